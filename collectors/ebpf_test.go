package collectors

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"golang.org/x/sys/unix"

	"github.com/gpudiag/gpudiag/bpf"
	"github.com/gpudiag/gpudiag/bpf/bpftest"
	"github.com/gpudiag/gpudiag/sample"
)

// newLiveEBPF loads the programs and publishes the test process as GPU 3's
// only process.
func newLiveEBPF(t *testing.T) (*ebpfCollector, *Shared) {
	t.Helper()
	bpftest.Require(t)
	shared := &Shared{}
	shared.SetGPUs([]GPURef{{Index: 3, PCIBusID: "0000:5d:00.0", PIDs: []uint32{uint32(os.Getpid())}}})
	c, err := newEBPFCollector(Config{ProcPath: "/proc", SysPath: "/sys", Shared: shared}, ebpfOptions{blockIO: true, tcp: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Error(err)
		}
	})
	return c, shared
}

func sampleEBPF(t *testing.T, c *ebpfCollector) *sample.EBPF { return sampleAs[sample.EBPF](t, c) }

func findDisk(s *sample.EBPF, device, op string) sample.DiskLatency {
	for _, d := range s.Disks {
		if d.Device == device && d.Op == op {
			return d
		}
	}
	return sample.DiskLatency{}
}

func findBlockIO(entries []sample.EBPFBlockIO, device, op string) sample.EBPFBlockIO {
	for _, b := range entries {
		if b.Device == device && b.Op == op {
			return b
		}
	}
	return sample.EBPFBlockIO{}
}

func findGPU(s *sample.EBPF, index int) sample.EBPFGPU {
	for _, g := range s.GPUs {
		if g.Index == index {
			return g
		}
	}
	return sample.EBPFGPU{}
}

func findProcess(s *sample.EBPF, pid int) (sample.EBPFProcess, bool) {
	for _, p := range s.Processes {
		if p.PID == uint32(pid) {
			return p, true
		}
	}
	return sample.EBPFProcess{}, false
}

// Direct reads and writes of the test process show in its disk's histograms
// and are charged to its GPU, in bytes, requests and wait.
func TestEBPFBlockIOLive(t *testing.T) {
	c, _ := newLiveEBPF(t)
	if !c.blockState.Loaded {
		t.Fatalf("block I/O programs not loaded: %s", c.blockState.Error)
	}
	dir, backing := bpftest.DiskDir(t)
	disk := backing.Name
	before := sampleEBPF(t, c)
	const size = 4 << 20
	bpftest.DirectIO(t, dir, size, 0)
	after := sampleEBPF(t, c)
	t.Logf("disk %s, owner hook %s", disk, after.BlockIO.Hook)

	for _, op := range []string{"read", "write"} {
		b, a := findDisk(before, disk, op), findDisk(after, disk, op)
		if a.Count <= b.Count || a.SumSeconds <= b.SumSeconds {
			t.Errorf("%s %s: histogram count %d → %d, sum %v → %v: the direct I/O was not timed", disk, op, b.Count, a.Count, b.SumSeconds, a.SumSeconds)
		}
		var total uint64
		for _, n := range a.Buckets {
			total += n
		}
		if total != a.Count || len(a.Buckets) != bpf.LatencySlots {
			t.Errorf("%s %s: %d buckets summing to %d, count %d", disk, op, len(a.Buckets), total, a.Count)
		}
		// The histogram is the whole disk's: the host's other requests share
		// it, so no relation between its p99 and its mean can be counted on
		// (a few slow requests of another process put the mean above p99).
		if a.RequestsPerSecond <= 0 || a.MeanSeconds <= 0 || a.P99Seconds <= 0 {
			t.Errorf("%s %s: interval rates %+v", disk, op, a)
		}

		gb, ga := findBlockIO(findGPU(before, 3).BlockIO, disk, op), findBlockIO(findGPU(after, 3).BlockIO, disk, op)
		if got := ga.BytesTotal - gb.BytesTotal; got < size {
			t.Errorf("GPU 3 %s %s: %d bytes charged, want at least the %d moved", disk, op, got, size)
		}
		if ga.RequestsTotal <= gb.RequestsTotal || ga.WaitSecondsTotal <= gb.WaitSecondsTotal || ga.BytesPerSecond <= 0 {
			t.Errorf("GPU 3 %s %s: %+v → %+v", disk, op, gb, ga)
		}
		p, ok := findProcess(after, os.Getpid())
		if !ok || p.Root != uint32(os.Getpid()) || len(p.GPUs) != 1 || p.GPUs[0] != 3 {
			t.Fatalf("test process not listed as GPU 3's: %+v", after.Processes)
		}
		if pb := findBlockIO(p.BlockIO, disk, op); pb.BytesTotal < size {
			t.Errorf("process %s %s: %+v", disk, op, pb)
		}
	}

	// The histogram reaches Prometheus with the sample's numbers.
	read := findDisk(after, disk, "read")
	h := gatherHistogram(t, c, after, disk, "read")
	if h.GetSampleCount() != read.Count || h.GetSampleSum() != read.SumSeconds || len(h.GetBucket()) != bpf.LatencySlots-1 {
		t.Errorf("exported histogram %v, sample %+v", h, read)
	}
}

