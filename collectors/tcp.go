package collectors

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/alecthomas/kingpin/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/procfs"
	"go.uber.org/zap"

	"github.com/gpudiag/gpudiag/engine"
	"github.com/gpudiag/gpudiag/sample"
	"github.com/gpudiag/gpudiag/sockdiag"
)

var tcpFlags struct {
	maxDescriptors int
}

func init() {
	register(collectorSpec[sample.TCP, *tcpCollector]{
		key:       sample.TCPKey,
		defaultOn: true,
		help:      "TCP traffic of the GPU processes, loopback and network, from sock_diag: shows collectives that fell back to sockets",
		flags: func(app *kingpin.Application) {
			app.Flag("collector.tcp.max-descriptors-per-process",
				"Most file descriptors read per GPU process and cycle to find its sockets; sockets past it are missed and the process is reported truncated in /diagnose.").
				Default("65536").IntVar(&tcpFlags.maxDescriptors)
		},
		newCollector: func(cfg Config) (*tcpCollector, error) {
			return newTCPCollector(cfg, kernelSockets{}, tcpFlags.maxDescriptors)
		},
		metrics: (&tcpCollector{}).Metrics,
	})
}

// tcpSockets reads the TCP sockets of the daemon's network namespace: all
// of them (Dump) or given ones (Lookup); tests replace the kernel with a
// fixed list.
type tcpSockets interface {
	Dump(context.Context, func(*sockdiag.Socket) error) (sockdiag.Stats, error)
	Lookup(context.Context, []sockdiag.SocketID, func(*sockdiag.Socket) error) (sockdiag.Stats, []sockdiag.SocketID, error)
}

// kernelSockets is tcpSockets through the kernel's sock_diag.
type kernelSockets struct{}

func (kernelSockets) Dump(ctx context.Context, fn func(*sockdiag.Socket) error) (sockdiag.Stats, error) {
	return sockdiag.Dump(ctx, fn)
}

func (kernelSockets) Lookup(ctx context.Context, ids []sockdiag.SocketID, fn func(*sockdiag.Socket) error) (sockdiag.Stats, []sockdiag.SocketID, error) {
	return sockdiag.Lookup(ctx, ids, fn)
}

