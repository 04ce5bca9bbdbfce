package collectors

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/alecthomas/kingpin/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/procfs"
	"go.uber.org/zap"

	"github.com/gpudiag/gpudiag/engine"
	"github.com/gpudiag/gpudiag/hostfs"
	"github.com/gpudiag/gpudiag/nccl"
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

	accounts map[string]*gpuAccount         // by PCI bus ID
	lastSeen map[int]trackedProc            // every process read last sample, for per-process rates
	numaMaps map[hostfs.ProcID]numaMapsRead // GPU processes' memory per node
	lastTime time.Time

	// cgroupsSeen holds each cgroup's throttling counters as last read,
	// by path, for the per-interval throttled share.
	cgroupsSeen map[string]sample.CPULimit
	// omp caches OMP_NUM_THREADS per process: the environment a process
	// was started with does not change.
	omp map[hostfs.ProcID]int
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
	// held keeps the stat and io files of the processes read last sample
	// open, by PID (at most maxProcesses of them, two descriptors each).
	held map[int]*hostfs.ProcessFiles
	// sampling is held by Sample, so that Close leaves alone the files of
	// a sample the engine gave up on and left running.
	sampling sync.Mutex
}

// cgroupNSRetry is how long a failed lookup of the daemon's cgroup
// namespace root stands before it is tried again (it walks the host's
// cgroups down to the root's depth).
const cgroupNSRetry = time.Minute

type numaMapsRead struct {
	bytes    []sample.NodeBytes
	at       time.Time
	rssPages uint64 // the process's resident pages when read
}

// A GPU process's numa_maps falls due every numaMapsInterval, and a due
// read is made only when the process's resident memory moved by at least
// numaMapsRSSShare of what it was at the last read, or that read is
// numaMapsMaxIntervals intervals old. Reading numa_maps walks the process's
// page tables (a rank with tens of GB of pinned host memory pays it in
// milliseconds); pages placed or freed move the shares on each node by at
// most the resident memory they add or take, so under an eighth the
// placement the verdict judges (most memory remote from the GPU) stands.
// Pages moved between nodes at the same size (NUMA balancing, migratepages)
// or freed and placed again elsewhere wait for the maximum age.
const (
	numaMapsRSSShare     = 1.0 / 8
	numaMapsMaxIntervals = 10
)

