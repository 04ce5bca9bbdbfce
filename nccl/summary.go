package nccl

import (
	"sort"

	"github.com/gpudiag/gpudiag/sample"
)

// Comm is one communicator a process initialised.
type Comm struct {
	// CommID is NCCL's communicator hash, shared by all its ranks (NCCL 2.18+).
	CommID string
	Rank   int
	NRanks int
	// CudaDev and NVMLDev are the process's device numbers; -1 when the
	// line had none (NVMLDev appears in NCCL 2.19+).
	CudaDev int
	NVMLDev int
	// PCIBusID is the GPU's bus ID in kernel form, from NCCL's busId.
	PCIBusID string
	// NNodes and LocalRanks are NCCL's view of the job's layout; 0 when the
	// line was not seen.
	NNodes     int
	LocalRanks int
	Complete   bool
	Ended      bool
	// InitLine is the log's line number of the communicator's latest init
	// line.
	InitLine uint64
	// Key names the communicator across the job's processes: CommID, or
	// for an NCCL that prints none its size and order ("#16.1").
	Key string
}

// TransportCount is the number of distinct connections of one class.
type TransportCount struct {
	Transport   string
	Connections int
}

// PeerLink is the connections of one rank to one peer over one class.
type PeerLink struct {
	CommID string
	// Comm is the communicator's key (Comm.Key): CommID where NCCL printed
	// one; "" when the connection came before any communicator line.
	Comm        string
	Rank        int
	Peer        int
	Transport   string
	Path        string // the first "via" text, e.g. "NET/Socket/0"
	Connections int
}

// EnvVar is a "<NAME> set by environment to <value>" line.
type EnvVar struct {
	Name  string
	Value string
}

// Warning is a distinct WARN text and how often it appeared.
type Warning struct {
	Message string
	Count   int
}

// Summary is what one process's lines say.
type Summary struct {
	Host     string
	PID      int
	Lines    uint64
	Versions []string

	Comms []Comm
	// CommInits counts communicator initialisations, including those
	// forgotten past MaxComms: a count that keeps rising is churn.
	CommInits int

	Transports   []TransportCount
	Peers        []PeerLink
	PeersDropped int
	Paths        []string

	Network           string
	NetPluginFailures []string
	IBNoDevice        bool
	IBDevices         []string
	SocketInterfaces  []string
	GDRNotes          []string
	NVLinkInTopology  bool

	// AssignedNetwork is NCCL 2.27+'s "Assigned NET plugin X to comm",
	// DistanceNetwork NCCL 2.4's "CUDA Dev 0[0], X NIC distance": the
	// network where no "Using network" line names it.
	AssignedNetwork string
	DistanceNetwork string
	// LoadedNetPlugin is the external net plugin NCCL loaded ("Loaded net
	// plugin FastSocket (v4)"), which it tries before its own networks.
	LoadedNetPlugin string
	// IBVerbsMissing: "Failed to open libibverbs.so[.1]" (also sets
	// IBNoDevice).
	IBVerbsMissing bool
	// HostAddr is the first address the process bootstrapped on (else its
	// first NIC's), loopback and link-local excluded: it tells apart hosts
	// that share a name.
	HostAddr string
	// OFI is set by aws-ofi-nccl's "NET/OFI" lines; OFIProvider is the
	// libfabric provider it selected ("efa"), OFIDevices its NICs' PCI
	// addresses, OFINoGDR its "disabling GDR".
	OFI         bool
	OFIProvider string
	OFIDevices  []string
	OFINoGDR    bool
	// GDREnabled: "GPU Direct RDMA Enabled for GPU ... / HCA ...". (The
	// ring line's "GDR 1" is no such sign: NCCL prints it on nodes without
	// any RDMA NIC.)
	GDREnabled bool
	// IBPlainReceives counts the NET/IB connections without GPUDirect RDMA
	// that receive (or say no direction). A send without it is normal where
	// NCCL keeps GDR for receives (NCCL_NET_GDR_READ off on PCIe GPUs).
	IBPlainReceives int
	// LocalRanks are the ranks the process drives (its communicators' and
	// the local end of its connections) with the GPU a connection line
	// names for each ("" if none); NodePeers the ranks it reaches over P2P
	// or SHM, which are on its node.
	LocalRanks []LocalRank
	NodePeers  []RankRef

	Env           []EnvVar
	Warnings      []Warning
	WarningsTotal int
	// CopyFallback is the "falling back to copy" line, if any.
	CopyFallback string
}