// tcpCollector attributes TCP traffic to GPUs through the processes on them.
//
// Each cycle it reads the socket inodes in the GPU processes' descriptor
// tables, reads those sockets from the kernel (see ids) with their cumulative
// tcpi_bytes_acked and tcpi_bytes_received, and adds each attributed socket's
// increase since the previous cycle to its GPUs and processes. The per-GPU
// totals are therefore true counters: they grow as sockets come and go and
// never fall when a socket closes.
//
// How a socket's first reading counts: a socket that appears in the table of
// a process whose table was read completely on the previous cycle was opened
// (or connected) since then, so all of its bytes are new and count. A socket
// of a process seen for the first time (daemon start, a new GPU process, a
// table that could not be read) is taken as a baseline and counts from its
// next reading: its earlier bytes may predate the process's GPU use or the
// daemon. Bytes a socket moves between its last reading and its close are not
// seen; NCCL's sockets live as long as the communicator, so that is at most
// one interval of teardown traffic.
type tcpCollector struct {
	proc           procfs.FS
	procPath       string
	shared         *Shared
	log            *zap.Logger
	kernel         tcpSockets
	maxDescriptors int
	now            func() time.Time
	// ownNetNS is the inode of the daemon's network namespace, the only one
	// the dump sees; 0 when unknown, and every process is then taken to
	// share it.
	ownNetNS uint32

	// tables keep each GPU process's descriptors as last read, so a cycle
	// reads the links of new descriptors only, and lists a process's
	// descriptors only when their count moved (Linux 6.2+) or one of its
	// sockets left the kernel; every tcpDescriptorRefresh (fullReadAt)
	// all of them are listed and read again.
	tables     map[uint32]*sockdiag.SocketTable
	fullReadAt time.Time
	// netns is each GPU process's network namespace inode as last read
	// (0: unknown), read again at every full read: a process that
	// changes namespace (setns) is rare and seen within the refresh.
	netns map[uint32]uint32
	// ids are the held sockets' ends and cookies as the kernel last gave
	// them, by inode: while every socket the GPU processes hold is among
	// them, the cycle looks each up (a hash lookup) instead of dumping
	// the namespace (a walk of every bucket of the kernel's table, a
	// million on a 128 GB host, with milliseconds of kernel time even
	// when nearly empty). A held socket not among them (new, or gone from
	// the last reading: closed, or reconnected) makes the cycle a dump.
	ids map[uint32]sockdiag.SocketID
	// absent counts, per held socket, the whole dumps in a row that did
	// not give it; at notTCPAfter it is not a TCP socket (a Unix or UDP
	// one, which every NCCL rank holds for its proxy and CUDA IPC) and is
	// no longer asked for. Before, such sockets counted as new at every
	// cycle, and every cycle of a busy node dumped the namespace and
	// listed the descriptors again: the tcp collector was 14% of the
	// daemon's CPU under a 2-rank DDP job. Cleared at each full read, so a
	// TCP socket two racing dumps skipped is read again within
	// tcpDescriptorRefresh, its bytes counted from the reading it kept.
	absent map[uint32]int

	sockets  map[uint32]tcpSocketState // by inode, sockets attributed last cycle
	observed map[uint32]bool           // PIDs whose tables were read completely last cycle
	gpus     map[int]*tcpCounters
	procs    map[uint32]*tcpCounters
	last     time.Time

	// source is where the last cycle's bytes came from.
	source string
	// kernelFreshFor is how old a published eBPF reading may be and still
	// be used; an older one means the ebpf collector stopped sampling.
	kernelFreshFor time.Duration
	// The eBPF reading the last cycle used, and the socket listing and
	// cycles since it, while the bytes come from eBPF.
	// sampling is held by Sample, so that Close leaves alone the
	// directories of a sample the engine gave up on and left running.
	sampling sync.Mutex

	kernelGPUs         map[int][tcpScopes]TCPBytes
	kernelProcs        map[uint32][tcpScopes]TCPBytes
	listing            *tcpListing
	cyclesSinceListing int
}

// tcpDescriptorRefresh is how often every descriptor link of the GPU
// processes is read again, not only new ones: a descriptor closed and its
// number reused by a new socket within one cycle lists as before, and is
// found at the next full read (its bytes then count from its opening, by
// the first-reading rule, so no traffic is lost, only attributed late). A
// socket closed is noticed at once: the kernel no longer gives it.
const tcpDescriptorRefresh = 10 * time.Second

// notTCPAfter is how many whole dumps in a row must lack a held socket
// before it counts as not TCP: one dump can skip a socket when it races
// with churn (the next one gives it), a Unix socket is never given.
const notTCPAfter = 2

type tcpSocketState struct {
	cookie          uint64
	acked, received uint64
}

// tcpCounters are the totals of one GPU or process, by scope.
type tcpCounters [tcpScopes]struct{ tx, rx uint64 }

var tcpScopeNames = [tcpScopes]string{tcpLoopback: "loopback", tcpNetwork: "network"}

const (
	tcpUnobservedNetNS      = "network_namespace"
	tcpUnobservedUnreadable = "unreadable"
)

