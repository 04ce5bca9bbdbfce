package collectors

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"github.com/alecthomas/kingpin/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/procfs"
	"go.uber.org/zap"

	"github.com/gpudiag/gpudiag/bpf"
	"github.com/gpudiag/gpudiag/engine"
	"github.com/gpudiag/gpudiag/hostfs"
	"github.com/gpudiag/gpudiag/sample"
)

// ebpfFlags holds the flag values; the initial values serve code that builds
// collectors without parsing flags.
var ebpfFlags = ebpfOptions{blockIO: true, tcp: true}

type ebpfOptions struct {
	blockIO, tcp bool
	// programStats turns the kernel's BPF run-time statistics on while the
	// collector runs and exports the programs' own cost.
	programStats bool
}

// The collector is off by default: loading tracing programs needs CAP_BPF
// and CAP_PERFMON (or root) and puts code on every block request and socket
// call of the node, which an operator should choose, as with ebpf_exporter.
// Everything it adds has a procfs counterpart that keeps working without it
// (diskstats, gpuprocess, tcp).
func init() {
	register(collectorSpec[sample.EBPF, *ebpfCollector]{
		key:  sample.EBPFKey,
		help: "Block I/O latency histograms per disk, and the block I/O and TCP traffic of the GPU processes and their descendants, counted by eBPF programs in the kernel (needs kernel BTF and CAP_BPF with CAP_PERFMON, or root)",
		flags: func(app *kingpin.Application) {
			app.Flag("collector.ebpf.block-io",
				"Attach the block I/O programs: request latency per disk and operation, and the GPU processes' block I/O.").
				Default("true").BoolVar(&ebpfFlags.blockIO)
			app.Flag("collector.ebpf.tcp",
				"Attach the TCP programs: bytes the GPU processes send and receive, counted at each socket call.").
				Default("true").BoolVar(&ebpfFlags.tcp)
			app.Flag("collector.ebpf.program-stats",
				"Turn the kernel's BPF run-time statistics on and export the programs' own runs and CPU time (gpudiag_ebpf_program_*); the statistics add two clock reads to every run of every BPF program on the node.").
				Default("false").BoolVar(&ebpfFlags.programStats)
		},
		newCollector: func(cfg Config) (*ebpfCollector, error) {
			return newEBPFCollector(cfg, ebpfFlags)
		},
		metrics: (&ebpfCollector{}).Metrics,
	})
}

// ebpfCollector keeps the kernel's table of tracked processes in step with
// the GPU processes the GPU collector publishes, and turns the programs'
// cumulative per-process counts into per-GPU counters.
//
// The kernel follows the forks and exits of tracked processes itself; each
// cycle this collector adds the GPU processes, walks /proc once for the
// descendants a new GPU process already had, and drops the processes of GPU
// processes that left their GPU. A process's counts are charged to the GPUs
// of the GPU process it descends from (its root) as they grow; the entries
// of a process that exited are read one last time a cycle later, so that
// requests completing after its exit still count, then removed.
type ebpfCollector struct {
	host     hostfs.FS
	proc     procfs.FS // host's procfs handle, for the files procfs parses
	procPath string
	sysPath  string
	log      *zap.Logger
	shared   *Shared
	now      func() time.Time

	tracker    *bpf.Tracker
	block      *bpf.BlockIO // nil when not loaded
	tcp        *bpf.TCP     // nil when not loaded
	blockState sample.EBPFFeature
	tcpState   sample.EBPFFeature
	runStats   io.Closer // nil unless --collector.ebpf.program-stats

	last         time.Time
	hintsRebuilt time.Time         // when the tracked-process hint last dropped stale bits
	devices      map[uint32]string // dev_t → name, from /sys/dev/block
	prevTracked  map[uint32]uint32 // tgid → root, last cycle
	rootGPUs     map[uint32][]int  // GPUs of each root counts may still be charged to
	prevDisks    map[ebpfDiskKey]bpf.DiskLatency
	prevBlock    map[bpf.ProcessIOKey]bpf.ProcessIO
	prevTCP      map[bpf.TCPKey]bpf.TCPTraffic
	gpuBlock     map[int]map[ebpfDiskKey]*ebpfBlockTotals
	gpuTCP       map[int]*[2]ebpfTCPTotals // by bpf.Scope
	// ownTCP is the GPU processes' own TCP bytes per GPU (descendants
	// excluded), published to the tcp collector through Shared.
	ownTCP map[int][tcpScopes]TCPBytes
	// untracked counts the processes this collector failed to add.
	untracked uint64
	// unstamped holds the disks already logged as timed at issue.
	unstamped map[uint32]bool
}

