package analyzers

import (
	"fmt"
	"math"
	"slices"

	"github.com/gpudiag/gpudiag/sample"
)

// Checks of the limits the GPU's processes run under (gpuprocess
// collector): their container's CPU quota, the OpenMP threads they ask for
// against the CPUs they may use, the /dev/shm of their mount namespace and
// their locked-memory limit. Each fires only for a GPU that holds
// processes: a job runs on it, busy or starved.

// CPUThrottledWarn is the share of CFS enforcement periods (100 ms by
// default) in which a GPU's processes' cgroup ran out of quota, at or
// above which the quota holds the job back. A cgroup whose demand stays
// under its quota is never throttled; one whose mean use sits just under
// it is throttled now and then, in the bursts of an input pipeline (a
// batch collated at a step boundary). At 10%, one period in ten the
// job's threads were stopped until the next period, up to 100 ms minus
// the quota's share: a stall on every training step of 0.1–2 s, which the
// GPU waits out. seeds-000-003 row 17 proposes 5%; 10% leaves the
// occasional burst of a job sized close to its limit alone.
const CPUThrottledWarn = 0.1

// OversubscribedFactor: OpenMP threads asked for (OMP_NUM_THREADS summed
// over the GPU's processes and descendants that set it) above this many
// times the CPUs they may use. The seeds set OMP_NUM_THREADS to the CPUs
// granted (seeds-000-003 row 18: 16, 32, 48 threads on as many CPUs);
// up to twice leaves room for SMT siblings counted as CPUs and threads
// that mostly sleep, beyond it the threads of one parallel region wait
// for each other on every barrier, a spin-wait burning the time slice
// of another.
const OversubscribedFactor = 2

// DevShmMinBytes: a /dev/shm (tmpfs) smaller than this starves DataLoader
// workers, which pass every batch through it, and NCCL's SHM transport,
// which maps its buffers there. Docker's default is 64 MiB; the seeds'
// examples give 16 GiB per GPU (seeds-000-003 row 35); one prefetched
// batch of 32 images of 224² in fp32 is 19 MiB, and seed-001 #5's
// prefetch queue holds up to 32 of them per process. 1 GiB is a floor
// below which no training job fits, not a recommendation.
const DevShmMinBytes = 1 << 30

// DevShmFullShare: a /dev/shm this full fails the next worker's batch
// (a bus error in the worker) or NCCL's segment.
const DevShmFullShare = 0.9

// MemlockMinBytes: RLIMIT_MEMLOCK below which a GPU process may fail to
// register its buffers with the RDMA NIC (ibv_reg_mr counts pinned pages
// against it unless the process has CAP_IPC_LOCK). NCCL's IB transport
// registers per channel and peer its Simple (4 MiB, NCCL_BUFFSIZE), LL
// and LL128 buffers, some 9 MiB: 8 channels to 2 peers already need
// ~150 MiB. 256 MiB leaves headroom over that; Docker's default of 64 KiB
// and systemd's 8 MiB are far below. seed-001 row 23 flags any finite
// limit; a site that set a limit in gigabytes chose it. A process holding
// CAP_IPC_LOCK is not held by its limit: the collector leaves it out.
const MemlockMinBytes = 256 << 20