func newTCPCollector(cfg Config, kernel tcpSockets, maxDescriptors int) (*tcpCollector, error) {
	fsys, err := procfs.NewFS(cfg.ProcPath)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	cfg = cfg.withDefaults()
	log := cfg.Logger
	shared := cfg.Shared
	// One dump up front tells "no sock_diag here" (not Linux, tcp_diag not
	// loaded and not loadable in a container, seccomp) from a failed cycle.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	st, err := kernel.Dump(ctx, func(*sockdiag.Socket) error { return nil })
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	if st.ShortInfo > 0 {
		return nil, fmt.Errorf("%w: the kernel's tcp_info lacks tcpi_bytes_acked and tcpi_bytes_received (Linux 4.1 or later needed)", ErrUnavailable)
	}
	c := &tcpCollector{
		proc: fsys, procPath: cfg.ProcPath, shared: shared, log: log, kernel: kernel,
		maxDescriptors: maxDescriptors, now: time.Now, kernelFreshFor: 5 * cfg.Interval,
		sockets: map[uint32]tcpSocketState{}, observed: map[uint32]bool{},
		gpus: map[int]*tcpCounters{}, procs: map[uint32]*tcpCounters{},
	}
	if self, err := fsys.Self(); err == nil {
		if ns, err := self.Namespaces(); err == nil {
			c.ownNetNS = ns["net"].Inode
		}
	}
	if c.ownNetNS == 0 {
		log.Debug("own network namespace unknown: every GPU process is taken to share it", zap.String("proc", cfg.ProcPath))
	}
	return c, nil
}

func (c *tcpCollector) Name() string { return sample.TCPKey.Name() }

// Close closes the descriptor directories held open, unless a sample is
// still running (the daemon is exiting: they close with it).
func (c *tcpCollector) Close() error {
	if !c.sampling.TryLock() {
		return nil
	}
	defer c.sampling.Unlock()
	for pid, table := range c.tables {
		table.Close()
		delete(c.tables, pid)
	}
	return nil
}

// tcpCycle is what one cycle adds to a GPU or process, by scope.
type tcpCycle [tcpScopes]struct {
	tx, rx      uint64
	connections int
}

func (c *tcpCycle) add(scope int, tx, rx uint64, connections int) {
	c[scope].tx += tx
	c[scope].rx += rx
	c[scope].connections += connections
}

// tcpProcessScan is what one cycle learned of one GPU process.
type tcpProcessScan struct {
	sample.TCPProcess
	fullyRead bool
	cycle     tcpCycle
}

// tcpKernelListEvery is how many cycles pass between socket listings while
// the byte counts come from the eBPF programs: the listing then only
// refreshes the connection counts, which need no per-second precision.
const tcpKernelListEvery = 15

func (c *tcpCollector) Sample(ctx context.Context) (*sample.TCP, error) {
	c.sampling.Lock()
	defer c.sampling.Unlock()
	now := c.now()
	if k := c.shared.FreshKernelTCP(now, c.kernelFreshFor); k != nil {
		return c.sampleKernel(ctx, now, k)
	}
	if c.source == sample.TCPSourceEBPF {
		// Back from the eBPF counts: every socket's next reading is a
		// baseline, or the whole time on eBPF would count again.
		clear(c.sockets)
		clear(c.observed)
	}
	c.source = sample.TCPSourceSockDiag
	c.kernelGPUs, c.kernelProcs = nil, nil
	gpus := c.shared.GPUs()
	l, err := c.listSockets(ctx, gpus)
	if err != nil {
		return nil, err
	}
	seconds := c.advanceClock(now)
	out := &sample.TCP{
		Source:                     sample.TCPSourceSockDiag,
		IntervalSeconds:            seconds,
		SocketsListed:              l.stats.Sockets,
		LookedUp:                   l.looked,
		SocketsWithoutByteCounters: l.stats.ShortInfo,
		DumpInterrupted:            l.stats.Interrupted,
		GPUs:                       make([]sample.TCPGPU, 0, len(gpus)),
	}
	for _, g := range gpus {
		tg := sample.TCPGPU{Index: g.Index}
		tg.Loopback, tg.Network = c.gpuTotals(g.Index).advance(l.gpuCycles[g.Index], seconds)
		for _, pid := range g.PIDs {
			if p := l.procs[pid]; p != nil {
				switch p.Unobserved {
				case tcpUnobservedNetNS:
					tg.ProcessesInOtherNetNS++
				case tcpUnobservedUnreadable:
					tg.ProcessesUnreadable++
				}
			}
		}
		out.GPUs = append(out.GPUs, tg)
	}
	c.forgetProcessesNotIn(l.procs)
	for _, pid := range l.pids {
		p := l.procs[pid]
		if p == nil {
			continue
		}
		p.Loopback, p.Network = c.processTotals(pid).advance(&p.cycle, seconds)
		out.Processes = append(out.Processes, p.TCPProcess)
	}
	return out, nil
}

