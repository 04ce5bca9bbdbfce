package nvmlgpu

import (
	"context"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/gpudiag/gpudiag/gpu/nvmlgpu/nvmlfake"
	"github.com/gpudiag/gpudiag/sample"
)

func sampleOne(t *testing.T, b *Backend, clk *clock, d time.Duration) sample.GPU {
	t.Helper()
	clk.advance(d)
	s, err := b.Sample(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return s.Devices[0]
}

func eccCount(g sample.GPU, loc, counter, typ string) (float64, bool) {
	for _, c := range g.ECCErrors {
		if c.Location == loc && c.Counter == counter && c.Type == typ {
			return c.Count, true
		}
	}
	return 0, false
}

// What an H200 reports reaches the sample in base units: the memory
// temperature, the time held down per clock event reason (ns → s), the ECC
// totals volatile and aggregate, ECC by location (DRAM and SRAM only), the
// per-link NVLink errors by kind, free and reserved memory, the decoder's
// utilization; what it does not report (CRC data errors, the other ECC
// locations, here the encoder) is not in the sample, not as 0.
func TestHealthCountersRead(t *testing.T) {
	g := nvmlfake.Hopper(0)
	g.Fields[nvmlfake.FieldKey{ID: nvml.FI_DEV_MEMORY_TEMP}] = 47
	g.Fields[nvmlfake.FieldKey{ID: nvml.FI_DEV_CLOCKS_EVENT_REASON_SW_POWER_CAP}] = 2_500_000_000
	g.Fields[nvmlfake.FieldKey{ID: nvml.FI_DEV_CLOCKS_EVENT_REASON_HW_THERM_SLOWDOWN}] = 1_000_000
	g.Fields[nvmlfake.FieldKey{ID: nvml.FI_DEV_NVLINK_ERROR_DL_CRC, Scope: 7}] = 12
	g.Fields[nvmlfake.FieldKey{ID: nvml.FI_DEV_NVLINK_ERROR_DL_REPLAY, Scope: 7}] = 3
	g.Fields[nvmlfake.FieldKey{ID: nvml.FI_DEV_NVLINK_ERROR_DL_RECOVERY, Scope: 17}] = 1
	g.ECCCorr, g.ECCUncorr, g.ECCCorrAgg, g.ECCUncorrAgg = 5, 0, 40, 2
	g.MemoryErrors[nvmlfake.MemoryErrorKey{Type: nvml.MEMORY_ERROR_TYPE_CORRECTED, Counter: nvml.VOLATILE_ECC, Location: nvml.MEMORY_LOCATION_DRAM}] = 5
	g.MemoryErrors[nvmlfake.MemoryErrorKey{Type: nvml.MEMORY_ERROR_TYPE_UNCORRECTED, Counter: nvml.AGGREGATE_ECC, Location: nvml.MEMORY_LOCATION_SRAM}] = 2
	g.MemTotal, g.MemUsed, g.MemReserved = 80<<30, 10<<30, 512<<20
	g.DecoderPct = 35
	g.NoEncoder = true
	clk := newClock()
	b, err := Open(nvmlfake.New(g), Options{Now: clk.now})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	d := sampleOne(t, b, clk, time.Second)
	for f, want := range map[sample.Field]float64{
		sample.MemoryTemperatureCelsius:           47,
		sample.ClockEventSWPowerCapSecondsTotal:   2.5,
		sample.ClockEventHWThermalSecondsTotal:    0.001,
		sample.ClockEventHWPowerBrakeSecondsTotal: 0,
		sample.ECCCorrectedErrorsTotal:            5,
		sample.ECCUncorrectedErrorsTotal:          0,
		sample.ECCCorrectedAggregateTotal:         40,
		sample.ECCUncorrectedAggregateTotal:       2,
		sample.MemoryTotalBytes:                   80 << 30,
		sample.MemoryUsedBytes:                    10 << 30,
		sample.MemoryReservedBytes:                512 << 20,
		sample.MemoryFreeBytes:                    80<<30 - 10<<30 - 512<<20,
		sample.DecoderUtilization:                 0.35,
	} {
		if x := get(t, d, f); !near(x, want) {
			t.Errorf("%s = %v; want %v", f, x, want)
		}
	}
	if _, ok := d.Values.Get(sample.EncoderUtilization); ok {
		t.Error("an encoder the GPU cannot measure was read")
	}
	if x, ok := eccCount(d, "dram", sample.ECCVolatile, sample.ECCCorrected); !ok || x != 5 {
		t.Errorf("DRAM volatile corrected %v %v", x, ok)
	}
	if x, ok := eccCount(d, "sram", sample.ECCAggregate, sample.ECCUncorrected); !ok || x != 2 {
		t.Errorf("SRAM aggregate uncorrected %v %v", x, ok)
	}
	if len(d.ECCErrors) != 8 {
		t.Errorf("%d ECC counters %v; want DRAM and SRAM's 8", len(d.ECCErrors), d.ECCErrors)
	}
	if len(d.Links) != 18 {
		t.Fatalf("%d links", len(d.Links))
	}
	for _, l := range d.Links {
		want := map[sample.NVLinkErrorKind]float64{sample.NVLinkCRCFlit: 0, sample.NVLinkReplay: 0, sample.NVLinkRecovery: 0}
		switch l.Link {
		case 7:
			want[sample.NVLinkCRCFlit], want[sample.NVLinkReplay] = 12, 3
		case 17:
			want[sample.NVLinkRecovery] = 1
		}
		for k := range sample.NumNVLinkErrorKinds {
			x, ok := l.Errors.Get(k)
			w, read := want[k]
			if ok != read || x != w {
				t.Errorf("link %d %s = %v, %v; want %v, %v", l.Link, k, x, ok, w, read)
			}
		}
	}
	// Carried between slow reads, the per-link ones also between the
	// slow reads before linkErrorInterval, and read again after it.
	g.Lock()
	g.Fields[nvmlfake.FieldKey{ID: nvml.FI_DEV_NVLINK_ERROR_DL_CRC, Scope: 7}] = 20
	g.Unlock()
	d = sampleOne(t, b, clk, time.Second)
	if x, _ := d.Links[7].Errors.Get(sample.NVLinkCRCFlit); x != 12 || len(d.ECCErrors) != 8 {
		t.Errorf("between slow reads: crc_flit %v, %d ECC counters", x, len(d.ECCErrors))
	}
	d = sampleOne(t, b, clk, DefaultSlowInterval)
	if x, _ := d.Links[7].Errors.Get(sample.NVLinkCRCFlit); x != 12 || len(d.ECCErrors) != 8 {
		t.Errorf("slow read before linkErrorInterval: crc_flit %v, %d ECC counters", x, len(d.ECCErrors))
	}
	d = sampleOne(t, b, clk, linkErrorInterval)
	if x, _ := d.Links[7].Errors.Get(sample.NVLinkCRCFlit); x != 20 {
		t.Errorf("after linkErrorInterval: crc_flit %v; want 20", x)
	}
}

// A counter whose field the GPU does not answer is read by its query, and
// one neither answers is not asked for again and is logged once, with the
// others of its GPU, in one line.
func TestHealthCountersFallBackToQueriesThenLeftOut(t *testing.T) {
	g := nvmlfake.Hopper(0)
	g.NVLinks = 2
	g.Fields = map[nvmlfake.FieldKey]uint64{{ID: nvml.FI_DEV_MEMORY_TEMP}: 40} // no clock times, no NVLink fields
	g.NVLinkErrors[nvmlfake.NVLinkErrorKey{Link: 1, Counter: nvml.NVLINK_ERROR_DL_REPLAY}] = 9
	core, logs := observer.New(zap.InfoLevel)
	clk := newClock()
	b, err := Open(nvmlfake.New(g), Options{Now: clk.now, Logger: zap.New(core)})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	for range 3 {
		d := sampleOne(t, b, clk, linkErrorInterval)
		if x, ok := d.Links[1].Errors.Get(sample.NVLinkReplay); !ok || x != 9 {
			t.Fatalf("replay by query %v %v", x, ok)
		}
		if _, ok := d.Links[0].Errors.Get(sample.NVLinkReplay); ok {
			t.Fatal("a counter nothing answered was read")
		}
		if _, ok := d.Values.Get(sample.ClockEventSWPowerCapSecondsTotal); ok {
			t.Fatal("an unsupported clock event time was read")
		}
	}
	// The first read asked each link's four counters by query (none has a
	// field here); the next two only link 1's replay counter.
	if n := g.CallCount("GetNvLinkErrorCounter"); n != 2*4+2 {
		t.Errorf("GetNvLinkErrorCounter called %d times; want 10", n)
	}
	lines := logs.FilterMessage("GPU health counters not supported; not exported").Filter(func(e observer.LoggedEntry) bool {
		return e.ContextMap()["counters"] != "encoder_utilization" // the query of its own, logged by itself
	}).All()
	if len(lines) != 1 {
		t.Fatalf("%d log lines; want 1", len(lines))
	}
	got := lines[0].ContextMap()["counters"].(string)
	for _, want := range []string{"clock_event_sw_power_cap", "nvlink_crc_flit", "nvlink_crc_data"} {
		if !slices.Contains(strings.Split(got, ","), want) {
			t.Errorf("logged %q; lacks %s", got, want)
		}
	}
}

// ECC counters mean nothing with ECC off and are not asked for; the GPU
// comes back from a reset with ECC on and they are planned then.
func TestECCCountersFollowTheECCMode(t *testing.T) {
	g := nvmlfake.Hopper(0)
	g.ECCOn = false
	clk := newClock()
	b, err := Open(nvmlfake.New(g), Options{Now: clk.now})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	d := sampleOne(t, b, clk, time.Second)
	if len(d.ECCErrors) != 0 || g.CallCount("GetMemoryErrorCounter") != 0 {
		t.Fatalf("ECC off: %v, %d queries", d.ECCErrors, g.CallCount("GetMemoryErrorCounter"))
	}
	if _, ok := d.Values.Get(sample.ECCCorrectedAggregateTotal); ok {
		t.Fatal("ECC off: an aggregate total was read")
	}
	g.Lock()
	g.ECCOn, g.ECCCorrAgg = true, 3
	g.Unlock()
	d = sampleOne(t, b, clk, modesInterval)
	if x, ok := d.Values.Get(sample.ECCCorrectedAggregateTotal); !ok || x != 3 || len(d.ECCErrors) != 8 {
		t.Fatalf("ECC on: aggregate %v %v, %d by location", x, ok, len(d.ECCErrors))
	}
}

// A driver without nvmlDeviceGetMemoryInfo_v2 (before R510) still gives
// used, free and total memory; reserved is not known, not 0.
func TestMemoryWithoutTheV2Call(t *testing.T) {
	g := nvmlfake.Hopper(0)
	g.MemoryV2Unsupported = true
	g.MemTotal, g.MemUsed, g.MemReserved = 80<<30, 10<<30, 512<<20
	clk := newClock()
	b, _ := Open(nvmlfake.New(g), Options{Now: clk.now})
	defer b.Close()
	for range 2 {
		d := sampleOne(t, b, clk, DefaultSlowInterval)
		if used, free := get(t, d, sample.MemoryUsedBytes), get(t, d, sample.MemoryFreeBytes); used != 10<<30+512<<20 || used+free != 80<<30 {
			t.Fatalf("used %v free %v", used, free)
		}
		if _, ok := d.Values.Get(sample.MemoryReservedBytes); ok {
			t.Fatal("reserved memory read without the v2 call")
		}
	}
	if n := g.CallCount("GetMemoryInfo_v2"); n != 1 {
		t.Fatalf("GetMemoryInfo_v2 asked %d times; once is enough to know", n)
	}
}

// A MIG GPU's GPU instances each get their activity from GPM per GPU
// instance, named by their ID, with their MIG devices; the whole GPU's
// readings go on. Buffers are freed on Close.
func TestMIGInstancesActivity(t *testing.T) {
	g := nvmlfake.Hopper(0)
	g.MIG = []string{"MIG-a", "MIG-b", "MIG-c"}
	g.MIGInstance = []int{1, 1, 5} // two compute instances in GPU instance 1
	g.MIGGPM = map[int]map[nvml.GpmMetricId]float64{
		1: {nvml.GPM_METRIC_SM_UTIL: 80, nvml.GPM_METRIC_ANY_TENSOR_UTIL: 60, nvml.GPM_METRIC_DRAM_BW_UTIL: 30, nvml.GPM_METRIC_SM_OCCUPANCY: 20},
		5: {nvml.GPM_METRIC_SM_UTIL: 0},
	}
	lib := nvmlfake.New(g)
	clk := newClock()
	b, err := Open(lib, Options{Now: clk.now})
	if err != nil {
		t.Fatal(err)
	}
	d := sampleOne(t, b, clk, time.Second) // the first GPM sample of each instance
	if len(d.MIGInstances) != 2 || !math.IsNaN(d.MIGInstances[0].SMActive) {
		t.Fatalf("first sample: %+v", d.MIGInstances)
	}
	d = sampleOne(t, b, clk, time.Second)
	m1, m5 := d.MIGInstances[0], d.MIGInstances[1]
	if m1.GPUInstance != 1 || len(m1.Devices) != 2 || m1.Devices[1] != "MIG-b" || m1.SMActive != 0.8 || m1.TensorActive != 0.6 ||
		m1.DRAMActive != 0.3 || m1.SMOccupancy != 0.2 || m1.IntervalSeconds != 1 {
		t.Errorf("instance 1: %+v", m1)
	}
	if m5.GPUInstance != 5 || m5.Devices[0] != "MIG-c" || m5.SMActive != 0 || !math.IsNaN(m5.TensorActive) {
		t.Errorf("instance 5: %+v", m5)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if allocated, freed, _, _ := lib.Counts(); allocated != freed {
		t.Errorf("%d GPM buffers allocated, %d freed", allocated, freed)
	}
}

// A GPU without MIG has no instances and is never asked for one; a MIG
// GPU that does not support GPM per GPU instance lists its instances
// without activity, says so once, and is not asked again; --collector.gpu.gpm
// off asks for none.
func TestMIGInstancesWithoutGPM(t *testing.T) {
	plain := nvmlfake.Hopper(0)
	clk := newClock()
	b, _ := Open(nvmlfake.New(plain), Options{Now: clk.now})
	for range 3 {
		if d := sampleOne(t, b, clk, time.Second); d.MIGInstances != nil {
			t.Fatalf("a GPU without MIG: %+v", d.MIGInstances)
		}
	}
	b.Close()
	if n := plain.CallCount("GpmMigSampleGet"); n != 0 {
		t.Fatalf("GpmMigSampleGet called %d times on a GPU without MIG", n)
	}

	mig := nvmlfake.Hopper(0)
	mig.MIG = []string{"MIG-a"}
	core, logs := observer.New(zap.InfoLevel)
	b, _ = Open(nvmlfake.New(mig), Options{Now: clk.now, Logger: zap.New(core)})
	for range 3 {
		d := sampleOne(t, b, clk, time.Second)
		if len(d.MIGInstances) != 1 || d.MIGInstances[0].GPUInstance != 1 || !math.IsNaN(d.MIGInstances[0].SMActive) {
			t.Fatalf("MIG without GPM per instance: %+v", d.MIGInstances)
		}
	}
	b.Close()
	if n := mig.CallCount("GpmMigSampleGet"); n != 1 {
		t.Errorf("GpmMigSampleGet called %d times; once tells", n)
	}
	if n := logs.FilterMessage("GPM per GPU instance not supported on this GPU; MIG instances' activity is not exported").Len(); n != 1 {
		t.Errorf("logged %d times", n)
	}

	off := nvmlfake.Hopper(0)
	off.MIG = []string{"MIG-a"}
	off.MIGGPM = map[int]map[nvml.GpmMetricId]float64{1: {nvml.GPM_METRIC_SM_UTIL: 50}}
	b, _ = Open(nvmlfake.New(off), Options{Now: clk.now, DisableGPM: true})
	sampleOne(t, b, clk, time.Second)
	sampleOne(t, b, clk, time.Second)
	b.Close()
	if n := off.CallCount("GpmMigSampleGet"); n != 0 {
		t.Errorf("GPM off: GpmMigSampleGet called %d times", n)
	}
}

// One GetFieldValues call reads every link's counters the GPU answers by
// field; a field the batch answers NOT_SUPPORTED leaves the others as
// read, and its counter is read by its query where that answers (the same
// value) and otherwise not at all: unmeasured, not 0. The data CRC counter
// rides in the batch on a GPU that answers its per-link field (links
// 0-11; an H200 does not).
func TestLinkErrorBatchKeepsWhatItAnswers(t *testing.T) {
	g := nvmlfake.Hopper(0)
	g.NVLinks = 4
	g.Fields = hopperLinkFields(4)
	delete(g.Fields, nvmlfake.FieldKey{ID: nvml.FI_DEV_NVLINK_ERROR_DL_CRC, Scope: 2})
	delete(g.Fields, nvmlfake.FieldKey{ID: nvml.FI_DEV_NVLINK_ERROR_DL_REPLAY, Scope: 1})
	g.Fields[nvmlfake.FieldKey{ID: nvml.FI_DEV_NVLINK_ERROR_DL_REPLAY, Scope: 3}] = 4
	g.NVLinkErrors[nvmlfake.NVLinkErrorKey{Link: 1, Counter: nvml.NVLINK_ERROR_DL_REPLAY}] = 7
	for l := range 4 {
		g.Fields[nvmlfake.FieldKey{ID: nvml.FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_L0 + uint32(l), Scope: uint32(l)}] = uint64(10 + l)
	}
	clk := newClock()
	b, err := Open(nvmlfake.New(g), Options{Now: clk.now})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	check := func(d sample.GPU) {
		t.Helper()
		for _, l := range d.Links {
			for k, want := range map[sample.NVLinkErrorKind]float64{sample.NVLinkCRCFlit: 0, sample.NVLinkCRCData: float64(10 + l.Link),
				sample.NVLinkReplay: 0, sample.NVLinkRecovery: 0} {
				switch {
				case k == sample.NVLinkReplay && l.Link == 1:
					want = 7
				case k == sample.NVLinkReplay && l.Link == 3:
					want = 4
				}
				x, ok := l.Errors.Get(k)
				if k == sample.NVLinkCRCFlit && l.Link == 2 {
					if ok {
						t.Errorf("link 2 crc_flit, answered by nothing, = %v", x)
					}
					continue
				}
				if !ok || x != want {
					t.Errorf("link %d %s = %v, %v; want %v", l.Link, k, x, ok, want)
				}
			}
		}
	}
	check(sampleOne(t, b, clk, time.Second))
	check(sampleOne(t, b, clk, linkErrorInterval))
	// Planning asked link 2's flit CRC and link 1's replay counters by
	// query; the read after it link 1's replay counter only.
	if n := g.CallCount("GetNvLinkErrorCounter"); n != 3 {
		t.Errorf("GetNvLinkErrorCounter called %d times; want 3", n)
	}
	if n := g.CallCount("GetFieldValues"); n != 2 {
		t.Errorf("GetFieldValues called %d times; want one a slow read", n)
	}
}

// hopperLinkFields are the per-link fields an H200 answers for n links,
// all 0.
func hopperLinkFields(n int) map[nvmlfake.FieldKey]uint64 {
	f := map[nvmlfake.FieldKey]uint64{}
	for l := range n {
		for _, id := range []uint32{nvml.FI_DEV_NVLINK_ERROR_DL_REPLAY, nvml.FI_DEV_NVLINK_ERROR_DL_RECOVERY, nvml.FI_DEV_NVLINK_ERROR_DL_CRC} {
			f[nvmlfake.FieldKey{ID: id, Scope: uint32(l)}] = 0
		}
	}
	return f
}

// The per-link counters, read every linkErrorInterval, are read at once
// when an XID is reported or a link goes down, and their last read is
// exported in between.
func TestLinkErrorsReadAtOnceAfterAnXIDOrALinkChange(t *testing.T) {
	g := nvmlfake.Hopper(0)
	lib := nvmlfake.New(g)
	var xids []nvml.EventData
	lib.Events = func() (nvml.EventSet, nvml.Return) {
		return &mock.EventSet{
			WaitFunc: func(uint32) (nvml.EventData, nvml.Return) {
				if len(xids) == 0 {
					return nvml.EventData{}, nvml.ERROR_TIMEOUT
				}
				e := xids[0]
				xids = xids[1:]
				e.Device, _ = lib.DeviceGetHandleByIndex(0)
				return e, nvml.SUCCESS
			},
			FreeFunc: func() nvml.Return { return nvml.SUCCESS },
		}, nvml.SUCCESS
	}
	clk := newClock()
	b, err := Open(lib, Options{Now: clk.now})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	replays := func(d sample.GPU) float64 {
		t.Helper()
		x, ok := d.Links[5].Errors.Get(sample.NVLinkReplay)
		if !ok {
			t.Fatal("link 5's replays not exported")
		}
		return x
	}
	setReplays := func(n uint64) {
		g.Lock()
		g.Fields[nvmlfake.FieldKey{ID: nvml.FI_DEV_NVLINK_ERROR_DL_REPLAY, Scope: 5}] = n
		g.Unlock()
	}
	sampleOne(t, b, clk, time.Second)
	setReplays(3)
	if x := replays(sampleOne(t, b, clk, DefaultSlowInterval)); x != 0 {
		t.Fatalf("replays %v at a slow read before linkErrorInterval; want the last read, 0", x)
	}
	xids = append(xids, nvml.EventData{EventType: nvml.EventTypeXidCriticalError, EventData: 74})
	if x := replays(sampleOne(t, b, clk, time.Second)); x != 3 {
		t.Fatalf("replays %v at the sample of an XID; want 3", x)
	}
	setReplays(5)
	g.Lock()
	g.LinksDown = map[int]bool{9: true}
	g.Unlock()
	if x := replays(sampleOne(t, b, clk, DefaultSlowInterval)); x != 5 {
		t.Fatalf("replays %v at the slow read that saw link 9 go down; want 5", x)
	}
	// As many links up as before, but not the same.
	setReplays(6)
	g.Lock()
	g.LinksDown = map[int]bool{4: true}
	g.Unlock()
	if x := replays(sampleOne(t, b, clk, DefaultSlowInterval)); x != 6 {
		t.Fatalf("replays %v at the slow read that saw link 9 come back and 4 go down; want 6", x)
	}
}