// auditLimits runs the checks on the newest gpuprocess reading.
func auditLimits(a AuditInput) []Finding {
	if a.Processes == nil {
		return nil
	}
	var out []Finding
	for _, g := range a.Processes.GPUs {
		if len(g.Processes) == 0 {
			continue
		}
		idx := g.GPU
		if f, ok := throttledFinding(g); ok {
			f.GPU = &idx
			out = append(out, f)
		}
		// The CPUs they can run on: the cpuset's, or fewer where a CPU
		// quota allows less time than that.
		cpus, of := g.AllowedCPUs, "allowed CPUs"
		if q := g.CPUQuotaCores; q != nil && *q > 0 && int(math.Ceil(*q)) < cpus {
			cpus, of = int(math.Ceil(*q)), fmt.Sprintf("CPUs of quota (%.3g; %d allowed)", *q, g.AllowedCPUs)
		}
		if cpus > 0 && g.OMPThreads > OversubscribedFactor*cpus {
			out = append(out, Finding{Check: "cpu_oversubscribed", Severity: SeverityWarning, GPU: &idx,
				Summary: fmt.Sprintf("the GPU's %d process(es) setting OMP_NUM_THREADS ask for %d OpenMP threads on %d %s, %.1f per CPU: the threads of each parallel region wait for each other",
					g.OMPProcesses, g.OMPThreads, cpus, of, float64(g.OMPThreads)/float64(cpus)),
				Evidence: []Evidence{{Signal: "omp_threads_per_cpu", Value: round(float64(g.OMPThreads) / float64(cpus)), Unit: "ratio", Op: ">", Threshold: OversubscribedFactor}},
				Fix: fmt.Sprintf("set OMP_NUM_THREADS to the CPUs the processes may use divided among them (here about %d per process; torchrun sets 1 unless told); DataLoader workers need 1",
					max(1, cpus/max(1, g.OMPProcesses)))})
		}
		if s := g.DevShm; s != nil && s.Tmpfs && s.SizeBytes > 0 {
			used := float64(s.UsedBytes) / float64(s.SizeBytes)
			var ev []Evidence
			if s.SizeBytes < DevShmMinBytes {
				ev = append(ev, Evidence{Signal: "dev_shm_size_bytes", Value: float64(s.SizeBytes), Unit: "B", Op: "<", Threshold: DevShmMinBytes})
			}
			if used >= DevShmFullShare {
				ev = append(ev, Evidence{Signal: "dev_shm_used_ratio", Value: round(used), Unit: "ratio", Op: ">=", Threshold: DevShmFullShare})
			}
			if len(ev) > 0 {
				out = append(out, Finding{Check: "dev_shm_small", Severity: SeverityWarning, GPU: &idx,
					Summary: fmt.Sprintf("/dev/shm of the GPU's processes is %s, %.0f%% used: DataLoader workers pass batches and NCCL's SHM transport its buffers through it",
						bytesText(s.SizeBytes), used*100),
					Evidence: ev,
					Fix:      "give the container a larger /dev/shm: docker --shm-size=16g (per GPU), or in Kubernetes an emptyDir with medium: Memory and a sizeLimit mounted at /dev/shm"})
			}
		}
		if g.MemlockBytes != nil && *g.MemlockBytes < MemlockMinBytes {
			out = append(out, Finding{Check: "memlock_limited", Severity: SeverityWarning, GPU: &idx,
				Summary:  fmt.Sprintf("a GPU process may lock only %s of memory (RLIMIT_MEMLOCK): RDMA registration of NCCL's buffers fails or falls back without CAP_IPC_LOCK", bytesText(*g.MemlockBytes)),
				Evidence: []Evidence{{Signal: "memlock_limit_bytes", Value: float64(*g.MemlockBytes), Unit: "B", Op: "<", Threshold: MemlockMinBytes}},
				Fix:      "raise the limit to unlimited: docker --ulimit memlock=-1:-1, LimitMEMLOCK=infinity in the container runtime's systemd unit (containerd, dockerd) or Slurm's PropagateResourceLimits; or grant CAP_IPC_LOCK"})
		}
	}
	return out
}

// throttledFinding is cpu_quota_throttled for one GPU, from the newest
// reading's interval.
func throttledFinding(g sample.GPUProcessGroup) (Finding, bool) {
	r := g.CPUThrottledPeriodsRatio
	if r == nil || *r < CPUThrottledWarn {
		return Finding{}, false
	}
	quota := math.NaN()
	if g.CPUQuotaCores != nil {
		quota = *g.CPUQuotaCores
	}
	ev := []Evidence{{Signal: "cpu_throttled_periods_ratio", Value: round(*r), Unit: "ratio", Op: ">=", Threshold: CPUThrottledWarn}}
	if !math.IsNaN(quota) {
		ev = append(ev, Evidence{Signal: "cpu_quota_cores", Value: round(quota), Unit: "cores", Op: "info"})
	}
	if s := g.CPUThrottledSecondsPerSecond; s != nil {
		ev = append(ev, Evidence{Signal: "cpu_throttled_seconds_per_second", Value: round(*s), Unit: "s/s", Op: "info"})
	}
	return Finding{Check: "cpu_quota_throttled", Severity: SeverityWarning,
		Summary: fmt.Sprintf("the GPU's processes and their workers were throttled by their container's CPU quota (%.3g CPUs) in %.0f%% of periods: their threads wait for the next period while the GPU waits for them",
			quota, *r*100),
		Evidence: ev,
		Fix:      cpuQuotaFix}, true
}

// cpuQuotaFix is the fix for a GPU job held back by its CPU quota.
const cpuQuotaFix = "raise the container's CPU limit (or remove it; requests only)"

// bytesText is a size for a summary: 64 MiB, 1.5 GiB.
func bytesText(b uint64) string {
	switch {
	case b >= 1<<30:
		return fmt.Sprintf("%.3g GiB", float64(b)/(1<<30))
	case b >= 1<<20:
		return fmt.Sprintf("%.3g MiB", float64(b)/(1<<20))
	}
	return fmt.Sprintf("%.3g KiB", float64(b)/(1<<10))
}

// DataLoaderWorkerComm is the name recent PyTorch gives its DataLoader
// worker processes (seed-001 row 15).
const DataLoaderWorkerComm = "pt_data_worker"