// sampleKernel takes the bytes from the eBPF programs' counts and the
// connections from a socket listing made every tcpKernelListEvery cycles.
// The programs see every process whatever its network namespace, so no
// process is unobserved.
func (c *tcpCollector) sampleKernel(ctx context.Context, now time.Time, k *KernelTCP) (*sample.TCP, error) {
	gpus := c.shared.GPUs()
	if c.source != sample.TCPSourceEBPF || c.listing == nil || c.cyclesSinceListing >= tcpKernelListEvery-1 {
		l, err := c.listSockets(ctx, gpus)
		if err != nil {
			return nil, err
		}
		c.listing, c.cyclesSinceListing = l, 0
	} else {
		c.cyclesSinceListing++
	}
	// The first reading after a switch is a baseline: what it holds was
	// counted by the socket listing, or predates it.
	baseline := c.source != sample.TCPSourceEBPF
	c.source = sample.TCPSourceEBPF
	seconds := c.advanceClock(now)
	out := &sample.TCP{
		Source:          sample.TCPSourceEBPF,
		IntervalSeconds: seconds,
		SocketsListed:   c.listing.stats.Sockets,
		DumpInterrupted: c.listing.stats.Interrupted,
		GPUs:            make([]sample.TCPGPU, 0, len(gpus)),
	}
	for _, g := range gpus {
		var cycle tcpCycle
		if !baseline {
			cycle = kernelCycle(c.kernelGPUs[g.Index], k.GPUs[g.Index])
		}
		if listed := c.listing.gpuCycles[g.Index]; listed != nil {
			for scope := range tcpScopes {
				cycle[scope].connections = listed[scope].connections
			}
		}
		tg := sample.TCPGPU{Index: g.Index}
		tg.Loopback, tg.Network = c.gpuTotals(g.Index).advance(&cycle, seconds)
		out.GPUs = append(out.GPUs, tg)
	}
	procs := map[uint32]*tcpProcessScan{}
	for _, g := range gpus {
		for _, pid := range g.PIDs {
			p := procs[pid]
			if p == nil {
				p = &tcpProcessScan{TCPProcess: sample.TCPProcess{PID: pid, Observed: true}}
				procs[pid] = p
				// A process new since the last reading was tracked
				// after it: all of its counted bytes are new.
				var prev [tcpScopes]TCPBytes
				if known, ok := c.kernelProcs[pid]; ok {
					prev = known
				}
				if !baseline {
					p.cycle = kernelCycle(prev, k.Processes[pid])
				}
				if listed := c.listing.procs[pid]; listed != nil {
					p.Sockets = listed.Sockets
					for scope := range tcpScopes {
						p.cycle[scope].connections = listed.cycle[scope].connections
					}
				}
			}
			if !slices.Contains(p.GPUs, g.Index) {
				p.GPUs = append(p.GPUs, g.Index)
			}
		}
	}
	c.kernelGPUs, c.kernelProcs = k.GPUs, k.Processes
	c.forgetProcessesNotIn(procs)
	for _, pid := range slices.Sorted(maps.Keys(procs)) {
		p := procs[pid]
		p.Loopback, p.Network = c.processTotals(pid).advance(&p.cycle, seconds)
		out.Processes = append(out.Processes, p.TCPProcess)
	}
	return out, nil
}