type ebpfDiskKey struct {
	dev uint32
	op  bpf.Op
}

type ebpfBlockTotals struct {
	bytes, requests, waitNs        uint64
	cycleBytes, cycleReqs, cycleNs uint64
}

type ebpfTCPTotals struct {
	sent, received           uint64
	cycleSent, cycleReceived uint64
}

func newEBPFCollector(cfg Config, opts ebpfOptions) (*ebpfCollector, error) {
	blockIO, tcp := opts.blockIO, opts.tcp
	if !blockIO && !tcp {
		return nil, fmt.Errorf("%w: --collector.ebpf.block-io and --collector.ebpf.tcp are both off", ErrUnavailable)
	}
	host, err := hostfs.NewFS(cfg.ProcPath, cfg.SysPath)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	cfg = cfg.withDefaults()
	log := cfg.Logger
	shared := cfg.Shared
	tracker, err := bpf.LoadTracker()
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	c := &ebpfCollector{
		host: host, proc: host.Procfs(), procPath: cfg.ProcPath, sysPath: cfg.SysPath, log: log, shared: shared, now: time.Now,
		tracker: tracker, devices: map[uint32]string{}, prevTracked: map[uint32]uint32{}, rootGPUs: map[uint32][]int{},
		prevDisks: map[ebpfDiskKey]bpf.DiskLatency{}, prevBlock: map[bpf.ProcessIOKey]bpf.ProcessIO{},
		prevTCP: map[bpf.TCPKey]bpf.TCPTraffic{}, gpuBlock: map[int]map[ebpfDiskKey]*ebpfBlockTotals{},
		gpuTCP: map[int]*[2]ebpfTCPTotals{}, ownTCP: map[int][tcpScopes]TCPBytes{}, unstamped: map[uint32]bool{},
	}
	if blockIO {
		if c.block, err = bpf.LoadBlockIO(tracker); err != nil {
			c.blockState.Error = err.Error()
		} else {
			c.blockState = sample.EBPFFeature{Loaded: true, Hook: string(c.block.OwnerHook())}
		}
	} else {
		c.blockState.Error = "disabled by --no-collector.ebpf.block-io"
	}
	if tcp {
		if c.tcp, err = bpf.LoadTCP(tracker); err != nil {
			c.tcpState.Error = err.Error()
		} else {
			c.tcpState = sample.EBPFFeature{Loaded: true, Hook: string(c.tcp.Hook())}
		}
	} else {
		c.tcpState.Error = "disabled by --no-collector.ebpf.tcp"
	}
	if c.block == nil && c.tcp == nil {
		tracker.Close()
		return nil, fmt.Errorf("%w: block I/O: %s; TCP: %s", ErrUnavailable, c.blockState.Error, c.tcpState.Error)
	}
	fields := []zap.Field{zap.String("block_io_hook", c.blockState.Hook), zap.String("tcp_hook", c.tcpState.Hook)}
	if c.block == nil && blockIO {
		fields = append(fields, zap.String("block_io_error", c.blockState.Error))
	}
	if c.tcp == nil && tcp {
		fields = append(fields, zap.String("tcp_error", c.tcpState.Error))
	}
	if opts.programStats {
		if c.runStats, err = bpf.EnableRunStats(); err != nil {
			log.Warn("eBPF program statistics not available", zap.Error(err))
		}
	}
	log.Info("eBPF programs attached", fields...)
	return c, nil
}

func (c *ebpfCollector) Name() string { return sample.EBPFKey.Name() }

