package collectors

// The gpuprocess collector: its flags, what it keeps between samples, and
// Sample, which walks each GPU's processes down to their descendants
// (gpuprocess_tree.go), reads each process once (gpuprocess_read.go) and sums
// them per GPU (gpuprocess_group.go). The other gpuprocess_*.go files hold
// one concern each.

import (
	"context"
	"fmt"
	"math"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/alecthomas/kingpin/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/procfs"
	"go.uber.org/zap"

	"github.com/gpudiag/gpudiag/engine"
	"github.com/gpudiag/gpudiag/hostfs"
	"github.com/gpudiag/gpudiag/sample"
)

type gpuProcessOptions struct {
	maxProcesses     int
	maxThreads       int
	numaMapsInterval time.Duration
}

// gpuProcessDefaults are the flags' defaults, also in force when the
// collectors are built without parsing flags (tests, embedding).
var gpuProcessDefaults = gpuProcessOptions{
	maxProcesses: 256, maxThreads: 512, numaMapsInterval: 30 * time.Second,
}

var gpuProcessFlags = gpuProcessDefaults

func init() {
	register(collectorSpec[sample.GPUProcesses, *gpuProcessCollector]{
		key:       sample.GPUProcessKey,
		defaultOn: true,
		help:      "Host side of GPU processes and their descendants: CPU and memory placement against the GPU's NUMA node, CPU time, storage reads, threads waiting on I/O, and the limits they run under (CPU quota and its throttling, OMP_NUM_THREADS against the allowed CPUs, memlock, /dev/shm)",
		flags: func(app *kingpin.Application) {
			app.Flag("collector.gpuprocess.max-processes",
				"Most processes read per sample: the GPUs' processes first, then their descendants; the rest are reported as unread.").
				Default(strconv.Itoa(gpuProcessDefaults.maxProcesses)).IntVar(&gpuProcessFlags.maxProcesses)
			app.Flag("collector.gpuprocess.max-threads",
				"Most threads read per process per sample, for thread states and children (the main thread first).").
				Default(strconv.Itoa(gpuProcessDefaults.maxThreads)).IntVar(&gpuProcessFlags.maxThreads)
			app.Flag("collector.gpuprocess.numa-maps-interval",
				"How often each GPU process's /proc/<pid>/numa_maps falls due: reading it walks the process's page tables under its memory map lock. A due read is made when the process's resident memory moved by an eighth since the last, and at least every ten intervals. 0 reads it every sample.").
				Default(gpuProcessDefaults.numaMapsInterval.String()).DurationVar(&gpuProcessFlags.numaMapsInterval)
		},
		newCollector: func(cfg Config) (*gpuProcessCollector, error) { return newGPUProcessCollector(cfg, gpuProcessFlags) },
		metrics:      (&gpuProcessCollector{}).Metrics,
		ownInterval:  &intervalFlag{value: 5 * time.Second, help: "How often GPU processes are read; each read opens a few files per process, and one per thread every 30 s while the host's I/O stall grows (each read while one of the process's threads waits on I/O). 0 uses --sample.interval."},
	})
}

// gpuProcessCollector reads /proc for the processes the GPU collector lists
// on each GPU and for their descendants (DataLoader workers): where they may
// run and where their memory lives compared with the GPU's NUMA node, their
// CPU time and storage reads, and how many of their threads wait on I/O.
type gpuProcessCollector struct {
	interval time.Duration
	host     hostfs.FS
	proc     procfs.FS // host's procfs handle, for the files procfs parses
	shared   *Shared
	log      *zap.Logger
	now      func() time.Time
	opts     gpuProcessOptions

	// fastInterval is the daemon's sampling interval, taken while a new GPU
	// process is young (until fastUntil); gpuPIDs are the GPU processes of
	// the previous sample.
	fastInterval time.Duration
	fastUntil    time.Time
	gpuPIDs      map[uint32]bool

	accounts map[string]*gpuAccount // by PCI bus ID
	// workers follows each GPU process's DataLoader workers across
	// samples, by the process's identity, to count their respawns.
	workers  map[hostfs.ProcID]*workerTrack
	lastSeen map[int]trackedProc            // every process read last sample, for per-process rates
	numaMaps map[hostfs.ProcID]numaMapsRead // GPU processes' memory per node
	lastTime time.Time

	// cgroupsSeen holds each cgroup's throttling counters as last read,
	// by path, for the per-interval throttled share.
	cgroupsSeen map[string]sample.CPULimit
	// ompNumThreadsSeen caches OMP_NUM_THREADS per process: the
	// environment a process was started with does not change.
	ompNumThreadsSeen map[hostfs.ProcID]int
	// environBuf is the wiped buffer environments are scanned through.
	environBuf []byte
	// stats reads the threads' stat files through one buffer; tidBuf is
	// the task directory's listing, both reused across samples.
	stats  *hostfs.TaskStatReader
	tidBuf []int
	// treeThreads is how many threads the last sample's walk met: the
	// next walk weighs their children files against a parent scan.
	treeThreads int
	// parents carries every host process's parent between parent scans:
	// a scan reads the processes born since the last.
	parents *hostfs.ParentIndex
	// cgroupNS is the host path of the daemon's cgroup namespace root
	// ("" when it sees the host's), found at cgroupNSAt; a failed lookup
	// is retried after cgroupNSRetry.
	cgroupNS    string
	cgroupNSAt  time.Time
	cgroupNSErr error
	self        int
	// stallMark is the host's I/O stall as the previous sample (or, before
	// the first, the constructor) read it: procCycle.ioQuiet.
	stallMark threadCensus
	// heldFiles keeps the stat and io files of the processes read last
	// sample open, by PID (at most maxProcesses of them, two descriptors
	// each).
	heldFiles map[int]*hostfs.ProcessFiles
	// sampling is held by Sample, so that Close leaves alone the files of
	// a sample the engine gave up on and left running.
	sampling sync.Mutex
}