// kernelCycle is the increase between two eBPF readings of cumulative bytes.
func kernelCycle(prev, cur [tcpScopes]TCPBytes) tcpCycle {
	var c tcpCycle
	for scope := range tcpScopes {
		c[scope].tx = tcpCounterDelta(prev[scope].Sent, cur[scope].Sent)
		c[scope].rx = tcpCounterDelta(prev[scope].Received, cur[scope].Received)
	}
	return c
}

// tcpListing is one pass over the GPU processes' sockets: which processes
// hold which sockets, and what each socket moved since the last pass.
type tcpListing struct {
	pids      []uint32 // the GPU processes, sorted
	procs     map[uint32]*tcpProcessScan
	gpuCycles map[int]*tcpCycle
	stats     sockdiag.Stats
	looked    bool // the known sockets were looked up, not dumped
}

// listSockets reads the GPU processes' descriptor tables and their sockets
// from the kernel (looked up when all are known, else one dump of the
// namespace), attributing each held socket's traffic since the last pass to
// its processes and their GPUs.
func (c *tcpCollector) listSockets(ctx context.Context, gpus []GPURef) (*tcpListing, error) {
	pidGPUs := map[uint32][]int{}
	for _, g := range gpus {
		for _, pid := range g.PIDs {
			if !slices.Contains(pidGPUs[pid], g.Index) {
				pidGPUs[pid] = append(pidGPUs[pid], g.Index)
			}
		}
	}
	l := &tcpListing{
		pids:      slices.Sorted(maps.Keys(pidGPUs)),
		procs:     make(map[uint32]*tcpProcessScan, len(pidGPUs)),
		gpuCycles: map[int]*tcpCycle{},
	}
	owners := map[uint32][]uint32{} // socket inode -> PIDs holding it
	full := c.now().Sub(c.fullReadAt) >= tcpDescriptorRefresh
	if full {
		c.fullReadAt = c.now()
	}
	if c.tables == nil {
		c.tables = map[uint32]*sockdiag.SocketTable{}
		c.netns = map[uint32]uint32{}
		c.absent = map[uint32]int{}
	}
	if full {
		clear(c.absent)
	}
	for pid, table := range c.tables {
		if pidGPUs[pid] == nil {
			table.Close()
			delete(c.tables, pid)
		}
	}
	for pid := range c.netns {
		if full || pidGPUs[pid] == nil {
			delete(c.netns, pid)
		}
	}
	for _, pid := range l.pids {
		p, inodes, ok := c.scanProcess(pid, pidGPUs[pid], full)
		if !ok {
			continue
		}
		l.procs[pid] = p
		for _, ino := range inodes {
			if !slices.Contains(owners[ino], pid) {
				owners[ino] = append(owners[ino], pid)
			}
		}
	}
	for _, g := range gpus {
		l.gpuCycles[g.Index] = &tcpCycle{}
	}
	notTCP := 0
	for ino, n := range c.absent {
		switch {
		case owners[ino] == nil:
			delete(c.absent, ino) // closed: its inode may come back as a TCP socket's
		case n >= notTCPAfter:
			notTCP++
		}
	}
	tcpOwners := owners
	if notTCP > 0 {
		tcpOwners = make(map[uint32][]uint32, len(owners))
		for ino, pids := range owners {
			if c.absent[ino] < notTCPAfter {
				tcpOwners[ino] = pids
			}
		}
	}
	next := make(map[uint32]tcpSocketState, len(c.sockets))
	seen := map[uint32]bool{}
	ids := make(map[uint32]sockdiag.SocketID, len(owners))
	if len(tcpOwners) > 0 {
		visit := func(s *sockdiag.Socket) error {
			holders := owners[s.Inode]
			if s.Inode == 0 || holders == nil || seen[s.Inode] {
				return nil
			}
			seen[s.Inode] = true
			ids[s.Inode] = s.ID()
			dTx, dRx := c.socketDelta(s, holders)
			if s.HasByteCounters {
				next[s.Inode] = tcpSocketState{cookie: s.Cookie, acked: s.BytesAcked, received: s.BytesReceived}
			}
			scope := tcpNetwork
			if s.OnHost() {
				scope = tcpLoopback
			}
			established := 0
			if s.State == sockdiag.Established {
				established = 1
			}
			var onGPUs []int
			for _, pid := range holders {
				p := l.procs[pid]
				p.Sockets++
				p.cycle.add(scope, dTx, dRx, established)
				for _, g := range p.GPUs {
					if !slices.Contains(onGPUs, g) {
						onGPUs = append(onGPUs, g)
					}
				}
			}
			for _, g := range onGPUs {
				l.gpuCycles[g].add(scope, dTx, dRx, established)
			}
			return nil
		}
		var err error
		if known := c.knownSockets(tcpOwners); known != nil {
			l.stats, _, err = c.kernel.Lookup(ctx, known, visit)
			l.looked = true
		} else {
			l.stats, err = c.kernel.Dump(ctx, visit)
		}
		if err != nil {
			return nil, err
		}
	}
	c.ids = ids
	// A socket still held but missing from this dump (a dump that raced
	// with socket churn can skip entries) keeps its last reading, so that
	// its next reading is a delta and not its whole history again.
	for ino, s := range c.sockets {
		if _, held := owners[ino]; held && !seen[ino] {
			next[ino] = s
		}
	}
	// A descriptor whose socket the kernel no longer gave was closed (or
	// a dump raced with it), or is not a TCP socket: its link is read
	// again next cycle, and what notTCPAfter whole dumps lacked while it
	// stayed held is not TCP (absent).
	dumped := len(tcpOwners) > 0 && !l.looked && !l.stats.Interrupted
	if len(tcpOwners) > 0 && !l.stats.Interrupted {
		for ino, pids := range tcpOwners {
			if seen[ino] {
				delete(c.absent, ino)
				continue
			}
			if dumped {
				c.absent[ino]++
			}
			for _, pid := range pids {
				if t := c.tables[pid]; t != nil {
					t.Forget(ino)
				}
			}
		}
	}
	c.sockets = next
	c.observed = map[uint32]bool{}
	for pid, p := range l.procs {
		if p.fullyRead {
			c.observed[pid] = true
		}
	}
	return l, nil
}