// Close detaches the programs and frees their maps.
func (c *ebpfCollector) Close() error {
	var errs []error
	if c.tcp != nil {
		// The tcp collector goes back to listing sockets.
		c.shared.SetKernelTCP(nil)
		errs = append(errs, c.tcp.Close())
	}
	if c.block != nil {
		errs = append(errs, c.block.Close())
	}
	errs = append(errs, c.tracker.Close())
	if c.runStats != nil {
		errs = append(errs, c.runStats.Close())
	}
	return errors.Join(errs...)
}

// programSet is what every group of attached programs reports of itself.
type programSet interface {
	ProgramStats() ([]bpf.ProgramStats, error)
	RunsSkipped() (uint64, error)
}

// programSets are the attached groups of programs.
func (c *ebpfCollector) programSets() []programSet {
	sets := []programSet{c.tracker}
	if c.block != nil {
		sets = append(sets, c.block)
	}
	if c.tcp != nil {
		sets = append(sets, c.tcp)
	}
	return sets
}

// runsSkipped sums the runs the kernel skipped over every attached program.
func (c *ebpfCollector) runsSkipped() (uint64, error) {
	var n uint64
	for _, set := range c.programSets() {
		skipped, err := set.RunsSkipped()
		if err != nil {
			return 0, err
		}
		n += skipped
	}
	return n, nil
}

// programStats reads the run-time statistics of every attached program.
func (c *ebpfCollector) programStats() ([]sample.EBPFProgram, error) {
	var out []sample.EBPFProgram
	for _, src := range c.programSets() {
		stats, err := src.ProgramStats()
		if err != nil {
			return nil, err
		}
		for _, st := range stats {
			out = append(out, sample.EBPFProgram{Name: st.Name, Runs: st.Runs, RunSeconds: st.Runtime.Seconds()})
		}
	}
	return out, nil
}

func (c *ebpfCollector) Sample(ctx context.Context) (*sample.EBPF, error) {
	now := c.now()
	gpus := c.shared.GPUs()
	roots := map[uint32][]int{}
	for _, g := range gpus {
		for _, pid := range g.PIDs {
			if !slices.Contains(roots[pid], g.Index) {
				roots[pid] = append(roots[pid], g.Index)
			}
		}
	}
	for pid := range roots {
		slices.Sort(roots[pid])
		c.rootGPUs[pid] = roots[pid]
	}
	tracked, err := c.reconcile(roots)
	if err != nil {
		return nil, err
	}
	if now.Sub(c.hintsRebuilt) >= time.Minute {
		if err := c.tracker.RebuildHints(); err != nil {
			return nil, err
		}
		c.hintsRebuilt = now
	}
	var seconds float64
	var every time.Duration
	if !c.last.IsZero() {
		every = now.Sub(c.last)
		seconds = every.Seconds()
	}
	c.last = now

	out := &sample.EBPF{IntervalSeconds: seconds, BlockIO: c.blockState, TCP: c.tcpState, TrackedProcesses: len(tracked)}
	forks, err := c.tracker.ForksUntracked()
	if err != nil {
		return nil, err
	}
	out.Lost.ProcessesUntracked = forks + c.untracked
	if out.Lost.ProgramRunsSkipped, err = c.runsSkipped(); err != nil {
		return nil, err
	}
	procs := map[uint32]*sample.EBPFProcess{}
	process := func(tgid, root uint32) *sample.EBPFProcess {
		if r, ok := tracked[tgid]; ok {
			root = r
		}
		p := procs[tgid]
		if p == nil {
			p = &sample.EBPFProcess{PID: tgid, Root: root, GPUs: c.rootGPUs[root]}
			procs[tgid] = p
		}
		return p
	}
	// Entries of a process neither tracked now nor last cycle are read a
	// last time and removed.
	finished := func(tgid uint32) bool {
		_, tracking := tracked[tgid]
		_, before := c.prevTracked[tgid]
		return !tracking && !before
	}
	if c.block != nil {
		if err := c.sampleBlockIO(out, seconds, process, finished); err != nil {
			return nil, err
		}
	}
	if c.tcp != nil {
		own, err := c.sampleTCP(out, roots, process, finished)
		if err != nil {
			return nil, err
		}
		c.shared.SetKernelTCP(&KernelTCP{At: now, Every: every, GPUs: maps.Clone(c.ownTCP), Processes: own})
	}
	c.prevTracked = tracked
	if c.runStats != nil {
		if out.Programs, err = c.programStats(); err != nil {
			return nil, err
		}
	}
	for root := range c.rootGPUs {
		if _, current := roots[root]; !current && !c.rootReferenced(root, tracked) {
			delete(c.rootGPUs, root)
		}
	}

	indexes := make([]int, 0, len(gpus))
	for _, g := range gpus {
		indexes = append(indexes, g.Index)
	}
	slices.Sort(indexes)
	out.GPUs = make([]sample.EBPFGPU, 0, len(indexes))
	for _, index := range slices.Compact(indexes) {
		out.GPUs = append(out.GPUs, c.gpuReading(index, seconds))
	}
	for _, totals := range c.gpuBlock {
		for _, t := range totals {
			t.cycleBytes, t.cycleReqs, t.cycleNs = 0, 0, 0
		}
	}
	for _, t := range c.gpuTCP {
		for s := range t {
			t[s].cycleSent, t[s].cycleReceived = 0, 0
		}
	}
	for _, p := range procs {
		slices.SortFunc(p.BlockIO, compareBlockIO)
		out.Processes = append(out.Processes, *p)
	}
	slices.SortFunc(out.Processes, func(a, b sample.EBPFProcess) int { return cmp.Compare(a.PID, b.PID) })
	return out, nil
}

