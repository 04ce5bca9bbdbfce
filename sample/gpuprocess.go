package sample

// GPUProcessKey is the gpuprocess collector's key: its samples are *GPUProcesses.
var GPUProcessKey = NewKey[GPUProcesses]("gpuprocess")

// GPUProcesses is one reading of the host side of every GPU's processes:
// where they may run, where their memory lives, how much CPU and storage they
// use, and whether their threads wait on I/O.
type GPUProcesses struct {
	// IntervalSeconds is the span the rates cover; 0 on the first reading.
	IntervalSeconds float64 `json:"interval_seconds,omitempty"`
	// DescendantSource says how descendants were found: "children_file"
	// (/proc/<pid>/task/<tid>/children) or "ppid_scan" (every
	// /proc/<pid>/stat, on kernels built without CONFIG_PROC_CHILDREN).
	DescendantSource string            `json:"descendant_source,omitempty"`
	GPUs             []GPUProcessGroup `json:"gpus"`
}

// GPUProcessGroup is what runs on one GPU: the processes the driver lists
// for it and their descendants (DataLoader workers and the like).
type GPUProcessGroup struct {
	GPU      int    `json:"gpu"`
	PCIBusID string `json:"pci_bus_id"`
	// NUMANode is the GPU's node; -1 when the platform does not say, and
	// then every placement value below is left unset rather than guessed.
	NUMANode     int    `json:"numa_node"`
	LocalCPUList string `json:"local_cpulist,omitempty"`

	// Processes lists the GPU's processes first, then their descendants.
	Processes []GPUProcess `json:"processes,omitempty"`
	// Unread counts processes of this GPU (listed by the driver or found as
	// descendants) left unread because the per-sample cap was reached.
	Unread int `json:"unread,omitempty"`
	// Errors names files that could not be parsed; the process concerned
	// is left out or incomplete.
	Errors []string `json:"errors,omitempty"`

	// Placement, the worst over the GPU's own processes (descendants
	// excluded); nil when unknown.
	//
	// RemoteMemoryRatio: the largest share of a process's resident memory
	// on nodes other than the GPU's.
	RemoteMemoryRatio *float64 `json:"remote_memory_ratio,omitempty"`
	// CPUsOffNodeRatio: the largest share of a process's allowed CPUs
	// outside the GPU's local CPUs.
	CPUsOffNodeRatio *float64 `json:"cpus_off_node_ratio,omitempty"`
	// CPUsFullyRemote: some process may run only on CPUs of other nodes.
	CPUsFullyRemote bool `json:"cpus_fully_remote,omitempty"`
	// ResidentBytesByNode sums the GPU processes' resident memory per node.
	ResidentBytesByNode []NodeBytes `json:"resident_bytes_by_node,omitempty"`

	// Threads of the processes and their descendants that were read, and
	// how many of them were in uninterruptible sleep (D), which is mostly
	// waiting on storage. IOWaitThreadsRatio is nil when none was read.
	Threads            int      `json:"threads"`
	IOWaitThreads      int      `json:"io_wait_threads"`
	IOWaitThreadsRatio *float64 `json:"io_wait_threads_ratio,omitempty"`

	// Totals since the daemon first saw the processes, over the processes
	// and their descendants, including descendants that exited since
	// (counted once: what an exited child handed to its parent's cutime
	// and io counters is not counted again). They never decrease.
	UserSecondsTotal      float64 `json:"user_seconds_total"`
	SystemSecondsTotal    float64 `json:"system_seconds_total"`
	StorageReadBytesTotal float64 `json:"storage_read_bytes_total"`
	SyscallReadBytesTotal float64 `json:"syscall_read_bytes_total"`
	ReadSyscallsTotal     float64 `json:"read_syscalls_total"`

	// Rates of those totals over the last interval (valid when the
	// sample's IntervalSeconds > 0).
	CPUCoresUsed              float64 `json:"cpu_cores_used"`
	StorageReadBytesPerSecond float64 `json:"storage_read_bytes_per_second"`

	// CPU quota (CFS bandwidth) of the cgroups the processes and their
	// descendants run in: for each process, the cgroup whose quota binds
	// over its own and its ancestors' (a container's or its pod's), and
	// the distinct ones summed. CPUCgroups counts the distinct cgroups
	// read (0: none readable); CPUQuotaCores is nil when none sets a
	// quota.
	CPUCgroups    int      `json:"cpu_cgroups,omitempty"`
	CPUQuotaCores *float64 `json:"cpu_quota_cores,omitempty"`
	// Totals since the daemon first saw the cgroups: enforcement periods
	// with runnable tasks, those that ran out of quota, and the time
	// their tasks waited throttled. They never decrease.
	CPUPeriodsTotal          float64 `json:"cpu_periods_total,omitempty"`
	CPUThrottledPeriodsTotal float64 `json:"cpu_throttled_periods_total,omitempty"`
	CPUThrottledSecondsTotal float64 `json:"cpu_throttled_seconds_total,omitempty"`
	// Over the last interval, for the cgroups with a quota read in both
	// samples: the share of periods throttled, and throttled seconds per
	// second. Nil when not measured (no quota, or the first reading).
	CPUThrottledPeriodsRatio     *float64 `json:"cpu_throttled_periods_ratio,omitempty"`
	CPUThrottledSecondsPerSecond *float64 `json:"cpu_throttled_seconds_per_second,omitempty"`

	// OMPThreads sums OMP_NUM_THREADS over the processes and descendants
	// that set it (OMPProcesses of them); AllowedCPUs is the number of
	// CPUs in the union of the processes' Cpus_allowed_list.
	OMPThreads   int `json:"omp_threads,omitempty"`
	OMPProcesses int `json:"omp_processes,omitempty"`
	AllowedCPUs  int `json:"allowed_cpus,omitempty"`

	// MemlockBytes is the lowest RLIMIT_MEMLOCK among the GPU's own
	// processes that lack CAP_IPC_LOCK (which lifts the limit); nil when
	// every one read is unlimited or holds the capability
	// (MemlockUnlimited), or none could be read.
	MemlockBytes     *uint64 `json:"memlock_bytes,omitempty"`
	MemlockUnlimited bool    `json:"memlock_unlimited,omitempty"`

	// DevShm is the smallest /dev/shm among the GPU's own processes'
	// mount namespaces; nil when unread.
	DevShm *DevShm `json:"dev_shm,omitempty"`
}

