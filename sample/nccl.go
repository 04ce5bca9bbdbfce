package sample

import "strings"

// NCCLKey is the nccl collector's key: its samples are *NCCL.
var NCCLKey = NewKey[NCCL]("nccl")

// NCCL is one reading of the NCCL debug logs (NCCL_DEBUG=INFO) the daemon
// follows: which path each process's collectives took, and where that path
// is slower than the one the node offers.
type NCCL struct {
	Files []NCCLFile `json:"files,omitempty"`
	// GPUs says, for each GPU of this node a current log names, which
	// process's state the metrics show: the one that initialised last.
	GPUs []NCCLGPU `json:"gpus,omitempty"`
	// LinesTotal and BytesTotal count what the collector read from every
	// log since it started.
	LinesTotal uint64 `json:"lines_total"`
	BytesTotal uint64 `json:"bytes_total"`
	// SkippedFiles counts the logs the sources named that were not
	// followed: past --collector.nccl.max-files, the least recently
	// modified.
	SkippedFiles int `json:"skipped_files,omitempty"`
}

// NCCLFile is one followed log file.
type NCCLFile struct {
	Path string `json:"path"`
	// Exists is false for a file that vanished less than the retention ago:
	// its processes are kept so that a finished job's fallback still shows.
	Exists bool `json:"exists"`
	// Retained is set for a file no source names now (its process
	// exited, its glob stopped matching, or newer logs took its place
	// under --collector.nccl.max-files): its state is kept for the
	// retention but it is not read, nor counted as followed.
	Retained bool   `json:"retained,omitempty"`
	Error    string `json:"error,omitempty"`
	// Versions are bare "NCCL version" lines (NCCL_DEBUG=VERSION), which
	// name no process.
	Versions []string `json:"versions,omitempty"`
	// DroppedLines counts lines over the line-length limit; DroppedProcesses
	// the processes past the per-file bound.
	DroppedLines     uint64        `json:"dropped_lines,omitempty"`
	DroppedProcesses uint64        `json:"dropped_processes,omitempty"`
	Processes        []NCCLProcess `json:"processes,omitempty"`
}

// NCCLProcess is what one process (host:pid of the log prefix) logged.
// The PID is the one NCCL saw: inside a container, the container's.
type NCCLProcess struct {
	Host     string   `json:"host"`
	PID      int      `json:"pid"`
	Lines    uint64   `json:"lines"`
	Versions []string `json:"versions,omitempty"`

	Comms []NCCLComm `json:"comms,omitempty"`
	// CommInits counts communicator initialisations; a count that keeps
	// rising after start-up is communicator churn.
	CommInits int `json:"comm_inits"`

	// Transports counts distinct connections per transport class (P2P,
	// SHM, NET/Socket, NET/IB, NET/IB+GDRDMA, NET/other, NET/other+GDRDMA,
	// COLLNET, NVLS).
	Transports   []NCCLTransport `json:"transports,omitempty"`
	Peers        []NCCLPeer      `json:"peers,omitempty"`
	PeersDropped int             `json:"peers_dropped,omitempty"`
	// Paths are the distinct "via" texts, e.g. "P2P/CUMEM", "NET/IB/0/GDRDMA".
	Paths []string `json:"paths,omitempty"`

	// Network is the net plugin NCCL chose ("Using network IB").
	Network           string   `json:"network,omitempty"`
	NetPluginFailures []string `json:"net_plugin_failures,omitempty"`
	IBNoDevice        bool     `json:"ib_no_device,omitempty"`
	IBDevices         []string `json:"ib_devices,omitempty"`
	SocketInterfaces  []string `json:"socket_interfaces,omitempty"`
	GDRNotes          []string `json:"gdr_notes,omitempty"`
	// NVLinkInTopology is set when NCCL's topology dump shows an NVLink
	// from a GPU: P2P over NVLink was there to take.
	NVLinkInTopology bool `json:"nvlink_in_topology,omitempty"`

	Env           []NCCLEnv     `json:"env,omitempty"`
	Warnings      []NCCLWarning `json:"warnings,omitempty"`
	WarningsTotal int           `json:"warnings_total"`

	Fallbacks []NCCLFallback `json:"fallbacks,omitempty"`
	// Ended is set once the process destroyed all its communicators.
	Ended bool `json:"ended,omitempty"`
	// Current is false for a process that ended longer than the retention
	// ago: kept for /diagnose, left out of the metrics.
	Current bool `json:"current"`
}