// rootReferenced reports whether a tracked process or a counter entry still
// charges to root.
func (c *ebpfCollector) rootReferenced(root uint32, tracked map[uint32]uint32) bool {
	for _, r := range tracked {
		if r == root {
			return true
		}
	}
	for _, v := range c.prevBlock {
		if v.Root == root {
			return true
		}
	}
	for _, v := range c.prevTCP {
		if v.Root == root {
			return true
		}
	}
	return false
}

// reconcile brings the kernel's table in step with the GPU processes and
// returns it: tgid → root.
func (c *ebpfCollector) reconcile(roots map[uint32][]int) (map[uint32]uint32, error) {
	tracked, err := c.tracker.Processes()
	if err != nil {
		return nil, err
	}
	tree := c.host.NewProcTree()
	pids := make([]uint32, 0, len(roots))
	for pid := range roots {
		pids = append(pids, pid)
	}
	slices.Sort(pids)
	for _, pid := range pids {
		if tracked[pid] == pid {
			continue
		}
		if err := c.tracker.Track(pid, pid); err != nil {
			c.trackFailed(pid, err)
			continue
		}
		tracked[pid] = pid
		// A process just seen on a GPU may already have children (a
		// DataLoader started before CUDA): follow them now; the kernel
		// follows those forked from here on.
		// Another GPU process's subtree is its own.
		otherRoot := func(p int) bool { _, ok := roots[uint32(p)]; return ok }
		for _, d := range c.descendants(int(pid), tree, otherRoot) {
			tgid := uint32(d)
			if err := c.tracker.Track(tgid, pid); err != nil {
				c.trackFailed(tgid, err)
				continue
			}
			// A child that exited before it was added is not
			// removed by the kernel: check it is still alive.
			if !c.alive(d) {
				if err := c.tracker.Untrack(tgid); err != nil {
					return nil, err
				}
				continue
			}
			tracked[tgid] = pid
		}
	}
	for tgid, root := range tracked {
		if _, ok := roots[root]; ok {
			continue
		}
		if _, ok := roots[tgid]; ok {
			continue
		}
		if err := c.tracker.Untrack(tgid); err != nil {
			return nil, err
		}
		delete(tracked, tgid)
	}
	return tracked, nil
}

func (c *ebpfCollector) trackFailed(tgid uint32, err error) {
	c.untracked++
	c.log.Debug("process not tracked", zap.Uint32("pid", tgid), zap.Int("table_size", bpf.MaxTrackedProcesses), zap.Error(err))
}

