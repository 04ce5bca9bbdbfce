package collectors

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap"

	"github.com/gpudiag/gpudiag/engine"
	"github.com/gpudiag/gpudiag/gpu/nvmlgpu"
	"github.com/gpudiag/gpudiag/gpu/nvmlgpu/nvmlfake"
	"github.com/gpudiag/gpudiag/sample"
)

type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time { return c.t }

// newFakeGPUCollector returns a GPU collector over fake Hopper GPUs.
func newFakeGPUCollector(t testing.TB, gpus ...*nvmlfake.GPU) (*gpuCollector, *fakeClock) {
	t.Helper()
	clk := &fakeClock{t: time.Unix(1_700_000_000, 0)}
	b, err := nvmlgpu.Open(nvmlfake.New(gpus...), nvmlgpu.Options{Now: clk.now})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return newGPUCollector(b, "", zap.NewNop()), clk
}

// Rates are integrated into counters, so rate() is exact whatever the scrape
// interval: 2 s at 56600 MiB/s then 1 s at 0 is 113200 MiB in all.
func TestGPUCountersIntegrateRates(t *testing.T) {
	g := nvmlfake.Hopper(0)
	g.GPM[nvml.GPM_METRIC_PCIE_RX_PER_SEC] = 56600
	g.GPM[nvml.GPM_METRIC_SM_UTIL] = 50
	c, clk := newFakeGPUCollector(t, g)
	step := func(d time.Duration) *sample.GPUs {
		clk.t = clk.t.Add(d)
		s, err := c.Sample(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	step(2 * time.Second)
	g.Lock()
	g.GPM[nvml.GPM_METRIC_PCIE_RX_PER_SEC] = 0
	g.Unlock()
	s := step(time.Second)
	rx, _ := s.Devices[0].Values.Get(sample.PCIeRxBytesTotal)
	if want := 2 * 56600.0 * (1 << 20); rx != want {
		t.Fatalf("pcie rx total %v; want %v", rx, want)
	}
	sm, _ := s.Devices[0].Values.Get(sample.SMActiveSecondsTotal)
	if sm != 1.5 {
		t.Fatalf("sm active seconds %v; want 1.5", sm)
	}
}

func TestGPUMetricsExposition(t *testing.T) {
	g := nvmlfake.Hopper(0)
	g.GPM[nvml.GPM_METRIC_SM_UTIL] = 96.5
	g.ClockEvents = 0x4 // sw power cap
	c, clk := newFakeGPUCollector(t, g)
	clk.t = clk.t.Add(time.Second)
	e := engine.New(engine.Options{Interval: testEngineInterval})
	e.Add(asEngine(c), 0)
	e.SampleOnce(context.Background())

	want := `
# HELP gpudiag_gpu_sm_active_ratio Fraction of time at least one warp was resident on an SM, averaged over SMs and the last sampling interval (GPM SM_UTIL, DCGM PROF_SM_ACTIVE). The signal that tells real compute from copies and waits.
# TYPE gpudiag_gpu_sm_active_ratio gauge
gpudiag_gpu_sm_active_ratio{gpu="0"} 0.965
# HELP gpudiag_gpu_up Whether the GPU answered the last sample (1) or not (0: lost, fallen off the bus, or every query failed).
# TYPE gpudiag_gpu_up gauge
gpudiag_gpu_up{gpu="0"} 1
`
	if err := testutil.GatherAndCompare(e, strings.NewReader(want), "gpudiag_gpu_sm_active_ratio", "gpudiag_gpu_up"); err != nil {
		t.Fatal(err)
	}
	if n, _ := testutil.GatherAndCount(e, "gpudiag_gpu_nvlink_link_up"); n != 18 {
		t.Fatalf("%d nvlink_link_up series; want 18", n)
	}
	mfs, err := e.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "gpudiag_gpu_clock_event_active" {
			continue
		}
		for _, m := range mf.GetMetric() {
			reason := m.GetLabel()[1].GetValue()
			if want := reason == "sw_power_cap"; (m.GetGauge().GetValue() == 1) != want {
				t.Errorf("clock event %s = %v", reason, m.GetGauge().GetValue())
			}
		}
	}
}

func TestLostGPUExportsUpZero(t *testing.T) {
	a, b := nvmlfake.Hopper(0), nvmlfake.Hopper(1)
	b.Lost = true
	c, clk := newFakeGPUCollector(t, a, b)
	clk.t = clk.t.Add(time.Second)
	e := engine.New(engine.Options{Interval: testEngineInterval})
	e.Add(asEngine(c), 0)
	e.SampleOnce(context.Background())
	want := `
# HELP gpudiag_gpu_up Whether the GPU answered the last sample (1) or not (0: lost, fallen off the bus, or every query failed).
# TYPE gpudiag_gpu_up gauge
gpudiag_gpu_up{gpu="0"} 1
gpudiag_gpu_up{gpu="1"} 0
`
	if err := testutil.GatherAndCompare(e, strings.NewReader(want), "gpudiag_gpu_up"); err != nil {
		t.Fatal(err)
	}
	// The lost GPU exports nothing but its up and info series.
	if n, _ := testutil.GatherAndCount(e, "gpudiag_gpu_memory_bytes"); n != 1 {
		t.Fatalf("memory_bytes series %d; want 1", n)
	}
}

// With no backend the collector still reports, so the node says why it has no
// GPU metrics instead of going silent.
func TestNoBackendReportsNone(t *testing.T) {
	c := newGPUCollector(nil, "NVML: libnvidia-ml.so.1 not found", zap.NewNop())
	e := engine.New(engine.Options{Interval: testEngineInterval})
	e.Add(asEngine(c), 0)
	e.SampleOnce(context.Background())
	want := `
# HELP gpudiag_gpu_backend_info The GPU backend in use (dcgm, nvml or none) and the driver version.
# TYPE gpudiag_gpu_backend_info gauge
gpudiag_gpu_backend_info{backend="none",driver_version=""} 1
`
	if err := testutil.GatherAndCompare(e, strings.NewReader(want), "gpudiag_gpu_backend_info"); err != nil {
		t.Fatal(err)
	}
}

// finishSignal closes done once its collector's first sample has returned:
// the collector is then no longer in use.
type finishSignal struct {
	engine.Collector
	done chan struct{}
	once sync.Once
}

func (f *finishSignal) Sample(ctx context.Context) (any, error) {
	defer f.once.Do(func() { close(f.done) })
	return f.Collector.Sample(ctx)
}

// A GPU whose driver call hangs stalls only the GPU collector: the scrape
// returns at once with gpudiag_collector_success 0 for it.
func TestHungGPUDoesNotBlockScrape(t *testing.T) {
	g := nvmlfake.Hopper(0)
	c, clk := newFakeGPUCollector(t, g)
	clk.t = clk.t.Add(time.Second)
	hang := make(chan struct{})
	g.Lock()
	g.Hang = hang
	g.Unlock()
	// The abandoned sample goes on after the test: released, it must be
	// waited for, or it reads flags the next tests set.
	finished := &finishSignal{Collector: asEngine(c), done: make(chan struct{})}
	defer func() {
		close(hang)
		select {
		case <-finished.done:
		case <-hangGuard(t):
			t.Error("the released sample did not finish")
		}
	}()

	e := engine.New(engine.Options{Interval: time.Second, Timeout: 50 * time.Millisecond})
	e.Add(finished, 0)
	// Returns at the 50 ms deadline: the call hangs until released, so
	// the deadline passes however fast or slow the machine is.
	e.SampleOnce(context.Background())

	done := make(chan error, 1)
	go func() {
		done <- testutil.GatherAndCompare(e, strings.NewReader(`
# HELP gpudiag_collector_success Whether the collector's last sample succeeded (1) or failed, timed out or is still running (0).
# TYPE gpudiag_collector_success gauge
gpudiag_collector_success{collector="gpu"} 0
`), "gpudiag_collector_success")
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-hangGuard(t):
		// The NVML call hangs until the test ends: a scrape behind it
		// would never return, a slow one does.
		t.Fatal("scrape blocked behind a hung NVML call")
	}
	if st := e.Statuses()[0]; !strings.Contains(st.LastError, "timed out") {
		t.Fatalf("status %+v", st)
	}
}

func sampleOnceEngine(t *testing.T, c *gpuCollector, clk *fakeClock) *engine.Engine {
	t.Helper()
	clk.t = clk.t.Add(time.Second)
	e := engine.New(engine.Options{Interval: testEngineInterval})
	e.Add(asEngine(c), 0)
	e.SampleOnce(context.Background())
	if st := e.Statuses()[0]; !st.Success {
		t.Fatalf("sample failed: %s", st.LastError)
	}
	return e
}

// Two Hopper GPUs whose 18 NVLinks join them directly: both ordered pairs,
// NV18 at 450 GB/s one way, and each GPU's PCIe Gen5 x16 and NVLink capacity.
func TestGPUTopologyMetrics(t *testing.T) {
	c, clk := newFakeGPUCollector(t, nvmlfake.NVLinkPair()...)
	e := sampleOnceEngine(t, c, clk)
	want := `
# HELP gpudiag_gpu_nvlink_capacity_bytes_per_second One-way data rate of the GPU's NVLinks active at start, summed (per link 25e9 on NVLink 2–4, 50e9 on NVLink 5): the ceiling for NVLink transmit or receive throughput.
# TYPE gpudiag_gpu_nvlink_capacity_bytes_per_second gauge
gpudiag_gpu_nvlink_capacity_bytes_per_second{gpu="0"} 4.5e+11
gpudiag_gpu_nvlink_capacity_bytes_per_second{gpu="1"} 4.5e+11
# HELP gpudiag_gpu_pcie_link_capacity_bytes_per_second One-way data rate of the best PCIe link the GPU and its slot support (max generation and width, after line encoding): the ceiling for PCIe transmit or receive throughput. Gen5 x16 is 63.0e9.
# TYPE gpudiag_gpu_pcie_link_capacity_bytes_per_second gauge
gpudiag_gpu_pcie_link_capacity_bytes_per_second{gpu="0"} 6.301538461538461e+10
gpudiag_gpu_pcie_link_capacity_bytes_per_second{gpu="1"} 6.301538461538461e+10
# HELP gpudiag_gpu_peer_link_capacity_bytes_per_second One-way theoretical bandwidth of the best path from gpu to peer_gpu: NVLinks × per-link rate, else the slower GPU's PCIe link rate (across sockets the inter-socket link is not measured).
# TYPE gpudiag_gpu_peer_link_capacity_bytes_per_second gauge
gpudiag_gpu_peer_link_capacity_bytes_per_second{gpu="0",peer_gpu="1"} 4.5e+11
gpudiag_gpu_peer_link_capacity_bytes_per_second{gpu="1",peer_gpu="0"} 4.5e+11
# HELP gpudiag_gpu_peer_link_info Best path from gpu to peer_gpu, named as nvidia-smi topo -m does: NV<links> over NVLink (directly or through NVSwitches), else PIX, PXB, PHB, NODE or SYS over PCIe (fastest to slowest).
# TYPE gpudiag_gpu_peer_link_info gauge
gpudiag_gpu_peer_link_info{gpu="0",link="NV18",peer_gpu="1"} 1
gpudiag_gpu_peer_link_info{gpu="1",link="NV18",peer_gpu="0"} 1
# HELP gpudiag_gpu_peer_nvlinks NVLinks between gpu and peer_gpu (through NVSwitches: the lesser of the two GPUs' switch links); 0 when they talk over PCIe.
# TYPE gpudiag_gpu_peer_nvlinks gauge
gpudiag_gpu_peer_nvlinks{gpu="0",peer_gpu="1"} 18
gpudiag_gpu_peer_nvlinks{gpu="1",peer_gpu="0"} 18
`
	if err := testutil.GatherAndCompare(e, strings.NewReader(want),
		"gpudiag_gpu_nvlink_capacity_bytes_per_second", "gpudiag_gpu_pcie_link_capacity_bytes_per_second",
		"gpudiag_gpu_peer_link_capacity_bytes_per_second", "gpudiag_gpu_peer_link_info", "gpudiag_gpu_peer_nvlinks"); err != nil {
		t.Fatal(err)
	}
}

// A PCIe-only box: 8 × 7 ordered pairs, none with NVLinks, a SYS pair across
// the sockets at the Gen4 x16 rate, and no NVLink capacity series.
func TestGPUTopologyMetricsPCIeOnly(t *testing.T) {
	c, clk := newFakeGPUCollector(t, nvmlfake.PCIeBox()...)
	e := sampleOnceEngine(t, c, clk)
	for name, want := range map[string]int{
		"gpudiag_gpu_peer_link_info": 56, "gpudiag_gpu_peer_nvlinks": 56, "gpudiag_gpu_peer_link_capacity_bytes_per_second": 56,
		"gpudiag_gpu_pcie_link_capacity_bytes_per_second": 8, "gpudiag_gpu_nvlink_capacity_bytes_per_second": 0,
	} {
		if n, err := testutil.GatherAndCount(e, name); err != nil || n != want {
			t.Errorf("%s: %d series (%v); want %d", name, n, err, want)
		}
	}
	mfs, err := e.Gather()
	if err != nil {
		t.Fatal(err)
	}
	links := map[string]int{}
	for _, mf := range mfs {
		switch mf.GetName() {
		case "gpudiag_gpu_peer_link_info":
			for _, m := range mf.GetMetric() {
				for _, l := range m.GetLabel() {
					if l.GetName() == "link" {
						links[l.GetValue()]++
					}
				}
			}
		case "gpudiag_gpu_peer_nvlinks":
			for _, m := range mf.GetMetric() {
				if m.GetGauge().GetValue() != 0 {
					t.Errorf("NVLinks on a PCIe-only box: %v", m)
				}
			}
		case "gpudiag_gpu_peer_link_capacity_bytes_per_second":
			for _, m := range mf.GetMetric() {
				if v := m.GetGauge().GetValue(); v != 16e9*128/130/8*16 {
					t.Errorf("pair capacity %v; want Gen4 x16", v)
				}
			}
		}
	}
	// Ordered pairs: 4 PIX pairs, 8 NODE pairs and 16 SYS pairs, twice each.
	if links["PIX"] != 8 || links["NODE"] != 16 || links["SYS"] != 32 {
		t.Fatalf("links by type %v", links)
	}
}

// Above --collector.gpu.peer-metrics-max-gpus the pair series are left out;
// per-GPU capacities stay, and the sample still carries the whole matrix.
func TestGPUPeerMetricsBounded(t *testing.T) {
	defer func(n int) { gpuFlags.peerMaxGPUs = n }(gpuFlags.peerMaxGPUs)
	gpuFlags.peerMaxGPUs = 4
	c, clk := newFakeGPUCollector(t, nvmlfake.HGX()...)
	e := sampleOnceEngine(t, c, clk)
	if n, _ := testutil.GatherAndCount(e, "gpudiag_gpu_peer_link_info", "gpudiag_gpu_peer_nvlinks"); n != 0 {
		t.Fatalf("%d pair series above the bound", n)
	}
	if n, _ := testutil.GatherAndCount(e, "gpudiag_gpu_nvlink_capacity_bytes_per_second"); n != 8 {
		t.Fatalf("%d NVLink capacity series; want 8", n)
	}
	s, err := c.Sample(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if topo := s.Topology; topo == nil || len(topo.Pairs) != 28 {
		t.Fatalf("sample topology %+v", topo)
	}
}
