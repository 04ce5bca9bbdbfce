package nvmlgpu

import (
	"context"
	"fmt"
	"math"
	"reflect"
	"slices"
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

// A GPU counts as down whenever its liveness probe could not be asked, not
// only when NVML says it is lost: with the driver unloaded or timing out every
// query fails, and such a GPU must not read as up with no values. A refusal
// (not supported) means the GPU answered.
func TestFailingQueriesMeanDown(t *testing.T) {
	for _, tc := range []struct {
		ret  nvml.Return
		down bool
	}{
		{nvml.ERROR_GPU_IS_LOST, true},
		{nvml.ERROR_UNKNOWN, true},
		{nvml.ERROR_DRIVER_NOT_LOADED, true},
		{nvml.ERROR_TIMEOUT, true},
		{nvml.ERROR_RESET_REQUIRED, true},
		{nvml.ERROR_NOT_SUPPORTED, false},
	} {
		t.Run(nvml.ErrorString(tc.ret), func(t *testing.T) {
			a, bad := nvmlfake.Hopper(0), nvmlfake.Hopper(1)
			clk := newClock()
			b, _ := Open(nvmlfake.New(a, bad), Options{Now: clk.now})
			defer b.Close()
			bad.Lock()
			bad.Fail = tc.ret
			bad.Unlock()
			clk.advance(time.Second)
			s, err := b.Sample(context.Background())
			if err != nil {
				t.Fatalf("one failing GPU failed the whole sample: %v", err)
			}
			g := s.Devices[1]
			if g.Up == tc.down || !s.Devices[0].Up {
				t.Fatalf("up %v (error %q); want down=%v, GPU 0 up", g.Up, g.Error, tc.down)
			}
			if tc.down && !strings.Contains(g.Error, tc.ret.Error()) {
				t.Fatalf("error %q does not name %q", g.Error, tc.ret.Error())
			}
		})
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

// Slow fields are read once per SlowInterval, the energy counter (~4 ms a
// call on an H200) once per energyInterval, the board's maximum clocks and
// PCIe link once; every sample still has them all.
func TestSlowFieldsCached(t *testing.T) {
	g := nvmlfake.Hopper(0)
	clk := newClock()
	b, _ := Open(nvmlfake.New(g), Options{Now: clk.now, SlowInterval: 10 * time.Second})
	defer b.Close()
	for i := 0; i < 125; i++ {
		clk.advance(time.Second)
		s, _ := b.Sample(context.Background())
		for _, f := range []sample.Field{sample.EnergyJoulesTotal, sample.PCIeReplaysTotal, sample.PCIeLinkMaxWidth, sample.PCIeLinkWidth, sample.SMClockMaxHertz,
			sample.PowerLimitWatts, sample.ECCEnabled, sample.ECCCorrectedErrorsTotal, sample.MIGModeEnabled, sample.ComputeMode, sample.PersistenceModeEnabled,
			sample.MemoryUsedBytes, sample.SMClockHertz, sample.MemoryClockHertz, sample.PowerWatts, sample.TemperatureCelsius, sample.MPSProcesses,
			sample.MemoryTemperatureCelsius, sample.MemoryReservedBytes, sample.MemoryFreeBytes, sample.DecoderUtilization, sample.EncoderUtilization,
			sample.ECCCorrectedAggregateTotal, sample.ClockEventHWThermalSecondsTotal} {
			if _, ok := s.Devices[0].Values.Get(f); !ok {
				t.Fatalf("sample %d lacks the cached field %v", i, f)
			}
		}
	}
	for call, want := range map[string]int{
		"GetTotalEnergyConsumption": 3,   // at 1 s, 61 s, 121 s
		"GetPcieReplayCounter":      0,   // its field comes with the health counters
		"GetCurrPcieLinkWidth":      13,  // what the link trained to: every 10 s
		"GetCurrPcieLinkGeneration": 125, // drops at idle: every sample
		"GetMaxPcieLinkWidth":       2,   // once for the topology at Open, once for the samples
		// The health counters every 10 s: the ECC totals, memory
		// temperature, clock event times, PCIe replays and (every
		// minute) NVLink errors in one call;
		// ECC by location (DRAM and SRAM, volatile and aggregate,
		// corrected and uncorrected) by its own query, after one
		// query of every location at the first read to learn which the
		// GPU reports, as for the NVLink data CRC errors, which no link
		// reports and are not asked for again.
		"GetFieldValues":        13,
		"GetTotalEccErrors":     0,
		"GetMemoryErrorCounter": 32 + 12*8,
		"GetNvLinkErrorCounter": 18,
		"GetDecoderUtilization": 13,
		"GetEncoderUtilization": 13,
		"GetRemappedRows":       13,
		"GetEnforcedPowerLimit": 13, // cheap settings and the fabric state: every 10 s
		"GetPersistenceMode":    13,
		"GetComputeMode":        13,
		"GetGpuFabricInfo":      13,
		"GetEccMode":            3, // the costly modes: every minute
		"GetMigMode":            3,
		// Every second: what the verdicts read, and power and clocks
		// (no cheaper read every 10 s on an H100).
		"GetUtilizationRates":          125, // also the liveness probe
		"GetCurrentClocksEventReasons": 125,
		// The process list: every 5 s while the utilization stays on
		// one side of zero (TestProcessListReadWhenTheGPUTurns).
		"GetComputeRunningProcesses": 25,
		"GpmSampleGet":               126, // and once at Open, to see GPM answer
		"GetClockInfo":               250, // SM and memory
		"GetPowerUsage":              125,
		// What only dashboards show: with the slow fields.
		"GetMemoryInfo_v2":              13,
		"GetMemoryInfo":                 0,
		"GetTemperature":                13,
		"GetMPSComputeRunningProcesses": 13,
	} {
		if n := g.CallCount(call); n != want {
			t.Errorf("%s called %d times in 125 s; want %d", call, n, want)
		}
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

// topoMatrix renders the pair links as nvidia-smi topo -m lays them out.
func topoMatrix(t *sample.Topology) string {
	var b strings.Builder
	for _, row := range t.GPUs {
		b.WriteString(fmt.Sprintf("GPU%d", row.Index))
		for _, col := range t.GPUs {
			cell := "X"
			if col.Index != row.Index {
				p, ok := t.Pair(row.Index, col.Index)
				if !ok {
					cell = "?"
				} else if cell = p.Link; cell == "" {
					cell = "-"
				}
			}
			b.WriteString(" " + cell)
		}
		b.WriteString("\n")
	}
	return b.String()
}

func openTopology(t *testing.T, lib *nvmlfake.Lib) *sample.Topology {
	t.Helper()
	b, err := Open(lib, Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	s, err := b.Sample(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if s.Topology == nil {
		t.Fatal("no topology in the sample")
	}
	return s.Topology
}

// One-way rates: Gen5 x16 = 32 GT/s × 128/130 ÷ 8 × 16 lanes ≈ 63.0 GB/s;
// 18 NVLink 4 links × 25 GB/s = 450 GB/s.
const (
	gen5x16 = 32e9 * 128 / 130 / 8 * 16
	gen4x16 = 16e9 * 128 / 130 / 8 * 16
	nv18    = 18 * 25e9
)

func TestTopologyHGX(t *testing.T) {
	topo := openTopology(t, nvmlfake.New(nvmlfake.HGX()...))
	want := `GPU0 X NV18 NV18 NV18 NV18 NV18 NV18 NV18
GPU1 NV18 X NV18 NV18 NV18 NV18 NV18 NV18
GPU2 NV18 NV18 X NV18 NV18 NV18 NV18 NV18
GPU3 NV18 NV18 NV18 X NV18 NV18 NV18 NV18
GPU4 NV18 NV18 NV18 NV18 X NV18 NV18 NV18
GPU5 NV18 NV18 NV18 NV18 NV18 X NV18 NV18
GPU6 NV18 NV18 NV18 NV18 NV18 NV18 X NV18
GPU7 NV18 NV18 NV18 NV18 NV18 NV18 NV18 X
`
	if got := topoMatrix(topo); got != want {
		t.Fatalf("matrix:\n%s\nwant:\n%s", got, want)
	}
	if len(topo.Pairs) != 28 {
		t.Fatalf("%d pairs; want 28", len(topo.Pairs))
	}
	for _, p := range topo.Pairs {
		pcie := sample.LinkSYS
		if p.A/4 == p.B/4 {
			pcie = sample.LinkNODE
		}
		if p.NVLinks != 18 || !p.ViaSwitch || p.ExpectedBytesPerSecond != nv18 || p.PCIePath != pcie {
			t.Errorf("pair %+v; want 18 links via NVSwitch, 450 GB/s, PCIe %s", p, pcie)
		}
	}
	for _, g := range topo.GPUs {
		if g.NVLinks != 18 || g.NVLinkMaxBytesPerSecond != nv18 || !near(g.PCIeMaxBytesPerSecond, gen5x16) {
			t.Errorf("gpu %+v", g)
		}
	}
	if math.Abs(gen5x16-63.0e9) > 0.05e9 {
		t.Fatalf("Gen5 x16 %v; want 63.0 GB/s", gen5x16)
	}
}

func TestTopologyPCIeOnly(t *testing.T) {
	gpus := nvmlfake.PCIeBox()
	gpus[5].PCIeMaxWidth = 8 // a card in an x8 slot bounds every path it is on
	topo := openTopology(t, nvmlfake.New(gpus...))
	want := `GPU0 X PIX NODE NODE SYS SYS SYS SYS
GPU1 PIX X NODE NODE SYS SYS SYS SYS
GPU2 NODE NODE X PIX SYS SYS SYS SYS
GPU3 NODE NODE PIX X SYS SYS SYS SYS
GPU4 SYS SYS SYS SYS X PIX NODE NODE
GPU5 SYS SYS SYS SYS PIX X NODE NODE
GPU6 SYS SYS SYS SYS NODE NODE X PIX
GPU7 SYS SYS SYS SYS NODE NODE PIX X
`
	if got := topoMatrix(topo); got != want {
		t.Fatalf("matrix:\n%s\nwant:\n%s", got, want)
	}
	for _, p := range topo.Pairs {
		want := gen4x16
		if p.A == 5 || p.B == 5 {
			want = gen4x16 / 2
		}
		if p.NVLinks != 0 || p.ViaSwitch || !near(p.ExpectedBytesPerSecond, want) || p.PCIePath != p.Link {
			t.Errorf("pair %+v; want PCIe only at %v", p, want)
		}
	}
	for _, g := range topo.GPUs {
		if g.NVLinks != 0 || g.NVLinkMaxBytesPerSecond != 0 {
			t.Errorf("gpu %+v has NVLink", g)
		}
	}
}

func TestTopologyDirectNVLinkPair(t *testing.T) {
	topo := openTopology(t, nvmlfake.New(nvmlfake.NVLinkPair()...))
	want := []sample.GPUPair{{A: 0, B: 1, Link: "NV18", NVLinks: 18, PCIePath: sample.LinkNODE, ExpectedBytesPerSecond: nv18}}
	if !reflect.DeepEqual(topo.Pairs, want) {
		t.Fatalf("pairs %+v; want %+v", topo.Pairs, want)
	}
}

// A single-GPU VM answers NOT_SUPPORTED to every NVLink query (the H200 test
// host did): no pairs, no NVLink capacity, PCIe capacity still known.
func TestTopologySingleGPUWithoutNVLink(t *testing.T) {
	g := nvmlfake.Hopper(0)
	g.NVLinks = 0
	topo := openTopology(t, nvmlfake.New(g))
	if len(topo.Pairs) != 0 || len(topo.GPUs) != 1 {
		t.Fatalf("topology %+v", topo)
	}
	if c := topo.GPUs[0]; c.NVLinks != 0 || c.NVLinkMaxBytesPerSecond != 0 || !near(c.PCIeMaxBytesPerSecond, gen5x16) {
		t.Fatalf("capacities %+v", c)
	}
	if n := g.CallCount("GetNvLinkRemotePciInfo"); n != 0 {
		t.Fatalf("remote of nonexistent links queried %d times", n)
	}
}

// Read once at Open: every sample shares the same topology, and later
// samples make no topology queries.
func TestTopologyReadOnceAndShared(t *testing.T) {
	gpus := nvmlfake.HGX()
	clk := newClock()
	b, err := Open(nvmlfake.New(gpus...), Options{Now: clk.now})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	var first *sample.Topology
	for i := 0; i < 3; i++ {
		clk.advance(time.Second)
		s, err := b.Sample(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if first == nil {
			first = s.Topology
		} else if s.Topology != first {
			t.Fatal("a sample carries its own copy of the topology")
		}
	}
	for _, q := range []string{"GetNvLinkRemotePciInfo", "GetNvLinkRemoteDeviceType", "GetNvLinkVersion"} {
		if n := gpus[0].CallCount(q); n != 18 {
			t.Errorf("%s called %d times; want 18 (once per link, at Open)", q, n)
		}
	}
	if n := gpus[0].CallCount("GetTopologyCommonAncestor"); n != 7 {
		t.Errorf("GPU 0 common ancestor queried %d times; want 7 (once per pair)", n)
	}
}

// A link down at Open is not counted: nvidia-smi shows NV17, and 17 links'
// capacity is what the pair can use.
func TestTopologyLinkDownAtOpen(t *testing.T) {
	gpus := nvmlfake.NVLinkPair()
	a, b := gpus[0], gpus[1]
	a.LinksDown = map[int]bool{7: true}
	b.LinksDown = map[int]bool{7: true}
	topo := openTopology(t, nvmlfake.New(a, b))
	p, _ := topo.Pair(1, 0)
	if p.Link != "NV17" || p.ExpectedBytesPerSecond != 17*25e9 || topo.GPUs[0].NVLinks != 17 {
		t.Fatalf("pair %+v gpu %+v", p, topo.GPUs[0])
	}
}

// Drivers that do not report the remote device type leave the remote's bus
// ID: one of our GPUs is a direct link, a device on another bus an NVSwitch
// (HGX A100, whose switches are PCI devices), and a remote with no PCI
// address is not counted: nothing says what it is.
func TestTopologyWithoutRemoteType(t *testing.T) {
	onBus := nvmlfake.HGX()[:2]
	for _, g := range onBus {
		for l, end := range g.Remote {
			end.OffBus, end.Bus = false, nvmlfake.NVSwitchBuses[l%4]
			g.Remote[l] = end
		}
	}
	for name, tc := range map[string]struct {
		gpus      []*nvmlfake.GPU
		link      string
		viaSwitch bool
	}{
		"switch on the bus":  {onBus, "NV18", true},
		"switch off the bus": {nvmlfake.HGX()[:2], "PHB", false},
		"direct":             {nvmlfake.NVLinkPair(), "NV18", false},
	} {
		lib := nvmlfake.New(tc.gpus...)
		lib.CommonAncestor = func(a, b *nvmlfake.GPU) (nvml.GpuTopologyLevel, nvml.Return) {
			return nvml.TOPOLOGY_HOSTBRIDGE, nvml.SUCCESS
		}
		for _, g := range tc.gpus {
			g.RemoteTypeUnsupported = true
		}
		p, _ := openTopology(t, lib).Pair(0, 1)
		if p.Link != tc.link || p.ViaSwitch != tc.viaSwitch {
			t.Errorf("%s: pair %+v; want %s via switch %v", name, p, tc.link, tc.viaSwitch)
		}
	}
}

// A common-ancestor query the driver refuses leaves the path unknown, and
// the pair still gets the PCIe capacity both GPUs' links bound it to.
func TestTopologyUnknownPCIePath(t *testing.T) {
	gpus := nvmlfake.PCIeBox()[:2]
	lib := nvmlfake.New(gpus...)
	lib.CommonAncestor = func(a, b *nvmlfake.GPU) (nvml.GpuTopologyLevel, nvml.Return) {
		return 0, nvml.ERROR_NOT_SUPPORTED
	}
	topo := openTopology(t, lib)
	if p := topo.Pairs[0]; p.Link != "" || p.PCIePath != "" || !near(p.ExpectedBytesPerSecond, gen4x16) {
		t.Fatalf("pair %+v", p)
	}
}

func TestPCIePathNames(t *testing.T) {
	for level, want := range map[nvml.GpuTopologyLevel]string{
		nvml.TOPOLOGY_INTERNAL: "PIX", nvml.TOPOLOGY_SINGLE: "PIX", nvml.TOPOLOGY_MULTIPLE: "PXB",
		nvml.TOPOLOGY_HOSTBRIDGE: "PHB", nvml.TOPOLOGY_NODE: "NODE", nvml.TOPOLOGY_SYSTEM: "SYS", 60: "",
	} {
		if got := pciePathName(level); got != want {
			t.Errorf("level %d: %q; want %q", level, got, want)
		}
	}
}

// GetNvLinkVersion answers an nvmlNvlinkVersion_t, not the major version.
func TestNVLinkGeneration(t *testing.T) {
	for v, want := range map[nvml.NvlinkVersion]int{
		nvml.NVLINK_VERSION_INVALID: 0, nvml.NVLINK_VERSION_1_0: 1, nvml.NVLINK_VERSION_2_0: 2, nvml.NVLINK_VERSION_2_2: 2,
		nvml.NVLINK_VERSION_3_0: 3, nvml.NVLINK_VERSION_3_1: 3, nvml.NVLINK_VERSION_4_0: 4, nvml.NVLINK_VERSION_5_0: 5,
		nvml.NVLINK_VERSION_6_0: 6, 99: 0,
	} {
		if got := nvlinkGeneration(uint32(v)); got != want {
			t.Errorf("version enum %d: generation %d; want %d", v, got, want)
		}
	}
}

// What the 2×H200 host (HGX slice in a VM, driver 580.159.04) answered: all
// 18 links of each GPU of type SWITCH, remote PCI info all 0xFF, version
// enum 6 (NVLink 4.0), common ancestor HOSTBRIDGE; nvidia-smi topo -m showed
// NV18.
func TestTopologyMeasuredH200Pair(t *testing.T) {
	lib := nvmlfake.New(nvmlfake.HGX()[:2]...)
	lib.CommonAncestor = func(a, b *nvmlfake.GPU) (nvml.GpuTopologyLevel, nvml.Return) {
		return nvml.TOPOLOGY_HOSTBRIDGE, nvml.SUCCESS
	}
	topo := openTopology(t, lib)
	want := []sample.GPUPair{{A: 0, B: 1, Link: "NV18", NVLinks: 18, ViaSwitch: true, PCIePath: sample.LinkPHB, ExpectedBytesPerSecond: nv18}}
	if !reflect.DeepEqual(topo.Pairs, want) {
		t.Fatalf("pairs %+v; want %+v", topo.Pairs, want)
	}
}

// In MIG mode the GPU lists its MIG devices' UUIDs (Kubernetes hands those
// to pods); the lookup runs with the slow fields, not every sample.
func TestMIGDevices(t *testing.T) {
	mig, whole := nvmlfake.Hopper(0), nvmlfake.Hopper(1)
	mig.MIG = []string{"MIG-aaaa", "", "MIG-cccc"}
	clk := newClock()
	b, err := Open(nvmlfake.New(mig, whole), Options{Now: clk.now})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	var s *sample.GPUs
	for i := 0; i < 3; i++ {
		clk.advance(time.Second)
		if s, err = b.Sample(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	if got := s.Devices[0].MIGDevices; !slices.Equal(got, []string{"MIG-aaaa", "MIG-cccc"}) {
		t.Errorf("MIG devices %v", got)
	}
	if got := s.Devices[1].MIGDevices; got != nil {
		t.Errorf("a GPU without MIG lists %v", got)
	}
	if n := mig.CallCount("GetMaxMigDeviceCount"); n != 1 {
		t.Errorf("MIG layout read %d times in 3 samples; want once (slow fields)", n)
	}
}

// The ECC and MIG modes are read every minute, but at once when a GPU comes
// back from being lost (a reset applies pending modes), and a GPU in MIG
// mode lists its MIG devices every slow tick (they come and go without a
// reset).
func TestModesReadAgainAfterAReset(t *testing.T) {
	g := nvmlfake.Hopper(0)
	clk := newClock()
	b, err := Open(nvmlfake.New(g), Options{Now: clk.now, SlowInterval: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	sampleAt := func(d time.Duration) sample.GPU {
		t.Helper()
		clk.advance(d)
		s, _ := b.Sample(context.Background()) // fails while the only GPU is lost
		return s.Devices[0]
	}
	d := sampleAt(time.Second)
	if mig, _ := d.Values.Get(sample.MIGModeEnabled); mig != 0 {
		t.Fatalf("MIG mode %v before the change; want 0", mig)
	}
	g.Lock()
	g.Lost = true
	g.Unlock()
	if d := sampleAt(time.Second); d.Up {
		t.Fatal("a lost GPU reads as up")
	}
	g.Lock()
	g.Lost, g.MIG = false, []string{"MIG-aaaa"}
	g.Unlock()
	d = sampleAt(time.Second)
	if mig, _ := d.Values.Get(sample.MIGModeEnabled); mig != 1 || !slices.Equal(d.MIGDevices, []string{"MIG-aaaa"}) {
		t.Errorf("2 s after the first reading, back from a reset: MIG mode %v, devices %v; want 1, [MIG-aaaa]", mig, d.MIGDevices)
	}
	g.Lock()
	g.MIG = []string{"MIG-aaaa", "MIG-bbbb"}
	g.Unlock()
	if d := sampleAt(10 * time.Second); !slices.Equal(d.MIGDevices, []string{"MIG-aaaa", "MIG-bbbb"}) {
		t.Errorf("a MIG device created without a reset: devices %v after one slow tick", d.MIGDevices)
	}
}

// The settings the GPU configuration checks read: compute mode, pending MIG
// mode, MPS, the fabric state, per-process SM shares and the driver's CUDA
// version.
func TestConfigurationFields(t *testing.T) {
	shared, fabric := nvmlfake.Hopper(0), nvmlfake.Hopper(1)
	shared.PIDs = []uint32{100, 200}
	shared.ProcessSMUtil = map[uint32]uint32{100: 60, 200: 35}
	shared.ComputeMode = nvml.COMPUTEMODE_EXCLUSIVE_PROCESS
	shared.MIGPendingChange = true
	fabric.PIDs = []uint32{300}
	fabric.MPSPIDs = []uint32{300}
	fabric.FabricState = nvml.GPU_FABRIC_STATE_IN_PROGRESS
	lib := nvmlfake.New(shared, fabric)
	lib.CUDAVersion = 12080
	clk := newClock()
	b, err := Open(lib, Options{Now: clk.now})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	s, err := b.Sample(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if s.CUDADriverVersion != 12080 || sample.CUDAVersionString(s.CUDADriverVersion) != "12.8" {
		t.Errorf("CUDA driver version %d", s.CUDADriverVersion)
	}
	a, f := s.Devices[0], s.Devices[1]
	for _, c := range []struct {
		g    sample.GPU
		f    sample.Field
		want float64
	}{
		{a, sample.ComputeMode, sample.ComputeModeExclusiveProcess},
		{a, sample.MIGModeEnabled, 0}, {a, sample.MIGModePending, 1},
		{a, sample.MPSProcesses, 0}, {a, sample.FabricState, sample.FabricCompleted}, {a, sample.FabricStatus, 0},
		{f, sample.ComputeMode, sample.ComputeModeDefault}, {f, sample.MPSProcesses, 1},
		{f, sample.FabricState, sample.FabricInProgress},
	} {
		if got := get(t, c.g, c.f); got != c.want {
			t.Errorf("GPU %d %s = %v, want %v", c.g.Index, c.f, got, c.want)
		}
	}
	if p := a.Processes; len(p) != 2 || p[0].SMUtil == nil || *p[0].SMUtil != 0.6 || *p[1].SMUtil != 0.35 {
		t.Errorf("per-process SM shares %+v", p)
	}
	// One process has the GPU alone: its share is not asked for.
	if f.Processes[0].SMUtil != nil || fabric.CallCount("GetProcessUtilization") != 0 {
		t.Errorf("a lone process's share was read")
	}
	// The query costs ~2 ms on an H100: read with the slow fields, the
	// shares carried in between.
	for i := 0; i < 3; i++ {
		clk.advance(time.Second)
		if s, err = b.Sample(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	if n := shared.CallCount("GetProcessUtilization"); n != 1 {
		t.Errorf("process utilization read %d times in 4 samples; want once (slow fields)", n)
	}
	if p := s.Devices[0].Processes; p[1].SMUtil == nil || *p[1].SMUtil != 0.35 {
		t.Errorf("shares not carried between reads: %+v", p)
	}
}

// A GPU's process list is read when its utilization crosses zero (a job
// started or ended) and every processListInterval otherwise.
func TestProcessListReadWhenTheGPUTurns(t *testing.T) {
	g := nvmlfake.Hopper(0)
	g.Util = nvml.Utilization{Gpu: 0}
	clk := newClock()
	b, _ := Open(nvmlfake.New(g), Options{Now: clk.now})
	defer b.Close()
	step := func() sample.GPU { t.Helper(); return procStep(t, b, clk) }
	pids := func(d sample.GPU) []uint32 {
		var out []uint32
		for _, p := range d.Processes {
			out = append(out, p.PID)
		}
		return out
	}
	step()
	reads := g.CallCount("GetComputeRunningProcesses")

	// A job starts: its context first, then its first kernel turns the GPU
	// busy, and that sample lists it.
	g.Lock()
	g.PIDs = []uint32{4242}
	g.Unlock()
	if d := step(); len(d.Processes) != 0 {
		t.Fatalf("idle GPU listed %v within the interval; want the list of the last read", pids(d))
	}
	g.Lock()
	g.Util = nvml.Utilization{Gpu: 80}
	g.Unlock()
	d := step()
	if got := pids(d); !slices.Equal(got, []uint32{4242}) {
		t.Fatalf("GPU turned busy: processes %v; want [4242]", got)
	}
	if n, _ := d.Values.Get(sample.ComputeProcesses); n != 1 {
		t.Errorf("compute processes %v; want 1", n)
	}

	// A second process joins the busy GPU: seen at the interval, not before.
	g.Lock()
	g.PIDs = []uint32{4242, 4343}
	g.Unlock()
	for i := 1; i < 5; i++ {
		if got := pids(step()); !slices.Equal(got, []uint32{4242}) {
			t.Fatalf("%d s after the read: processes %v; want [4242] until the interval", i, got)
		}
	}
	if got := pids(step()); !slices.Equal(got, []uint32{4242, 4343}) {
		t.Fatalf("at the interval: processes %v; want both", got)
	}

	// The job ends: the GPU turns idle and the list is read at once.
	g.Lock()
	g.PIDs, g.Util = nil, nvml.Utilization{Gpu: 0}
	g.Unlock()
	if got := pids(step()); len(got) != 0 {
		t.Fatalf("GPU turned idle: processes %v; want none", got)
	}
	if n := g.CallCount("GetComputeRunningProcesses") - reads; n != 3 {
		t.Errorf("%d reads of the process list after the first; want 3 (two turns and one interval)", n)
	}
}

// failOnce answers GetComputeRunningProcesses with ERROR_UNKNOWN once.
type failOnce struct {
	nvml.Device
	fail bool
}

func (f *failOnce) GetComputeRunningProcesses() ([]nvml.ProcessInfo, nvml.Return) {
	if f.fail {
		f.fail = false
		return nil, nvml.ERROR_UNKNOWN
	}
	return f.Device.GetComputeRunningProcesses()
}

func procStep(t *testing.T, b *Backend, clk *clock) sample.GPU {
	t.Helper()
	clk.advance(time.Second)
	s, err := b.Sample(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return s.Devices[0]
}

// openBusyWithJob opens a backend on one GPU busy with one process, 4242.
func openBusyWithJob(t *testing.T) (*nvmlfake.GPU, *Backend, *clock) {
	t.Helper()
	g := nvmlfake.Hopper(0)
	g.Util, g.PIDs = nvml.Utilization{Gpu: 90}, []uint32{4242}
	clk := newClock()
	b, err := Open(nvmlfake.New(g), Options{Now: clk.now})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return g, b, clk
}

// One failed process query on a busy GPU whose job runs on costs one sample
// without the list, not an interval of them (found by review).
func TestProcessQueryFailureReadAgain(t *testing.T) {
	_, b, clk := openBusyWithJob(t)
	f := &failOnce{Device: b.devices[0].h}
	b.devices[0].h = f
	procStep(t, b, clk) // first read: [4242]
	for range 4 {
		procStep(t, b, clk)
	}
	f.fail = true
	if d := procStep(t, b, clk); len(d.Processes) != 0 {
		t.Fatalf("the failed read listed %v", d.Processes)
	}
	for i := 1; i < 5; i++ {
		d := procStep(t, b, clk)
		if _, ok := d.Values.Get(sample.ComputeProcesses); len(d.Processes) != 1 || !ok {
			t.Errorf("%d s after one failed query (the query answers again): processes %v, compute_processes known %v; want [4242]",
				i, d.Processes, ok)
		}
	}
}

// A job's process outlives its last kernel (teardown, checkpoint, exit): the
// GPU turns idle first and the read on that turn still lists it; its exit a
// second later is seen at once, since an idle GPU with processes is read
// every sample (found by review).
func TestProcessListJobEndAfterLastKernel(t *testing.T) {
	g, b, clk := openBusyWithJob(t)
	procStep(t, b, clk)
	procStep(t, b, clk)
	g.Lock()
	g.Util = nvml.Utilization{Gpu: 0} // last kernel done, process tearing down
	g.Unlock()
	if d := procStep(t, b, clk); len(d.Processes) != 1 {
		t.Fatalf("teardown sample: %v", d.Processes)
	}
	g.Lock()
	g.PIDs = nil // the process exits
	g.Unlock()
	for i := 1; i < 5; i++ {
		if d := procStep(t, b, clk); len(d.Processes) != 0 {
			t.Errorf("%d s after the job's process exited: still listed %v", i, d.Processes)
		}
	}
}
