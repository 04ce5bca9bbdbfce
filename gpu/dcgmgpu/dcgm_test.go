package dcgmgpu

import (
	"context"
	"errors"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/NVIDIA/go-dcgm/pkg/dcgm"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/gpudiag/gpudiag/sample"
)

// fakeClient serves canned values the way DCGM would: a watched field with no
// canned value reads blank, a field nobody watches reads NOT_WATCHED.
type fakeClient struct {
	mu sync.Mutex

	gpus    []uint
	infos   map[uint]dcgm.Device
	infoErr map[uint]error
	status  map[uint]dcgm.EntityStatus
	links   []dcgm.NvLinkStatus
	linkErr error

	values    map[uint]map[dcgm.Short]value
	latestErr error          // a read of several GPUs fails
	gpuErr    map[uint]error // a read of this GPU alone fails

	// watchErr decides whether watching a field set fails.
	watchErr func(fields []dcgm.Short) error

	next        uintptr
	fieldGroups map[uintptr][]dcgm.Short
	watching    map[uintptr]bool
	groups      map[uintptr]bool
	watchCalls  [][]dcgm.Short
	every       map[uintptr]time.Duration // by field group
	latestCalls int
	shutdowns   int
}

func newFake(gpus ...uint) *fakeClient {
	f := &fakeClient{
		gpus:        gpus,
		infos:       map[uint]dcgm.Device{},
		infoErr:     map[uint]error{},
		status:      map[uint]dcgm.EntityStatus{},
		values:      map[uint]map[dcgm.Short]value{},
		gpuErr:      map[uint]error{},
		fieldGroups: map[uintptr][]dcgm.Short{},
		watching:    map[uintptr]bool{},
		groups:      map[uintptr]bool{},
	}
	for _, id := range gpus {
		f.infos[id] = dcgm.Device{
			GPU:  id,
			UUID: "GPU-" + string(rune('a'+id)),
			PCI:  dcgm.PCIInfo{BusID: "00000000:3B:00.0"},
			Identifiers: dcgm.DeviceIdentifiers{
				Model: "NVIDIA A100-SXM4-80GB", DriverVersion: "550.54.15",
			},
		}
		f.values[id] = map[dcgm.Short]value{}
	}
	return f
}

func (f *fakeClient) set(gpu uint, field dcgm.Short, v value) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.values[gpu][field] = v
}

func (f *fakeClient) SupportedGPUs() ([]uint, error) { return f.gpus, nil }

func (f *fakeClient) DeviceInfo(gpu uint) (dcgm.Device, error) {
	if err := f.infoErr[gpu]; err != nil {
		return dcgm.Device{}, err
	}
	return f.infos[gpu], nil
}

func (f *fakeClient) GPUStatus(gpu uint) dcgm.EntityStatus {
	f.mu.Lock()
	defer f.mu.Unlock()
	if st, ok := f.status[gpu]; ok {
		return st
	}
	return dcgm.EntityStatusOk
}

func (f *fakeClient) NvLinkStatus() ([]dcgm.NvLinkStatus, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.links), f.linkErr
}

func (f *fakeClient) CreateGroup(name string, gpus []uint) (dcgm.GroupHandle, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.next++
	var g dcgm.GroupHandle
	g.SetHandle(f.next)
	f.groups[f.next] = true
	return g, nil
}

func (f *fakeClient) DestroyGroup(g dcgm.GroupHandle) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.groups[g.GetHandle()] {
		return errors.New("no such group")
	}
	delete(f.groups, g.GetHandle())
	return nil
}

func (f *fakeClient) CreateFieldGroup(name string, fields []dcgm.Short) (dcgm.FieldHandle, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.next++
	var h dcgm.FieldHandle
	h.SetHandle(f.next)
	f.fieldGroups[f.next] = slices.Clone(fields)
	return h, nil
}

func (f *fakeClient) DestroyFieldGroup(h dcgm.FieldHandle) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.fieldGroups[h.GetHandle()]; !ok {
		return errors.New("no such field group")
	}
	delete(f.fieldGroups, h.GetHandle())
	return nil
}

func (f *fakeClient) Watch(h dcgm.FieldHandle, g dcgm.GroupHandle, every, keepAge time.Duration) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	fields := f.fieldGroups[h.GetHandle()]
	f.watchCalls = append(f.watchCalls, fields)
	// The update interval, or healthInterval for the health fields.
	if (every != time.Second && every != healthInterval) || keepAge < every {
		return errors.New("unexpected watch timing")
	}
	if f.every == nil {
		f.every = map[uintptr]time.Duration{}
	}
	f.every[h.GetHandle()] = every
	if f.watchErr != nil {
		if err := f.watchErr(fields); err != nil {
			return err
		}
	}
	f.watching[h.GetHandle()] = true
	return nil
}

func (f *fakeClient) Unwatch(h dcgm.FieldHandle, g dcgm.GroupHandle) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.watching, h.GetHandle())
	return nil
}