// maxLookups bounds the sockets looked up one by one in a cycle; more are
// dumped (a lookup is two system calls, a dump's walk milliseconds).
const maxLookups = 4096

// knownSockets returns the ids of the held sockets, by inode, when the last
// reading gave every one of them; nil (a dump) otherwise.
func (c *tcpCollector) knownSockets(owners map[uint32][]uint32) []sockdiag.SocketID {
	if len(owners) > maxLookups {
		return nil
	}
	inodes := slices.Sorted(maps.Keys(owners))
	out := make([]sockdiag.SocketID, 0, len(inodes))
	for _, ino := range inodes {
		id, known := c.ids[ino]
		if !known {
			return nil // a socket not read before: new
		}
		out = append(out, id)
	}
	return out
}

// advanceClock returns the seconds since the previous cycle, 0 on the first.
func (c *tcpCollector) advanceClock(now time.Time) float64 {
	var seconds float64
	if !c.last.IsZero() {
		seconds = now.Sub(c.last).Seconds()
	}
	c.last = now
	return seconds
}

func (c *tcpCollector) gpuTotals(index int) *tcpCounters {
	t := c.gpus[index]
	if t == nil {
		t = &tcpCounters{}
		c.gpus[index] = t
	}
	return t
}

func (c *tcpCollector) processTotals(pid uint32) *tcpCounters {
	t := c.procs[pid]
	if t == nil {
		t = &tcpCounters{}
		c.procs[pid] = t
	}
	return t
}

