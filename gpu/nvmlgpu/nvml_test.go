package nvmlgpu

import (
	"context"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"

	"github.com/gpudiag/gpudiag/gpu/nvmlgpu/nvmlfake"
	"github.com/gpudiag/gpudiag/sample"
)

type clock struct{ t time.Time }

func (c *clock) now() time.Time          { return c.t }
func (c *clock) advance(d time.Duration) { c.t = c.t.Add(d) }
func newClock() *clock                   { return &clock{t: time.Unix(1_700_000_000, 0)} }
func near(a, b float64) bool             { return math.Abs(a-b) <= 1e-9*math.Max(1, math.Abs(b)) }
func get(t *testing.T, g sample.GPU, f sample.Field) float64 {
	t.Helper()
	v, ok := g.Values.Get(f)
	if !ok {
		t.Fatalf("gpu %d: %s not read", g.Index, f)
	}
	return v
}

// The signatures measured on real H200s (device-probe.md), fed through GPM.
func TestGPMSignaturesNormalised(t *testing.T) {
	gemm, h2d := nvmlfake.Hopper(0), nvmlfake.Hopper(1)
	gemm.Util = nvml.Utilization{Gpu: 100, Memory: 20}
	gemm.GPM = map[nvml.GpmMetricId]float64{
		nvml.GPM_METRIC_SM_UTIL: 96.4, nvml.GPM_METRIC_SM_OCCUPANCY: 14.2, nvml.GPM_METRIC_ANY_TENSOR_UTIL: 93.5,
		nvml.GPM_METRIC_DRAM_BW_UTIL: 17.5, nvml.GPM_METRIC_PCIE_RX_PER_SEC: 12,
		nvml.GPM_METRIC_NVLINK_L3_TX_PER_SEC: 100,
	}
	h2d.Util = nvml.Utilization{Gpu: 100}
	h2d.GPM = map[nvml.GpmMetricId]float64{
		nvml.GPM_METRIC_SM_UTIL: 0, nvml.GPM_METRIC_DRAM_BW_UTIL: 1.2, nvml.GPM_METRIC_PCIE_RX_PER_SEC: 56600,
		nvml.GPM_METRIC_PCIE_TX_PER_SEC: 3,
	}
	clk := newClock()
	b, err := Open(nvmlfake.New(gemm, h2d), Options{Now: clk.now})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	clk.advance(time.Second)
	s, err := b.Sample(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	g, c := s.Devices[0], s.Devices[1]
	if g.ActivitySource != sample.SourceGPM || g.IntervalSeconds != 1 {
		t.Fatalf("source %q interval %v", g.ActivitySource, g.IntervalSeconds)
	}
	for _, tc := range []struct {
		gpu  sample.GPU
		f    sample.Field
		want float64
	}{
		{g, sample.SMActive, 0.964}, {g, sample.SMOccupancy, 0.142}, {g, sample.TensorActive, 0.935},
		{g, sample.DRAMActive, 0.175}, {g, sample.Utilization, 1}, {g, sample.PCIeRxBytesPerSecond, 12 * 1048576},
		{c, sample.SMActive, 0}, {c, sample.Utilization, 1}, {c, sample.PCIeRxBytesPerSecond, 56600 * 1048576},
		{c, sample.PCIeTxBytesPerSecond, 3 * 1048576},
		{g, sample.MemoryTotalBytes, 80 << 30}, {g, sample.SMClockHertz, 1.98e9}, {g, sample.PowerWatts, 70},
		{g, sample.EnergyJoulesTotal, 1e6}, {g, sample.PCIeLinkGeneration, 5}, {g, sample.ECCEnabled, 1},
	} {
		if got := get(t, tc.gpu, tc.f); !near(got, tc.want) {
			t.Errorf("gpu %d %s = %v; want %v", tc.gpu.Index, tc.f, got, tc.want)
		}
	}
	// A metric the driver does not report stays unavailable, not zero.
	if _, ok := g.Values.Get(sample.FP64Active); ok {
		t.Error("FP64 read although GPM did not report it")
	}
	if len(g.Links) != 18 || !g.Links[3].Up || g.Links[3].TxBytesPerSecond != 100*1048576 || !math.IsNaN(g.Links[3].RxBytesPerSecond) {
		t.Fatalf("links: %d, link 3 %+v", len(g.Links), g.Links[3])
	}
	if g.PCIBusID != "0000:18:00.0" || g.Model != "NVIDIA H100 80GB HBM3" {
		t.Fatalf("identity %q %q", g.PCIBusID, g.Model)
	}
}

// One GpmSampleGet per GPU per interval: the newest sample is reused as the
// first of the next pair, and only two buffers are ever allocated per GPU.
func TestGPMSampleReused(t *testing.T) {
	g := nvmlfake.Hopper(0)
	g.GPM[nvml.GPM_METRIC_SM_UTIL] = 50
	lib := nvmlfake.New(g)
	clk := newClock()
	b, err := Open(lib, Options{Now: clk.now})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 5; i++ {
		clk.advance(time.Second)
		if _, err := b.Sample(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	if n := g.CallCount("GpmSampleGet"); n != 6 {
		t.Errorf("GpmSampleGet called %d times for 5 intervals; want 6 (1 at open + 1 per interval)", n)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	alloc, freed, _, shutdowns := lib.Counts()
	if alloc != 2 || freed != 2 || shutdowns != 1 {
		t.Errorf("alloc %d freed %d shutdowns %d; want 2 2 1", alloc, freed, shutdowns)
	}
}

// Samples closer than 100ms cannot be measured by GPM; the older one is kept
// as the start of the next pair, so the next long-enough interval is exact.
func TestGPMShortIntervalKeepsOlderSample(t *testing.T) {
	g := nvmlfake.Hopper(0)
	g.GPM[nvml.GPM_METRIC_SM_UTIL] = 10
	clk := newClock()
	b, _ := Open(nvmlfake.New(g), Options{Now: clk.now})
	defer b.Close()
	clk.advance(50 * time.Millisecond)
	s, _ := b.Sample(context.Background())
	if _, ok := s.Devices[0].Values.Get(sample.SMActive); ok {
		t.Fatal("GPM value from a 50ms pair")
	}
	clk.advance(100 * time.Millisecond)
	s, _ = b.Sample(context.Background())
	if s.Devices[0].IntervalSeconds != 0.15 {
		t.Fatalf("interval %v; want 0.15 (measured from the older sample)", s.Devices[0].IntervalSeconds)
	}
}

func TestLostGPUIsDownOthersContinue(t *testing.T) {
	a, lost := nvmlfake.Hopper(0), nvmlfake.Hopper(1)
	clk := newClock()
	b, _ := Open(nvmlfake.New(a, lost), Options{Now: clk.now})
	defer b.Close()
	lost.Lock()
	lost.Lost = true
	lost.Unlock()
	clk.advance(time.Second)
	s, err := b.Sample(context.Background())
	if err != nil {
		t.Fatalf("one lost GPU failed the whole sample: %v", err)
	}
	if !s.Devices[0].Up || s.Devices[1].Up || !strings.Contains(s.Devices[1].Error, "GPU_IS_LOST") {
		t.Fatalf("up: %v %v, error %q", s.Devices[0].Up, s.Devices[1].Up, s.Devices[1].Error)
	}
	a.Lock()
	a.Lost = true
	a.Unlock()
	if _, err := b.Sample(context.Background()); err == nil {
		t.Fatal("all GPUs lost but no error")
	}
}

// GPUs without GPM (Ampere and older) fall back to NVML's coarse signals and
// say so; SM activity stays unavailable rather than faked from utilization.
func TestFallbackWithoutGPM(t *testing.T) {
	g := nvmlfake.Hopper(0)
	g.NoGPM = true
	g.NVLinks = 2
	g.Util = nvml.Utilization{Gpu: 100}
	g.PCIeRxKBps = 25_000_000
	clk := newClock()
	b, err := Open(nvmlfake.New(g), Options{Now: clk.now})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	s, _ := b.Sample(context.Background())
	d := s.Devices[0]
	if d.ActivitySource != sample.SourceNVML {
		t.Fatalf("source %q", d.ActivitySource)
	}
	if _, ok := d.Values.Get(sample.SMActive); ok {
		t.Fatal("SM activity invented without GPM")
	}
	if got := get(t, d, sample.PCIeRxBytesPerSecond); got != 25e9 {
		t.Fatalf("PCIe RX %v", got)
	}
	g.Lock()
	g.NVLinkKiB[0], g.NVLinkKiB[1] = 1024*1024, 2048*1024 // 1 GiB and 2 GiB after 2 s
	g.Unlock()
	clk.advance(2 * time.Second)
	s, _ = b.Sample(context.Background())
	d = s.Devices[0]
	if got := get(t, d, sample.NVLinkTxBytesPerSecond); got != 1.5*(1<<30) {
		t.Fatalf("NVLink TX %v; want 1.5 GiB/s", got)
	}
	// A counter that goes backwards (driver reload) gives 0, never negative.
	g.Lock()
	g.NVLinkKiB[0], g.NVLinkKiB[1] = 0, 0
	g.Unlock()
	clk.advance(time.Second)
	s, _ = b.Sample(context.Background())
	if got := get(t, s.Devices[0], sample.NVLinkTxBytesPerSecond); got != 0 {
		t.Fatalf("after counter reset NVLink TX %v; want 0", got)
	}
}

func TestDisableGPMFlag(t *testing.T) {
	g := nvmlfake.Hopper(0)
	lib := nvmlfake.New(g)
	b, _ := Open(lib, Options{DisableGPM: true})
	defer b.Close()
	s, _ := b.Sample(context.Background())
	if s.Devices[0].ActivitySource != sample.SourceNVML {
		t.Fatalf("source %q", s.Devices[0].ActivitySource)
	}
	if alloc, _, _, _ := lib.Counts(); alloc != 0 {
		t.Fatalf("GPM buffers allocated although disabled: %d", alloc)
	}
}

func TestNoLibrary(t *testing.T) {
	_, err := Open(nvml.New(nvml.WithLibraryPath("/nonexistent/libnvidia-ml.so.1")), Options{})
	if err == nil || !strings.Contains(err.Error(), "libnvidia-ml.so.1 not found") {
		t.Fatalf("err = %v", err)
	}
}

func TestXIDEventsCounted(t *testing.T) {
	g := nvmlfake.Hopper(0)
	lib := nvmlfake.New(g)
	events := []nvml.EventData{{EventType: nvml.EventTypeXidCriticalError, EventData: 79}, {EventType: nvml.EventTypeXidCriticalError, EventData: 79}, {EventType: nvml.EventTypeXidCriticalError, EventData: 48}}
	lib.Events = func() (nvml.EventSet, nvml.Return) {
		return &mock.EventSet{
			WaitFunc: func(uint32) (nvml.EventData, nvml.Return) {
				if len(events) == 0 {
					return nvml.EventData{}, nvml.ERROR_TIMEOUT
				}
				e := events[0]
				events = events[1:]
				dev, _ := lib.DeviceGetHandleByIndex(0)
				e.Device = dev
				return e, nvml.SUCCESS
			},
			FreeFunc: func() nvml.Return { return nvml.SUCCESS },
		}, nvml.SUCCESS
	}
	b, _ := Open(lib, Options{})
	defer b.Close()
	s, _ := b.Sample(context.Background())
	x := s.Devices[0].XIDErrors
	if x[79] != 2 || x[48] != 1 {
		t.Fatalf("xids %v", x)
	}
}

// Slow fields (energy ~4 ms a call on an H200) are read once per
// SlowInterval and carried in between, so every sample still has them.
func TestSlowFieldsCached(t *testing.T) {
	g := nvmlfake.Hopper(0)
	clk := newClock()
	b, _ := Open(nvmlfake.New(g), Options{Now: clk.now, SlowInterval: 10 * time.Second})
	defer b.Close()
	for i := 0; i < 25; i++ {
		clk.advance(time.Second)
		s, _ := b.Sample(context.Background())
		if _, ok := s.Devices[0].Values.Get(sample.EnergyJoulesTotal); !ok {
			t.Fatalf("sample %d lacks the cached energy counter", i)
		}
	}
	if n := g.CallCount("GetTotalEnergyConsumption"); n != 3 {
		t.Fatalf("energy read %d times in 25 s; want 3 (at 1 s, 11 s, 21 s)", n)
	}
}

func TestCloseTwiceAndSampleAfterClose(t *testing.T) {
	lib := nvmlfake.New(nvmlfake.Hopper(0))
	b, _ := Open(lib, Options{})
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if _, _, _, shutdowns := lib.Counts(); shutdowns != 1 {
		t.Fatalf("NVML shut down %d times", shutdowns)
	}
	if _, err := b.Sample(context.Background()); err == nil {
		t.Fatal("sample after close succeeded")
	}
}