// steady tells whether a due read may be skipped at now for a process with
// rss resident pages.
func (m numaMapsRead) steady(now time.Time, rss uint64, interval time.Duration) bool {
	if interval <= 0 || m.rssPages == 0 || now.Sub(m.at) >= numaMapsMaxIntervals*interval {
		return false
	}
	moved := max(rss, m.rssPages) - min(rss, m.rssPages)
	return float64(moved) < numaMapsRSSShare*float64(m.rssPages)
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
		cgroupsSeen: map[string]sample.CPULimit{}, omp: map[hostfs.ProcID]int{}, self: os.Getpid(),
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

// groupBuild collects one GPU's processes during a sample.
type groupBuild struct {
	ref      GPURef
	key      string
	loc      hostfs.PCILocality
	locKnown bool
	seen     map[int]bool
	unread   map[int]bool // left unread by the cap or the deadline
	queue    []queued
	readings []*procReading
	depths   []int
	group    sample.GPUProcessGroup
	// under lists the processes read under each of the GPU's processes
	// (ProcessTrees.Under); partial marks those whose tree has processes
	// left unread.
	under   map[int][]int
	partial map[int]bool
}

type queued struct {
	pid, depth int
	parent     int // the process whose child it was found as
	root       int // the GPU process whose tree it was found in
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
			g.visit(cy, queued{pid: int(pid), root: int(pid)})
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

// visit reads one process into the group (once per GPU) and queues its
// children. A process beyond the cap, or left when the sample ran out of
// time, is counted as unread.
func (g *groupBuild) visit(cy *procCycle, q queued) {
	pid, depth := q.pid, q.depth
	if g.seen[pid] {
		return
	}
	g.seen[pid] = true
	r, ok := cy.read(pid)
	if !ok {
		g.unread[pid] = true
		g.group.Unread++
		g.partial[q.root] = true
		return
	}
	if r == nil {
		return // vanished or unreadable
	}
	g.group.Errors = append(g.group.Errors, r.errs...)
	if r.broken {
		return
	}
	if depth > 0 && r.detail.PPID != q.parent {
		// Not its child now: reparented since the tree was read, or a
		// PID reused since a parent scan's index last read it.
		return
	}
	g.readings = append(g.readings, r)
	g.depths = append(g.depths, depth)
	g.under[q.root] = append(g.under[q.root], pid)
	for _, child := range cy.children(r) {
		if !g.seen[child] {
			g.queue = append(g.queue, queued{pid: child, depth: depth + 1, parent: pid, root: q.root})
		}
	}
}

// finishGroup derives the group's placement, thread and accounting values.
func (c *gpuProcessCollector) finishGroup(cy *procCycle, g *groupBuild, now time.Time, interval float64) {
	grp := &g.group
	nodeKnown := g.locKnown && g.loc.NUMANode >= 0
	local := map[int]bool{}
	for _, cpu := range g.loc.LocalCPUs {
		local[cpu] = true
	}
	residentByNode := map[int]uint64{}
	allowed := map[int]bool{}
	limits := map[string]sample.CPULimit{}
	memlockUnlimited := 0
	for i, r := range g.readings {
		onGPU := g.depths[i] == 0
		var nm numaMapsResult
		if onGPU {
			nm = cy.numaMaps(r) // before the copy below: it may mark numa_maps unreadable
		}
		p := r.detail
		p.Depth, p.OnGPU = g.depths[i], onGPU
		if nodeKnown && len(local) > 0 && len(r.allowedCPUs) > 0 {
			off := 0
			for _, cpu := range r.allowedCPUs {
				if !local[cpu] {
					off++
				}
			}
			ratio := float64(off) / float64(len(r.allowedCPUs))
			p.CPUsOffNodeRatio = &ratio
			if p.OnGPU {
				grp.CPUsOffNodeRatio = maxRatio(grp.CPUsOffNodeRatio, ratio)
				grp.CPUsFullyRemote = grp.CPUsFullyRemote || off == len(r.allowedCPUs)
			}
		}
		if onGPU {
			if !nm.at.IsZero() {
				p.ResidentBytesByNode = nm.bytes
				p.NUMAMapsAgeSeconds = now.Sub(nm.at).Seconds()
				var total, remote uint64
				for _, nb := range nm.bytes {
					residentByNode[nb.Node] += nb.Bytes
					total += nb.Bytes
					if nb.Node != g.loc.NUMANode {
						remote += nb.Bytes
					}
				}
				if nodeKnown && total > 0 {
					ratio := float64(remote) / float64(total)
					p.RemoteMemoryRatio = &ratio
					grp.RemoteMemoryRatio = maxRatio(grp.RemoteMemoryRatio, ratio)
				}
			} else if nm.err != "" {
				grp.Errors = append(grp.Errors, nm.err)
			}
		}
		if onGPU {
			grp.Errors = append(grp.Errors, cy.processLimits(r)...)
			p.MemlockBytes, p.MemlockUnlimited, p.IPCLock, p.DevShm = r.detail.MemlockBytes, r.detail.MemlockUnlimited, r.detail.IPCLock, r.detail.DevShm
			p.Unreadable = r.detail.Unreadable
			switch {
			case p.MemlockUnlimited || (p.IPCLock && p.MemlockBytes != nil):
				memlockUnlimited++
			case p.MemlockBytes != nil && (grp.MemlockBytes == nil || *p.MemlockBytes < *grp.MemlockBytes):
				grp.MemlockBytes = p.MemlockBytes
			}
			if p.DevShm != nil && (grp.DevShm == nil || p.DevShm.SizeBytes < grp.DevShm.SizeBytes) {
				grp.DevShm = p.DevShm
			}
		}
		if p.OMPNumThreads > 0 {
			grp.OMPThreads += p.OMPNumThreads
			grp.OMPProcesses++
		}
		for _, cpu := range r.allowedCPUs {
			allowed[cpu] = true
		}
		if p.CPULimit != nil {
			limits[p.CPULimit.Cgroup] = *p.CPULimit
		}
		counted := 0
		for state, n := range p.ThreadStates {
			counted += n
			if state == "D" {
				grp.IOWaitThreads += n
			}
		}
		if r.census.presumed {
			counted = max(counted, p.Threads) // the unread ones, not waiting
		}
		grp.Threads += counted
		grp.Processes = append(grp.Processes, p)
	}
	grp.ResidentBytesByNode = nodeBytes(residentByNode)
	grp.AllowedCPUs = len(allowed)
	grp.MemlockUnlimited = memlockUnlimited > 0 && grp.MemlockBytes == nil
	if grp.Threads > 0 {
		ratio := float64(grp.IOWaitThreads) / float64(grp.Threads)
		grp.IOWaitThreadsRatio = &ratio
	}

	acc, ok := c.accounts[g.key]
	if !ok {
		acc = &gpuAccount{procs: map[int]trackedProc{}}
		c.accounts[g.key] = acc
	}
	inc := acc.update(g.readings, g.unread)
	grp.UserSecondsTotal, grp.SystemSecondsTotal = acc.user, acc.system
	grp.StorageReadBytesTotal, grp.SyscallReadBytesTotal, grp.ReadSyscallsTotal = acc.storageRead, acc.syscallRead, acc.readSyscalls
	if interval > 0 {
		grp.CPUCoresUsed = (inc.user + inc.system) / interval
		grp.StorageReadBytesPerSecond = inc.storageRead / interval
	}
	c.throttling(grp, acc, limits, interval)
}

// throttling sums the GPU's distinct cgroups' quotas, adds their throttling
// since the last sample to the GPU's totals and, over the cgroups with a
// quota read in both samples, derives the interval's throttled share of
// periods and throttled seconds per second. A cgroup met for the first
// time is a baseline: its past belongs to before the daemon looked.
func (c *gpuProcessCollector) throttling(grp *sample.GPUProcessGroup, acc *gpuAccount, limits map[string]sample.CPULimit, interval float64) {
	grp.CPUCgroups = len(limits)
	var quota, periods, throttled, throttledSec float64
	limited, measured := false, false
	for path, l := range limits {
		if l.QuotaCores > 0 {
			quota += l.QuotaCores
			limited = true
		}
		prev, ok := c.cgroupsSeen[path]
		if !ok {
			continue
		}
		dp := sample.CounterDelta(float64(prev.Periods), float64(l.Periods))
		dt := sample.CounterDelta(float64(prev.ThrottledPeriods), float64(l.ThrottledPeriods))
		ds := sample.CounterDelta(prev.ThrottledSeconds, l.ThrottledSeconds)
		acc.cpuPeriods += dp
		acc.cpuThrottled += dt
		acc.cpuThrottledSec += ds
		if l.QuotaCores > 0 {
			periods += dp
			throttled += dt
			throttledSec += ds
			measured = true
		}
	}
	if limited {
		grp.CPUQuotaCores = &quota
	}
	grp.CPUPeriodsTotal, grp.CPUThrottledPeriodsTotal, grp.CPUThrottledSecondsTotal = acc.cpuPeriods, acc.cpuThrottled, acc.cpuThrottledSec
	if measured && interval > 0 {
		ratio := 0.0
		if periods > 0 {
			ratio = throttled / periods
		}
		perSecond := throttledSec / interval
		grp.CPUThrottledPeriodsRatio, grp.CPUThrottledSecondsPerSecond = &ratio, &perSecond
	}
}

// cgroupLimit reads the binding CPU quota of a process's cgroups once per
// sample. Cgroups not mounted where expected, or a process outside any
// cpu hierarchy, are not measured: no error.
func (cy *procCycle) cgroupLimit(cgs []procfs.Cgroup) cgroupRead {
	// The cgroup file's lines again, as the key: fmt.Sprint of the
	// parsed lines was a third of this collector's allocations.
	var kb strings.Builder
	for _, cg := range cgs {
		kb.WriteString(strconv.Itoa(cg.HierarchyID))
		kb.WriteByte(':')
		for i, ctl := range cg.Controllers {
			if i > 0 {
				kb.WriteByte(',')
			}
			kb.WriteString(ctl)
		}
		kb.WriteByte(':')
		kb.WriteString(strconv.Itoa(len(cg.Path))) // a path may hold any byte
		kb.WriteByte(':')
		kb.WriteString(cg.Path)
	}
	key := kb.String()
	if cr, ok := cy.cgroups[key]; ok {
		return cr
	}
	var cr cgroupRead
	l, err := cy.c.host.CgroupCPU(cgs, cy.c.cgroupNamespace(cy.now))
	switch {
	case err == nil:
		cr.limit = &sample.CPULimit{Cgroup: l.Path, QuotaCores: l.QuotaCores(), Periods: l.Periods,
			ThrottledPeriods: l.ThrottledPeriods, ThrottledSeconds: float64(l.ThrottledMicros) / 1e6}
	case errors.Is(err, fs.ErrNotExist) || errors.Is(err, fs.ErrPermission):
		cr.gone = errors.Is(err, fs.ErrNotExist)
		cy.c.log.Debug("cgroup CPU limit unreadable", zap.Error(err))
	default:
		cr.err = err.Error()
	}
	cy.cgroups[key] = cr
	return cr
}

// cgroupNamespace returns the host path of the daemon's cgroup namespace
// root: "" where init's cgroup shows the daemon the host's hierarchy (or
// cannot be read), else the cgroup found at init's depth that lists the
// daemon. A failed lookup stands for cgroupNSRetry, and paths above the
// namespace are then not read.
func (c *gpuProcessCollector) cgroupNamespace(now time.Time) string {
	if !c.cgroupNSAt.IsZero() && (c.cgroupNSErr == nil || now.Sub(c.cgroupNSAt) < cgroupNSRetry) {
		return c.cgroupNS
	}
	c.cgroupNSAt, c.cgroupNS, c.cgroupNSErr = now, "", nil
	p, err := c.proc.Proc(1)
	if err != nil {
		return ""
	}
	cgs, err := p.Cgroups()
	if err != nil {
		return ""
	}
	for _, cg := range cgs {
		if cg.HierarchyID == 0 && len(cg.Controllers) == 0 {
			c.cgroupNS, c.cgroupNSErr = c.host.CgroupNamespaceRoot(cg.Path, c.self)
			if c.cgroupNSErr != nil {
				c.log.Info("cgroup namespace root not found: CPU quotas of processes outside it are not read", zap.Error(c.cgroupNSErr))
			}
		}
	}
	return c.cgroupNS
}

// processLimits reads, once per sample, what only the GPU's own processes
// are asked: RLIMIT_MEMLOCK (RDMA registration of NCCL's buffers runs in
// them; read with the placement, see processAttrInterval) and the size and
// use of /dev/shm in their mount namespace (every sample: it fills).
func (cy *procCycle) processLimits(r *procReading) (errs []string) {
	if r.limitsRead {
		return nil
	}
	r.limitsRead = true
	c, d := cy.c, &r.detail
	if cy.ctx.Err() != nil {
		return nil
	}
	m := r.attrs.memlock
	if m == nil {
		var keep bool
		m, keep, errs = readMemlock(c.host, d)
		if keep {
			r.attrs.memlock = m
		}
	}
	if m != nil {
		if m.limit.Unlimited {
			d.MemlockUnlimited = true
		} else {
			b := m.limit.Bytes
			d.MemlockBytes = &b
		}
		d.IPCLock = m.ipcLock
	}
	// Bounded by the sample's deadline as well: a hung /dev/shm (FUSE,
	// NFS) costs this sample at most what is left of it.
	var timeout time.Duration
	if dl, ok := cy.ctx.Deadline(); ok {
		if timeout = time.Until(dl); timeout <= 0 {
			return errs
		}
	}
	shm, err := c.host.DevShm(d.PID, timeout)
	switch {
	case err == nil:
		d.DevShm = &sample.DevShm{Tmpfs: shm.Tmpfs, SizeBytes: shm.SizeBytes, UsedBytes: shm.UsedBytes}
	case errors.Is(err, fs.ErrPermission):
		d.Unreadable = append(d.Unreadable, "root/dev/shm")
	default:
		// Absent (a root without /dev/shm, a process gone), pending or
		// hung: not measured.
		c.log.Debug("/dev/shm unreadable", zap.Int("pid", d.PID), zap.Error(err))
	}
	return errs
}

// readMemlock reads the process's RLIMIT_MEMLOCK and, where it is finite,
// whether CAP_IPC_LOCK lifts it: nil when the limit was not read (noted in
// d or errs). keep says the reading is whole and stands until the
// attributes are due; otherwise the next sample reads again.
func readMemlock(host hostfs.FS, d *sample.GPUProcess) (m *memlockRead, keep bool, errs []string) {
	ml, err := host.MaxLockedMemory(d.PID)
	switch {
	case err == nil:
	case hostfs.Vanished(err):
		return nil, false, nil
	case errors.Is(err, fs.ErrPermission):
		d.Unreadable = append(d.Unreadable, "limits")
		return nil, false, nil
	default:
		return nil, false, []string{err.Error()}
	}
	m = &memlockRead{limit: ml}
	if ml.Unlimited {
		return m, true, nil
	}
	// CAP_IPC_LOCK lifts the limit: only then does it matter.
	switch caps, err := host.CapEff(d.PID); {
	case err == nil:
		m.ipcLock = caps&(1<<hostfs.CapIPCLock) != 0
		return m, true, nil
	case errors.Is(err, fs.ErrPermission):
		return m, true, nil // the limit stands on its own
	case hostfs.Vanished(err):
		return m, false, nil
	default:
		return m, false, []string{err.Error()}
	}
}

// gpuProcessEnvironBytes bounds the read of one environment, and
// gpuProcessEnvironChunk the buffer it is scanned through.
const (
	gpuProcessEnvironBytes = 1 << 20
	gpuProcessEnvironChunk = 64 << 10
)

// ompNumThreads reads OMP_NUM_THREADS from the process's environment,
// once per process: the only variable kept (it is on nccl's allow-list of
// values); nothing else leaves the wiped buffer.
func (c *gpuProcessCollector) ompNumThreads(id hostfs.ProcID) int {
	if n, ok := c.omp[id]; ok {
		return n
	}
	if c.environBuf == nil {
		c.environBuf = make([]byte, gpuProcessEnvironChunk)
	}
	n := 0
	_, err := c.host.Environ(id.PID)(c.environBuf, gpuProcessEnvironBytes, func(name []byte) bool {
		return string(name) == "OMP_NUM_THREADS" && nccl.EnvPolicy(name) == nccl.EnvValue
	}, func(_, value []byte) {
		if n != 0 {
			return // the first one is what getenv returns
		}
		// "8" or a nested list "8,4": the outer level is what runs.
		first, _, _ := strings.Cut(string(value), ",")
		if v, err := strconv.Atoi(strings.TrimSpace(first)); err == nil && v > 0 {
			n = min(v, 1<<16)
		}
	})
	if err != nil && !hostfs.Vanished(err) {
		c.log.Debug("environ unreadable", zap.Int("pid", id.PID), zap.Error(err))
	}
	c.omp[id] = n
	return n
}

func maxRatio(cur *float64, v float64) *float64 {
	if cur == nil || v > *cur {
		return &v
	}
	return cur
}

func nodeBytes(m map[int]uint64) []sample.NodeBytes {
	if len(m) == 0 {
		return nil
	}
	out := make([]sample.NodeBytes, 0, len(m))
	for n, b := range m {
		out = append(out, sample.NodeBytes{Node: n, Bytes: b})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Node < out[j].Node })
	return out
}

// rememberProcesses keeps this sample's readings for next sample's
// per-process rates, and forgets numa_maps of processes no longer seen.
func (c *gpuProcessCollector) rememberProcesses(cy *procCycle, now time.Time) {
	seen := make(map[int]trackedProc, len(cy.cache))
	live := map[hostfs.ProcID]bool{}
	for pid, r := range cy.cache {
		if r == nil || r.broken {
			continue
		}
		seen[pid] = trackedProc{start: r.detail.StartTicks, parent: r.detail.PPID, at: now, c: r.counters, census: r.census, attrs: r.attrs}
		live[hostfs.ProcID{PID: pid, StartTicks: r.detail.StartTicks}] = true
	}
	c.lastSeen = seen
	for pid, files := range c.held {
		if _, ok := seen[pid]; !ok {
			files.Close()
			delete(c.held, pid)
		}
	}
	for id := range c.numaMaps {
		if !live[id] {
			delete(c.numaMaps, id)
		}
	}
	for id := range c.omp {
		if !live[id] {
			delete(c.omp, id)
		}
	}
}

// procCounters are the cumulative counters of one process.
type procCounters struct {
	// user and system include what reaped children handed over (cutime,
	// cstime), as the io counters do, so that a child's exit moves its
	// time to the parent instead of losing it.
	user, system float64
	own          float64 // utime+stime: the process's own CPU time
	ioKnown      bool
	storageRead  float64
	syscallRead  float64
	readSyscalls float64
}

func (a procCounters) minus(b procCounters) procCounters {
	d := procCounters{
		user:   sample.CounterDelta(b.user, a.user),
		system: sample.CounterDelta(b.system, a.system),
		own:    sample.CounterDelta(b.own, a.own),
	}
	if a.ioKnown && b.ioKnown {
		d.ioKnown = true
		d.storageRead = sample.CounterDelta(b.storageRead, a.storageRead)
		d.syscallRead = sample.CounterDelta(b.syscallRead, a.syscallRead)
		d.readSyscalls = sample.CounterDelta(b.readSyscalls, a.readSyscalls)
	}
	return d
}

// trackedProc is a process as last read; at is set where rates need it.
type trackedProc struct {
	start  uint64
	parent int
	at     time.Time
	c      procCounters
	census threadCensus
	attrs  processAttrs
}

// threadCensusInterval is how long the thread states of a process stand
// when its last census found none of its threads waiting on I/O: a busy
// node's ranks and DataLoader workers hold thousands of pool threads
// asleep (CUDA, NCCL, OpenMP, gloo), and a census costs one stat file per
// thread. The main thread (the one a DataLoader worker reads data on, and a
// rank without workers) is read every sample from the process's stat; a
// process found waiting is counted in full every sample.
const threadCensusInterval = 30 * time.Second

// A census due by its interval is taken only where it could find threads
// waiting on I/O: when the host's I/O stall time (/proc/pressure/io, some:
// the time at least one task waited on I/O) grew since the last census by
// at least censusIOStallShare of the time passed; else the last census
// stands, up to threadCensusMaxAge. A thread's share of time in I/O wait
// cannot exceed the host's share with some task waiting, so below 1% a
// census would find, on average, under 1% of threads in D state, against
// the 25% the I/O verdict asks for (analyzers.Thresholds.IOWaitThreads).
// That holds for threads born since the last census too, so a changed
// thread count is no reason to count again (runtimes and pools add and drop
// threads all along; the verdict's share is over the threads counted). A
// compute-bound job whose data sits in memory then costs no census at all;
// one whose loaders read storage is counted as before. Without pressure
// files (a kernel without PSI) every due census is taken.
const (
	censusIOStallShare = 0.01
	threadCensusMaxAge = 5 * time.Minute
)

// threadCensus is a process's threads other than the main one, counted by
// state at time at; ioStall is the host's I/O stall total then
// (microseconds; ioKnown: read).
type threadCensus struct {
	at      time.Time
	states  []stateCount
	ioStall uint64
	ioKnown bool
	// presumed marks the census of a process first seen while the host's
	// I/O had been quiet since the previous sample (procCycle.ioQuiet): no
	// thread but the main one was read, and the others are counted as not
	// waiting, by the rule that lets a census stand. It stands as a
	// census does, so the first one read is taken when the host's I/O
	// stalls (at the next sample, not after threadCensusInterval: none was
	// read) or at threadCensusMaxAge.
	presumed bool
}

// quiet tells whether the census may stand past its interval at now: the
// host's I/O stall grew by less than censusIOStallShare of the time since
// it was taken (stall: this sample's total), and it is younger than
// threadCensusMaxAge.
func (t threadCensus) quiet(now time.Time, stall uint64, stallKnown bool) bool {
	age := now.Sub(t.at)
	if !stallKnown || !t.ioKnown || stall < t.ioStall || age >= threadCensusMaxAge || age <= 0 {
		return false
	}
	return float64(stall-t.ioStall) < censusIOStallShare*float64(age.Microseconds())
}

type stateCount struct {
	state byte
	n     int
}

// waiting tells whether the census found a thread in uninterruptible sleep.
func (t threadCensus) waiting() bool {
	for _, s := range t.states {
		if s.state == 'D' {
			return true
		}
	}
	return false
}

// gpuAccount integrates the CPU time and reads of one GPU's process tree
// into counters that never decrease, whatever processes come and go.
type gpuAccount struct {
	procs                                                map[int]trackedProc
	user, system, storageRead, syscallRead, readSyscalls float64
	// The GPU's cgroups' CPU periods, throttled periods and seconds.
	cpuPeriods, cpuThrottled, cpuThrottledSec float64
}

// update adds this sample's increments and returns them.
//
// A process seen before adds its delta. A process seen for the first time
// adds everything if its parent was already watched (it was born since), and
// nothing otherwise: its past belongs to before the daemon looked. When a
// watched child has exited, its parent's cutime and io counters jump by the
// child's final totals; the part already counted (the child's last reading)
// is taken off the parent's increment, so each CPU second and byte counts
// once. A process missing because it, or an ancestor between it and a
// watched process, was left unread by the cap may still be alive: its last
// reading is kept and nothing is taken off.
func (a *gpuAccount) update(readings []*procReading, unread map[int]bool) procCounters {
	type pending struct {
		inc   procCounters
		delta bool
	}
	live := make(map[int]*procReading, len(readings))
	for _, r := range readings {
		live[r.detail.PID] = r
	}
	watched := func(pid int) bool {
		t, ok := a.procs[pid]
		r, alive := live[pid]
		return ok && alive && t.start == r.detail.StartTicks
	}
	incs := make(map[int]*pending, len(readings))
	for _, r := range readings {
		pid := r.detail.PID
		p := &pending{}
		switch {
		case watched(pid):
			p.inc, p.delta = r.counters.minus(a.procs[pid].c), true
		case watched(r.detail.PPID):
			p.inc = r.counters
		}
		incs[pid] = p
	}
	// maybeAlive: the process or a missing ancestor was not read, so its
	// parent's children were never listed.
	maybeAlive := func(pid int) bool {
		for range 64 {
			if unread[pid] {
				return true
			}
			if _, read := live[pid]; read {
				return false
			}
			t, ok := a.procs[pid]
			if !ok {
				return false
			}
			pid = t.parent
		}
		return false
	}
	next := make(map[int]trackedProc, len(readings))
	for pid, t := range a.procs {
		if watched(pid) {
			continue
		}
		if _, read := live[pid]; !read && maybeAlive(pid) {
			next[pid] = t
			continue
		}
		// Gone: charge its last reading against the first watched ancestor,
		// whose counters now include it.
		anc := t.parent
		for range 64 {
			if watched(anc) {
				if p := incs[anc]; p.delta {
					p.inc = p.inc.minus(t.c)
				}
				break
			}
			up, ok := a.procs[anc]
			if !ok {
				break
			}
			anc = up.parent
		}
	}
	var sum procCounters
	for _, p := range incs {
		sum.user += p.inc.user
		sum.system += p.inc.system
		if p.inc.ioKnown {
			sum.storageRead += p.inc.storageRead
			sum.syscallRead += p.inc.syscallRead
			sum.readSyscalls += p.inc.readSyscalls
		}
	}
	a.user += sum.user
	a.system += sum.system
	a.storageRead += sum.storageRead
	a.syscallRead += sum.syscallRead
	a.readSyscalls += sum.readSyscalls
	for _, r := range readings {
		next[r.detail.PID] = trackedProc{start: r.detail.StartTicks, parent: r.detail.PPID, c: r.counters}
	}
	a.procs = next
	return sum
}

// processAttrInterval is how long a process's placement (the CPUs and
// memory nodes it may use, from its status file) and cgroup membership
// stand between reads once the process is that old. Both are set when a
// launcher starts the process (torchrun, numactl, the container runtime,
// Slurm) or soon after by the process itself, and seldom change later: a
// young process has them read every sample, an old one every
// processAttrInterval, which spares a busy node's workers two of the four
// files each is read from every sample. A GPU process's memlock limit and
// capabilities (its limits and status files) go with them. Counters (stat,
// io, the cgroup's throttling) are read every sample.
const processAttrInterval = 30 * time.Second

// processAttrs is a process's placement and cgroup membership as last read;
// placement and membership tell which of the two were read (an unreadable
// file is tried again every sample).
type processAttrs struct {
	firstSeen, readAt     time.Time
	comm                  string // the command name when read
	placement, membership bool
	limitRead             bool // the membership's cgroup CPU limit was read
	cpus, mems            string
	allowed               []int
	cgroups               []procfs.Cgroup
	// memlock is a GPU process's RLIMIT_MEMLOCK and whether it holds
	// CAP_IPC_LOCK (processLimits), set at its start like the placement
	// (prlimit can change it later: seen within processAttrInterval).
	memlock *memlockRead
}

type memlockRead struct {
	limit   hostfs.Memlock
	ipcLock bool
}

// due tells whether the attributes are read again this sample: every
// sample while the process is young, then every processAttrInterval.
func (a processAttrs) due(now time.Time) bool {
	return now.Sub(a.firstSeen) < processAttrInterval || now.Sub(a.readAt) >= processAttrInterval
}

// procReading is one process read once per sample and shared by every GPU
// that lists it.
type procReading struct {
	detail      sample.GPUProcess
	counters    procCounters
	attrs       processAttrs
	allowedCPUs []int
	childPIDs   []int // what its threads forked (hostfs.ProcTree)
	census      threadCensus
	errs        []string // files that could not be parsed, named
	broken      bool     // stat unparseable: nothing usable
	nm          *numaMapsResult
	limitsRead  bool   // processLimits ran
	rssPages    uint64 // resident pages, from stat
}

type numaMapsResult struct {
	numaMapsRead
	err string
}

// procCycle is one sample's reads: each process is read at most once, and
// at most budget processes are read.
type procCycle struct {
	c      *gpuProcessCollector
	ctx    context.Context
	now    time.Time
	budget int
	cache  map[int]*procReading // nil: vanished or unreadable
	// tree finds each process's children, by the kernel's children files
	// or, without them, one scan of every process's parent.
	tree *hostfs.ProcTree
	// cgroups holds this sample's cgroup CPU limits, by the process's
	// cgroup lines: the processes of a container share them.
	cgroups map[string]cgroupRead
	// ioStall is the host's I/O stall total as this sample read it
	// (ioStallKnown: read), for the thread censuses (threadCensus.quiet).
	ioStall      uint64
	ioStallKnown bool
	// ioQuiet tells that the host's I/O stall grew by less than
	// censusIOStallShare of the time since the previous sample
	// (gpuProcessCollector.stallMark): a process first seen now gets a
	// presumed census instead of a read one.
	ioQuiet bool
}

type cgroupRead struct {
	limit *sample.CPULimit // nil when not readable
	err   string
	gone  bool // the cgroup's files do not exist
}

// read returns the process, or nil when it vanished or cannot be read; ok is
// false when the cap or the deadline left it unread.
func (cy *procCycle) read(pid int) (r *procReading, ok bool) {
	if r, done := cy.cache[pid]; done {
		return r, true
	}
	if cy.budget <= 0 || cy.ctx.Err() != nil {
		return nil, false
	}
	cy.budget--
	r = cy.c.readProcess(cy, pid)
	cy.cache[pid] = r
	return r, true
}

func (cy *procCycle) children(r *procReading) []int { return r.childPIDs }

// numaMaps returns the process's memory per node, re-reading numa_maps when
// the last reading is older than the numa-maps interval (and the sample still
// has time; otherwise the older reading stands).
func (cy *procCycle) numaMaps(r *procReading) numaMapsResult {
	if r.nm == nil {
		c, now := cy.c, cy.now
		id := hostfs.ProcID{PID: r.detail.PID, StartTicks: r.detail.StartTicks}
		res := &numaMapsResult{}
		prev, havePrev := c.numaMaps[id]
		if havePrev && (now.Sub(prev.at) < c.opts.numaMapsInterval || prev.steady(now, r.rssPages, c.opts.numaMapsInterval) || cy.ctx.Err() != nil) {
			res.numaMapsRead = prev
		} else if cy.ctx.Err() == nil {
			byNode, err := c.host.NUMAMaps(r.detail.PID)
			switch {
			case err == nil:
				res.numaMapsRead = numaMapsRead{bytes: nodeBytes(byNode), at: now, rssPages: r.rssPages}
				c.numaMaps[id] = res.numaMapsRead
			case hostfs.Vanished(err) || errors.Is(err, fs.ErrPermission):
				c.log.Debug("numa_maps unreadable", zap.Int("pid", r.detail.PID), zap.Error(err))
				r.detail.Unreadable = append(r.detail.Unreadable, "numa_maps")
			default:
				res.err = err.Error()
			}
		}
		r.nm = res
	}
	return *r.nm
}

// readProcess reads one process. A process that vanishes while being read is
// dropped whole (nil): half a reading would feed wrong deltas.
func (c *gpuProcessCollector) readProcess(cy *procCycle, pid int) *procReading {
	skip := func(what string, err error) *procReading {
		c.log.Debug("GPU process skipped", zap.Int("pid", pid), zap.String("reading", what), zap.Error(err))
		return nil
	}
	dir := c.host.ProcPath(strconv.Itoa(pid))
	files, st, err := c.processFiles(pid)
	if err != nil {
		if hostfs.Vanished(err) || errors.Is(err, fs.ErrPermission) {
			return skip("stat", err)
		}
		return &procReading{errs: []string{err.Error()}, broken: true}
	}
	r := &procReading{detail: sample.GPUProcess{
		PID: pid, PPID: st.PPID, StartTicks: st.Starttime, Comm: files.Comm(), State: string(st.State), Threads: st.NumThreads,
		UserSeconds: float64(st.UTime) / hostfs.UserHZ, SystemSeconds: float64(st.STime) / hostfs.UserHZ,
		ChildrenUserSeconds: float64(st.CUTime) / hostfs.UserHZ, ChildrenSystemSeconds: float64(st.CSTime) / hostfs.UserHZ,
		BlockIODelaySeconds: float64(st.DelayAcctBlkIOTicks) / hostfs.UserHZ,
	}}
	r.rssPages = st.RSSPages
	d := &r.detail
	r.counters = procCounters{
		user: d.UserSeconds + d.ChildrenUserSeconds, system: d.SystemSeconds + d.ChildrenSystemSeconds,
		own: d.UserSeconds + d.SystemSeconds,
	}
	unreadable := func(file string, err error) {
		c.log.Debug("GPU process file unreadable", zap.Int("pid", pid), zap.String("file", file), zap.Error(err))
		d.Unreadable = append(d.Unreadable, file)
	}

	prev, known := c.lastSeen[pid]
	known = known && prev.start == st.Starttime
	if known {
		r.attrs = prev.attrs
	}
	// An exec (numactl, taskset, a launcher's wrapper) keeps the PID and
	// start time but may bring a new placement: a new command name makes
	// the attributes due.
	attrsDue := !known || r.attrs.due(cy.now) || r.attrs.comm != d.Comm
	if attrsDue {
		r.attrs.placement, r.attrs.membership, r.attrs.limitRead = false, false, false
		r.attrs.memlock = nil
		r.attrs.readAt, r.attrs.comm = cy.now, d.Comm
		if !known {
			r.attrs.firstSeen = cy.now
		}
	}

	if attrsDue || !r.attrs.placement {
		cpus, mems, allowed, err := c.host.AllowedLists(pid)
		switch {
		case err == nil:
			r.attrs.placement = true
			r.attrs.cpus, r.attrs.mems, r.attrs.allowed = cpus, mems, allowed
		case hostfs.Vanished(err):
			return skip("status", err)
		case errors.Is(err, fs.ErrPermission):
			unreadable("status", err)
		default:
			r.errs = append(r.errs, err.Error())
		}
	}
	if r.attrs.placement {
		d.CPUsAllowedList, d.MemsAllowedList, d.CPUsAllowed, r.allowedCPUs =
			r.attrs.cpus, r.attrs.mems, len(r.attrs.allowed), r.attrs.allowed
	}

	pio, err := files.IO()
	switch {
	case err == nil:
		d.IO = &sample.ProcessIO{StorageReadBytes: pio.ReadBytes, SyscallReadBytes: pio.RChar, ReadSyscalls: pio.SyscR}
		r.counters.ioKnown = true
		r.counters.storageRead, r.counters.syscallRead, r.counters.readSyscalls =
			float64(pio.ReadBytes), float64(pio.RChar), float64(pio.SyscR)
	case hostfs.Vanished(err):
		return skip("io", err)
	case errors.Is(err, fs.ErrPermission):
		unreadable("io", err)
	default:
		r.errs = append(r.errs, err.Error())
	}

	if attrsDue || !r.attrs.membership {
		cgs, err := c.cgroupsOf(pid)
		switch {
		case err == nil:
			r.attrs.membership, r.attrs.cgroups = true, cgs
		case hostfs.Vanished(err):
			return skip("cgroup", err)
		case errors.Is(err, fs.ErrPermission):
			unreadable("cgroup", err)
		default:
			r.errs = append(r.errs, fmt.Sprintf("%s/cgroup: %v", dir, err))
		}
	}
	if r.attrs.membership {
		cgs := r.attrs.cgroups
		d.Cgroup, d.ContainerID, d.PodUID, d.SlurmJobID = hostfs.CgroupIdentity(cgs)
		// The limit and its throttling counters are the cgroup's, read
		// every sample.
		cr := cy.cgroupLimit(cgs)
		d.CPULimit = cr.limit
		if cr.err != "" {
			r.errs = append(r.errs, cr.err)
		}
		if cr.gone && r.attrs.limitRead {
			// The cgroup whose limit was read is gone: the process
			// moved; read its membership again next sample. (A cgroup
			// never readable, outside the daemon's namespace, stands.)
			r.attrs.membership, r.attrs.limitRead = false, false
		}
		r.attrs.limitRead = r.attrs.limitRead || cr.limit != nil
	}

	if !c.readThreads(cy, r) {
		return skip("task", fs.ErrNotExist)
	}
	d.OMPNumThreads = c.ompNumThreads(hostfs.ProcID{PID: pid, StartTicks: d.StartTicks})

	if known {
		if dt := cy.now.Sub(prev.at).Seconds(); dt > 0 {
			cores := sample.CounterRate(prev.c.own, r.counters.own, dt)
			d.CPUCoresUsed = &cores
			if d.IO != nil && prev.c.ioKnown {
				rate := sample.CounterRate(prev.c.storageRead, r.counters.storageRead, dt)
				d.IO.StorageReadBytesPerSecond = &rate
			}
		}
	}
	return r
}

// processFiles reads the stat file of the process pid through its held
// files, opening them for a process not held (new, or its PID now another
// process's: the held files of a reaped process answer ESRCH).
func (c *gpuProcessCollector) processFiles(pid int) (*hostfs.ProcessFiles, hostfs.TaskStat, error) {
	if files := c.held[pid]; files != nil {
		st, err := files.Stat()
		if err == nil || !hostfs.Vanished(err) {
			return files, st, err
		}
		files.Close()
		delete(c.held, pid)
	}
	files, err := c.host.OpenProcessFiles(pid)
	if err != nil {
		return nil, hostfs.TaskStat{}, err
	}
	st, err := files.Stat()
	if err != nil {
		files.Close()
		return nil, hostfs.TaskStat{}, err
	}
	if c.held == nil {
		c.held = map[int]*hostfs.ProcessFiles{}
	}
	c.held[pid] = files
	return files, st, nil
}

// cgroupsOf reads the process's cgroup memberships.
func (c *gpuProcessCollector) cgroupsOf(pid int) ([]procfs.Cgroup, error) {
	p, err := c.proc.Proc(pid)
	if err != nil {
		return nil, err
	}
	return p.Cgroups()
}

// Close closes the files held open, unless a sample is still running (the
// daemon is exiting: they close with it).
func (c *gpuProcessCollector) Close() error {
	if !c.sampling.TryLock() {
		return nil
	}
	defer c.sampling.Unlock()
	for pid, files := range c.held {
		files.Close()
		delete(c.held, pid)
	}
	return nil
}

// readThreads counts the process's threads by state and finds its children
// (hostfs.ProcTree). The main thread's state is the process's own, read
// every sample; the other threads are counted by a census, taken every
// sample for processes whose main thread or last census was waiting on I/O,
// for new processes unless the host's I/O was quiet since the previous
// sample (then presumed: threadCensus.presumed), and otherwise every
// threadCensusInterval unless the host's I/O was quiet since
// (threadCensus.quiet; the last census stands in between). It returns false
// when the process vanished.
func (c *gpuProcessCollector) readThreads(cy *procCycle, r *procReading) bool {
	pid := r.detail.PID
	var states [256]int
	if r.detail.State != "" {
		states[r.detail.State[0]]++
	}
	prev, known := c.lastSeen[pid]
	known = known && prev.start == r.detail.StartTicks
	switch {
	case known && r.detail.State != "D" && !prev.census.waiting() &&
		(!prev.census.presumed && cy.now.Sub(prev.census.at) < threadCensusInterval ||
			prev.census.quiet(cy.now, cy.ioStall, cy.ioStallKnown)):
		r.census = prev.census
		c.childrenOf(cy, r)
	case !known && r.detail.State != "D" && cy.ioQuiet:
		// New, under a quiet host: a census would find, as one standing
		// does, no thread waiting. A job's processes start together (a
		// rank and its DataLoader workers, a new epoch's workers): their
		// first censuses were most of what the collector read.
		r.census = threadCensus{at: cy.now, ioStall: cy.ioStall, ioKnown: cy.ioStallKnown, presumed: true}
		c.childrenOf(cy, r)
	default:
		census, ok := c.takeCensus(cy, r)
		if !ok {
			return false
		}
		r.census = census
	}
	for _, sc := range r.census.states {
		states[sc.state] += sc.n
	}
	for state, n := range states {
		if n > 0 {
			if r.detail.ThreadStates == nil {
				r.detail.ThreadStates = map[string]int{}
			}
			r.detail.ThreadStates[threadStateNames[state]] = n
		}
	}
	return true
}

// takeCensus reads the stat file of every thread but the main one (up to
// the cap) and collects the children of the threads read.
func (c *gpuProcessCollector) takeCensus(cy *procCycle, r *procReading) (threadCensus, bool) {
	pid := r.detail.PID
	tasks, err := c.stats.OpenTasks(pid)
	if err != nil {
		return threadCensus{}, !hostfs.Vanished(err)
	}
	defer tasks.Close()
	threads, err := tasks.IDs(c.tidBuf)
	c.tidBuf = threads
	if err != nil {
		return threadCensus{}, !hostfs.Vanished(err)
	}
	// The main thread first: under the cap it is the one that forks
	// DataLoader workers.
	slices.SortFunc(threads, func(a, b int) int {
		if (a == pid) != (b == pid) {
			if a == pid {
				return -1
			}
			return 1
		}
		return cmp.Compare(a, b)
	})
	if len(threads) > c.opts.maxThreads {
		threads = threads[:c.opts.maxThreads]
	}
	var states [256]int
	// The threads read, whose children the tree looks for, kept in place.
	tids := threads[:0]
	for _, tid := range threads {
		if tid == pid {
			tids = append(tids, tid) // counted from the process's stat
			continue
		}
		st, err := tasks.Stat(tid)
		if err != nil {
			continue // the thread exited
		}
		states[st.State]++
		tids = append(tids, tid)
	}
	kids, errs := cy.tree.ChildrenOfThreads(pid, tids)
	c.noteChildErrors(pid, errs)
	r.childPIDs = kids
	census := threadCensus{at: cy.now, ioStall: cy.ioStall, ioKnown: cy.ioStallKnown}
	for state, n := range states {
		if n > 0 {
			census.states = append(census.states, stateCount{state: byte(state), n: n})
		}
	}
	return census, true
}

// childrenOf finds the process's children from the tree, without a census.
func (c *gpuProcessCollector) childrenOf(cy *procCycle, r *procReading) {
	kids, errs := cy.tree.ChildrenOf(r.detail.PID)
	c.noteChildErrors(r.detail.PID, errs)
	r.childPIDs = kids
}

func (c *gpuProcessCollector) noteChildErrors(pid int, errs []error) {
	for _, err := range errs {
		c.log.Debug("children unreadable", zap.Int("pid", pid), zap.Error(err))
	}
}

// threadStateNames are the one-letter strings of stat's state byte, made
// once.
var threadStateNames = func() (out [256]string) {
	for i := range out {
		out[i] = string([]byte{byte(i)})
	}
	return out
}()

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