func (c *tcpCollector) forgetProcessesNotIn(procs map[uint32]*tcpProcessScan) {
	for pid := range c.procs {
		if procs[pid] == nil {
			delete(c.procs, pid)
		}
	}
}

// scanProcess checks that the process's sockets are visible to the dump and
// reads its socket inodes. ok is false when the process is gone.
func (c *tcpCollector) scanProcess(pid uint32, gpus []int, full bool) (p *tcpProcessScan, inodes []uint32, ok bool) {
	p = &tcpProcessScan{TCPProcess: sample.TCPProcess{PID: pid, GPUs: gpus}}
	unreadable := func(what string, err error) (*tcpProcessScan, []uint32, bool) {
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ESRCH) {
			c.log.Debug("GPU process vanished", zap.Uint32("pid", pid))
			return nil, nil, false
		}
		c.log.Debug("GPU process sockets not readable", zap.Uint32("pid", pid), zap.String("reading", what), zap.Error(err))
		p.Unobserved = tcpUnobservedUnreadable
		return p, nil, true
	}
	if c.ownNetNS != 0 {
		netns, read := c.netns[pid]
		if !read {
			// A process gone reads as unknown here and as gone from
			// its descriptors below.
			var known bool
			var err error
			if netns, known, err = sockdiag.NetNamespaceInode(c.procPath, int(pid)); err != nil {
				return unreadable("network namespace", err)
			}
			if !known {
				netns = 0
			}
			c.netns[pid] = netns
		}
		if netns != 0 && netns != c.ownNetNS {
			c.log.Debug("GPU process in another network namespace: its sockets are not visible",
				zap.Uint32("pid", pid), zap.Uint32("netns", netns), zap.Uint32("own_netns", c.ownNetNS))
			p.Unobserved = tcpUnobservedNetNS
			return p, nil, true
		}
	}
	table := c.tables[pid]
	if table == nil {
		table = sockdiag.NewSocketTable(c.procPath, int(pid))
		c.tables[pid] = table
	}
	inodes, truncated, err := table.Inodes(c.maxDescriptors, full, nil)
	if err != nil {
		delete(c.tables, pid) // Inodes closed it
		delete(c.netns, pid)
		return unreadable("descriptors", err)
	}
	if truncated {
		c.log.Debug("GPU process has more descriptors than are read per cycle",
			zap.Uint32("pid", pid), zap.Int("max_descriptors", c.maxDescriptors))
	}
	p.Observed = true
	p.DescriptorsTruncated = truncated
	p.fullyRead = !truncated
	return p, inodes, true
}

// socketDelta is the increase of the socket's byte counters since the last
// cycle, under the first-reading rule in tcpCollector's comment.
func (c *tcpCollector) socketDelta(s *sockdiag.Socket, holders []uint32) (tx, rx uint64) {
	if !s.HasByteCounters {
		return 0, 0
	}
	if prev, known := c.sockets[s.Inode]; known && prev.cookie == s.Cookie {
		return tcpCounterDelta(prev.acked, s.BytesAcked), tcpCounterDelta(prev.received, s.BytesReceived)
	}
	for _, pid := range holders {
		if c.observed[pid] {
			return s.BytesAcked, s.BytesReceived
		}
	}
	return 0, 0
}

// tcpCounterDelta is sample.CounterDelta on exact integers: a socket's
// counters cannot go back, but if they ever did the interval adds nothing.
func tcpCounterDelta(prev, cur uint64) uint64 {
	if cur < prev {
		return 0
	}
	return cur - prev
}