func (f *fakeClient) Latest(gpus []uint, fields []dcgm.Short) ([]value, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.latestCalls++
	if len(gpus) > 1 && f.latestErr != nil {
		return nil, f.latestErr
	}
	if len(gpus) == 1 && f.gpuErr[gpus[0]] != nil {
		return nil, f.gpuErr[gpus[0]]
	}
	watched := map[dcgm.Short]bool{}
	for h := range f.watching {
		for _, id := range f.fieldGroups[h] {
			watched[id] = true
		}
	}
	var out []value
	// Reverse order: DCGM does not promise any.
	for i := len(gpus) - 1; i >= 0; i-- {
		id := gpus[i]
		for _, field := range fields {
			v, ok := f.values[id][field]
			switch {
			case ok:
			case watched[field]:
				v = blankInt()
			default:
				v = value{status: dcgm.DCGM_ST_NOT_WATCHED}
			}
			v.gpu, v.field = id, field
			out = append(out, v)
		}
	}
	return out, nil
}

func (f *fakeClient) Shutdown() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.shutdowns++
	return nil
}

func dbl(x float64) value { return value{kind: dcgm.DCGM_FT_DOUBLE, f: x} }
func i64(x int64) value   { return value{kind: dcgm.DCGM_FT_INT64, i: x} }
func str(s string) value  { return value{kind: dcgm.DCGM_FT_STRING, s: s} }
func blankInt() value     { return i64(dcgm.DCGM_FT_INT64_BLANK) }
func failed(st int) value { return value{status: st} }
func at(v value, ts int64) value {
	v.ts = ts
	return v
}

// fakeClock advances only when told.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

func openFake(t *testing.T, f *fakeClient, log *zap.Logger) (*Backend, *fakeClock) {
	t.Helper()
	clock := &fakeClock{t: time.Unix(1_700_000_000, 0)}
	if log == nil {
		log = zap.NewNop()
	}
	b, err := open(f, Options{Logger: log, Now: clock.Now})
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return b, clock
}

func sampleOK(t *testing.T, b *Backend) *sample.GPUs {
	t.Helper()
	s, err := b.Sample(context.Background())
	if err != nil {
		t.Fatalf("Sample: %v", err)
	}
	return s
}

func wantValue(t *testing.T, g *sample.GPU, f sample.Field, want float64) {
	t.Helper()
	got, ok := g.Values.Get(f)
	if math.IsNaN(want) {
		if ok {
			t.Errorf("gpu %d %s = %v, want unavailable", g.Index, f, got)
		}
		return
	}
	if !ok || got != want {
		t.Errorf("gpu %d %s = %v (read %v), want %v", g.Index, f, got, ok, want)
	}
}