func gatherHistogram(t *testing.T, c *ebpfCollector, s *sample.EBPF, device, op string) *dto.Histogram {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(sampledMetrics{asEngine(c), s})
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "gpudiag_disk_io_latency_seconds" {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["device"] == device && labels["op"] == op {
				return m.GetHistogram()
			}
		}
	}
	t.Fatalf("no histogram for %s %s", device, op)
	return nil
}

// A child forked after its parent became a GPU process is followed by the
// kernel from its first request; one that ran before is found in /proc. Both
// are charged to the parent's GPU.
func TestEBPFDescendantsLive(t *testing.T) {
	bpftest.Require(t)
	dir, backing := bpftest.DiskDir(t)
	disk := backing.Name
	path := bpftest.DirectIO(t, dir, 2<<20, 0)

	// Started before the collector knows the test process.
	sleeper := exec.Command("sleep", "60")
	if err := sleeper.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sleeper.Process.Kill(); sleeper.Wait() })

	c, _ := newLiveEBPF(t)
	before := sampleEBPF(t, c)
	self := uint32(os.Getpid())
	if root, ok := c.prevTracked[uint32(sleeper.Process.Pid)]; !ok || root != self {
		t.Errorf("child started earlier not followed from /proc: tracked %v", c.prevTracked)
	}

	dd := exec.Command("dd", "if="+path, "of=/dev/null", "bs=1M", "iflag=direct")
	if out, err := dd.CombinedOutput(); err != nil {
		t.Fatalf("dd: %v\n%s", err, out)
	}
	after := sampleEBPF(t, c)
	p, ok := findProcess(after, dd.Process.Pid)
	if !ok {
		t.Fatalf("dd (PID %d) has no counts: %+v", dd.Process.Pid, after.Processes)
	}
	if p.Root != self || len(p.GPUs) != 1 || p.GPUs[0] != 3 {
		t.Errorf("dd charged to root %d, GPUs %v; want %d, [3]", p.Root, p.GPUs, self)
	}
	// dd may also read its own binary and libraries if not cached.
	if got := findBlockIO(p.BlockIO, disk, "read").BytesTotal; got < 2<<20 {
		t.Errorf("dd read %d bytes from %s, want at least %d", got, disk, 2<<20)
	}
	gb, ga := findBlockIO(findGPU(before, 3).BlockIO, disk, "read"), findBlockIO(findGPU(after, 3).BlockIO, disk, "read")
	if ga.BytesTotal-gb.BytesTotal < 2<<20 {
		t.Errorf("GPU 3 read %d bytes over dd's run, want at least %d", ga.BytesTotal-gb.BytesTotal, 2<<20)
	}

	// dd exited: its entries are read once more, then removed; its bytes
	// stay in the GPU's counter.
	sampleEBPF(t, c)
	last := sampleEBPF(t, c)
	if _, ok := findProcess(last, dd.Process.Pid); ok {
		t.Errorf("dd's entries outlived it by two cycles")
	}
	if got := findBlockIO(findGPU(last, 3).BlockIO, disk, "read").BytesTotal; got < ga.BytesTotal {
		t.Errorf("GPU 3's read counter fell from %d to %d when dd's entry went", ga.BytesTotal, got)
	}
}

