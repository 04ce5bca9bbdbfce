package collectors

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/common/expfmt"
	"go.uber.org/zap"

	"github.com/gpudiag/gpudiag/engine"
	"github.com/gpudiag/gpudiag/sample"
	"github.com/gpudiag/gpudiag/sockdiag"
)

// tcpFakeDump stands in for the kernel: it lists the sockets the test sets.
type tcpFakeDump struct {
	sockets []sockdiag.Socket
	stats   sockdiag.Stats
	err     error
	calls   int
	lookups [][]sockdiag.SocketID // each call's sockets looked up, nil for a dump
}

func (f *tcpFakeDump) Dump(_ context.Context, fn func(*sockdiag.Socket) error) (sockdiag.Stats, error) {
	f.calls++
	f.lookups = append(f.lookups, nil)
	if f.err != nil {
		return sockdiag.Stats{}, f.err
	}
	st := f.stats
	for i := range f.sockets {
		s := f.sockets[i]
		st.Sockets++
		if err := fn(&s); err != nil {
			return sockdiag.Stats{}, err
		}
	}
	return st, nil
}

func (f *tcpFakeDump) Lookup(_ context.Context, ids []sockdiag.SocketID, fn func(*sockdiag.Socket) error) (sockdiag.Stats, []sockdiag.SocketID, error) {
	f.calls++
	f.lookups = append(f.lookups, ids)
	if f.err != nil {
		return sockdiag.Stats{}, nil, f.err
	}
	var st sockdiag.Stats
	var gone []sockdiag.SocketID
	for _, id := range ids {
		found := false
		for i := range f.sockets {
			if s := f.sockets[i]; s.ID() == id {
				found = true
				st.Sockets++
				if err := fn(&s); err != nil {
					return st, gone, err
				}
			}
		}
		if !found {
			gone = append(gone, id)
		}
	}
	return st, gone, nil
}

// set replaces the socket with s's inode (appending it if new); remove
// drops it from the dump.
func (f *tcpFakeDump) set(s sockdiag.Socket) {
	for i := range f.sockets {
		if f.sockets[i].Inode == s.Inode {
			f.sockets[i] = s
			return
		}
	}
	f.sockets = append(f.sockets, s)
}

func (f *tcpFakeDump) remove(inode uint32) {
	for i := range f.sockets {
		if f.sockets[i].Inode == inode {
			f.sockets = append(f.sockets[:i], f.sockets[i+1:]...)
			return
		}
	}
}

func tcpSock(inode uint32, cookie uint64, local, remote string, state sockdiag.State, acked, received uint64) sockdiag.Socket {
	return sockdiag.Socket{
		State: state, Inode: inode, Cookie: cookie,
		Local: netip.MustParseAddrPort(local), Remote: netip.MustParseAddrPort(remote),
		HasInfo: true, HasByteCounters: true, BytesAcked: acked, BytesReceived: received,
	}
}

type tcpTestRig struct {
	c     *tcpCollector
	clock *fakeClock
	dump  *tcpFakeDump
}

func newTCPRig(t *testing.T, proc string, gpus []GPURef, maxDescriptors int) *tcpTestRig {
	t.Helper()
	r := &tcpTestRig{clock: &fakeClock{t: time.Unix(1_700_000_000, 0)}, dump: &tcpFakeDump{}}
	shared := &Shared{}
	shared.SetGPUs(gpus)
	c, err := newTCPCollector(Config{ProcPath: proc, Shared: shared, Logger: zap.NewNop()}, r.dump, maxDescriptors)
	if err != nil {
		t.Fatal(err)
	}
	c.now = r.clock.now
	r.c = c
	return r
}

