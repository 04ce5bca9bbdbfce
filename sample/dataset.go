package sample

// DatasetKey is the dataset collector's key: its samples are *Datasets.
var DatasetKey = NewKey[Datasets]("dataset")

// Datasets is one reading of where the GPUs' processes read their data
// from: the filesystems their open regular files sit on, the NFS client's
// READ statistics per mount, the page cache's refaults in the processes'
// memory cgroup, and the GPUDirect Storage driver's counters.
type Datasets struct {
	// IntervalSeconds is the time since the previous reading; 0 on the first.
	IntervalSeconds float64 `json:"interval_seconds,omitempty"`
	// GPUs lists, per GPU with processes, what they hold open.
	GPUs []DatasetGPU `json:"gpus,omitempty"`
	// NFS holds one entry per NFS mount the GPUs' files sit on.
	NFS []NFSMount `json:"nfs,omitempty"`
	// GDS is nil when the nvidia-fs driver is not loaded.
	GDS *GDSStats `json:"gds,omitempty"`
	// Neighbours are the cgroups beside the GPUs' (the other children of
	// each GPU cgroup's grandparent: the other pods of its QoS slice, the
	// other slices of the root) that feel memory or I/O pressure, at most
	// DatasetMaxNeighbours; none holds a GPU's processes.
	Neighbours []CgroupNeighbour `json:"neighbours,omitempty"`
}

// DatasetMaxNeighbours bounds the neighbour cgroups read per scan.
const DatasetMaxNeighbours = 256

// CgroupPressure is the share of the last 10 s a cgroup's tasks stalled on
// memory and on I/O (its memory.pressure and io.pressure "some avg10",
// 0–1); nil when the group has no such file (PSI off, cgroup v1).
type CgroupPressure struct {
	MemorySome *float64 `json:"memory_some,omitempty"`
	IOSome     *float64 `json:"io_some,omitempty"`
}

// CgroupNeighbour is a cgroup beside the GPUs' and what it stalls on.
type CgroupNeighbour struct {
	Path     string         `json:"path"`
	Pressure CgroupPressure `json:"pressure"`
}

// DatasetGPU is what one GPU's processes and their descendants read.
type DatasetGPU struct {
	GPU int `json:"gpu"`
	// Mounts are the filesystems their open regular files sit on, most
	// files first; at most DatasetMaxMounts.
	Mounts []DatasetMount `json:"mounts,omitempty"`
	// Cgroup is the memory cgroup of the GPU's first process, nil when
	// unreadable (cgroup v1, or no /sys/fs/cgroup).
	Cgroup *CgroupMemory `json:"cgroup,omitempty"`
	// Truncated is set when the scan stopped at its bound on descriptors,
	// processes or time: the mounts are those seen until then.
	Truncated bool `json:"truncated,omitempty"`
}

// DatasetMaxMounts bounds the mounts kept per GPU.
const DatasetMaxMounts = 16

// DatasetMount is one filesystem a GPU's processes read from.
type DatasetMount struct {
	MountPoint string `json:"mount_point"`
	FSType     string `json:"fs_type"`
	// Source is the mount source (server:/export for NFS, /dev/nvme0n1p1,
	// overlay for an overlay).
	Source string `json:"source"`
	// Options are the per-mount options (noatime, relatime, ro, ...).
	Options []string `json:"options,omitempty"`
	// Disk is the whole disk under a block-device mount (nvme0n1 for
	// nvme0n1p1), "" for network, overlay and pseudo filesystems.
	Disk string `json:"disk,omitempty"`
	// Files counts the open regular files on it; WrittenFiles those of
	// them open for writing (logs, checkpoints, outputs), which are no
	// data the GPUs read. Recordings made before it was counted hold 0.
	Files        int `json:"files"`
	WrittenFiles int `json:"written_files,omitempty"`
}

// Network says whether the filesystem reads over the network: NFS, a FUSE
// filesystem (s3fs, gcsfuse, blobfuse, goofys, JuiceFS, ...), CIFS,
// Lustre, BeeGFS, GPFS, CephFS, WekaFS.
func (m DatasetMount) Network() bool {
	switch m.FSType {
	case "nfs", "nfs4", "cifs", "smb3", "lustre", "beegfs", "gpfs", "ceph", "wekafs", "9p", "glusterfs":
		return true
	}
	return len(m.FSType) >= 4 && m.FSType[:4] == "fuse" && m.FSType != "fusectl"
}