// Loopback traffic between two sockets of the test process is charged to it
// exactly, both ways.
func TestEBPFTCPLive(t *testing.T) {
	c, shared := newLiveEBPF(t)
	if !c.tcpState.Loaded {
		t.Fatalf("TCP programs not loaded: %s", c.tcpState.Error)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	before := sampleEBPF(t, c)

	const size = 3<<20 + 17
	received := make(chan error, 1)
	go func() {
		conn, err := ln.Accept()
		if err != nil {
			received <- err
			return
		}
		defer conn.Close()
		n, err := io.Copy(io.Discard, conn)
		if err == nil && n != size {
			err = fmt.Errorf("received %d bytes, want %d", n, size)
		}
		received <- err
	}()
	conn, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Write(make([]byte, size)); err != nil {
		t.Fatal(err)
	}
	conn.Close()
	if err := <-received; err != nil {
		t.Fatal(err)
	}
	after := sampleEBPF(t, c)
	t.Logf("TCP hook %s", after.TCP.Hook)

	pb, _ := findProcess(before, os.Getpid())
	pa, ok := findProcess(after, os.Getpid())
	if !ok {
		t.Fatalf("test process has no counts: %+v", after.Processes)
	}
	if sent := pa.Loopback.SentBytesTotal - pb.Loopback.SentBytesTotal; sent != size {
		t.Errorf("loopback sent %d bytes, want %d", sent, size)
	}
	if got := pa.Loopback.ReceivedBytesTotal - pb.Loopback.ReceivedBytesTotal; got != size {
		t.Errorf("loopback received %d bytes, want %d", got, size)
	}
	if pa.Network != pb.Network {
		t.Errorf("loopback traffic counted as network: %+v → %+v", pb.Network, pa.Network)
	}
	gb, ga := findGPU(before, 3).Loopback, findGPU(after, 3).Loopback
	if ga.SentBytesTotal-gb.SentBytesTotal != size || ga.ReceivedBytesTotal-gb.ReceivedBytesTotal != size || ga.SentBytesPerSecond <= 0 {
		t.Errorf("GPU 3 loopback %+v → %+v, want %d more each way", gb, ga, size)
	}
	if got := tcpDuring(t, c, shared, 1<<20+5).Loopback; got.TransmitBytesTotal != 1<<20+5 || got.ReceiveBytesTotal != 1<<20+5 {
		t.Errorf("tcp collector on eBPF counts: GPU 3 loopback %+v; want %d each way", got, 1<<20+5)
	}
}

// tcpDuring runs the tcp collector beside the ebpf collector while the test
// process sends size bytes to itself over loopback, and returns what the
// tcp collector adds to GPU 3.
func tcpDuring(t *testing.T, c *ebpfCollector, shared *Shared, size int) sample.TCPGPU {
	t.Helper()
	tc, err := newTCPCollector(Config{ProcPath: "/proc", Shared: shared}, kernelSockets{}, 1<<16)
	if err != nil {
		t.Fatal(err)
	}
	sampleTCP := func() *sample.TCP {
		sampleEBPF(t, c)
		s, err := tc.Sample(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		r := s
		if r.Source != sample.TCPSourceEBPF {
			t.Fatalf("tcp collector source %q beside the loaded eBPF programs", r.Source)
		}
		return r
	}
	sampleTCP() // a baseline
	before := sampleTCP()
	loopbackTransfer(t, size)
	after := sampleTCP()
	var g0, g1 sample.TCPGPU
	for _, g := range before.GPUs {
		if g.Index == 3 {
			g0 = g
		}
	}
	for _, g := range after.GPUs {
		if g.Index == 3 {
			g1 = g
		}
	}
	g1.Loopback.TransmitBytesTotal -= g0.Loopback.TransmitBytesTotal
	g1.Loopback.ReceiveBytesTotal -= g0.Loopback.ReceiveBytesTotal
	return g1
}

// loopbackTransfer sends size bytes from the test process to itself.
func loopbackTransfer(t *testing.T, size int) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	done := make(chan error, 1)
	go func() {
		conn, err := ln.Accept()
		if err != nil {
			done <- err
			return
		}
		defer conn.Close()
		_, err = io.Copy(io.Discard, conn)
		done <- err
	}()
	conn, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Write(make([]byte, size)); err != nil {
		t.Fatal(err)
	}
	conn.Close()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// A process that leaves its GPU stops being followed, with its descendants.
func TestEBPFUntracksProcessesOffGPU(t *testing.T) {
	c, shared := newLiveEBPF(t)
	sleeper := exec.Command("sleep", "60")
	if err := sleeper.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sleeper.Process.Kill(); sleeper.Wait() })
	if s := sampleEBPF(t, c); s.TrackedProcesses < 2 {
		t.Fatalf("tracking %d processes, want the test process and its child", s.TrackedProcesses)
	}
	shared.SetGPUs([]GPURef{{Index: 3, PCIBusID: "0000:5d:00.0"}})
	if s := sampleEBPF(t, c); s.TrackedProcesses != 0 {
		t.Errorf("still tracking %d processes after the GPU's process list emptied", s.TrackedProcesses)
	}
	procs, err := c.tracker.Processes()
	if err != nil || len(procs) != 0 {
		t.Errorf("kernel table holds %v (%v)", procs, err)
	}
}