func (c *ebpfCollector) alive(pid int) bool {
	p, err := c.proc.Proc(pid)
	if err != nil {
		return false
	}
	st, err := p.Stat()
	return err == nil && st.State != "Z" && st.State != "X"
}

// descendants lists the processes below pid, breadth-first, as tree finds
// them; skip leaves out a process and everything below it. At most the
// table's size.
func (c *ebpfCollector) descendants(pid int, tree *hostfs.ProcTree, skip func(int) bool) []int {
	var out []int
	queue := []int{pid}
	seen := map[int]bool{pid: true}
	for len(queue) > 0 && len(out) < bpf.MaxTrackedProcesses {
		p := queue[0]
		queue = queue[1:]
		kids, errs := tree.ChildrenOf(p)
		for _, err := range errs {
			c.log.Debug("children unreadable", zap.Int("pid", p), zap.Error(err))
		}
		for _, child := range kids {
			if !seen[child] && !skip(child) {
				seen[child] = true
				out = append(out, child)
				queue = append(queue, child)
			}
		}
	}
	return out
}

// counterDelta is the growth of a kernel counter since the last reading; an
// entry that shrank was removed and created anew, so all of it is new.
func counterDelta(prev, cur uint64) uint64 {
	if cur < prev {
		return cur
	}
	return cur - prev
}

func (c *ebpfCollector) sampleBlockIO(out *sample.EBPF, seconds float64,
	process func(tgid, root uint32) *sample.EBPFProcess, finished func(uint32) bool) error {
	unstamped, err := c.block.TimeUnstampedDisks()
	if err != nil {
		return err
	}
	var found []string
	for _, dev := range unstamped {
		if !c.unstamped[dev] {
			c.unstamped[dev] = true
			found = append(found, c.deviceName(dev))
		}
	}
	if len(found) > 0 {
		c.log.Info("timing block requests at issue: these disks complete requests without the kernel's issue stamp",
			zap.Strings("devices", found))
	}
	lost, err := c.block.Lost()
	if err != nil {
		return err
	}
	out.Lost.RequestsUnmatched, out.Lost.RequestTableFull = lost.RequestsUnmatched, lost.RequestTableFull
	out.Lost.DiskTableFull, out.Lost.ProcessIOFull = lost.DiskTableFull, lost.ProcessTableFull

	disks, err := c.block.DiskLatencies()
	if err != nil {
		return err
	}
	for _, d := range disks {
		key := ebpfDiskKey{d.Dev, d.Op}
		out.Disks = append(out.Disks, diskLatencyReading(c.deviceName(d.Dev), d, c.prevDisks[key], seconds))
		c.prevDisks[key] = d
	}
	slices.SortFunc(out.Disks, func(a, b sample.DiskLatency) int {
		return cmp.Or(cmp.Compare(a.Device, b.Device), cmp.Compare(a.Op, b.Op))
	})

	ios, err := c.block.ProcessIO()
	if err != nil {
		return err
	}
	var forget []bpf.ProcessIOKey
	for _, io := range ios {
		p := process(io.TGID, io.Root)
		prev := c.prevBlock[io.ProcessIOKey]
		dBytes, dReqs, dNs := counterDelta(prev.Bytes, io.Bytes), counterDelta(prev.Requests, io.Requests), counterDelta(prev.WaitNs, io.WaitNs)
		key := ebpfDiskKey{io.Dev, io.Op}
		for _, g := range p.GPUs {
			if c.gpuBlock[g] == nil {
				c.gpuBlock[g] = map[ebpfDiskKey]*ebpfBlockTotals{}
			}
			t := c.gpuBlock[g][key]
			if t == nil {
				t = &ebpfBlockTotals{}
				c.gpuBlock[g][key] = t
			}
			t.bytes += dBytes
			t.requests += dReqs
			t.waitNs += dNs
			t.cycleBytes += dBytes
			t.cycleReqs += dReqs
			t.cycleNs += dNs
		}
		p.BlockIO = append(p.BlockIO, sample.EBPFBlockIO{
			Device: c.deviceName(io.Dev), Op: io.Op.String(),
			BytesTotal: io.Bytes, RequestsTotal: io.Requests, WaitSecondsTotal: float64(io.WaitNs) / 1e9,
		})
		if finished(io.TGID) {
			forget = append(forget, io.ProcessIOKey)
			delete(c.prevBlock, io.ProcessIOKey)
		} else {
			c.prevBlock[io.ProcessIOKey] = io
		}
	}
	return c.block.ForgetProcessIO(forget)
}