// NCCLComm is one communicator of a process.
type NCCLComm struct {
	CommID     string `json:"comm_id,omitempty"`
	Rank       int    `json:"rank"`
	NRanks     int    `json:"nranks"`
	CudaDev    int    `json:"cuda_dev"`
	NVMLDev    int    `json:"nvml_dev"`
	PCIBusID   string `json:"pci_bus_id,omitempty"`
	NNodes     int    `json:"nnodes,omitempty"`
	LocalRanks int    `json:"local_ranks,omitempty"`
	Complete   bool   `json:"complete"`
	Ended      bool   `json:"ended,omitempty"`
}

// NCCLTransport counts a process's distinct connections of one class.
type NCCLTransport struct {
	Transport   string `json:"transport"`
	Connections int    `json:"connections"`
}

// NCCLPeer is one rank's connections to one peer rank over one class.
type NCCLPeer struct {
	CommID      string `json:"comm_id,omitempty"`
	Rank        int    `json:"rank"`
	Peer        int    `json:"peer"`
	Transport   string `json:"transport"`
	Path        string `json:"path"`
	Connections int    `json:"connections"`
}

// NCCLEnv is an environment override NCCL reported.
type NCCLEnv struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

// NCCLWarning is a distinct NCCL WARN text and its count.
type NCCLWarning struct {
	Message string `json:"message"`
	Count   int    `json:"count"`
}

// NCCLFallback is a slower path taken: its kind (p2p_disabled,
// shm_disabled, socket_instead_of_ib, ib_without_gdr, p2p_copy_fallback,
// net_within_node), the path taken, the one expected, and the log's words.
type NCCLFallback struct {
	Kind     string `json:"kind"`
	Taken    string `json:"taken,omitempty"`
	Expected string `json:"expected"`
	Evidence string `json:"evidence"`
}

// NCCLGPU ties a GPU to the process whose state the metrics show for it.
type NCCLGPU struct {
	GPU      int    `json:"gpu"`
	PCIBusID string `json:"pci_bus_id,omitempty"`
	// Matched is true when PCIBusID is one of this node's GPUs; false when
	// the node's GPU list was unavailable and GPU is NCCL's nvmlDev (cudaDev
	// for NCCL versions that print no nvmlDev).
	Matched bool `json:"matched"`
	// File and Process index Files and Files[File].Processes.
	File    int `json:"file"`
	Process int `json:"process"`
}

// Process returns the process a GPU entry points to.
func (s *NCCL) Process(g NCCLGPU) *NCCLProcess {
	return &s.Files[g.File].Processes[g.Process]
}

// SizeBytes estimates the memory a reading holds, for the window's budget.
func (s *NCCL) SizeBytes() int {
	n := 64 + len(s.GPUs)*48
	for i := range s.Files {
		f := &s.Files[i]
		n += 96 + len(f.Path) + len(f.Error) + ncclListSize(f.Versions)
		for j := range f.Processes {
			p := &f.Processes[j]
			n += 320 + len(p.Host) + ncclListSize(p.Versions) + ncclListSize(p.Paths) + len(p.Network) +
				ncclListSize(p.NetPluginFailures) + ncclListSize(p.IBDevices) + ncclListSize(p.SocketInterfaces) + ncclListSize(p.GDRNotes)
			n += len(p.Comms)*96 + len(p.Transports)*40
			for _, x := range p.Peers {
				n += 72 + len(x.CommID) + len(x.Path)
			}
			for _, e := range p.Env {
				n += 32 + len(e.Name) + len(e.Value)
			}
			for _, w := range p.Warnings {
				n += 24 + len(w.Message)
			}
			for _, fb := range p.Fallbacks {
				n += 64 + len(fb.Kind) + len(fb.Taken) + len(fb.Expected) + len(fb.Evidence)
			}
		}
	}
	return n
}

func ncclListSize(list []string) int {
	n := 0
	for _, s := range list {
		n += 16 + len(s)
	}
	return n
}

// LogHostname is the host name as NCCL prints it in log prefixes and file
// names: up to the first dot, with '%' and '/' replaced by '-'.
func LogHostname(hostname string) string {
	host, _, _ := strings.Cut(hostname, ".")
	return logHostnameReplacer.Replace(host)
}

// logHostnameReplacer is made once: the analyses ask for every NCCL
// process's log name each second, and a Replacer builds its tables on
// first use.
var logHostnameReplacer = strings.NewReplacer("%", "-", "/", "-")