// Close detaches every program: none of those it loaded stays loaded. The
// programs are told by the IDs the kernel gave the collector's own, not by
// name: another process on the host (a daemon, another test run) may load
// the same programs at the same time and keep them.
func TestEBPFCloseDetaches(t *testing.T) {
	bpftest.Require(t)
	c, err := newEBPFCollector(Config{ProcPath: "/proc", SysPath: "/sys", Shared: &Shared{}}, ebpfOptions{blockIO: true, tcp: true})
	if err != nil {
		t.Fatal(err)
	}
	if c.block == nil || c.tcp == nil {
		t.Fatalf("programs not loaded: block I/O %q, TCP %q", c.blockState.Error, c.tcpState.Error)
	}
	var mine []ebpf.ProgramID
	for _, src := range []interface {
		ProgramIDs() ([]ebpf.ProgramID, error)
	}{c.tracker, c.block, c.tcp} {
		ids, err := src.ProgramIDs()
		if err != nil {
			t.Fatal(err)
		}
		mine = append(mine, ids...)
	}
	// Tracking (2), block I/O (2 to 4), TCP (2).
	if len(mine) < 6 {
		t.Fatalf("the collector loaded %d programs, want at least 6", len(mine))
	}
	loaded := func(id ebpf.ProgramID) bool {
		p, err := ebpf.NewProgramFromID(id)
		if err != nil {
			return false // freed (an ID is not reused until the counter wraps)
		}
		p.Close()
		return true
	}
	for _, id := range mine {
		if !loaded(id) {
			t.Fatalf("program %d not found while the collector holds it: the check below would prove nothing", id)
		}
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	// The kernel frees a detached program after an RCU grace period, which a
	// loaded machine stretches: the deadline only stops a program that stays.
	const patience = time.Minute
	deadline := time.Now().Add(patience)
	for {
		var left []ebpf.ProgramID
		for _, id := range mine {
			if loaded(id) {
				left = append(left, id)
			}
		}
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("programs %v still loaded %v after Close", left, patience)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestEBPFBothFeaturesOffIsUnavailable(t *testing.T) {
	_, err := newEBPFCollector(Config{ProcPath: "/proc", SysPath: "/sys"}, ebpfOptions{})
	if !errors.Is(err, ErrUnavailable) {
		t.Fatalf("got %v, want ErrUnavailable", err)
	}
}

func TestDiskLatencyReading(t *testing.T) {
	var prev, cur bpf.DiskLatency
	cur.Op = bpf.OpRead
	prev.Slots[5], prev.SumNs = 10, 200_000 // 10 requests of 16–32 µs
	cur.Slots = prev.Slots
	cur.Slots[5] += 90  // 90 more of 16–32 µs
	cur.Slots[12] += 10 // 10 of 2.048–4.096 ms
	cur.SumNs = prev.SumNs + 90*20_000 + 10*3_000_000
	r := diskLatencyReading("nvme0n1", cur, prev, 2)
	want := sample.DiskLatency{Device: "nvme0n1", Op: "read", Count: 110, SumSeconds: 0.0320, RequestsPerSecond: 50,
		MeanSeconds: (90*20e-6 + 10*3e-3) / 100, P99Seconds: 4.096e-3}
	r.Buckets = nil
	if !approxEqualDisk(r, want) {
		t.Errorf("got %+v\nwant %+v", r, want)
	}

	// 99 % of the interval in the lowest bucket: p99 is its bound.
	cur = prev
	cur.Slots[0] += 99
	cur.Slots[27]++
	cur.SumNs += 99*500 + 100e9
	if r := diskLatencyReading("vda", cur, prev, 1); r.P99Seconds != 1e-6 {
		t.Errorf("p99 %v, want 1µs", r.P99Seconds)
	}
	// Beyond the last bound: its lower bound, never +Inf (JSON has none).
	cur = prev
	cur.Slots[27] += 5
	if r := diskLatencyReading("vda", cur, prev, 1); r.P99Seconds != sample.DiskLatencyBucketBound(26) {
		t.Errorf("p99 %v, want %v", r.P99Seconds, sample.DiskLatencyBucketBound(26))
	}
	// First reading, or nothing new: no rates.
	if r := diskLatencyReading("vda", cur, bpf.DiskLatency{}, 0); r.RequestsPerSecond != 0 || r.Count != 15 {
		t.Errorf("first reading %+v", r)
	}
	if r := diskLatencyReading("vda", cur, cur, 1); r.RequestsPerSecond != 0 || r.P99Seconds != 0 {
		t.Errorf("idle interval %+v", r)
	}
}

func approxEqualDisk(a, b sample.DiskLatency) bool {
	near := func(x, y float64) bool { return x == y || (x-y < 1e-12 && y-x < 1e-12) }
	return a.Device == b.Device && a.Op == b.Op && a.Count == b.Count && near(a.SumSeconds, b.SumSeconds) &&
		near(a.RequestsPerSecond, b.RequestsPerSecond) && near(a.MeanSeconds, b.MeanSeconds) && near(a.P99Seconds, b.P99Seconds)
}

func TestCounterDeltaAfterRecreatedEntry(t *testing.T) {
	for _, c := range []struct{ prev, cur, want uint64 }{{10, 25, 15}, {0, 7, 7}, {100, 30, 30}, {5, 5, 0}} {
		if got := counterDelta(c.prev, c.cur); got != c.want {
			t.Errorf("counterDelta(%d, %d) = %d, want %d", c.prev, c.cur, got, c.want)
		}
	}
}

// ebpfSampleFixture is a reading with every metric family present.
func ebpfSampleFixture() *sample.EBPF {
	buckets := make([]uint64, bpf.LatencySlots)
	buckets[4], buckets[5], buckets[13] = 3, 5, 2
	return &sample.EBPF{
		IntervalSeconds:  1,
		BlockIO:          sample.EBPFFeature{Loaded: true, Hook: "block_io_start"},
		TCP:              sample.EBPFFeature{Error: "disabled by --no-collector.ebpf.tcp"},
		TrackedProcesses: 3,
		Lost:             sample.EBPFLost{RequestsUnmatched: 2, ProgramRunsSkipped: 1},
		Disks: []sample.DiskLatency{{Device: "nvme0n1", Op: "read", Buckets: buckets, Count: 10, SumSeconds: 0.01,
			RequestsPerSecond: 10, MeanSeconds: 0.001, P99Seconds: 0.008192}},
		GPUs: []sample.EBPFGPU{
			{Index: 0, BlockIO: []sample.EBPFBlockIO{{Device: "nvme0n1", Op: "read", BytesTotal: 1 << 20, RequestsTotal: 8, WaitSecondsTotal: 0.004}}},
			{Index: 4},
		},
		Processes: []sample.EBPFProcess{{PID: 4242, Root: 4242, GPUs: []int{0},
			BlockIO: []sample.EBPFBlockIO{{Device: "nvme0n1", Op: "read", BytesTotal: 1 << 20, RequestsTotal: 8, WaitSecondsTotal: 0.004}}}},
	}
}

func TestEBPFMetrics(t *testing.T) {
	c := &ebpfCollector{}
	s := ebpfSampleFixture()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(sampledMetrics{asEngine(c), s})
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, l.GetName()+"="+l.GetValue())
			}
			key := mf.GetName() + "{" + strings.Join(labels, ",") + "}"
			switch {
			case m.GetHistogram() != nil:
				h := m.GetHistogram()
				var b []string
				for _, bk := range h.GetBucket() {
					if bk.GetCumulativeCount() > 0 && len(b) < 4 {
						b = append(b, strconv.FormatFloat(bk.GetUpperBound(), 'g', -1, 64)+":"+strconv.FormatUint(bk.GetCumulativeCount(), 10))
					}
				}
				got[key] = fmt.Sprintf("count=%d sum=%g buckets=%d %s", h.GetSampleCount(), h.GetSampleSum(), len(h.GetBucket()), strings.Join(b, " "))
			case m.GetCounter() != nil:
				got[key] = strconv.FormatFloat(m.GetCounter().GetValue(), 'g', -1, 64)
			default:
				got[key] = strconv.FormatFloat(m.GetGauge().GetValue(), 'g', -1, 64)
			}
		}
	}
	want := map[string]string{
		"gpudiag_disk_io_latency_seconds{device=nvme0n1,op=read}":                       "count=10 sum=0.01 buckets=27 1.6e-05:3 3.2e-05:8 6.4e-05:8 0.000128:8",
		"gpudiag_gpu_process_block_io_bytes_total{device=nvme0n1,gpu=0,op=read}":        "1.048576e+06",
		"gpudiag_gpu_process_block_io_requests_total{device=nvme0n1,gpu=0,op=read}":     "8",
		"gpudiag_gpu_process_block_io_wait_seconds_total{device=nvme0n1,gpu=0,op=read}": "0.004",
		"gpudiag_ebpf_tracked_processes{}":                                              "3",
		"gpudiag_ebpf_feature_loaded{feature=block_io,hook=block_io_start}":             "1",
		"gpudiag_ebpf_feature_loaded{feature=tcp,hook=}":                                "0",
		"gpudiag_ebpf_lost_events_total{reason=processes_untracked}":                    "0",
		"gpudiag_ebpf_lost_events_total{reason=requests_unmatched}":                     "2",
		"gpudiag_ebpf_lost_events_total{reason=request_table_full}":                     "0",
		"gpudiag_ebpf_lost_events_total{reason=disk_table_full}":                        "0",
		"gpudiag_ebpf_lost_events_total{reason=process_io_table_full}":                  "0",
		"gpudiag_ebpf_lost_events_total{reason=tcp_table_full}":                         "0",
		"gpudiag_ebpf_lost_events_total{reason=program_runs_skipped}":                   "1",
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %q, want %q", k, got[k], v)
		}
	}
	if len(got) != len(want) {
		t.Errorf("%d series, want %d: %v", len(got), len(want), got)
	}
	// The 2 requests of 4–8 ms land in the 8.192 ms bucket and above.
	for _, mf := range mfs {
		if mf.GetName() == "gpudiag_disk_io_latency_seconds" {
			for _, b := range mf.GetMetric()[0].GetHistogram().GetBucket() {
				if want := uint64(8); b.GetUpperBound() < 0.008192 && b.GetUpperBound() >= 3.2e-05 && b.GetCumulativeCount() != want {
					t.Errorf("bucket le=%g holds %d, want %d", b.GetUpperBound(), b.GetCumulativeCount(), want)
				}
				if b.GetUpperBound() >= 0.008192 && b.GetCumulativeCount() != 10 {
					t.Errorf("bucket le=%g holds %d, want 10", b.GetUpperBound(), b.GetCumulativeCount())
				}
			}
		}
	}
	lintWithPromtool(t, sampledMetrics{asEngine(c), s})
}