func newGPUProcessCollector(cfg Config, opts gpuProcessOptions) (*gpuProcessCollector, error) {
	if opts.maxProcesses < 1 || opts.maxThreads < 1 {
		return nil, fmt.Errorf("--collector.gpuprocess.max-processes and max-threads must be at least 1 (got %d, %d)",
			opts.maxProcesses, opts.maxThreads)
	}
	if _, err := os.Stat(cfg.ProcPath); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	host, err := hostfs.NewFS(cfg.ProcPath, cfg.SysPath)
	if err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	log := cfg.Logger
	shared := cfg.Shared
	c := &gpuProcessCollector{
		host: host, proc: host.Procfs(), shared: shared, log: log, now: time.Now, opts: opts, interval: cfg.OwnInterval,
		fastInterval: cfg.Interval,
		accounts:     map[string]*gpuAccount{}, lastSeen: map[int]trackedProc{}, numaMaps: map[hostfs.ProcID]numaMapsRead{},
		cgroupsSeen: map[string]sample.CPULimit{}, ompNumThreadsSeen: map[hostfs.ProcID]int{}, self: os.Getpid(),
		stats: host.NewTaskStatReader(),
	}
	c.parents = hostfs.NewParentIndex(func() time.Time { return c.now() })
	// The mark the first sample's processes are judged from.
	stall, known := c.ioStall()
	c.stallMark = threadCensus{at: c.now(), ioStall: stall, ioKnown: known}
	return c, nil
}

// ioStall reads the host's I/O stall total (/proc/pressure/io, some, in
// microseconds); known is false without pressure files.
func (c *gpuProcessCollector) ioStall() (total uint64, known bool) {
	if psi, err := c.host.PSI("io"); err == nil && psi.HasSome {
		return psi.Some.TotalMicroseconds, true
	}
	return 0, false
}

func (c *gpuProcessCollector) Name() string { return sample.GPUProcessKey.Name() }

// Interval gives the collector its own clock: see the interval flag.
func (c *gpuProcessCollector) Interval() time.Duration { return c.interval }

// newJobFastSpan is how long the collector samples at the daemon's interval
// after a GPU gets a process it did not have: a new process's first reading
// is a baseline, its CPU has a rate from the second, and the verdict
// (host-bound, say) needs that rate within the analysis span.
const newJobFastSpan = 10 * time.Second

// NextSample asks for the next sample at the daemon's interval while a new
// GPU process is young (engine.Pacer), else at the collector's own.
func (c *gpuProcessCollector) NextSample() time.Duration {
	if c.now().Before(c.fastUntil) {
		return c.fastInterval
	}
	return 0
}

// Prompt is signalled when the GPU collector publishes a process a GPU did
// not have (engine.Prompter): a new job's first reading, its baseline, is
// taken at once rather than at the next tick.
func (c *gpuProcessCollector) Prompt() <-chan struct{} { return c.shared.NewGPUProcesses() }