func TestSampleConvertsUnits(t *testing.T) {
	f := newFake(0)
	f.links = []dcgm.NvLinkStatus{
		{ParentId: 0, ParentType: dcgm.FE_GPU, Index: 0, State: dcgm.LS_UP},
		{ParentId: 0, ParentType: dcgm.FE_GPU, Index: 1, State: dcgm.LS_DOWN},
		{ParentId: 0, ParentType: dcgm.FE_GPU, Index: 2, State: dcgm.LS_NOT_SUPPORTED},
	}
	canned := map[dcgm.Short]value{
		dcgm.DCGM_FI_PROF_SM_UTIL_RATIO:                    dbl(0.5),
		dcgm.DCGM_FI_PROF_SM_OCCUPANCY_RATIO:               dbl(0.4),
		dcgm.DCGM_FI_PROF_TENSOR_UTIL_RATIO:                dbl(0.93),
		dcgm.DCGM_FI_PROF_HMMA_UTIL_RATIO:                  dbl(0.9),
		dcgm.DCGM_FI_PROF_DRAM_UTIL_RATIO:                  dbl(0.25),
		dcgm.DCGM_FI_PROF_FP64_UTIL_RATIO:                  dbl(0),
		dcgm.DCGM_FI_PROF_FP32_UTIL_RATIO:                  dbl(0.125),
		dcgm.DCGM_FI_PROF_FP16_UTIL_RATIO:                  dbl(1.0000003), // DCGM overshoots
		dcgm.DCGM_FI_PROF_GR_ENGINE_UTIL_RATIO:             dbl(0.6),
		dcgm.DCGM_FI_PROF_PCIE_TX_BYTES:                    i64(1_500_000_000),
		dcgm.DCGM_FI_PROF_PCIE_RX_BYTES:                    i64(2_000_000_000),
		dcgm.DCGM_FI_PROF_NVLINK_TX_BYTES:                  i64(40_000_000_000),
		dcgm.DCGM_FI_PROF_NVLINK_RX_BYTES:                  i64(30_000_000_000),
		dcgm.DCGM_FI_PROF_NVLINK_L0_TX_BYTES:               i64(20_000_000_000),
		dcgm.DCGM_FI_PROF_NVLINK_L0_RX_BYTES:               i64(10_000_000_000),
		dcgm.DCGM_FI_PROF_NVLINK_L1_TX_BYTES:               i64(dcgm.DCGM_FT_INT64_BLANK),
		dcgm.DCGM_FI_DEV_GPU_UTIL_RATIO:                    i64(87),
		dcgm.DCGM_FI_DEV_MEM_COPY_UTIL:                     i64(30),
		dcgm.DCGM_FI_DEV_FB_USED:                           i64(5000),
		dcgm.DCGM_FI_DEV_FB_TOTAL:                          i64(81920),
		dcgm.DCGM_FI_DEV_SM_CLOCK:                          i64(1410),
		dcgm.DCGM_FI_DEV_MAX_SM_CLOCK:                      i64(1980),
		dcgm.DCGM_FI_DEV_MEM_CLOCK:                         i64(1593),
		dcgm.DCGM_FI_DEV_MAX_MEM_CLOCK:                     i64(1593),
		dcgm.DCGM_FI_DEV_CLOCKS_EVENT_REASONS:              i64(0x4 | 0x40),
		dcgm.DCGM_FI_DEV_BOARD_POWER_WATTS:                 dbl(250.5),
		dcgm.DCGM_FI_DEV_BOARD_POWER_LIMIT_ENFORCED_WATTS:  dbl(400),
		dcgm.DCGM_FI_DEV_BOARD_POWER_LIMIT_REQUESTED_WATTS: dbl(450),
		dcgm.DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION:          i64(123_456_789),
		dcgm.DCGM_FI_DEV_GPU_TEMP_CELSIUS:                  i64(65),
		dcgm.DCGM_FI_DEV_PCIE_LINK_GEN:                     i64(3),
		dcgm.DCGM_FI_DEV_PCIE_MAX_LINK_GEN:                 i64(4),
		dcgm.DCGM_FI_DEV_PCIE_LINK_WIDTH:                   i64(8),
		dcgm.DCGM_FI_DEV_PCIE_MAX_LINK_WIDTH:               i64(16),
		dcgm.DCGM_FI_DEV_PCIE_REPLAY_TOTAL:                 i64(3),
		dcgm.DCGM_FI_DEV_ECC_MODE:                          i64(1),
		dcgm.DCGM_FI_DEV_ECC_SBE_VOL_TOTAL:                 i64(7),
		dcgm.DCGM_FI_DEV_ECC_DBE_VOL_TOTAL:                 i64(1),
		dcgm.DCGM_FI_DEV_ROW_REMAP_CORRECTABLE_TOTAL:       i64(2),
		dcgm.DCGM_FI_DEV_ROW_REMAP_UNCORRECTABLE_TOTAL:     i64(1),
		dcgm.DCGM_FI_DEV_ROW_REMAP_PENDING:                 i64(1),
		dcgm.DCGM_FI_DEV_ROW_REMAP_FAILED:                  i64(0),
		dcgm.DCGM_FI_DEV_GPU_PERSISTENCE_MODE:              i64(1),
		dcgm.DCGM_FI_DEV_MIG_MODE:                          i64(0),
	}
	for id, v := range canned {
		f.set(0, id, v)
	}
	b, clock := openFake(t, f, nil)

	s := sampleOK(t, b)
	if s.Backend != "dcgm" || s.DriverVersion != "550.54.15" || len(s.Devices) != 1 {
		t.Fatalf("got backend %q driver %q %d devices", s.Backend, s.DriverVersion, len(s.Devices))
	}
	g := &s.Devices[0]
	if !g.Up || g.Error != "" {
		t.Fatalf("GPU down: %q", g.Error)
	}
	if g.UUID != "GPU-a" || g.PCIBusID != "0000:3b:00.0" || g.Model != "NVIDIA A100-SXM4-80GB" {
		t.Errorf("identity = %q %q %q", g.UUID, g.PCIBusID, g.Model)
	}
	if g.ActivitySource != sample.SourceDCGM || g.LinkSource != sample.SourceDCGM {
		t.Errorf("sources = %q %q, want dcgm", g.ActivitySource, g.LinkSource)
	}
	if g.IntervalSeconds != 0 {
		t.Errorf("first IntervalSeconds = %v, want 0", g.IntervalSeconds)
	}
	for _, c := range []struct {
		f    sample.Field
		want float64
	}{
		{sample.SMActive, 0.5},
		{sample.SMOccupancy, 0.4},
		{sample.TensorActive, 0.93},
		{sample.TensorHMMAActive, 0.9},
		{sample.DRAMActive, 0.25},
		{sample.FP64Active, 0},
		{sample.FP32Active, 0.125},
		{sample.FP16Active, 1},
		{sample.GraphicsActive, 0.6},
		{sample.PCIeTxBytesPerSecond, 1.5e9},
		{sample.PCIeRxBytesPerSecond, 2e9},
		{sample.NVLinkTxBytesPerSecond, 4e10},
		{sample.NVLinkRxBytesPerSecond, 3e10},
		{sample.Utilization, 0.87},
		{sample.MemoryUtilization, 0.3},
		{sample.MemoryUsedBytes, 5000 * 1048576},
		{sample.MemoryTotalBytes, 81920 * 1048576},
		{sample.SMClockHertz, 1.41e9},
		{sample.SMClockMaxHertz, 1.98e9},
		{sample.MemoryClockHertz, 1.593e9},
		{sample.MemoryClockMaxHertz, 1.593e9},
		{sample.PowerWatts, 250.5},
		{sample.PowerLimitWatts, 400},
		{sample.EnergyJoulesTotal, 123456.789},
		{sample.TemperatureCelsius, 65},
		{sample.PCIeLinkGeneration, 3},
		{sample.PCIeLinkMaxGeneration, 4},
		{sample.PCIeLinkWidth, 8},
		{sample.PCIeLinkMaxWidth, 16},
		{sample.PCIeReplaysTotal, 3},
		{sample.ECCEnabled, 1},
		{sample.ECCCorrectedErrorsTotal, 7},
		{sample.ECCUncorrectedErrorsTotal, 1},
		{sample.RemappedRowsCorrectable, 2},
		{sample.RemappedRowsUncorrectable, 1},
		{sample.RowRemapPending, 1},
		{sample.RowRemapFailed, 0},
		{sample.PersistenceModeEnabled, 1},
		{sample.MIGModeEnabled, 0},
		{sample.ComputeProcesses, math.NaN()}, // DCGM has no simple process list
		{sample.SMActiveSecondsTotal, math.NaN()},
	} {
		wantValue(t, g, c.f, c.want)
	}
	if g.ClockEventReasons != 0x44 {
		t.Errorf("ClockEventReasons = %#x, want 0x44", g.ClockEventReasons)
	}
	if len(g.Links) != 2 {
		t.Fatalf("links = %+v, want links 0 and 1", g.Links)
	}
	l0, l1 := g.Links[0], g.Links[1]
	if l0.Link != 0 || !l0.Up || l0.TxBytesPerSecond != 2e10 || l0.RxBytesPerSecond != 1e10 {
		t.Errorf("link 0 = %+v", l0)
	}
	if l1.Link != 1 || l1.Up || !math.IsNaN(l1.TxBytesPerSecond) || !math.IsNaN(l1.RxBytesPerSecond) {
		t.Errorf("link 1 = %+v, want down with unknown rates", l1)
	}

	clock.Advance(2500 * time.Millisecond)
	f.mu.Lock()
	f.links[0].State = dcgm.LS_DOWN
	f.mu.Unlock()
	s = sampleOK(t, b)
	if got := s.Devices[0].IntervalSeconds; got != 2.5 {
		t.Errorf("second IntervalSeconds = %v, want 2.5", got)
	}
	if s.Devices[0].Links[0].Up {
		t.Error("link 0 still up after DCGM reported it down")
	}

	// A failed link query keeps the last known states.
	f.mu.Lock()
	f.links[0].State = dcgm.LS_UP
	f.linkErr = errors.New("hostengine busy")
	f.mu.Unlock()
	if s = sampleOK(t, b); s.Devices[0].Links[0].Up {
		t.Error("link state changed although the query failed")
	}
}