// The collector is off by default, so the shared replay test does not see
// it: a recorded sample must give the same metrics after the JSON round trip.
func TestEBPFReplayRoundTrip(t *testing.T) {
	rc, err := ReplayCollector("ebpf")
	if err != nil {
		t.Fatal(err)
	}
	s := ebpfSampleFixture()
	raw, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	decoded := rc.NewSample()
	if err := json.Unmarshal(raw, decoded); err != nil {
		t.Fatal(err)
	}
	if a, b := metricText(t, rc, s), metricText(t, rc, decoded); a != b {
		t.Errorf("metrics differ after a record round trip:\n%s\nvs\n%s", a, b)
	}
	if s.SizeBytes() <= 0 {
		t.Error("SizeBytes not positive")
	}
}

// A GPU process started by another (a launcher holding a GPU itself) is its
// own root: its descendants count for its GPU, not for its parent's.
func TestEBPFNestedGPUProcessesLive(t *testing.T) {
	bpftest.Require(t)
	sh := exec.Command("sh", "-c", "sleep 60 & echo $!; wait")
	out, err := sh.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := sh.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sh.Process.Kill(); sh.Wait() })
	var sleepPID uint32
	if _, err := fmt.Fscan(out, &sleepPID); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Kill(int(sleepPID), unix.SIGKILL) })

	self, launched := uint32(os.Getpid()), uint32(sh.Process.Pid)
	shared := &Shared{}
	shared.SetGPUs([]GPURef{{Index: 3, PIDs: []uint32{self}}, {Index: 5, PIDs: []uint32{launched}}})
	c, err := newEBPFCollector(Config{ProcPath: "/proc", SysPath: "/sys", Shared: shared}, ebpfOptions{blockIO: true, tcp: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	sampleEBPF(t, c)
	want := map[uint32]uint32{self: self, launched: launched, sleepPID: launched}
	for pid, root := range want {
		if got, ok := c.prevTracked[pid]; !ok || got != root {
			t.Errorf("PID %d tracked under %d (%v), want %d", pid, got, ok, root)
		}
	}
}

// With program statistics on, the programs' own runs and CPU time are read
// and grow with the traffic they see.
func TestEBPFProgramStatsLive(t *testing.T) {
	bpftest.Require(t)
	shared := &Shared{}
	shared.SetGPUs([]GPURef{{Index: 3, PCIBusID: "0000:5d:00.0", PIDs: []uint32{uint32(os.Getpid())}}})
	c, err := newEBPFCollector(Config{ProcPath: "/proc", SysPath: "/sys", Shared: shared}, ebpfOptions{tcp: true, programStats: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Error(err)
		}
	})
	sendProgram := map[string]string{"sock_send_length/sock_recv_length": "sock_send_length", "tcp_sendmsg/tcp_recvmsg": "tcp_sendmsg_exit"}[c.tcpState.Hook]
	if sendProgram == "" {
		t.Fatalf("unknown TCP hook %q", c.tcpState.Hook)
	}
	find := func(s *sample.EBPF) sample.EBPFProgram {
		for _, p := range s.Programs {
			if p.Name == sendProgram {
				return p
			}
		}
		t.Fatalf("program %s not in %+v", sendProgram, s.Programs)
		return sample.EBPFProgram{}
	}
	before := find(sampleEBPF(t, c))
	const writes = 64
	for range writes {
		loopbackTransfer(t, 4096)
	}
	after := find(sampleEBPF(t, c))
	if after.Runs < before.Runs+writes || after.RunSeconds <= before.RunSeconds {
		t.Errorf("%s: %+v → %+v; want at least %d more runs and more run time", sendProgram, before, after, writes)
	}
}