func (r *tcpTestRig) step(t *testing.T, d time.Duration) *sample.TCP {
	t.Helper()
	r.clock.t = r.clock.t.Add(d)
	s, err := r.c.Sample(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func tcpGPU(t *testing.T, s *sample.TCP, index int) sample.TCPGPU {
	t.Helper()
	for _, g := range s.GPUs {
		if g.Index == index {
			return g
		}
	}
	t.Fatalf("GPU %d not in the sample: %+v", index, s.GPUs)
	return sample.TCPGPU{}
}

func tcpProcess(t *testing.T, s *sample.TCP, pid uint32) sample.TCPProcess {
	t.Helper()
	for _, p := range s.Processes {
		if p.PID == pid {
			return p
		}
	}
	t.Fatalf("process %d not in the sample: %+v", pid, s.Processes)
	return sample.TCPProcess{}
}

// fixtureTCPGPUs are the reference host's GPU processes: 4242 on GPU 0 and
// 4343 on GPU 4 (its DataLoader worker 4344 holds no GPU).
func fixtureTCPGPUs() []GPURef {
	return []GPURef{
		{Index: 0, PCIBusID: "0000:18:00.0", PIDs: []uint32{4242}},
		{Index: 4, PCIBusID: "0000:9a:00.0", PIDs: []uint32{4343}},
	}
}

// fixtureTCPSockets is the dump that goes with the fixture's descriptor
// tables (hostfs/testdata/host/proc/{4242,4343}/fd), scaled by step: 4242 holds a
// c10d store connection over loopback (61001), a NCCL socket to another node
// (61002), a unix socket the TCP dump does not list (61003) and a listener
// (61004); 4343 holds a connection to its host's own address (62001: on
// host) and a dual-stack one to another node (62002). Others' sockets and a
// TIME_WAIT entry must be ignored.
func fixtureTCPSockets(step uint64) []sockdiag.Socket {
	return []sockdiag.Socket{
		tcpSock(61001, 1, "127.0.0.1:40000", "127.0.0.1:29500", sockdiag.Established, 1000+500*step, 2000+600*step),
		tcpSock(61002, 2, "10.0.0.5:45678", "10.0.0.6:43001", sockdiag.Established, 10_000_000+4_000_000_000*step, 3_000_000_000*step),
		tcpSock(61004, 3, "0.0.0.0:43000", "0.0.0.0:0", sockdiag.Listen, 0, 0),
		tcpSock(62001, 4, "10.0.0.5:45000", "10.0.0.5:43002", sockdiag.Established, 1_000_000*step, 2_000_000*step),
		tcpSock(62002, 5, "[::ffff:10.0.0.5]:50000", "[::ffff:10.0.0.7]:43003", sockdiag.Established, 7_000_000*step, 8_000_000*step),
		tcpSock(70001, 6, "10.0.0.5:22", "10.0.0.99:51000", sockdiag.Established, 5e9*step, 5e9*step),
		{State: sockdiag.TimeWait, Cookie: 7, Local: netip.MustParseAddrPort("10.0.0.5:45001"), Remote: netip.MustParseAddrPort("10.0.0.6:43001")},
	}
}

func TestTCPFixture(t *testing.T) {
	r := newTCPRig(t, filepath.Join(fixtureRoot, "proc"), fixtureTCPGPUs(), 64)
	if r.c.ownNetNS != 0 {
		t.Fatalf("own netns %d read from a fixture without proc/self", r.c.ownNetNS)
	}
	r.c.ownNetNS = 4026531840 // the fixture's processes are in the host namespace
	r.dump.sockets = fixtureTCPSockets(0)
	first := r.step(t, 0)
	// The processes are new to the daemon: their sockets are a baseline.
	for _, g := range first.GPUs {
		if g.Loopback.TransmitBytesTotal != 0 || g.Network.ReceiveBytesTotal != 0 {
			t.Fatalf("first reading counted history: %+v", g)
		}
	}
	r.dump.sockets = fixtureTCPSockets(1)
	s := r.step(t, 2*time.Second)

	if s.IntervalSeconds != 2 || s.SocketsListed != 7 {
		t.Fatalf("interval %v, sockets listed %d", s.IntervalSeconds, s.SocketsListed)
	}
	want := map[int]sample.TCPGPU{
		0: {Index: 0,
			Loopback: sample.TCPTraffic{TransmitBytesTotal: 500, ReceiveBytesTotal: 600, TransmitBytesPerSecond: 250, ReceiveBytesPerSecond: 300, Connections: 1},
			Network:  sample.TCPTraffic{TransmitBytesTotal: 4_000_000_000, ReceiveBytesTotal: 3_000_000_000, TransmitBytesPerSecond: 2e9, ReceiveBytesPerSecond: 1.5e9, Connections: 1}},
		4: {Index: 4,
			Loopback: sample.TCPTraffic{TransmitBytesTotal: 1_000_000, ReceiveBytesTotal: 2_000_000, TransmitBytesPerSecond: 500_000, ReceiveBytesPerSecond: 1_000_000, Connections: 1},
			Network:  sample.TCPTraffic{TransmitBytesTotal: 7_000_000, ReceiveBytesTotal: 8_000_000, TransmitBytesPerSecond: 3_500_000, ReceiveBytesPerSecond: 4_000_000, Connections: 1}},
	}
	for idx, w := range want {
		if got := tcpGPU(t, s, idx); got != w {
			t.Errorf("GPU %d\n got %+v\nwant %+v", idx, got, w)
		}
	}
	p := tcpProcess(t, s, 4242)
	if !p.Observed || p.Sockets != 3 || p.Network.TransmitBytesTotal != 4_000_000_000 || len(p.GPUs) != 1 || p.GPUs[0] != 0 {
		t.Errorf("process 4242: %+v", p)
	}
	if p := tcpProcess(t, s, 4343); p.Sockets != 2 || p.Loopback.ReceiveBytesTotal != 2_000_000 {
		t.Errorf("process 4343: %+v", p)
	}
}

// tcpProcTree is a writable /proc with descriptor tables the test edits.
type tcpProcTree struct {
	t    *testing.T
	root string
}

func newTCPProcTree(t *testing.T) *tcpProcTree { return &tcpProcTree{t: t, root: t.TempDir()} }

func (p *tcpProcTree) link(pid uint32, rel, target string) {
	p.t.Helper()
	path := filepath.Join(p.root, strconv.Itoa(int(pid)), rel)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		p.t.Fatal(err)
	}
	os.Remove(path)
	if err := os.Symlink(target, path); err != nil {
		p.t.Fatal(err)
	}
}

func (p *tcpProcTree) socketFD(pid uint32, fd int, inode uint32) {
	p.link(pid, "fd/"+strconv.Itoa(fd), "socket:["+strconv.FormatUint(uint64(inode), 10)+"]")
}

func (p *tcpProcTree) closeFD(pid uint32, fd int) {
	p.t.Helper()
	if err := os.Remove(filepath.Join(p.root, strconv.Itoa(int(pid)), "fd", strconv.Itoa(fd))); err != nil {
		p.t.Fatal(err)
	}
}

// Counters follow sockets as they open, skip a dump, close and reuse an
// inode, and never go back; a new process's sockets are a baseline.
func TestTCPSocketLifecycle(t *testing.T) {
	tree := newTCPProcTree(t)
	tree.socketFD(100, 3, 1)
	r := newTCPRig(t, tree.root, []GPURef{{Index: 0, PIDs: []uint32{100}}}, 0)
	const lo, peer = "127.0.0.1:5000", "127.0.0.1:6000"
	net1, net2 := "10.0.0.5:7000", "10.0.0.6:8000"
	r.dump.set(tcpSock(1, 11, net1, net2, sockdiag.Established, 1000, 500))
	r.dump.set(tcpSock(9, 90, net1, net2, sockdiag.Established, 1e12, 1e12)) // not a GPU process's

	check := func(s *sample.TCP, step string, tx, rx uint64, conns int) {
		t.Helper()
		g := tcpGPU(t, s, 0)
		if g.Network.TransmitBytesTotal != tx || g.Network.ReceiveBytesTotal != rx || g.Network.Connections != conns {
			t.Fatalf("%s: network %+v; want tx %d rx %d connections %d", step, g.Network, tx, rx, conns)
		}
	}
	check(r.step(t, 0), "baseline", 0, 0, 1)

	// Socket 1 moves 500/100; socket 2 opens since the last cycle: all of it
	// is new.
	r.dump.set(tcpSock(1, 11, net1, net2, sockdiag.Established, 1500, 600))
	tree.socketFD(100, 4, 2)
	r.dump.set(tcpSock(2, 12, net1, net2, sockdiag.Established, 300, 200))
	s := r.step(t, time.Second)
	check(s, "new socket", 800, 300, 2)
	if g := tcpGPU(t, s, 0); g.Network.TransmitBytesPerSecond != 800 || g.Network.ReceiveBytesPerSecond != 300 {
		t.Fatalf("rates %+v", g.Network)
	}

	// The dump misses socket 2 (it raced with churn); process 200 joins the
	// GPU with an old busy socket 3, and shares socket 2 (forked).
	r.dump.remove(2)
	r.dump.set(tcpSock(1, 11, net1, net2, sockdiag.Established, 1600, 600))
	tree.socketFD(200, 3, 3)
	tree.socketFD(200, 4, 2)
	r.dump.set(tcpSock(3, 13, lo, peer, sockdiag.Established, 1e9, 1e9))
	r.c.shared.SetGPUs([]GPURef{{Index: 0, PIDs: []uint32{100, 200}}})
	s = r.step(t, time.Second)
	check(s, "dump missed a socket", 900, 300, 1)
	if g := tcpGPU(t, s, 0); g.Loopback.TransmitBytesTotal != 0 || g.Loopback.Connections != 1 {
		t.Fatalf("new process's old socket counted its history: %+v", g.Loopback)
	}

	// Socket 2 is back: only what it moved since its last reading counts,
	// once for the GPU though two of its processes hold it, and once for
	// each process. Socket 3 now counts from its baseline.
	r.dump.set(tcpSock(2, 12, net1, net2, sockdiag.Established, 400, 250))
	r.dump.set(tcpSock(3, 13, lo, peer, sockdiag.Established, 1e9+10, 1e9+20))
	s = r.step(t, time.Second)
	check(s, "socket back", 1000, 350, 2)
	if g := tcpGPU(t, s, 0); g.Loopback.TransmitBytesTotal != 10 || g.Loopback.ReceiveBytesTotal != 20 {
		t.Fatalf("loopback %+v", g.Loopback)
	}
	if p := tcpProcess(t, s, 200); p.Network.TransmitBytesTotal != 100 || p.Loopback.TransmitBytesTotal != 10 || p.Sockets != 2 {
		t.Fatalf("process 200 %+v", p)
	}
	if p := tcpProcess(t, s, 100); p.Network.TransmitBytesTotal != 1000 || p.Sockets != 2 {
		t.Fatalf("process 100 %+v", p)
	}

	// Socket 1 closes: it leaves the table and turns to TIME_WAIT. The
	// totals stay, the connection count drops.
	tree.closeFD(100, 3)
	r.dump.remove(1)
	r.dump.sockets = append(r.dump.sockets, sockdiag.Socket{State: sockdiag.TimeWait, Cookie: 11,
		Local: netip.MustParseAddrPort(net1), Remote: netip.MustParseAddrPort(net2)})
	s = r.step(t, time.Second)
	check(s, "closed", 1000, 350, 1)
	if _, kept := r.c.sockets[1]; kept {
		t.Fatal("a closed socket is still tracked")
	}

	// Inode 1 comes back as another socket (another cookie): a new socket,
	// all of its bytes count, none of the old one's are subtracted.
	tree.socketFD(100, 5, 1)
	r.dump.set(tcpSock(1, 21, net1, net2, sockdiag.Established, 50, 5))
	s = r.step(t, time.Second)
	check(s, "inode reused", 1050, 355, 2)

	// Process 200 leaves the GPU: it is forgotten, the GPU's totals stay.
	r.c.shared.SetGPUs([]GPURef{{Index: 0, PIDs: []uint32{100}}})
	s = r.step(t, time.Second)
	check(s, "process left", 1050, 355, 2)
	if len(s.Processes) != 1 || len(r.c.procs) != 1 {
		t.Fatalf("processes %+v", s.Processes)
	}
}

// A socket of a process that is on two GPUs (DataParallel) counts for both;
// a GPU without processes still reports, at zero.
func TestTCPProcessOnTwoGPUs(t *testing.T) {
	tree := newTCPProcTree(t)
	tree.socketFD(100, 3, 1)
	r := newTCPRig(t, tree.root, []GPURef{{Index: 0, PIDs: []uint32{100}}, {Index: 1, PIDs: []uint32{100}}, {Index: 2}}, 0)
	r.dump.set(tcpSock(1, 1, "10.0.0.5:1", "10.0.0.6:2", sockdiag.Established, 0, 0))
	r.step(t, 0)
	r.dump.set(tcpSock(1, 1, "10.0.0.5:1", "10.0.0.6:2", sockdiag.Established, 70, 80))
	s := r.step(t, time.Second)
	for _, i := range []int{0, 1} {
		if g := tcpGPU(t, s, i); g.Network.TransmitBytesTotal != 70 || g.Network.ReceiveBytesTotal != 80 {
			t.Errorf("GPU %d %+v", i, g)
		}
	}
	if g := tcpGPU(t, s, 2); g != (sample.TCPGPU{Index: 2}) {
		t.Errorf("idle GPU %+v", g)
	}
	if p := tcpProcess(t, s, 100); len(p.GPUs) != 2 || p.Network.TransmitBytesTotal != 70 {
		t.Errorf("process %+v", p)
	}
}

// Processes the dump cannot cover (another network namespace, a descriptor
// table that cannot be read) are reported, so that zero traffic is not read
// as none; vanished processes are skipped.
func TestTCPUnobservedProcesses(t *testing.T) {
	tree := newTCPProcTree(t)
	const hostNS = "net:[4026531840]"
	tree.link(100, "ns/net", hostNS)
	tree.socketFD(100, 3, 1)
	tree.link(300, "ns/net", "net:[4026532999]") // a pod without hostNetwork
	tree.socketFD(300, 3, 2)
	tree.link(500, "ns/net", hostNS)
	if err := os.WriteFile(filepath.Join(tree.root, "500", "fd"), nil, 0o644); err != nil { // no descriptor table to read
		t.Fatal(err)
	}
	r := newTCPRig(t, tree.root, []GPURef{{Index: 0, PIDs: []uint32{100, 300, 301, 500}}}, 0)
	r.c.ownNetNS = 4026531840
	r.dump.set(tcpSock(1, 1, "10.0.0.5:1", "10.0.0.6:2", sockdiag.Established, 1, 1))
	r.dump.set(tcpSock(2, 2, "10.0.0.5:3", "10.0.0.6:4", sockdiag.Established, 1, 1))
	s := r.step(t, 0)
	g := tcpGPU(t, s, 0)
	if g.ProcessesInOtherNetNS != 1 || g.ProcessesUnreadable != 1 || g.Network.Connections != 1 {
		t.Fatalf("GPU %+v", g)
	}
	if p := tcpProcess(t, s, 300); p.Observed || p.Unobserved != "network_namespace" || p.Sockets != 0 {
		t.Fatalf("process 300 %+v", p)
	}
	if p := tcpProcess(t, s, 500); p.Observed || p.Unobserved != "unreadable" {
		t.Fatalf("process 500 %+v", p)
	}
	if len(s.Processes) != 3 {
		t.Fatalf("vanished process 301 reported: %+v", s.Processes)
	}

	e := engine.New(engine.Options{Interval: testEngineInterval})
	e.Add(asEngine(r.c), 0)
	e.SampleOnce(context.Background())
	want := `
# HELP gpudiag_gpu_process_tcp_unobserved_processes GPU processes whose TCP sockets the daemon cannot see, so their traffic is missing above: reason=network_namespace (a network namespace other than the daemon's; run it with hostNetwork) or unreadable (/proc/<pid>/fd or ns/net not readable, as without root or CAP_SYS_PTRACE).
# TYPE gpudiag_gpu_process_tcp_unobserved_processes gauge
gpudiag_gpu_process_tcp_unobserved_processes{gpu="0",reason="network_namespace"} 1
gpudiag_gpu_process_tcp_unobserved_processes{gpu="0",reason="unreadable"} 1
`
	if err := testutil.GatherAndCompare(e, strings.NewReader(want), "gpudiag_gpu_process_tcp_unobserved_processes"); err != nil {
		t.Fatal(err)
	}
}

// A process with more descriptors than are read is never fully known, so no
// socket of it may count its whole history as new.
func TestTCPTruncatedDescriptorTable(t *testing.T) {
	tree := newTCPProcTree(t)
	for fd := range 6 {
		tree.socketFD(100, fd, uint32(fd+1))
	}
	r := newTCPRig(t, tree.root, []GPURef{{Index: 0, PIDs: []uint32{100}}}, 3)
	for step := range uint64(3) {
		for ino := range uint32(6) {
			r.dump.set(tcpSock(ino+1, uint64(ino+1), "10.0.0.5:1", "10.0.0.6:2", sockdiag.Established, 1e9+10*step, 1e9))
		}
		s := r.step(t, time.Second)
		p := tcpProcess(t, s, 100)
		if !p.DescriptorsTruncated || p.Sockets != 3 {
			t.Fatalf("step %d: %+v", step, p)
		}
		if tx := tcpGPU(t, s, 0).Network.TransmitBytesTotal; tx > 3*10*step {
			t.Fatalf("step %d: %d bytes: a socket counted its history", step, tx)
		}
	}
}

func TestTCPUnavailable(t *testing.T) {
	proc := filepath.Join(fixtureRoot, "proc")
	cfg := Config{ProcPath: proc, Logger: zap.NewNop()}
	for name, f := range map[string]*tcpFakeDump{
		"netlink refused":  {err: errors.New("sock_diag: opening a NETLINK_SOCK_DIAG socket: address family not supported by protocol")},
		"old kernel":       {stats: sockdiag.Stats{ShortInfo: 3}},
		"not linux (stub)": {err: errors.New("sock_diag: needs Linux, running on darwin")},
	} {
		if _, err := newTCPCollector(cfg, f, 0); !errors.Is(err, ErrUnavailable) {
			t.Errorf("%s: %v", name, err)
		}
	}
	if _, err := newTCPCollector(Config{ProcPath: filepath.Join(t.TempDir(), "none")}, &tcpFakeDump{}, 0); !errors.Is(err, ErrUnavailable) {
		t.Errorf("no /proc: %v", err)
	}
}

// A failed dump fails the cycle and changes nothing: the next good cycle
// counts from the last good reading.
func TestTCPDumpFailureKeepsState(t *testing.T) {
	tree := newTCPProcTree(t)
	tree.socketFD(100, 3, 1)
	r := newTCPRig(t, tree.root, []GPURef{{Index: 0, PIDs: []uint32{100}}}, 0)
	r.dump.set(tcpSock(1, 1, "10.0.0.5:1", "10.0.0.6:2", sockdiag.Established, 100, 0))
	r.step(t, 0)
	r.dump.err = errors.New("sock_diag: reading the dump: timed out")
	if _, err := r.c.Sample(context.Background()); err == nil {
		t.Fatal("no error")
	}
	r.dump.err = nil
	r.dump.set(tcpSock(1, 1, "10.0.0.5:1", "10.0.0.6:2", sockdiag.Established, 150, 0))
	if tx := tcpGPU(t, r.step(t, time.Second), 0).Network.TransmitBytesTotal; tx != 50 {
		t.Fatalf("tx %d; want 50", tx)
	}
}

func tcpFixtureEngine(t *testing.T) *engine.Engine {
	t.Helper()
	r := newTCPRig(t, filepath.Join(fixtureRoot, "proc"), fixtureTCPGPUs(), 0)
	e := engine.New(engine.Options{Interval: testEngineInterval})
	e.Add(asEngine(r.c), 0)
	for step := range uint64(2) {
		r.dump.sockets = fixtureTCPSockets(step)
		r.clock.t = r.clock.t.Add(time.Second)
		e.SampleOnce(context.Background())
	}
	return e
}

func TestTCPMetrics(t *testing.T) {
	e := tcpFixtureEngine(t)
	want := `
# HELP gpudiag_gpu_process_tcp_connections Established TCP connections held by the GPU's processes, by scope (loopback: stays on the host; network: the rest).
# TYPE gpudiag_gpu_process_tcp_connections gauge
gpudiag_gpu_process_tcp_connections{gpu="0",scope="loopback"} 1
gpudiag_gpu_process_tcp_connections{gpu="0",scope="network"} 1
gpudiag_gpu_process_tcp_connections{gpu="4",scope="loopback"} 1
gpudiag_gpu_process_tcp_connections{gpu="4",scope="network"} 1
# HELP gpudiag_gpu_process_tcp_transmit_bytes_total TCP payload sent by the GPU's processes, counted since the daemon first saw each process: acknowledged by the peer (tcpi_bytes_acked) when listed from sock_diag, passed to send calls when counted by the eBPF collector (see gpudiag_gpu_process_tcp_source_info). scope=loopback: traffic that stays on the host (loopback, or a connection to the host's own address); network: the rest. A collective that fell back to sockets shows here.
# TYPE gpudiag_gpu_process_tcp_transmit_bytes_total counter
gpudiag_gpu_process_tcp_transmit_bytes_total{gpu="0",scope="loopback"} 500
gpudiag_gpu_process_tcp_transmit_bytes_total{gpu="0",scope="network"} 4e+09
gpudiag_gpu_process_tcp_transmit_bytes_total{gpu="4",scope="loopback"} 1e+06
gpudiag_gpu_process_tcp_transmit_bytes_total{gpu="4",scope="network"} 7e+06
# HELP gpudiag_gpu_process_tcp_receive_bytes_total TCP payload received by the GPU's processes (tcpi_bytes_received, or returned by receive calls under eBPF), counted since the daemon first saw each process; scope as for transmit.
# TYPE gpudiag_gpu_process_tcp_receive_bytes_total counter
gpudiag_gpu_process_tcp_receive_bytes_total{gpu="0",scope="loopback"} 600
gpudiag_gpu_process_tcp_receive_bytes_total{gpu="0",scope="network"} 3e+09
gpudiag_gpu_process_tcp_receive_bytes_total{gpu="4",scope="loopback"} 2e+06
gpudiag_gpu_process_tcp_receive_bytes_total{gpu="4",scope="network"} 8e+06
# HELP gpudiag_gpu_process_tcp_source_info Where the GPU processes' TCP byte counts come from: source=ebpf (the eBPF collector's counts at each send and receive call, all network namespaces) or sock_diag (each socket's counters, listed every cycle, the daemon's network namespace only).
# TYPE gpudiag_gpu_process_tcp_source_info gauge
gpudiag_gpu_process_tcp_source_info{source="sock_diag"} 1
`
	if err := testutil.GatherAndCompare(e, strings.NewReader(want),
		"gpudiag_gpu_process_tcp_connections", "gpudiag_gpu_process_tcp_transmit_bytes_total", "gpudiag_gpu_process_tcp_receive_bytes_total",
		"gpudiag_gpu_process_tcp_source_info"); err != nil {
		t.Fatal(err)
	}
}

// promtool's linter must have nothing to say about the tcp metrics.
func TestTCPPromtool(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Skip("promtool not on PATH")
	}
	mfs, err := tcpFixtureEngine(t).Gather()
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	enc := expfmt.NewEncoder(&buf, expfmt.NewFormat(expfmt.TypeTextPlain))
	found := 0
	for _, mf := range mfs {
		if strings.HasPrefix(mf.GetName(), "gpudiag_gpu_process_tcp_") {
			found++
			if err := enc.Encode(mf); err != nil {
				t.Fatal(err)
			}
		}
	}
	if found != 5 {
		t.Fatalf("%d tcp metric families; want 5:\n%s", found, buf.String())
	}
	cmd := exec.Command(promtool, "check", "metrics")
	cmd.Stdin = &buf
	if out, err := cmd.CombinedOutput(); err != nil || len(out) > 0 {
		t.Fatalf("promtool check metrics: %v\n%s", err, out)
	}
}