func TestBlankAndFailedValuesStayUnavailable(t *testing.T) {
	f := newFake(0)
	f.set(0, dcgm.DCGM_FI_DEV_FB_USED, i64(dcgm.DCGM_FT_INT64_BLANK))
	f.set(0, dcgm.DCGM_FI_DEV_FB_TOTAL, i64(dcgm.DCGM_FT_INT32_BLANK)) // 32-bit field, 32-bit sentinel
	f.set(0, dcgm.DCGM_FI_DEV_SM_CLOCK, i64(dcgm.DCGM_FT_INT32_NOT_SUPPORTED))
	f.set(0, dcgm.DCGM_FI_DEV_MEM_CLOCK, i64(dcgm.DCGM_FT_INT64_NOT_PERMISSIONED))
	f.set(0, dcgm.DCGM_FI_DEV_BOARD_POWER_WATTS, dbl(dcgm.DCGM_FT_FP64_BLANK))
	f.set(0, dcgm.DCGM_FI_PROF_SM_UTIL_RATIO, dbl(dcgm.DCGM_FT_FP64_NOT_FOUND))
	f.set(0, dcgm.DCGM_FI_PROF_TENSOR_UTIL_RATIO, dbl(math.NaN()))
	f.set(0, dcgm.DCGM_FI_DEV_GPU_TEMP_CELSIUS, failed(dcgm.DCGM_ST_NVML_ERROR)) // one field errors
	f.set(0, dcgm.DCGM_FI_DEV_CLOCKS_EVENT_REASONS, blankInt())
	f.set(0, dcgm.DCGM_FI_DEV_BOARD_POWER_LIMIT_ENFORCED_WATTS, dbl(dcgm.DCGM_FT_FP64_NOT_SUPPORTED))
	f.set(0, dcgm.DCGM_FI_DEV_BOARD_POWER_LIMIT_REQUESTED_WATTS, dbl(300))
	f.set(0, dcgm.DCGM_FI_DEV_ECC_MODE, i64(0))
	f.set(0, dcgm.DCGM_FI_DEV_ECC_SBE_VOL_TOTAL, i64(0))
	f.set(0, dcgm.DCGM_FI_DEV_GPU_UTIL_RATIO, i64(42))
	b, _ := openFake(t, f, nil)

	g := &sampleOK(t, b).Devices[0]
	if !g.Up {
		t.Fatalf("GPU down: %q", g.Error)
	}
	for _, field := range []sample.Field{
		sample.MemoryUsedBytes, sample.MemoryTotalBytes, sample.SMClockHertz, sample.MemoryClockHertz,
		sample.PowerWatts, sample.SMActive, sample.TensorActive, sample.TemperatureCelsius,
		sample.ECCCorrectedErrorsTotal, // ECC off
		sample.SMOccupancy,             // watched, never filled: blank
	} {
		wantValue(t, g, field, math.NaN())
	}
	wantValue(t, g, sample.Utilization, 0.42)
	wantValue(t, g, sample.PowerLimitWatts, 300) // enforced unsupported: requested
	wantValue(t, g, sample.ECCEnabled, 0)
	if g.ClockEventReasons != 0 {
		t.Errorf("ClockEventReasons = %#x from a blank", g.ClockEventReasons)
	}
}