// DevShm is a /dev/shm's size and use. Tmpfs is false when it is not a
// tmpfs of its own, and the sizes are then the filesystem's that holds it.
type DevShm struct {
	Tmpfs     bool   `json:"tmpfs"`
	SizeBytes uint64 `json:"size_bytes"`
	UsedBytes uint64 `json:"used_bytes"`
}

// CPULimit is the binding CPU quota of a process's cgroups, and the
// throttling counters of the cgroup that sets it (of its own cgroup when
// none does).
type CPULimit struct {
	Cgroup string `json:"cgroup"`
	// QuotaCores is 0 when no quota applies.
	QuotaCores       float64 `json:"quota_cores,omitempty"`
	Periods          uint64  `json:"periods"`
	ThrottledPeriods uint64  `json:"throttled_periods"`
	ThrottledSeconds float64 `json:"throttled_seconds"`
}

// GPUProcess is one process of a GPU, or one of their descendants.
type GPUProcess struct {
	PID  int `json:"pid"`
	PPID int `json:"ppid"`
	// StartTicks is the start time in clock ticks after boot; with PID it
	// identifies the process across PID reuse.
	StartTicks uint64 `json:"start_ticks"`
	Comm       string `json:"comm"`
	// OnGPU is true for a process the driver lists on the GPU, false for a
	// descendant; Depth is 0 for the former, 1 for a child, and so on.
	OnGPU bool `json:"on_gpu"`
	Depth int  `json:"depth"`
	// State is the process state letter from stat (R, S, D, Z...).
	State   string `json:"state"`
	Threads int    `json:"threads"`
	// ThreadStates counts the threads read by state letter; at most the
	// per-process thread cap are read.
	ThreadStates map[string]int `json:"thread_states,omitempty"`

	CPUsAllowedList string `json:"cpus_allowed_list,omitempty"`
	MemsAllowedList string `json:"mems_allowed_list,omitempty"`
	CPUsAllowed     int    `json:"cpus_allowed,omitempty"`
	// CPUsOffNodeRatio is the share of the allowed CPUs outside the GPU's
	// local CPUs; nil when the GPU's node is unknown.
	CPUsOffNodeRatio *float64 `json:"cpus_off_node_ratio,omitempty"`

	UserSeconds           float64 `json:"user_seconds"`
	SystemSeconds         float64 `json:"system_seconds"`
	ChildrenUserSeconds   float64 `json:"children_user_seconds"`
	ChildrenSystemSeconds float64 `json:"children_system_seconds"`
	// CPUCoresUsed is the process's own CPU use over the last interval
	// (1 = one core busy); nil when first seen.
	CPUCoresUsed *float64 `json:"cpu_cores_used,omitempty"`
	// WorkerRespawns counts, for a GPU process, the times the daemon saw
	// its DataLoader workers (pt_data_worker children) all replaced by new
	// ones while it lived; WorkersWatchedSeconds is how long the daemon has
	// watched its workers. Zero when it has none.
	WorkerRespawns        int     `json:"worker_respawns,omitempty"`
	WorkersWatchedSeconds float64 `json:"workers_watched_seconds,omitempty"`
	// BlockIODelaySeconds is delayacct_blkio_ticks: time spent waiting for
	// block I/O; stays 0 unless delay accounting is on (kernel.task_delayacct).
	BlockIODelaySeconds float64 `json:"block_io_delay_seconds"`
	// IO is nil when /proc/<pid>/io could not be read (permission).
	IO *ProcessIO `json:"io,omitempty"`

	// ResidentBytesByNode is read from numa_maps for the GPU's own
	// processes only (reading it walks page tables) and is re-read once
	// older than the collector's numa-maps interval; NUMAMapsAgeSeconds is
	// the age of the reading. Nil for descendants or when unreadable.
	ResidentBytesByNode []NodeBytes `json:"resident_bytes_by_node,omitempty"`
	NUMAMapsAgeSeconds  float64     `json:"numa_maps_age_seconds,omitempty"`
	// RemoteMemoryRatio is the share of ResidentBytesByNode on nodes other
	// than the GPU's; nil when unknown.
	RemoteMemoryRatio *float64 `json:"remote_memory_ratio,omitempty"`

	// Cgroup identity, for /diagnose: never a metric label.
	Cgroup      string `json:"cgroup,omitempty"`
	ContainerID string `json:"container_id,omitempty"`
	PodUID      string `json:"pod_uid,omitempty"`
	SlurmJobID  string `json:"slurm_job_id,omitempty"`

	// CPULimit is nil when the process's cgroup could not be read.
	CPULimit *CPULimit `json:"cpu_limit,omitempty"`
	// OMPNumThreads is OMP_NUM_THREADS from the process's environment;
	// 0 when unset, not a positive number, or unreadable.
	OMPNumThreads int `json:"omp_num_threads,omitempty"`
	// MemlockBytes is RLIMIT_MEMLOCK (soft), nil when unlimited
	// (MemlockUnlimited) or unread; read for the GPU's own processes.
	MemlockBytes     *uint64 `json:"memlock_bytes,omitempty"`
	MemlockUnlimited bool    `json:"memlock_unlimited,omitempty"`
	// IPCLock: the process holds CAP_IPC_LOCK (effective), which lifts
	// RLIMIT_MEMLOCK for mlock and RDMA registration.
	IPCLock bool `json:"ipc_lock,omitempty"`
	// DevShm is /dev/shm in the process's mount namespace, for the GPU's
	// own processes; nil when unread.
	DevShm *DevShm `json:"dev_shm,omitempty"`

	// Unreadable names the files skipped for lack of permission.
	Unreadable []string `json:"unreadable,omitempty"`
}