// LocalRank is one rank a process drives.
type LocalRank struct {
	RankRef
	GPU string
}

// Ended reports whether the process destroyed every communicator it
// created: a job that finished cleanly.
func (s *Summary) Ended() bool {
	if len(s.Comms) == 0 {
		return false
	}
	for _, c := range s.Comms {
		if !c.Ended {
			return false
		}
	}
	return true
}

// PCIBusIDs lists the distinct GPUs the process's communicators ran on.
func (s *Summary) PCIBusIDs() []string {
	var out []string
	for _, c := range s.Comms {
		if c.PCIBusID != "" {
			out = addBounded(out, c.PCIBusID, MaxComms)
		}
	}
	return out
}

// LastInitLine is the line number of the process's latest communicator
// init, to tell which of two processes on one GPU came last.
func (s *Summary) LastInitLine() uint64 {
	var n uint64
	for _, c := range s.Comms {
		n = max(n, c.InitLine)
	}
	return n
}

// Uses reports whether any connection took the class.
func (s *Summary) Uses(class string) bool {
	for _, t := range s.Transports {
		if t.Transport == class && t.Connections > 0 {
			return true
		}
	}
	return false
}

// EnvValue returns an overridden variable's value.
func (s *Summary) EnvValue(name string) (string, bool) {
	for _, e := range s.Env {
		if e.Name == name {
			return e.Value, true
		}
	}
	return "", false
}

// Summaries returns each process's summary in the order the processes
// first appeared. The result shares nothing with the log.
func (l *Log) Summaries() []Summary {
	out := make([]Summary, 0, len(l.order))
	for _, p := range l.order {
		out = append(out, p.summary())
	}
	return out
}