func TestNumber(t *testing.T) {
	for _, c := range []struct {
		name string
		v    value
		want float64
		ok   bool
	}{
		{"double", dbl(0.93), 0.93, true},
		{"zero", i64(0), 0, true},
		{"int", i64(2_147_483_631), 2_147_483_631, true},
		{"int above the 32-bit sentinels", i64(2_147_483_636), 2_147_483_636, true},
		{"int32 blank", i64(dcgm.DCGM_FT_INT32_BLANK), 0, false},
		{"int32 not found", i64(dcgm.DCGM_FT_INT32_NOT_FOUND), 0, false},
		{"int32 not permissioned", i64(dcgm.DCGM_FT_INT32_NOT_PERMISSIONED), 0, false},
		{"int64 blank", i64(dcgm.DCGM_FT_INT64_BLANK), 0, false},
		{"int64 not supported", i64(dcgm.DCGM_FT_INT64_NOT_SUPPORTED), 0, false},
		{"fp64 blank", dbl(dcgm.DCGM_FT_FP64_BLANK), 0, false},
		{"fp64 not permissioned", dbl(dcgm.DCGM_FT_FP64_NOT_PERMISSIONED), 0, false},
		{"NaN", dbl(math.NaN()), 0, false},
		{"error status", value{kind: dcgm.DCGM_FT_INT64, i: 5, status: dcgm.DCGM_ST_NO_DATA}, 0, false},
		{"string", str("GPU-1"), 0, false},
	} {
		got, ok := number(c.v)
		if ok != c.ok || (ok && got != c.want) {
			t.Errorf("%s: number = %v, %v; want %v, %v", c.name, got, ok, c.want, c.ok)
		}
	}
}

func TestLostGPUIsDownOthersUp(t *testing.T) {
	f := newFake(0, 1, 2)
	for _, id := range []uint{0, 1, 2} {
		f.set(id, dcgm.DCGM_FI_DEV_FB_USED, i64(100))
	}
	b, _ := openFake(t, f, nil)

	// GPU 1: every field fails. GPU 2: DCGM marks it lost while its cache
	// still holds old values.
	for _, id := range b.fields {
		f.set(1, id, failed(dcgm.DCGM_ST_GPU_IS_LOST))
	}
	f.mu.Lock()
	f.status[2] = dcgm.EntityStatusLost
	f.mu.Unlock()

	s := sampleOK(t, b)
	if len(s.Devices) != 3 {
		t.Fatalf("%d devices", len(s.Devices))
	}
	if g := s.Devices[0]; !g.Up || g.Error != "" {
		t.Errorf("GPU 0 = up %v %q, want up", g.Up, g.Error)
	}
	for _, i := range []int{1, 2} {
		g := s.Devices[i]
		if g.Up || !strings.Contains(g.Error, "lost") {
			t.Errorf("GPU %d = up %v %q, want down and lost", i, g.Up, g.Error)
		}
		if g.UUID == "" || g.Index != i {
			t.Errorf("GPU %d lost its identity: %+v", i, g)
		}
		wantValue(t, &g, sample.MemoryUsedBytes, math.NaN())
	}
}

func TestNoGPUAnsweredIsAnError(t *testing.T) {
	f := newFake(0, 1)
	b, _ := openFake(t, f, nil)
	f.mu.Lock()
	f.latestErr = errors.New("connection lost")
	f.gpuErr[0] = errors.New("connection lost")
	f.gpuErr[1] = errors.New("connection lost")
	f.mu.Unlock()
	s, err := b.Sample(context.Background())
	if err == nil || s == nil || len(s.Devices) != 2 {
		t.Fatalf("Sample = %v, %v; want the down GPUs and an error", s, err)
	}
	if !strings.Contains(err.Error(), "connection lost") || s.Devices[0].Up || s.Devices[1].Up {
		t.Errorf("err %v, devices %+v", err, s.Devices)
	}
}

func TestFailedBatchReadIsRetriedPerGPU(t *testing.T) {
	f := newFake(0, 1)
	f.set(0, dcgm.DCGM_FI_DEV_GPU_TEMP_CELSIUS, i64(50))
	f.set(1, dcgm.DCGM_FI_DEV_GPU_TEMP_CELSIUS, i64(51))
	b, _ := openFake(t, f, nil)
	f.mu.Lock()
	f.latestErr = errors.New("one GPU spoils the batch")
	f.gpuErr[1] = errors.New("GPU is lost")
	f.mu.Unlock()

	s := sampleOK(t, b)
	if g := &s.Devices[0]; !g.Up {
		t.Errorf("GPU 0 down: %q", g.Error)
	} else {
		wantValue(t, g, sample.TemperatureCelsius, 50)
	}
	if g := s.Devices[1]; g.Up || !strings.Contains(g.Error, "GPU is lost") {
		t.Errorf("GPU 1 = up %v %q", g.Up, g.Error)
	}
}