// noteNewGPUProcesses starts a fast span when a GPU lists a process it did
// not list at the previous sample (not at the first: everything is new).
func (c *gpuProcessCollector) noteNewGPUProcesses(refs []GPURef, now time.Time) {
	seen := make(map[uint32]bool, len(c.gpuPIDs))
	fresh := false
	for _, r := range refs {
		for _, pid := range r.PIDs {
			seen[pid] = true
			if c.gpuPIDs != nil && !c.gpuPIDs[pid] {
				fresh = true
			}
		}
	}
	if fresh {
		c.fastUntil = now.Add(newJobFastSpan)
	}
	c.gpuPIDs = seen
}

func (c *gpuProcessCollector) Sample(ctx context.Context) (*sample.GPUProcesses, error) {
	c.sampling.Lock()
	defer c.sampling.Unlock()
	now := c.now()
	refs := c.shared.GPUs()
	c.noteNewGPUProcesses(refs, now)
	out := &sample.GPUProcesses{}
	if !c.lastTime.IsZero() {
		out.IntervalSeconds = now.Sub(c.lastTime).Seconds()
	}
	c.lastTime = now

	cy := &procCycle{c: c, ctx: ctx, now: now, budget: c.opts.maxProcesses, cache: map[int]*procReading{}, tree: c.host.NewProcTree(),
		cgroups: map[string]cgroupRead{}}
	cy.tree.ExpectThreads(c.treeThreads, c.stats)
	c.shared.seedParents(c.parents)
	cy.tree.KeepParents(c.parents)
	cy.ioStall, cy.ioStallKnown = c.ioStall()
	cy.ioQuiet = c.stallMark.quiet(now, cy.ioStall, cy.ioStallKnown)
	c.stallMark = threadCensus{at: now, ioStall: cy.ioStall, ioKnown: cy.ioStallKnown}
	groups := make([]*groupBuild, 0, len(refs))
	for _, ref := range refs {
		g := &groupBuild{ref: ref, key: ref.PCIBusID, seen: map[int]bool{}, unread: map[int]bool{},
			under: map[int][]int{}, partial: map[int]bool{}}
		if g.key == "" {
			g.key = "index:" + strconv.Itoa(ref.Index)
		}
		g.group = sample.GPUProcessGroup{GPU: ref.Index, PCIBusID: ref.PCIBusID, NUMANode: -1}
		if loc, err := c.host.PCILocality(ref.PCIBusID); err == nil {
			g.loc, g.locKnown = loc, true
			g.group.NUMANode, g.group.LocalCPUList = loc.NUMANode, loc.LocalCPUList
		} else {
			c.log.Debug("GPU's NUMA placement unreadable", zap.Int("gpu", ref.Index), zap.Error(err))
		}
		groups = append(groups, g)
	}

	// The GPUs' own processes first, for every GPU, so that the cap falls on
	// descendants; then descendants breadth-first, one per GPU in turn, so a
	// GPU with hundreds of workers cannot starve the others.
	for _, g := range groups {
		for _, pid := range g.ref.PIDs {
			g.visit(cy, queuedProc{pid: int(pid), root: int(pid)})
		}
	}
	for pending := true; pending; {
		pending = false
		for _, g := range groups {
			if len(g.queue) == 0 {
				continue
			}
			pending = true
			q := g.queue[0]
			g.queue = g.queue[1:]
			g.visit(cy, q)
		}
	}

	liveGPUs := map[string]bool{}
	for _, g := range groups {
		liveGPUs[g.key] = true
		c.finishGroup(cy, g, now, out.IntervalSeconds)
		out.GPUs = append(out.GPUs, g.group)
	}
	for k := range c.accounts {
		if !liveGPUs[k] {
			delete(c.accounts, k)
		}
	}
	c.trackWorkers(out, now)
	c.rememberProcesses(cy, now)
	c.cgroupsSeen = map[string]sample.CPULimit{}
	for _, cr := range cy.cgroups {
		if cr.limit != nil {
			c.cgroupsSeen[cr.limit.Cgroup] = *cr.limit
		}
	}
	out.DescendantSource = cy.tree.Source()
	c.treeThreads = cy.tree.ThreadsSeen()
	c.publishTrees(groups, now)
	return out, nil
}

// publishTrees gives the other collectors the trees this sample read whole
// (Shared.ProcessTrees), so that none walks /proc for them again. A GPU
// process on two GPUs has its tree from the first that read it whole.
func (c *gpuProcessCollector) publishTrees(groups []*groupBuild, now time.Time) {
	interval := c.interval
	if interval <= 0 {
		interval = c.fastInterval
	}
	trees := &ProcessTrees{At: now, Interval: interval, Under: map[int][]int{}}
	for _, g := range groups {
		for root, procs := range g.under {
			if _, done := trees.Under[root]; !done && !g.partial[root] {
				trees.Under[root] = procs
			}
		}
	}
	c.shared.SetProcessTrees(trees)
}