// sampleTCP reads the TCP counters. It returns the bytes of the GPU
// processes themselves (gpuPIDs: PID → its GPUs), by PID and scope, and adds
// their increase to ownTCP.
func (c *ebpfCollector) sampleTCP(out *sample.EBPF, gpuPIDs map[uint32][]int, process func(tgid, root uint32) *sample.EBPFProcess, finished func(uint32) bool) (map[uint32][tcpScopes]TCPBytes, error) {
	var err error
	if out.Lost.TCPTableFull, err = c.tcp.TableFull(); err != nil {
		return nil, err
	}
	traffic, err := c.tcp.Traffic()
	if err != nil {
		return nil, err
	}
	own := map[uint32][tcpScopes]TCPBytes{}
	var forget []bpf.TCPKey
	for _, tr := range traffic {
		p := process(tr.TGID, tr.Root)
		prev := c.prevTCP[tr.TCPKey]
		dSent, dReceived := counterDelta(prev.Sent, tr.Sent), counterDelta(prev.Received, tr.Received)
		if gpus := gpuPIDs[tr.TGID]; len(gpus) > 0 {
			scope := tcpScopeOf(tr.Scope)
			b := own[tr.TGID]
			b[scope] = TCPBytes{Sent: tr.Sent, Received: tr.Received}
			own[tr.TGID] = b
			for _, g := range gpus {
				t := c.ownTCP[g]
				t[scope].Sent += dSent
				t[scope].Received += dReceived
				c.ownTCP[g] = t
			}
		}
		for _, g := range p.GPUs {
			t := c.gpuTCP[g]
			if t == nil {
				t = &[2]ebpfTCPTotals{}
				c.gpuTCP[g] = t
			}
			t[tr.Scope].sent += dSent
			t[tr.Scope].received += dReceived
			t[tr.Scope].cycleSent += dSent
			t[tr.Scope].cycleReceived += dReceived
		}
		scope := &p.Network
		if tr.Scope == bpf.ScopeLoopback {
			scope = &p.Loopback
		}
		scope.SentBytesTotal, scope.ReceivedBytesTotal = tr.Sent, tr.Received
		if finished(tr.TGID) {
			forget = append(forget, tr.TCPKey)
			delete(c.prevTCP, tr.TCPKey)
		} else {
			c.prevTCP[tr.TCPKey] = tr
		}
	}
	return own, c.tcp.ForgetTraffic(forget)
}

func tcpScopeOf(s bpf.Scope) int {
	if s == bpf.ScopeLoopback {
		return tcpLoopback
	}
	return tcpNetwork
}

// gpuReading is one GPU's totals and the rates of this cycle.
func (c *ebpfCollector) gpuReading(index int, seconds float64) sample.EBPFGPU {
	g := sample.EBPFGPU{Index: index}
	for key, t := range c.gpuBlock[index] {
		g.BlockIO = append(g.BlockIO, sample.EBPFBlockIO{
			Device: c.deviceName(key.dev), Op: key.op.String(),
			BytesTotal: t.bytes, RequestsTotal: t.requests, WaitSecondsTotal: float64(t.waitNs) / 1e9,
			BytesPerSecond:       perSecond(t.cycleBytes, seconds),
			RequestsPerSecond:    perSecond(t.cycleReqs, seconds),
			WaitSecondsPerSecond: perSecond(t.cycleNs, seconds) / 1e9,
		})
	}
	slices.SortFunc(g.BlockIO, compareBlockIO)
	if t := c.gpuTCP[index]; t != nil {
		for scope, dst := range map[bpf.Scope]*sample.EBPFTCP{bpf.ScopeLoopback: &g.Loopback, bpf.ScopeNetwork: &g.Network} {
			*dst = sample.EBPFTCP{
				SentBytesTotal: t[scope].sent, ReceivedBytesTotal: t[scope].received,
				SentBytesPerSecond:     perSecond(t[scope].cycleSent, seconds),
				ReceivedBytesPerSecond: perSecond(t[scope].cycleReceived, seconds),
			}
		}
	}
	return g
}