func TestXIDChangeCountedOnce(t *testing.T) {
	f := newFake(0, 1)
	// GPU 0 had an XID before we started; GPU 1 had none.
	f.set(0, dcgm.DCGM_FI_DEV_XID_ERROR, at(i64(79), 100))
	f.set(1, dcgm.DCGM_FI_DEV_XID_ERROR, blankInt())
	b, _ := openFake(t, f, nil)

	xids := func() []map[uint64]uint64 {
		s := sampleOK(t, b)
		return []map[uint64]uint64{s.Devices[0].XIDErrors, s.Devices[1].XIDErrors}
	}
	if got := xids(); got[0] != nil || got[1] != nil {
		t.Fatalf("XIDs from before Open counted: %v", got)
	}

	f.set(0, dcgm.DCGM_FI_DEV_XID_ERROR, at(i64(79), 200))
	f.set(1, dcgm.DCGM_FI_DEV_XID_ERROR, at(i64(48), 210))
	for range 3 { // unchanged timestamps on later samples are not new events
		got := xids()
		if len(got[0]) != 1 || got[0][79] != 1 {
			t.Errorf("GPU 0 XIDs = %v, want {79:1}", got[0])
		}
		if len(got[1]) != 1 || got[1][48] != 1 {
			t.Errorf("GPU 1 XIDs = %v, want {48:1}", got[1])
		}
	}

	f.set(0, dcgm.DCGM_FI_DEV_XID_ERROR, at(i64(79), 300))
	f.set(1, dcgm.DCGM_FI_DEV_XID_ERROR, failed(dcgm.DCGM_ST_NVML_ERROR))
	got := xids()
	if got[0][79] != 2 || got[1][48] != 1 {
		t.Errorf("XIDs = %v, want GPU 0 {79:2}, GPU 1 {48:1}", got)
	}
}

func TestWithoutProfilingModule(t *testing.T) {
	f := newFake(0)
	f.links = []dcgm.NvLinkStatus{{ParentId: 0, ParentType: dcgm.FE_GPU, Index: 0, State: dcgm.LS_UP}}
	f.watchErr = func(fields []dcgm.Short) error {
		if slices.Contains(fields, dcgm.DCGM_FI_PROF_SM_UTIL_RATIO) {
			return errors.New("Profiling module not loaded")
		}
		return nil
	}
	f.set(0, dcgm.DCGM_FI_DEV_GPU_UTIL_RATIO, i64(100))
	f.set(0, dcgm.DCGM_FI_PROF_SM_UTIL_RATIO, dbl(0.5)) // must not be read
	core, logs := observer.New(zapcore.InfoLevel)
	b, _ := openFake(t, f, zap.New(core))

	// Base, then the profiling sets with links, without, and core only,
	// then the health fields.
	if len(f.watchCalls) != 5 || len(f.watchCalls[3]) != len(profCoreFields) {
		t.Errorf("watch calls = %d, want 5, the fourth the core set", len(f.watchCalls))
	}
	for range 2 {
		g := &sampleOK(t, b).Devices[0]
		if !g.Up || g.ActivitySource != sample.SourceNVML || g.LinkSource != "" {
			t.Errorf("up %v sources %q %q, want up, nvml and none", g.Up, g.ActivitySource, g.LinkSource)
		}
		wantValue(t, g, sample.Utilization, 1)
		wantValue(t, g, sample.SMActive, math.NaN())
		if len(g.Links) != 1 || !g.Links[0].Up || !math.IsNaN(g.Links[0].TxBytesPerSecond) {
			t.Errorf("links = %+v, want link 0 up with unknown rates", g.Links)
		}
	}
	if n := logs.FilterMessageSnippet("profiling").Len(); n != 1 {
		t.Errorf("%d info lines about profiling, want 1", n)
	}
	if len(f.fieldGroups) != 2 {
		t.Errorf("%d field groups left after the refused watches, want base and health", len(f.fieldGroups))
	}
}

func TestProfilingWithoutPerLinkFields(t *testing.T) {
	f := newFake(0)
	f.links = []dcgm.NvLinkStatus{{ParentId: 0, ParentType: dcgm.FE_GPU, Index: 3, State: dcgm.LS_UP}}
	f.watchErr = func(fields []dcgm.Short) error {
		if slices.Contains(fields, dcgm.DCGM_FI_PROF_NVLINK_L0_TX_BYTES) {
			return errors.New("Profiling multi-pass")
		}
		return nil
	}
	f.set(0, dcgm.DCGM_FI_PROF_SM_UTIL_RATIO, dbl(0.75))
	f.set(0, dcgm.DCGM_FI_PROF_NVLINK_L3_TX_BYTES, i64(5))
	b, _ := openFake(t, f, nil)
	if got := len(f.watchCalls[1]); got != len(profFields)+2*4 {
		t.Errorf("first profiling watch had %d fields, want the core set and links 0-3", got)
	}
	g := &sampleOK(t, b).Devices[0]
	if g.ActivitySource != sample.SourceDCGM {
		t.Errorf("ActivitySource = %q", g.ActivitySource)
	}
	wantValue(t, g, sample.SMActive, 0.75)
	if len(g.Links) != 1 || g.Links[0].Link != 3 || !math.IsNaN(g.Links[0].TxBytesPerSecond) {
		t.Errorf("links = %+v, want link 3 with unknown rates", g.Links)
	}
}

