package sample

import "slices"

// NCCLProcKey is the ncclproc collector's key: its samples are *NCCLHostProcesses.
var NCCLProcKey = NewKey[NCCLHostProcesses]("ncclproc")

// NCCLHostProcesses is one scan of the node for the processes of distributed
// jobs: those that map libnccl, and the GPU processes the driver lists. It
// says which NCCL library each maps, how its environment configures NCCL,
// and which job it belongs to.
type NCCLHostProcesses struct {
	// Processes are sorted by PID.
	Processes []NCCLHostProcess `json:"processes,omitempty"`
	// MapsRead counts the memory maps read by this scan; a process whose
	// map was read before and whose virtual size has not changed since is
	// not read again.
	MapsRead int `json:"maps_read"`
	// Unscanned counts processes whose map needed a read that the
	// per-scan limit or the deadline left to a later scan.
	Unscanned int `json:"unscanned,omitempty"`
	// Unreadable counts processes whose map the daemon may not read (it
	// lacks root or CAP_SYS_PTRACE, or the process is not dumpable or in
	// another user namespace): NCCL users among them are missed.
	Unreadable int `json:"unreadable,omitempty"`
	// Dropped counts processes found but left out past the report bound.
	Dropped int `json:"dropped,omitempty"`
	// LogFiles are the NCCL debug files handed to the nccl collector:
	// each process's NCCL_DEBUG_FILE expanded, reachable from the daemon.
	LogFiles []string `json:"log_files,omitempty"`
	// JobIdentityRefused counts, by variable (SlurmJobIDVar,
	// TorchrunRunIDVar), the processes since the collector started whose
	// job identity was not in its scheduler's format (ValidJobIdentity)
	// and was dropped from Env; nil when none was.
	JobIdentityRefused map[string]uint64 `json:"job_identity_refused,omitempty"`
}

// NCCLHostProcess is one process of a distributed job.
type NCCLHostProcess struct {
	// PID is the process's ID in the daemon's /proc; NSPID is the ID the
	// process has in its own PID namespace (a container's), the one NCCL
	// prints in its log and puts in %p.
	PID        int    `json:"pid"`
	NSPID      int    `json:"ns_pid"`
	PPID       int    `json:"ppid"`
	StartTicks uint64 `json:"start_ticks"`
	Comm       string `json:"comm"`
	// OnGPU is set when the GPU collector lists the process on a GPU.
	OnGPU bool `json:"on_gpu,omitempty"`
	// ForkOf is the parent's PID when the process was forked from an NCCL
	// process without exec (a DataLoader worker): it shares the parent's
	// libraries and environment and does not run collectives of its own.
	ForkOf int `json:"fork_of,omitempty"`

	// GPUs are the GPU indexes the driver lists the process on (GPUSource
	// "nvml"), or else those its CUDA_VISIBLE_DEVICES and, in a container,
	// NVIDIA_VISIBLE_DEVICES let it see ("visible_devices"); the process
	// uses one or more of them. Empty when unknown.
	GPUs      []int  `json:"gpus,omitempty"`
	GPUSource string `json:"gpu_source,omitempty"`

	// Libraries are the libnccl files the process maps (usually one).
	Libraries []NCCLLibrary `json:"libraries,omitempty"`
	// MapsUnread is set when the process's memory map has not been read
	// yet (the per-scan limit left it to a later scan): no Libraries then
	// says nothing.
	MapsUnread bool `json:"maps_unread,omitempty"`

	// Env holds only allow-listed variables (NCCL_*, UCX_*, TORCH_NCCL_*,
	// TORCH_DISTRIBUTED_DEBUG, CUDA_VISIBLE_DEVICES, NVIDIA_VISIBLE_DEVICES,
	// OMP_NUM_THREADS, GOMP_CPU_AFFINITY, NVIDIA_REQUIRE_CUDA, CUDA_VERSION, the torchrun rank variables and the Slurm job and
	// rank variables) from the exec-time environment; every other
	// variable is discarded while the file is read. Values are cut at 1
	// KiB. EnvTruncated is set when the environment was larger than the
	// read bound or a value was cut.
	Env          []NCCLEnv `json:"env,omitempty"`
	EnvTruncated bool      `json:"env_truncated,omitempty"`

	// Identity, for /diagnose and for grouping ranks into jobs: never a
	// metric label. SlurmJobID comes from SLURM_JOB_ID, else from the
	// cgroup path; a SLURM_JOB_ID or TORCHELASTIC_RUN_ID that is not in
	// its scheduler's format (ValidJobIdentity) is not kept in Env.
	Cgroup      string `json:"cgroup,omitempty"`
	ContainerID string `json:"container_id,omitempty"`
	PodUID      string `json:"pod_uid,omitempty"`
	SlurmJobID  string `json:"slurm_job_id,omitempty"`
	// HostNetwork is whether the process shares PID 1's network namespace;
	// nil when unknown. Interface names in its environment name host
	// interfaces only when true.
	HostNetwork *bool `json:"host_network,omitempty"`

	// Hostname is the host name NCCL sees (for %h), from the daemon's own
	// when the process shares its UTS namespace ("uts_namespace"), else
	// from the process's /etc/hostname ("etc_hostname"); empty when
	// unknown.
	Hostname       string `json:"hostname,omitempty"`
	HostnameSource string `json:"hostname_source,omitempty"`
	// DebugFile is the process's NCCL debug log as the daemon reaches it
	// (through /proc/<pid>/root for another mount namespace), when
	// NCCL_DEBUG makes NCCL write NCCL_DEBUG_FILE; DebugFileError says why
	// a set NCCL_DEBUG_FILE could not be resolved.
	DebugFile      string `json:"debug_file,omitempty"`
	DebugFileError string `json:"debug_file_error,omitempty"`
	// TopoFileMissing is set when NCCL_TOPO_FILE names a file that does
	// not exist in the process's mount namespace: NCCL then detects the
	// topology itself.
	TopoFileMissing bool `json:"topo_file_missing,omitempty"`
	// RDMADevicesHidden is set when the process runs in a container (a
	// mount namespace other than the daemon's) without /dev/infiniband:
	// it cannot open the node's RDMA devices.
	RDMADevicesHidden bool `json:"rdma_devices_hidden,omitempty"`

	// Unreadable names the files skipped for lack of permission; Errors
	// the files that could not be parsed.
	Unreadable []string `json:"unreadable,omitempty"`
	Errors     []string `json:"errors,omitempty"`
}