// Close closes the files held open, unless a sample is still running (the
// daemon is exiting: they close with it).
func (c *gpuProcessCollector) Close() error {
	if !c.sampling.TryLock() {
		return nil
	}
	defer c.sampling.Unlock()
	for pid, files := range c.heldFiles {
		files.Close()
		delete(c.heldFiles, pid)
	}
	return nil
}

func gpuProcessDesc(name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc(engine.Namespace+"_gpu_process_"+name, help, append([]string{"gpu"}, labels...), nil)
}

var (
	gpuProcRemoteMemDesc = gpuProcessDesc("remote_memory_ratio",
		"Largest share, among the GPU's processes, of a process's resident memory on NUMA nodes other than the GPU's (from numa_maps). Absent when the GPU's node is unknown.")
	gpuProcCPUsOffNodeDesc = gpuProcessDesc("cpus_off_node_ratio",
		"Largest share, among the GPU's processes, of a process's allowed CPUs outside the GPU's local CPUs; 1 means it can only run on another node. Absent when the GPU's node is unknown.")
	gpuProcIOWaitDesc = gpuProcessDesc("io_wait_threads_ratio",
		"Share of the threads of the GPU's processes and their descendants found in uninterruptible sleep (D state, mostly waiting on storage): main threads as of the last sample, the others as of their process's last census (taken every sample while one of its threads waits, else every 30 s while the host's I/O stall grows by 1% of the time, and at least every 5 min; a process first seen while the host's I/O is quiet has its other threads counted as not waiting until its first census).")
	gpuProcCPUDesc = gpuProcessDesc("cpu_seconds_total",
		"CPU time of the GPU's processes and their descendants (DataLoader workers), exited ones included, since the daemon first saw them.", "mode")
	gpuProcStorageReadDesc = gpuProcessDesc("storage_read_bytes_total",
		"Bytes the GPU's processes and their descendants caused to be read from storage (read_bytes; page cache hits excluded), since the daemon first saw them.")
	gpuProcSyscallReadDesc = gpuProcessDesc("syscall_read_bytes_total",
		"Bytes returned by read-like syscalls of the GPU's processes and their descendants from any source, page cache, pipes and sockets included (rchar), since the daemon first saw them.")
	gpuProcReadSyscallsDesc = gpuProcessDesc("read_syscalls_total",
		"Read-like syscalls of the GPU's processes and their descendants (syscr), since the daemon first saw them.")
	gpuProcResidentDesc = gpuProcessDesc("resident_memory_bytes",
		"Resident memory of the GPU's processes by NUMA node, from numa_maps (pages shared between processes count in each).", "numa_node")
	gpuProcDescendantsDesc = gpuProcessDesc("descendants",
		"Descendant processes of the GPU's processes (DataLoader workers and the like) read at the last sample.")
	gpuProcQuotaDesc = gpuProcessDesc("cpu_quota_cores",
		"CPU quota (CFS bandwidth limit) of the cgroups the GPU's processes and descendants run in, in CPUs: for each process the smallest over its cgroup and its ancestors (container, pod), the distinct cgroups summed. Absent when no quota applies.")
	gpuProcPeriodsDesc = gpuProcessDesc("cpu_periods_total",
		"CFS enforcement periods (100 ms by default) in which the GPU's processes' cgroups had runnable tasks (cpu.stat nr_periods), since the daemon first saw them.")
	gpuProcThrottledPeriodsDesc = gpuProcessDesc("cpu_throttled_periods_total",
		"Of those periods, the ones in which the cgroups ran out of quota and their tasks waited for the next period (cpu.stat nr_throttled).")
	gpuProcThrottledSecondsDesc = gpuProcessDesc("cpu_throttled_seconds_total",
		"Time the GPU's processes' cgroups spent throttled by their CPU quota (cpu.stat throttled_usec; v1 throttled_time), since the daemon first saw them.")
	gpuProcOMPThreadsDesc = gpuProcessDesc("omp_threads",
		"Sum of OMP_NUM_THREADS over the GPU's processes and descendants that set it: the OpenMP threads they ask for.")
	gpuProcAllowedCPUsDesc = gpuProcessDesc("allowed_cpus",
		"CPUs the GPU's processes and descendants may run on (the union of their Cpus_allowed_list).")
	gpuProcMemlockDesc = gpuProcessDesc("memlock_limit_bytes",
		"Lowest RLIMIT_MEMLOCK (Max locked memory, soft) among the GPU's own processes without CAP_IPC_LOCK, which lifts it; +Inf when unlimited or lifted for every one. RDMA memory registration counts against it.")
	gpuProcShmSizeDesc = gpuProcessDesc("dev_shm_size_bytes",
		"Size of /dev/shm in the mount namespace of the GPU's processes (the smallest among them): DataLoader workers pass batches and NCCL's SHM transport its buffers through it.")
	gpuProcShmUsedDesc = gpuProcessDesc("dev_shm_used_bytes",
		"Bytes used in that /dev/shm.")
	gpuProcUnreadDesc = gpuProcessDesc("unread_processes",
		"Processes of the GPU or their descendants left unread at the last sample because of --collector.gpuprocess.max-processes.")
)