func TestProfilingUnsupportedOnOneGPU(t *testing.T) {
	f := newFake(0, 1)
	f.set(0, dcgm.DCGM_FI_PROF_SM_UTIL_RATIO, dbl(0.2))
	f.set(1, dcgm.DCGM_FI_PROF_SM_UTIL_RATIO, failed(dcgm.DCGM_ST_NOT_SUPPORTED))
	core, logs := observer.New(zapcore.InfoLevel)
	b, _ := openFake(t, f, zap.New(core))
	for range 2 {
		s := sampleOK(t, b)
		if s.Devices[0].ActivitySource != sample.SourceDCGM || s.Devices[1].ActivitySource != sample.SourceNVML {
			t.Errorf("sources = %q, %q; want dcgm, nvml", s.Devices[0].ActivitySource, s.Devices[1].ActivitySource)
		}
	}
	if n := logs.FilterMessageSnippet("profiling").Len(); n != 1 {
		t.Errorf("%d info lines about profiling, want 1", n)
	}
}

func TestIdentityFromFieldsWhenDeviceInfoFails(t *testing.T) {
	f := newFake(0)
	f.infoErr[0] = errors.New("topology failed")
	f.set(0, dcgm.DCGM_FI_DEV_GPU_UUID, str("GPU-1234"))
	f.set(0, dcgm.DCGM_FI_DEV_GPU_NAME, str("Tesla V100-SXM2-32GB"))
	f.set(0, dcgm.DCGM_FI_DEV_PCI_BUS_ID, str("00000001:AF:00.0"))
	b, _ := openFake(t, f, nil)
	g := sampleOK(t, b).Devices[0]
	if g.UUID != "GPU-1234" || g.Model != "Tesla V100-SXM2-32GB" || g.PCIBusID != "0001:af:00.0" {
		t.Errorf("identity = %q %q %q", g.UUID, g.Model, g.PCIBusID)
	}
}