// tcpLoopbackPair connects two sockets of this process over 127.0.0.1.
func tcpLoopbackPair(t *testing.T) (a, b *net.TCPConn) {
	t.Helper()
	ln, err := net.ListenTCP("tcp4", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan *net.TCPConn, 1)
	go func() {
		c, _ := ln.AcceptTCP()
		accepted <- c
	}()
	a, err = net.DialTCP("tcp4", nil, ln.Addr().(*net.TCPAddr))
	if err != nil {
		t.Fatal(err)
	}
	if b = <-accepted; b == nil {
		t.Fatal("accept failed")
	}
	return a, b
}

// tcpExchange moves size bytes each way, then pings back and forth so that
// the ACKs of the bulk data have arrived (tcpi_bytes_acked counts acked
// bytes only) when it returns.
func tcpExchange(t *testing.T, a, b *net.TCPConn, size int) {
	t.Helper()
	payload := bytes.Repeat([]byte{0xa5}, size)
	for _, dir := range [][2]*net.TCPConn{{a, b}, {b, a}} {
		errc := make(chan error, 1)
		go func() { _, err := dir[0].Write(payload); errc <- err }()
		if _, err := io.CopyN(io.Discard, dir[1], int64(size)); err != nil {
			t.Fatal(err)
		}
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
	}
	for _, dir := range [][2]*net.TCPConn{{a, b}, {b, a}, {a, b}} {
		if _, err := dir[0].Write([]byte{1}); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(dir[1], make([]byte, 1)); err != nil {
			t.Fatal(err)
		}
	}
}