func perSecond(n uint64, seconds float64) float64 {
	if seconds <= 0 {
		return 0
	}
	return float64(n) / seconds
}

func compareBlockIO(a, b sample.EBPFBlockIO) int {
	return cmp.Or(cmp.Compare(a.Device, b.Device), cmp.Compare(a.Op, b.Op))
}

// diskLatencyReading converts a kernel histogram, with the interval's rates
// from the previous reading.
func diskLatencyReading(device string, d, prev bpf.DiskLatency, seconds float64) sample.DiskLatency {
	r := sample.DiskLatency{Device: device, Op: d.Op.String(), Buckets: make([]uint64, len(d.Slots)),
		SumSeconds: float64(d.SumNs) / 1e9}
	var cycle [bpf.LatencySlots]uint64
	var cycleCount uint64
	for i, n := range d.Slots {
		r.Buckets[i] = n
		r.Count += n
		cycle[i] = counterDelta(prev.Slots[i], n)
		cycleCount += cycle[i]
	}
	if seconds <= 0 || cycleCount == 0 {
		return r
	}
	r.RequestsPerSecond = float64(cycleCount) / seconds
	r.MeanSeconds = float64(counterDelta(prev.SumNs, d.SumNs)) / 1e9 / float64(cycleCount)
	rank := uint64(math.Ceil(0.99 * float64(cycleCount)))
	var cum uint64
	for i, n := range cycle {
		cum += n
		if cum >= rank {
			// The last bucket has no upper bound: report its lower one.
			r.P99Seconds = sample.DiskLatencyBucketBound(min(i, len(cycle)-2))
			break
		}
	}
	return r
}

// deviceName names a whole disk by its device number, from the
// /sys/dev/block/<major>:<minor> link; the numbers when it cannot be read.
func (c *ebpfCollector) deviceName(dev uint32) string {
	if name, ok := c.devices[dev]; ok {
		return name
	}
	id := fmt.Sprintf("%d:%d", dev>>20, dev&(1<<20-1))
	target, err := os.Readlink(filepath.Join(c.sysPath, "dev", "block", id))
	if err != nil {
		c.log.Debug("block device not named in sysfs", zap.String("device", id), zap.Error(err))
		return id
	}
	c.devices[dev] = filepath.Base(target)
	return c.devices[dev]
}

func ebpfGPUDesc(name, help string) *prometheus.Desc {
	return prometheus.NewDesc(engine.Namespace+"_gpu_process_block_io_"+name, help, []string{"gpu", "device", "op"}, nil)
}