// HasOption says whether opt is among the mount's options.
func (m DatasetMount) HasOption(opt string) bool {
	for _, o := range m.Options {
		if o == opt {
			return true
		}
	}
	return false
}

// CgroupMemory is a memory cgroup's limit, usage and page-cache refaults
// (cgroup v2 memory.max, memory.current, memory.stat).
type CgroupMemory struct {
	Path string `json:"path"`
	// LimitBytes is 0 when memory.max is "max" (no limit).
	LimitBytes   uint64 `json:"limit_bytes,omitempty"`
	CurrentBytes uint64 `json:"current_bytes"`
	FileBytes    uint64 `json:"file_bytes"`
	// RefaultsFile counts file pages read back in soon after eviction
	// (workingset_refault_file).
	RefaultsFile uint64 `json:"workingset_refault_file"`
	// RefaultsPerSecond is nil on the cgroup's first reading.
	RefaultsPerSecond *float64 `json:"refaults_per_second,omitempty"`
	// Pressure is what the group's own tasks stall on.
	Pressure CgroupPressure `json:"pressure,omitzero"`
}

// NFSMount is one NFS mount's client statistics (/proc/<pid>/mountstats).
type NFSMount struct {
	MountPoint string `json:"mount_point"`
	Server     string `json:"server"`
	FSType     string `json:"fs_type"`
	// RSize is the negotiated read size in bytes, 0 when not shown.
	RSize uint64 `json:"rsize,omitempty"`
	// Counters since mount, of the READ operation.
	ReadOps            uint64 `json:"read_ops"`
	ReadBytes          uint64 `json:"read_bytes"`
	ReadRTTMillis      uint64 `json:"read_rtt_ms"`
	ReadExecuteMillis  uint64 `json:"read_execute_ms"`
	ReadQueueMillis    uint64 `json:"read_queue_ms"`
	ReadRetransmission uint64 `json:"read_retransmissions"`
	// Rates is nil on the mount's first reading.
	Rates *NFSReadRates `json:"rates,omitempty"`
}

// NFSReadRates are READ averages over the interval since the previous
// reading; the per-op times are NaN-free: 0 when no READ completed.
type NFSReadRates struct {
	OpsPerSecond   float64 `json:"ops_per_second"`
	BytesPerSecond float64 `json:"bytes_per_second"`
	// RTTSeconds is the mean time a READ took on the wire (request sent
	// to reply received); ExecuteSeconds adds the client's queueing.
	RTTSeconds     float64 `json:"rtt_seconds"`
	ExecuteSeconds float64 `json:"execute_seconds"`
}

// GDSStats are the GPUDirect Storage driver's counters
// (/proc/driver/nvidia-fs/stats) since it loaded.
type GDSStats struct {
	Reads         uint64 `json:"reads"`
	ReadsOK       uint64 `json:"reads_ok"`
	ReadErrors    uint64 `json:"read_errors"`
	ReadMiB       uint64 `json:"read_mib"`
	Writes        uint64 `json:"writes"`
	WriteErrors   uint64 `json:"write_errors"`
	WriteMiB      uint64 `json:"write_mib"`
	IOStateErrors uint64 `json:"io_state_errors"`
	// MapErrors are the Error line's counters summed (cpu-gpu-pages,
	// sg-ext, dma-map, dma-ref): failures to map GPU memory for DMA.
	MapErrors uint64 `json:"map_errors"`
}

// Errors is every error counter summed.
func (g *GDSStats) Errors() uint64 {
	return g.ReadErrors + g.WriteErrors + g.IOStateErrors + g.MapErrors
}

// SizeBytes estimates the memory a reading holds, for the window's budget.
func (d *Datasets) SizeBytes() int {
	n := 64
	for _, g := range d.GPUs {
		n += 48
		for _, m := range g.Mounts {
			n += 80 + len(m.MountPoint) + len(m.FSType) + len(m.Source) + len(m.Disk)
			for _, o := range m.Options {
				n += 16 + len(o)
			}
		}
		if g.Cgroup != nil {
			n += 64 + len(g.Cgroup.Path)
		}
	}
	for _, m := range d.NFS {
		n += 160 + len(m.MountPoint) + len(m.Server)
	}
	if d.GDS != nil {
		n += 80
	}
	for _, nb := range d.Neighbours {
		n += 64 + len(nb.Path)
	}
	return n
}