// The tracked-process hint keeps every tracked process findable across its
// rebuild: a child forked before the rebuild (its bit set by the kernel,
// then moved to the user hint) still has its own children tracked after.
func TestEBPFHintsSurviveRebuild(t *testing.T) {
	c, _ := newLiveEBPF(t)
	sampleEBPF(t, c)
	// The child forks its own child only once told to, after the rebuild,
	// and that one outlives the test: no sleep decides the order, so a
	// loaded machine cannot swap it.
	child := exec.Command("sh", "-c", "read go; sleep 600; exit 0") // exit: no shell execs the sleep in its place
	release, err := child.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", child.Process.Pid, child.Process.Pid)); err == nil {
			for _, f := range strings.Fields(string(b)) {
				if pid, err := strconv.Atoi(f); err == nil {
					_ = unix.Kill(pid, unix.SIGKILL) // the sleep
				}
			}
		}
		child.Process.Kill()
		child.Wait()
	})
	if err := c.tracker.RebuildHints(); err != nil {
		t.Fatal(err)
	}
	if _, err := io.WriteString(release, "go\n"); err != nil {
		t.Fatal(err)
	}
	var grandchild int
	// Only a child that never forks runs into this deadline.
	for deadline := time.Now().Add(time.Minute); grandchild == 0; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the child never started its own child")
		}
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", child.Process.Pid, child.Process.Pid))
		if f := strings.Fields(string(b)); len(f) > 0 {
			grandchild, _ = strconv.Atoi(f[0])
		}
	}
	procs, err := c.tracker.Processes()
	if err != nil {
		t.Fatal(err)
	}
	if root, ok := procs[uint32(grandchild)]; !ok || root != uint32(os.Getpid()) {
		t.Errorf("grandchild %d forked after a hint rebuild: tracked %v under %d; want tracked under the test process %d", grandchild, ok, root, os.Getpid())
	}
}