// On this machine's kernel and /proc: this test process, registered as a GPU
// process, moves 10 MiB each way over loopback, and the collector sees it.
func TestTCPLive(t *testing.T) {
	if _, err := os.Stat("/proc/self/fd"); err != nil {
		t.Skip("no /proc")
	}
	const size = 10 << 20
	shared := &Shared{}
	shared.SetGPUs([]GPURef{{Index: 0, PIDs: []uint32{uint32(os.Getpid())}}})
	c, err := newTCPCollector(Config{ProcPath: "/proc", Shared: shared, Logger: zap.NewNop()}, kernelSockets{}, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	if c.ownNetNS == 0 {
		t.Error("own network namespace not read from /proc/self/ns/net")
	}
	a, b := tcpLoopbackPair(t)
	defer a.Close()
	defer b.Close()
	sampleNow := func() sample.TCPGPU {
		t.Helper()
		s, err := c.Sample(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		r := s
		if p := tcpProcess(t, r, uint32(os.Getpid())); !p.Observed {
			t.Fatalf("own process not observed: %+v", p)
		}
		return tcpGPU(t, r, 0)
	}
	before := sampleNow()
	if before.Loopback.Connections < 2 {
		t.Fatalf("the test's connection (2 sockets) not seen: %+v", before.Loopback)
	}
	tcpExchange(t, a, b, size)
	after := sampleNow()
	// Both ends are this process: each direction is sent once and received
	// once by it.
	if d := after.Loopback.TransmitBytesTotal - before.Loopback.TransmitBytesTotal; d < 2*size {
		t.Errorf("loopback transmit grew by %d; want at least %d", d, 2*size)
	}
	if d := after.Loopback.ReceiveBytesTotal - before.Loopback.ReceiveBytesTotal; d < 2*size {
		t.Errorf("loopback receive grew by %d; want at least %d", d, 2*size)
	}
	if d := after.Network.TransmitBytesTotal - before.Network.TransmitBytesTotal; d >= size {
		t.Errorf("loopback traffic counted as network: +%d", d)
	}
	a.Close()
	b.Close()
	closed := sampleNow()
	if closed.Loopback.TransmitBytesTotal < after.Loopback.TransmitBytesTotal ||
		closed.Loopback.ReceiveBytesTotal < after.Loopback.ReceiveBytesTotal {
		t.Errorf("counters went back when the connection closed: %+v after %+v", closed.Loopback, after.Loopback)
	}
	if closed.Loopback.Connections != before.Loopback.Connections-2 {
		t.Errorf("connections %d after closing; want %d", closed.Loopback.Connections, before.Loopback.Connections-2)
	}
}

// While the eBPF collector publishes fresh counts, the bytes come from them
// and the sockets are listed only for the connection counts; when the counts
// go stale the socket listing takes over again. Each switch starts from a
// baseline, so no byte counts twice and the counters never go back.
func TestTCPTakesBytesFromEBPF(t *testing.T) {
	tree := newTCPProcTree(t)
	tree.socketFD(100, 3, 1)
	r := newTCPRig(t, tree.root, []GPURef{{Index: 0, PIDs: []uint32{100}}}, 0)
	const local, remote = "10.0.0.5:7000", "10.0.0.6:8000"
	r.dump.set(tcpSock(1, 11, local, remote, sockdiag.Established, 1000, 0))
	r.step(t, 0) // the process is new: a baseline
	r.dump.set(tcpSock(1, 11, local, remote, sockdiag.Established, 1500, 0))
	s := r.step(t, time.Second)
	if g := tcpGPU(t, s, 0); s.Source != sample.TCPSourceSockDiag || g.Network.TransmitBytesTotal != 500 {
		t.Fatalf("socket listing: source %q, network tx %d; want sock_diag, 500", s.Source, g.Network.TransmitBytesTotal)
	}

	publish := func(gpuSent, procSent uint64) {
		r.c.shared.SetKernelTCP(&KernelTCP{At: r.clock.t.Add(time.Second),
			GPUs:      map[int][tcpScopes]TCPBytes{0: {tcpNetwork: {Sent: gpuSent}}},
			Processes: map[uint32][tcpScopes]TCPBytes{100: {tcpNetwork: {Sent: procSent}}}})
	}
	publish(1e6, 1e6)
	s = r.step(t, time.Second)
	g := tcpGPU(t, s, 0)
	if s.Source != sample.TCPSourceEBPF || g.Network.TransmitBytesTotal != 500 || g.Network.Connections != 1 {
		t.Fatalf("first eBPF cycle: source %q, network %+v; want ebpf, still 500 (a baseline), 1 connection", s.Source, g.Network)
	}
	calls := r.dump.calls
	r.dump.set(tcpSock(1, 11, local, remote, sockdiag.Established, 9e9, 0)) // must not count now
	publish(1e6+3000, 1e6+3000)
	s = r.step(t, time.Second)
	g = tcpGPU(t, s, 0)
	if g.Network.TransmitBytesTotal != 3500 || g.Network.TransmitBytesPerSecond != 3000 || g.Network.Connections != 1 {
		t.Errorf("eBPF cycle: network %+v; want 3500 total at 3000 B/s, 1 connection", g.Network)
	}
	if p := tcpProcess(t, s, 100); p.Network.TransmitBytesTotal != 3500 || !p.Observed {
		t.Errorf("process 100: %+v; want 3500 bytes sent (500 listed, 3000 counted by eBPF), observed", p)
	}
	if r.dump.calls != calls {
		t.Errorf("sockets dumped %d times on a cycle whose bytes come from eBPF", r.dump.calls-calls)
	}
	for range tcpKernelListEvery - 1 {
		publish(1e6+3000, 1e6+3000)
		r.step(t, time.Second)
	}
	if r.dump.calls != calls+1 {
		t.Errorf("sockets dumped %d times in %d eBPF cycles; want once, for the connections", r.dump.calls-calls, tcpKernelListEvery)
	}

	// The ebpf collector stopped: its last reading goes stale.
	r.step(t, 10*time.Second)
	r.dump.set(tcpSock(1, 11, local, remote, sockdiag.Established, 9e9+100, 0))
	s = r.step(t, time.Second)
	if g := tcpGPU(t, s, 0); s.Source != sample.TCPSourceSockDiag || g.Network.TransmitBytesTotal != 3600 {
		t.Errorf("back on the socket listing: source %q, network tx %d; want sock_diag, 3600 (a baseline, then +100)", s.Source, g.Network.TransmitBytesTotal)
	}
}

// Descriptor links are read once and kept: a socket closed and its number
// reused within one cycle is read again once the dump no longer lists the
// old socket, and a file's number reused by a socket at the next full read
// (tcpDescriptorRefresh); both count all their bytes, from their opening.
func TestTCPDescriptorReuse(t *testing.T) {
	tree := newTCPProcTree(t)
	tree.socketFD(100, 3, 1)
	tree.link(100, "fd/4", "/dev/nvidia0")
	r := newTCPRig(t, tree.root, []GPURef{{Index: 0, PIDs: []uint32{100}}}, 0)
	net1, net2 := "10.0.0.5:7000", "10.0.0.6:8000"
	r.dump.set(tcpSock(1, 11, net1, net2, sockdiag.Established, 1000, 500))
	tx := func(step string, want uint64) {
		t.Helper()
		s := r.step(t, time.Second)
		if g := tcpGPU(t, s, 0); g.Network.TransmitBytesTotal != want {
			t.Fatalf("%s: transmitted %d; want %d", step, g.Network.TransmitBytesTotal, want)
		}
	}
	tx("baseline", 0)

	// fd 3 closes and is reused by socket 2 before the next cycle.
	tree.closeFD(100, 3)
	tree.socketFD(100, 3, 2)
	r.dump.remove(1)
	r.dump.set(tcpSock(2, 12, net1, net2, sockdiag.Established, 70, 0))
	tx("old socket gone from the dump", 0)
	tx("fd 3 read again", 70)

	// fd 4, a device file, is reused by socket 3: found at the full read.
	tree.closeFD(100, 4)
	tree.socketFD(100, 4, 3)
	r.dump.set(tcpSock(3, 13, net1, net2, sockdiag.Established, 5, 0))
	tx("within the refresh", 70)
	r.clock.t = r.clock.t.Add(tcpDescriptorRefresh)
	tx("at the full read", 75)
}

// Once the kernel has given every socket the GPU processes hold, the next
// cycle looks each up instead of dumping the namespace; a socket not given
// before (new) makes the cycle a dump, as does one the lookup no longer
// finds (reconnected), and no byte is lost.
func TestTCPLooksUpKnownSockets(t *testing.T) {
	tree := newTCPProcTree(t)
	tree.socketFD(100, 3, 1)
	r := newTCPRig(t, tree.root, []GPURef{{Index: 0, PIDs: []uint32{100}}}, 0)
	a, b := "10.0.0.5:7000", "10.0.0.6:8000"
	r.dump.set(tcpSock(1, 11, a, b, sockdiag.Established, 1000, 0))
	r.dump.set(tcpSock(9, 90, a, "10.0.0.7:9000", sockdiag.Established, 5e9, 0)) // another process's
	id := func(inode uint32) sockdiag.SocketID {
		for _, s := range r.dump.sockets {
			if s.Inode == inode {
				return s.ID()
			}
		}
		t.Fatalf("no socket %d", inode)
		return sockdiag.SocketID{}
	}
	cycle := func(step string, wantLookup []sockdiag.SocketID, wantTx uint64) {
		t.Helper()
		s := r.step(t, time.Second)
		if got := r.dump.lookups[len(r.dump.lookups)-1]; !reflect.DeepEqual(got, wantLookup) {
			t.Fatalf("%s: looked up %v; want %v (nil: a dump)", step, got, wantLookup)
		}
		if s.LookedUp != (wantLookup != nil) {
			t.Fatalf("%s: sample says looked up %v", step, s.LookedUp)
		}
		if tx := tcpGPU(t, s, 0).Network.TransmitBytesTotal; tx != wantTx {
			t.Fatalf("%s: transmitted %d; want %d", step, tx, wantTx)
		}
	}
	cycle("first: a dump", nil, 0)
	r.dump.set(tcpSock(1, 11, a, b, sockdiag.Established, 1100, 0))
	cycle("second: socket 1 looked up", []sockdiag.SocketID{id(1)}, 100)

	tree.socketFD(100, 4, 2) // a new connection
	r.dump.set(tcpSock(2, 12, "10.0.0.5:7001", b, sockdiag.Established, 50, 0))
	cycle("a new socket: a dump", nil, 150)
	r.dump.set(tcpSock(2, 12, "10.0.0.5:7001", b, sockdiag.Established, 60, 0))
	cycle("both looked up", []sockdiag.SocketID{id(1), id(2)}, 160)

	// Socket 2 is reconnected elsewhere (same inode, other ends): the
	// lookup misses it, its bytes wait for the dump that follows.
	old2 := id(2)
	r.dump.set(tcpSock(2, 12, "10.0.0.5:7001", "10.0.0.8:8001", sockdiag.Established, 80, 0))
	cycle("ends changed: looked up, missed", []sockdiag.SocketID{id(1), old2}, 160)
	cycle("then a dump", nil, 180)
}

// A process's network namespace is read at its first cycle and again at
// each full read of the descriptor tables, not every cycle.
func TestTCPNetNamespaceReadAtFullReads(t *testing.T) {
	tree := newTCPProcTree(t)
	const hostNS, podNS = "net:[4026531840]", "net:[4026532999]"
	tree.link(300, "ns/net", podNS)
	tree.socketFD(300, 3, 2)
	r := newTCPRig(t, tree.root, []GPURef{{Index: 0, PIDs: []uint32{300}}}, 0)
	r.c.ownNetNS = 4026531840
	r.dump.set(tcpSock(2, 2, "10.0.0.5:3", "10.0.0.6:4", sockdiag.Established, 1, 1))
	if p := tcpProcess(t, r.step(t, 0), 300); p.Unobserved != "network_namespace" {
		t.Fatalf("first cycle: %+v", p)
	}
	tree.link(300, "ns/net", hostNS) // moved (setns) into the daemon's
	if p := tcpProcess(t, r.step(t, time.Second), 300); p.Unobserved != "network_namespace" {
		t.Errorf("a cycle between full reads read the namespace again: %+v", p)
	}
	if p := tcpProcess(t, r.step(t, tcpDescriptorRefresh), 300); !p.Observed || p.Sockets != 1 {
		t.Errorf("at the full read: %+v", p)
	}
	if err := r.c.Close(); err != nil || len(r.c.tables) != 0 {
		t.Errorf("close: %v, tables %v", err, r.c.tables)
	}
}

// A GPU process's Unix sockets (every NCCL rank holds some) are never in a
// TCP dump: after two whole dumps lack them they are no longer asked for,
// and the cycles look up the TCP sockets alone instead of dumping the
// namespace each second. A full read (tcpDescriptorRefresh) asks again.
func TestTCPUnixSocketsDoNotForceDumps(t *testing.T) {
	tree := newTCPProcTree(t)
	tree.socketFD(100, 3, 1)  // TCP
	tree.socketFD(100, 4, 50) // Unix: the dump never gives it
	tree.socketFD(100, 5, 51) // Unix
	r := newTCPRig(t, tree.root, []GPURef{{Index: 0, PIDs: []uint32{100}}}, 0)
	a, b := "10.0.0.5:7000", "10.0.0.6:8000"
	dumps := 0
	var tx uint64
	for i := range 12 {
		r.dump.set(tcpSock(1, 11, a, b, sockdiag.Established, uint64(1000+100*i), 0))
		s := r.step(t, time.Second)
		if r.dump.lookups[len(r.dump.lookups)-1] == nil {
			dumps++
		}
		tx = tcpGPU(t, s, 0).Network.TransmitBytesTotal
	}
	// Two dumps to learn the Unix sockets, two again after the full read
	// at 10 s; each second before this change was a dump.
	if dumps > 4 {
		t.Fatalf("%d dumps in 12 cycles; want at most 4", dumps)
	}
	if tx != 1100 {
		t.Fatalf("transmitted %d; want 1100 (100 a cycle after the baseline)", tx)
	}
	// A new TCP socket is still found at once.
	tree.socketFD(100, 6, 2)
	r.dump.set(tcpSock(2, 12, "10.0.0.5:7001", b, sockdiag.Established, 70, 0))
	if s := r.step(t, time.Second); tcpProcess(t, s, 100).Sockets != 2 {
		t.Fatalf("new TCP socket not found: %+v", tcpProcess(t, s, 100))
	}
}