var (
	diskLatencyDesc = prometheus.NewDesc(engine.Namespace+"_disk_io_latency_seconds",
		"Latency of block requests from issue to the driver to completion (device service time), per whole disk and operation (read, write, flush, discard, other), counted by eBPF on every request since the daemon started.",
		[]string{"device", "op"}, nil)
	ebpfBlockBytesDesc = ebpfGPUDesc("bytes_total",
		"Bytes of block requests created by the GPU's processes and their descendants, per disk and operation, counted by eBPF at completion since the daemon began following the processes. Writes the kernel flushes later from its page cache are charged to the flusher, not here.")
	ebpfBlockRequestsDesc = ebpfGPUDesc("requests_total",
		"Block requests created by the GPU's processes and their descendants and completed, per disk and operation (eBPF).")
	ebpfBlockWaitDesc = ebpfGPUDesc("wait_seconds_total",
		"Time the GPU's processes and their descendants waited on their block requests, from each request's creation to its completion, summed over requests (eBPF): its rate is their average number of requests in flight on the disk.")
	ebpfTrackedDesc = prometheus.NewDesc(engine.Namespace+"_ebpf_tracked_processes",
		"Processes the eBPF programs follow: the GPU processes and their descendants.", nil, nil)
	ebpfFeatureDesc = prometheus.NewDesc(engine.Namespace+"_ebpf_feature_loaded",
		"1 when the eBPF programs of the feature (block_io, tcp) are attached, 0 when disabled or refused by the kernel; hook names the kernel hook that attributes the traffic to processes.",
		[]string{"feature", "hook"}, nil)
	ebpfProgramRunsDesc = prometheus.NewDesc(engine.Namespace+"_ebpf_program_runs_total",
		"Runs of each of gpudiag's eBPF programs since it was loaded (with --collector.ebpf.program-stats).",
		[]string{"program"}, nil)
	ebpfProgramRunSecondsDesc = prometheus.NewDesc(engine.Namespace+"_ebpf_program_run_seconds_total",
		"CPU time spent in each of gpudiag's eBPF programs since it was loaded, as the kernel measures it (with --collector.ebpf.program-stats): their cost to the node.",
		[]string{"program"}, nil)
	ebpfLostDesc = prometheus.NewDesc(engine.Namespace+"_ebpf_lost_events_total",
		"Events the eBPF programs could not record, by reason: processes_untracked (a GPU process or descendant not followed: process table full), requests_unmatched (completion without a seen issue: in flight at start, or request table full), request_table_full, disk_table_full, process_io_table_full, tcp_table_full, program_runs_skipped (a program's run skipped by the kernel because it was already running on that CPU, Linux 5.12+).",
		[]string{"reason"}, nil)
)

func (c *ebpfCollector) Metrics(r *sample.EBPF, emit func(prometheus.Metric)) {
	for _, f := range []struct {
		name string
		st   sample.EBPFFeature
	}{{"block_io", r.BlockIO}, {"tcp", r.TCP}} {
		v := 0.0
		if f.st.Loaded {
			v = 1
		}
		emit(engine.NewSeries(ebpfFeatureDesc, prometheus.GaugeValue, v, f.name, f.st.Hook))
	}
	emit(engine.NewSeries(ebpfTrackedDesc, prometheus.GaugeValue, float64(r.TrackedProcesses)))
	for _, p := range r.Programs {
		emit(engine.NewSeries(ebpfProgramRunsDesc, prometheus.CounterValue, float64(p.Runs), p.Name))
		emit(engine.NewSeries(ebpfProgramRunSecondsDesc, prometheus.CounterValue, p.RunSeconds, p.Name))
	}
	for _, l := range []struct {
		reason string
		n      uint64
	}{
		{"processes_untracked", r.Lost.ProcessesUntracked},
		{"requests_unmatched", r.Lost.RequestsUnmatched},
		{"request_table_full", r.Lost.RequestTableFull},
		{"disk_table_full", r.Lost.DiskTableFull},
		{"process_io_table_full", r.Lost.ProcessIOFull},
		{"tcp_table_full", r.Lost.TCPTableFull},
		{"program_runs_skipped", r.Lost.ProgramRunsSkipped},
	} {
		emit(engine.NewSeries(ebpfLostDesc, prometheus.CounterValue, float64(l.n), l.reason))
	}
	for i := range r.Disks {
		d := &r.Disks[i]
		buckets := make(map[float64]uint64, len(d.Buckets))
		var cum uint64
		for b, n := range d.Buckets[:max(len(d.Buckets)-1, 0)] {
			cum += n
			buckets[sample.DiskLatencyBucketBound(b)] = cum
		}
		emit(prometheus.MustNewConstHistogram(diskLatencyDesc, d.Count, d.SumSeconds, buckets, d.Device, d.Op))
	}
	for _, g := range r.GPUs {
		id := strconv.Itoa(g.Index)
		for _, b := range g.BlockIO {
			emit(engine.NewSeries(ebpfBlockBytesDesc, prometheus.CounterValue, float64(b.BytesTotal), id, b.Device, b.Op))
			emit(engine.NewSeries(ebpfBlockRequestsDesc, prometheus.CounterValue, float64(b.RequestsTotal), id, b.Device, b.Op))
			emit(engine.NewSeries(ebpfBlockWaitDesc, prometheus.CounterValue, b.WaitSecondsTotal, id, b.Device, b.Op))
		}
	}
}