// advance adds one cycle to the totals and returns the reading of each
// scope, with rates over the cycle.
func (t *tcpCounters) advance(c *tcpCycle, seconds float64) (loopback, network sample.TCPTraffic) {
	var out [tcpScopes]sample.TCPTraffic
	for scope := range tcpScopes {
		prevTx, prevRx := t[scope].tx, t[scope].rx
		t[scope].tx += c[scope].tx
		t[scope].rx += c[scope].rx
		out[scope] = sample.TCPTraffic{
			TransmitBytesTotal:     t[scope].tx,
			ReceiveBytesTotal:      t[scope].rx,
			TransmitBytesPerSecond: sample.CounterRate(float64(prevTx), float64(t[scope].tx), seconds),
			ReceiveBytesPerSecond:  sample.CounterRate(float64(prevRx), float64(t[scope].rx), seconds),
			Connections:            c[scope].connections,
		}
	}
	return out[tcpLoopback], out[tcpNetwork]
}

func tcpDesc(name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc(engine.Namespace+"_gpu_process_tcp_"+name, help, append([]string{"gpu"}, labels...), nil)
}

var (
	tcpTransmitDesc = tcpDesc("transmit_bytes_total",
		"TCP payload sent by the GPU's processes, counted since the daemon first saw each process: acknowledged by the peer (tcpi_bytes_acked) when listed from sock_diag, passed to send calls when counted by the eBPF collector (see gpudiag_gpu_process_tcp_source_info). scope=loopback: traffic that stays on the host (loopback, or a connection to the host's own address); network: the rest. A collective that fell back to sockets shows here.",
		"scope")
	tcpReceiveDesc = tcpDesc("receive_bytes_total",
		"TCP payload received by the GPU's processes (tcpi_bytes_received, or returned by receive calls under eBPF), counted since the daemon first saw each process; scope as for transmit.",
		"scope")
	tcpSourceDesc = prometheus.NewDesc(engine.Namespace+"_gpu_process_tcp_source_info",
		"Where the GPU processes' TCP byte counts come from: source=ebpf (the eBPF collector's counts at each send and receive call, all network namespaces) or sock_diag (each socket's counters, listed every cycle, the daemon's network namespace only).",
		[]string{"source"}, nil)
	tcpConnectionsDesc = tcpDesc("connections",
		"Established TCP connections held by the GPU's processes, by scope (loopback: stays on the host; network: the rest).",
		"scope")
	tcpUnobservedDesc = tcpDesc("unobserved_processes",
		"GPU processes whose TCP sockets the daemon cannot see, so their traffic is missing above: reason=network_namespace (a network namespace other than the daemon's; run it with hostNetwork) or unreadable (/proc/<pid>/fd or ns/net not readable, as without root or CAP_SYS_PTRACE).",
		"reason")
)

func (c *tcpCollector) Metrics(r *sample.TCP, emit func(prometheus.Metric)) {
	if r.Source != "" {
		emit(engine.NewSeries(tcpSourceDesc, prometheus.GaugeValue, 1, r.Source))
	}
	for i := range r.GPUs {
		g := &r.GPUs[i]
		id := strconv.Itoa(g.Index)
		for scope, t := range [tcpScopes]*sample.TCPTraffic{tcpLoopback: &g.Loopback, tcpNetwork: &g.Network} {
			name := tcpScopeNames[scope]
			emit(engine.NewSeries(tcpTransmitDesc, prometheus.CounterValue, float64(t.TransmitBytesTotal), id, name))
			emit(engine.NewSeries(tcpReceiveDesc, prometheus.CounterValue, float64(t.ReceiveBytesTotal), id, name))
			emit(engine.NewSeries(tcpConnectionsDesc, prometheus.GaugeValue, float64(t.Connections), id, name))
		}
		emit(engine.NewSeries(tcpUnobservedDesc, prometheus.GaugeValue, float64(g.ProcessesInOtherNetNS), id, tcpUnobservedNetNS))
		emit(engine.NewSeries(tcpUnobservedDesc, prometheus.GaugeValue, float64(g.ProcessesUnreadable), id, tcpUnobservedUnreadable))
	}
}