// auditDataLoaderWorkers reports more DataLoader workers than the CPUs
// they may run on while the node's CPUs are contended (seed-001 row 16:
// workers summed across ranks above the allowed cores, with PSI cpu some
// above 20%): the workers then queue for the CPUs, against each other and
// against the ranks' own threads, and more of them only adds switching.
// Without the contention many idle workers cost nothing, so no finding.
// The workers are counted once over the GPUs (a rank with several GPUs
// lists its children under each) and their CPUs are the union of their
// Cpus_allowed_list.
func auditDataLoaderWorkers(a AuditInput) []Finding {
	if a.Processes == nil || !a.cpuContended() {
		return nil
	}
	seen := map[int]bool{}
	cpus := map[int]bool{}
	var gpus []int
	for _, g := range a.Processes.GPUs {
		has := false
		for _, p := range g.Processes {
			if p.OnGPU || p.Comm != DataLoaderWorkerComm || seen[p.PID] {
				continue
			}
			set, ok := cpuSet(p.CPUsAllowedList)
			if !ok || len(set) == 0 {
				continue // its CPUs unknown: not counted against any
			}
			seen[p.PID], has = true, true
			for c := range set {
				cpus[c] = true
			}
		}
		if has {
			gpus = append(gpus, g.GPU)
		}
	}
	if len(seen) <= len(cpus) {
		return nil
	}
	slices.Sort(gpus)
	f := Finding{Check: "dataloader_workers_oversubscribed", Severity: SeverityWarning, GPUs: gpus,
		Summary: fmt.Sprintf("%d DataLoader workers of the GPUs' processes may run on %d CPUs while the node's CPU pressure is %.0f%%: the workers queue for the CPUs, against each other and the ranks' own threads",
			len(seen), len(cpus), a.CPUPressure*100),
		Evidence: []Evidence{{Signal: "dataloader_workers_per_cpu", Value: round(float64(len(seen)) / float64(len(cpus))), Unit: "ratio", Op: ">", Threshold: 1},
			{Signal: "cpu_pressure", Value: round(a.CPUPressure), Unit: "ratio", Op: ">=", Threshold: a.CPUPressureLimit}},
		Fix: fmt.Sprintf("lower num_workers so that the workers of all ranks fit the %d CPUs (about %d per rank), or give the job more CPUs; move decoding to the GPU (DALI, nvJPEG) where the workers are busy",
			len(cpus), max(1, len(cpus)/max(1, len(gpus))))}
	if len(gpus) == 1 {
		f.GPU = &gpus[0]
	}
	return []Finding{f}
}

// DataLoader workers respawned each epoch (seed-001 row 19: without
// persistent_workers a DataLoader spawns and tears down its workers "at
// each epoch boundary", which "matters for short epochs, costly
// imports"). The seed gives no epoch length; a respawn at least every
// dataLoaderRespawnEvery, seen dataLoaderMinRespawns times, is a short
// epoch whose restart (imports, dataset handles, the prefetch queue
// refilled) the GPU waits through each time.
const (
	dataLoaderMinRespawns  = 2
	dataLoaderRespawnEvery = 10 * 60.0 // seconds
)

// auditDataLoaderRespawns reports the GPU processes whose DataLoader
// workers the gpuprocess collector saw replaced whole, again and again,
// while the process lived. Info: the job works, and loses seconds at each
// epoch's start; the fix is one argument in its code.
func auditDataLoaderRespawns(a AuditInput) []Finding {
	if a.Processes == nil {
		return nil
	}
	seen := map[int]bool{}
	var out []Finding
	for _, g := range a.Processes.GPUs {
		for _, p := range g.Processes {
			if !p.OnGPU || seen[p.PID] || p.WorkerRespawns < dataLoaderMinRespawns ||
				p.WorkersWatchedSeconds/float64(p.WorkerRespawns) > dataLoaderRespawnEvery {
				continue
			}
			seen[p.PID] = true
			idx := g.GPU
			every := p.WorkersWatchedSeconds / float64(p.WorkerRespawns)
			out = append(out, Finding{Check: "dataloader_workers_respawned", Severity: SeverityInfo, GPU: &idx,
				Summary: fmt.Sprintf("pid %d (%s) on GPU %d replaced all its DataLoader workers %d times in %.0f minutes, about every %.0f s: each epoch forks new workers, which import, open the dataset and refill the prefetch queue while the GPU waits",
					p.PID, p.Comm, g.GPU, p.WorkerRespawns, p.WorkersWatchedSeconds/60, every),
				Evidence: []Evidence{
					{Signal: "dataloader_worker_respawns", Value: float64(p.WorkerRespawns), Unit: "respawns", Op: ">=", Threshold: dataLoaderMinRespawns},
					{Signal: "seconds_between_respawns", Value: round(every), Unit: "s", Op: "<=", Threshold: dataLoaderRespawnEvery},
				},
				Fix: "DataLoader(..., persistent_workers=True) keeps the workers across epochs; raise prefetch_factor (4 to 8) if the GPU still idles at each epoch's start"})
		}
	}
	return out
}