func (p *procState) summary() Summary {
	s := Summary{
		Host: p.host, PID: p.pid, Lines: p.lines,
		Versions:          append([]string(nil), p.versions...),
		CommInits:         p.commInits,
		PeersDropped:      p.peersDropped,
		Paths:             append([]string(nil), p.paths...),
		Network:           p.network,
		NetPluginFailures: append([]string(nil), p.pluginFailures...),
		IBNoDevice:        p.ibNoDevice,
		IBDevices:         append([]string(nil), p.ibDevices...),
		SocketInterfaces:  append([]string(nil), p.socketIfs...),
		GDRNotes:          append([]string(nil), p.gdrNotes...),
		NVLinkInTopology:  p.nvlinkTopology,
		WarningsTotal:     p.warningsTotal,
		CopyFallback:      p.copyFallbackMsg,
		AssignedNetwork:   p.assignedNet,
		DistanceNetwork:   p.distanceNet,
		LoadedNetPlugin:   p.loadedNet,
		IBVerbsMissing:    p.ibVerbsMissing,
		HostAddr:          p.hostAddr,
		OFI:               p.ofi,
		OFIProvider:       p.ofiProvider,
		OFIDevices:        append([]string(nil), p.ofiDevices...),
		OFINoGDR:          p.ofiNoGDR,
		GDREnabled:        p.gdrEnabled,
		IBPlainReceives:   p.ibPlainRecv,
	}
	for _, r := range p.localOrder {
		s.LocalRanks = append(s.LocalRanks, LocalRank{RankRef: r, GPU: p.localRanks[r]})
	}
	s.NodePeers = append(s.NodePeers, p.peerOrderN...)
	for _, c := range p.comms {
		s.Comms = append(s.Comms, Comm{
			CommID: c.commID, Rank: c.rank, NRanks: c.nRanks, CudaDev: c.cudaDev, NVMLDev: c.nvmlDev,
			PCIBusID: c.busID, NNodes: c.nNodes, LocalRanks: c.localRanks,
			Complete: c.complete, Ended: c.ended, InitLine: c.initLine, Key: p.commKey(c),
		})
	}
	counts := map[string]int{}
	for k, v := range p.transports {
		counts[k] = v
	}
	if p.nvlsChannels > 0 || p.nvlsComm {
		counts[TransportNVLS] += max(p.nvlsChannels, 1)
	}
	for _, t := range Transports {
		if n := counts[t]; n > 0 {
			s.Transports = append(s.Transports, TransportCount{Transport: t, Connections: n})
		}
	}
	for _, k := range p.peerOrder {
		pl := p.peers[k]
		s.Peers = append(s.Peers, PeerLink{CommID: pl.commID, Comm: pl.comm, Rank: int(k.rank), Peer: int(k.peer),
			Transport: k.transport, Path: pl.path, Connections: pl.connections})
	}
	for _, name := range p.envOrder {
		s.Env = append(s.Env, EnvVar{Name: name, Value: p.env[name]})
	}
	sort.Slice(s.Env, func(i, j int) bool { return s.Env[i].Name < s.Env[j].Name })
	for _, text := range p.warningOrder {
		s.Warnings = append(s.Warnings, Warning{Message: text, Count: p.warnings[text]})
	}
	return s
}

// Sample is the process as the nccl collector's samples hold it, with the
// fallbacks its log shows.
func (s *Summary) Sample(fallbacks []Fallback) sample.NCCLProcess {
	p := sample.NCCLProcess{
		Host: s.Host, PID: s.PID, Lines: s.Lines, Versions: s.Versions, CommInits: s.CommInits,
		PeersDropped: s.PeersDropped, Paths: s.Paths, Network: s.Network,
		NetPluginFailures: s.NetPluginFailures, IBNoDevice: s.IBNoDevice, IBDevices: s.IBDevices,
		SocketInterfaces: s.SocketInterfaces, GDRNotes: s.GDRNotes, NVLinkInTopology: s.NVLinkInTopology,
		WarningsTotal: s.WarningsTotal, Ended: s.Ended(),
	}
	for _, cm := range s.Comms {
		p.Comms = append(p.Comms, sample.NCCLComm{CommID: cm.CommID, Rank: cm.Rank, NRanks: cm.NRanks,
			CudaDev: cm.CudaDev, NVMLDev: cm.NVMLDev, PCIBusID: cm.PCIBusID, NNodes: cm.NNodes,
			LocalRanks: cm.LocalRanks, Complete: cm.Complete, Ended: cm.Ended})
	}
	for _, t := range s.Transports {
		p.Transports = append(p.Transports, sample.NCCLTransport{Transport: t.Transport, Connections: t.Connections})
	}
	for _, x := range s.Peers {
		p.Peers = append(p.Peers, sample.NCCLPeer{CommID: x.CommID, Rank: x.Rank, Peer: x.Peer,
			Transport: x.Transport, Path: x.Path, Connections: x.Connections})
	}
	for _, e := range s.Env {
		p.Env = append(p.Env, sample.NCCLEnv{Name: e.Name, Value: e.Value})
	}
	for _, w := range s.Warnings {
		p.Warnings = append(p.Warnings, sample.NCCLWarning{Message: w.Message, Count: w.Count})
	}
	for _, fb := range fallbacks {
		p.Fallbacks = append(p.Fallbacks, sample.NCCLFallback{Kind: fb.Kind, Taken: fb.Taken,
			Expected: fb.Expected, Evidence: fb.Evidence})
	}
	return p
}