// ProcessIO is /proc/<pid>/io, which includes what reaped children did.
type ProcessIO struct {
	// StorageReadBytes is read_bytes: bytes the process caused to be
	// fetched from storage (page cache hits excluded).
	StorageReadBytes uint64 `json:"read_bytes"`
	// SyscallReadBytes is rchar: bytes returned by read-like syscalls from
	// any source (files, page cache, pipes, sockets).
	SyscallReadBytes uint64 `json:"rchar"`
	ReadSyscalls     uint64 `json:"syscr"`
	// StorageReadBytesPerSecond is over the last interval; nil when first
	// seen.
	StorageReadBytesPerSecond *float64 `json:"read_bytes_per_second,omitempty"`
}

// NodeBytes is an amount of memory on one NUMA node.
type NodeBytes struct {
	Node  int    `json:"node"`
	Bytes uint64 `json:"bytes"`
}

// SizeBytes estimates the memory a reading holds, for the window's budget.
func (s *GPUProcesses) SizeBytes() int {
	n := 64
	for i := range s.GPUs {
		g := &s.GPUs[i]
		n += 220 + len(g.PCIBusID) + len(g.LocalCPUList) + len(g.ResidentBytesByNode)*16
		for _, p := range []*float64{g.CPUQuotaCores, g.CPUThrottledPeriodsRatio, g.CPUThrottledSecondsPerSecond} {
			if p != nil {
				n += 8
			}
		}
		if g.DevShm != nil {
			n += 32
		}
		if g.MemlockBytes != nil {
			n += 8
		}
		for _, e := range g.Errors {
			n += 16 + len(e)
		}
		for j := range g.Processes {
			p := &g.Processes[j]
			n += 320 + len(p.Comm) + len(p.CPUsAllowedList) + len(p.MemsAllowedList) +
				len(p.Cgroup) + len(p.ContainerID) + len(p.PodUID) + len(p.SlurmJobID) +
				len(p.ThreadStates)*24 + len(p.ResidentBytesByNode)*16
			// What the limits add, where read (none in older traces).
			if p.CPULimit != nil {
				n += 56 + len(p.CPULimit.Cgroup)
			}
			if p.DevShm != nil {
				n += 32
			}
			if p.MemlockBytes != nil {
				n += 8
			}
			for _, u := range p.Unreadable {
				n += 16 + len(u)
			}
		}
	}
	return n
}