// NCCLLibrary is one libnccl file a process maps.
type NCCLLibrary struct {
	// Path is the mapped file in the process's mount namespace.
	Path string `json:"path"`
	// Version is x.y.z, or "unknown" when neither the file name
	// (libnccl.so.2.28.9) nor the pip package that installed it
	// (nvidia_nccl_cu12-2.28.9.dist-info) says.
	Version       string `json:"version"`
	VersionSource string `json:"version_source,omitempty"` // file_name, pip_dist_info
	// Deleted is set when the file was removed or replaced after it was
	// mapped (a package upgraded under a running job).
	Deleted bool `json:"deleted,omitempty"`
}

// NCCLLibraryVersionUnknown is the Version of a library whose version the
// collector could not read.
const NCCLLibraryVersionUnknown = "unknown"

// EnvValue returns an allow-listed variable of the process's environment.
func (p *NCCLHostProcess) EnvValue(name string) (string, bool) {
	for _, e := range p.Env {
		if e.Name == name {
			return e.Value, true
		}
	}
	return "", false
}

// MapsNCCL is whether the process maps a libnccl.
func (p *NCCLHostProcess) MapsNCCL() bool { return len(p.Libraries) > 0 }

// MapsKnown is whether the process's memory map was read, so that
// MapsNCCL false means it maps no libnccl.
func (p *NCCLHostProcess) MapsKnown() bool {
	return !p.MapsUnread && !slices.Contains(p.Unreadable, "maps")
}

// Job names the job the process belongs to, for grouping ranks: its Slurm
// job, else its Kubernetes pod; empty when neither is known, and then the
// node's processes without a job count as one.
func (p *NCCLHostProcess) Job() string {
	switch {
	case p.SlurmJobID != "":
		return "slurm job " + p.SlurmJobID
	case p.PodUID != "":
		return "pod " + p.PodUID
	}
	return ""
}

// SizeBytes estimates the memory a reading holds, for the window's budget.
func (s *NCCLHostProcesses) SizeBytes() int {
	n := 80 + ncclListSize(s.LogFiles)
	for v := range s.JobIdentityRefused {
		n += 48 + len(v)
	}
	for i := range s.Processes {
		p := &s.Processes[i]
		n += 360 + len(p.Comm) + len(p.GPUSource) + len(p.GPUs)*8 + len(p.Cgroup) + len(p.ContainerID) +
			len(p.PodUID) + len(p.SlurmJobID) + len(p.Hostname) + len(p.HostnameSource) + len(p.DebugFile) +
			len(p.DebugFileError) + ncclListSize(p.Unreadable) + ncclListSize(p.Errors)
		for _, l := range p.Libraries {
			n += 48 + len(l.Path) + len(l.Version) + len(l.VersionSource)
		}
		for _, e := range p.Env {
			n += 32 + len(e.Name) + len(e.Value)
		}
	}
	return n
}