func (c *gpuProcessCollector) Metrics(r *sample.GPUProcesses, emit func(prometheus.Metric)) {
	gauge := func(d *prometheus.Desc, v *float64, labels ...string) {
		if v != nil {
			emit(engine.NewSeries(d, prometheus.GaugeValue, *v, labels...))
		}
	}
	for i := range r.GPUs {
		g := &r.GPUs[i]
		id := strconv.Itoa(g.GPU)
		gauge(gpuProcRemoteMemDesc, g.RemoteMemoryRatio, id)
		gauge(gpuProcCPUsOffNodeDesc, g.CPUsOffNodeRatio, id)
		gauge(gpuProcIOWaitDesc, g.IOWaitThreadsRatio, id)
		emit(engine.NewSeries(gpuProcCPUDesc, prometheus.CounterValue, g.UserSecondsTotal, id, "user"))
		emit(engine.NewSeries(gpuProcCPUDesc, prometheus.CounterValue, g.SystemSecondsTotal, id, "system"))
		emit(engine.NewSeries(gpuProcStorageReadDesc, prometheus.CounterValue, g.StorageReadBytesTotal, id))
		emit(engine.NewSeries(gpuProcSyscallReadDesc, prometheus.CounterValue, g.SyscallReadBytesTotal, id))
		emit(engine.NewSeries(gpuProcReadSyscallsDesc, prometheus.CounterValue, g.ReadSyscallsTotal, id))
		for _, nb := range g.ResidentBytesByNode {
			emit(engine.NewSeries(gpuProcResidentDesc, prometheus.GaugeValue, float64(nb.Bytes), id, strconv.Itoa(nb.Node)))
		}
		descendants := 0
		for j := range g.Processes {
			if !g.Processes[j].OnGPU {
				descendants++
			}
		}
		emit(engine.NewSeries(gpuProcDescendantsDesc, prometheus.GaugeValue, float64(descendants), id))
		emit(engine.NewSeries(gpuProcUnreadDesc, prometheus.GaugeValue, float64(g.Unread), id))
		gauge(gpuProcQuotaDesc, g.CPUQuotaCores, id)
		if g.CPUCgroups > 0 {
			emit(engine.NewSeries(gpuProcPeriodsDesc, prometheus.CounterValue, g.CPUPeriodsTotal, id))
			emit(engine.NewSeries(gpuProcThrottledPeriodsDesc, prometheus.CounterValue, g.CPUThrottledPeriodsTotal, id))
			emit(engine.NewSeries(gpuProcThrottledSecondsDesc, prometheus.CounterValue, g.CPUThrottledSecondsTotal, id))
		}
		if g.OMPProcesses > 0 {
			emit(engine.NewSeries(gpuProcOMPThreadsDesc, prometheus.GaugeValue, float64(g.OMPThreads), id))
		}
		if g.AllowedCPUs > 0 {
			emit(engine.NewSeries(gpuProcAllowedCPUsDesc, prometheus.GaugeValue, float64(g.AllowedCPUs), id))
		}
		switch {
		case g.MemlockBytes != nil:
			emit(engine.NewSeries(gpuProcMemlockDesc, prometheus.GaugeValue, float64(*g.MemlockBytes), id))
		case g.MemlockUnlimited:
			emit(engine.NewSeries(gpuProcMemlockDesc, prometheus.GaugeValue, math.Inf(1), id))
		}
		if g.DevShm != nil {
			emit(engine.NewSeries(gpuProcShmSizeDesc, prometheus.GaugeValue, float64(g.DevShm.SizeBytes), id))
			emit(engine.NewSeries(gpuProcShmUsedDesc, prometheus.GaugeValue, float64(g.DevShm.UsedBytes), id))
		}
	}
}