func TestCloseReleasesEverything(t *testing.T) {
	f := newFake(0)
	f.links = []dcgm.NvLinkStatus{{ParentId: 0, ParentType: dcgm.FE_GPU, Index: 0, State: dcgm.LS_UP}}
	b, err := open(f, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(f.watching) != 3 || len(f.groups) != 1 {
		t.Fatalf("watching %d field groups in %d groups, want 3 (base, profiling, health) in 1", len(f.watching), len(f.groups))
	}
	if err := b.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if len(f.watching) != 0 || len(f.fieldGroups) != 0 || len(f.groups) != 0 || f.shutdowns != 1 {
		t.Errorf("after Close: %d watches, %d field groups, %d groups, %d shutdowns",
			len(f.watching), len(f.fieldGroups), len(f.groups), f.shutdowns)
	}
	if err := b.Close(); err != nil || f.shutdowns != 1 {
		t.Errorf("second Close = %v, %d shutdowns", err, f.shutdowns)
	}
	if _, err := b.Sample(context.Background()); err == nil {
		t.Error("Sample after Close succeeded")
	}
}

func TestOpenFailuresShutDown(t *testing.T) {
	f := newFake()
	if _, err := open(f, Options{}); err == nil || !strings.Contains(err.Error(), "no supported GPU") {
		t.Errorf("open without GPUs = %v", err)
	}
	if f.shutdowns != 1 {
		t.Errorf("%d shutdowns after a failed open, want 1", f.shutdowns)
	}

	f = newFake(0)
	f.watchErr = func([]dcgm.Short) error { return errors.New("Host engine connection invalid/disconnected") }
	_, err := open(f, Options{})
	if err == nil || !strings.HasPrefix(err.Error(), "DCGM: watch fields: ") {
		t.Errorf("open with a failing watch = %v", err)
	}
	if len(f.groups) != 0 || len(f.fieldGroups) != 0 || f.shutdowns != 1 {
		t.Errorf("after a failed open: %d groups, %d field groups, %d shutdowns", len(f.groups), len(f.fieldGroups), f.shutdowns)
	}
}

func TestSampleHonoursContext(t *testing.T) {
	f := newFake(0)
	b, _ := openFake(t, f, nil)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	before := f.latestCalls
	if _, err := b.Sample(ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("Sample = %v, want context.Canceled", err)
	}
	if f.latestCalls != before {
		t.Error("a cancelled Sample still read DCGM")
	}
}

func TestConcurrentSampleAndClose(t *testing.T) {
	f := newFake(0, 1)
	b, _ := openFake(t, f, nil)
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 20 {
				_, _ = b.Sample(context.Background())
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		time.Sleep(time.Millisecond)
		_ = b.Close()
	}()
	wg.Wait()
}

func TestStandaloneArgs(t *testing.T) {
	for _, c := range []struct {
		in   string
		want []string
	}{
		{"localhost:5555", []string{"localhost:5555", "0"}},
		{"10.0.0.1:5555", []string{"10.0.0.1:5555", "0"}},
		{"tcp://10.0.0.1:5555", []string{"10.0.0.1:5555", "0"}},
		{"unix:///run/nvidia-dcgm/dcgm.sock", []string{"/run/nvidia-dcgm/dcgm.sock", "1"}},
		{"/tmp/dcgm.sock", []string{"/tmp/dcgm.sock", "1"}},
		{"vsock://3:5555", []string{"vsock://3:5555"}},
	} {
		if got := standaloneArgs(c.in); !slices.Equal(got, c.want) {
			t.Errorf("standaloneArgs(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

func TestBusID(t *testing.T) {
	for in, want := range map[string]string{
		"00000000:3B:00.0": "0000:3b:00.0",
		"00000000:07:00.0": "0000:07:00.0",
		"0000:b1:00.0":     "0000:b1:00.0",
		"00000002:C1:1F.0": "0002:c1:1f.0",
		"":                 "",
		"weird":            "weird",
	} {
		if got := busID(in); got != want {
			t.Errorf("busID(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestProfLinkIDs(t *testing.T) {
	named := map[int][2]dcgm.Short{
		0:  {dcgm.DCGM_FI_PROF_NVLINK_L0_TX_BYTES, dcgm.DCGM_FI_PROF_NVLINK_L0_RX_BYTES},
		1:  {dcgm.DCGM_FI_PROF_NVLINK_L1_TX_BYTES, dcgm.DCGM_FI_PROF_NVLINK_L1_RX_BYTES},
		9:  {dcgm.DCGM_FI_PROF_NVLINK_L9_TX_BYTES, dcgm.DCGM_FI_PROF_NVLINK_L9_RX_BYTES},
		17: {dcgm.DCGM_FI_PROF_NVLINK_L17_TX_BYTES, dcgm.DCGM_FI_PROF_NVLINK_L17_RX_BYTES},
	}
	for l, want := range named {
		if tx, rx := profLinkIDs(l); tx != want[0] || rx != want[1] {
			t.Errorf("profLinkIDs(%d) = %d, %d; want %d, %d", l, tx, rx, want[0], want[1])
		}
	}
	if n := len(baseFields) + len(identityFields); n > 128 {
		t.Errorf("base field group has %d fields, DCGM allows 128", n)
	}
	if n := len(profFields) + len(profLinkFields(maxProfLinks)); n > 128 {
		t.Errorf("profiling field group has %d fields, DCGM allows 128", n)
	}
}

// TestOpenWithoutDCGM runs the real go-dcgm path. On a host without DCGM 4 it
// must fail fast with an error naming the library, not panic or hang.
func TestOpenWithoutDCGM(t *testing.T) {
	if dcgmInstalled() {
		t.Skip("libdcgm.so.4 is installed here")
	}
	for _, addr := range []string{"", "localhost:5555", "unix:///run/dcgm.sock"} {
		done := make(chan error, 1)
		go func() {
			b, err := Open(Options{Address: addr})
			if b != nil {
				_ = b.Close()
			}
			done <- err
		}()
		select {
		case err := <-done:
			if err == nil || !strings.Contains(err.Error(), "libdcgm.so.4") || !strings.HasPrefix(err.Error(), "DCGM: ") {
				t.Errorf("Open(%q) = %v, want a DCGM error naming libdcgm.so.4", addr, err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("Open(%q) hung", addr)
		}
	}
}

func dcgmInstalled() bool {
	if out, err := exec.Command("ldconfig", "-p").Output(); err == nil && strings.Contains(string(out), "libdcgm.so.4") {
		return true
	}
	for _, dir := range append(filepath.SplitList(os.Getenv("LD_LIBRARY_PATH")),
		"/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64", "/usr/lib", "/usr/local/lib") {
		if _, err := os.Stat(filepath.Join(dir, "libdcgm.so.4")); err == nil {
			return true
		}
	}
	return false
}

// DCGM's fabric manager status becomes NVML's fabric state and status, as
// the NVML backend reports them.
func TestFabricManagerStatus(t *testing.T) {
	for _, tc := range []struct {
		status, code          int64
		wantState, wantStatus float64
	}{
		{0, 0, sample.FabricNotSupported, math.NaN()},
		{1, 0, sample.FabricNotStarted, math.NaN()},
		{2, 0, sample.FabricInProgress, math.NaN()},
		{3, 0, sample.FabricCompleted, 0},
		{4, 3, sample.FabricCompleted, 3},
		{4, 0, sample.FabricCompleted, 999},
		{6, 0, math.NaN(), math.NaN()}, // NVML too old: nothing known
	} {
		f := newFake(0)
		f.set(0, dcgm.DCGM_FI_DEV_GPU_UTIL_RATIO, i64(42))
		f.set(0, dcgm.DCGM_FI_DEV_FABRIC_MANAGER_STATUS, i64(tc.status))
		f.set(0, dcgm.DCGM_FI_DEV_FABRIC_MANAGER_ERROR_CODE, i64(tc.code))
		b, _ := openFake(t, f, nil)
		g := &sampleOK(t, b).Devices[0]
		wantValue(t, g, sample.FabricState, tc.wantState)
		wantValue(t, g, sample.FabricStatus, tc.wantStatus)
		b.Close()
	}
}
