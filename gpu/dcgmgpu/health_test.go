package dcgmgpu

import (
	"errors"
	"math"
	"slices"
	"testing"

	"github.com/NVIDIA/go-dcgm/pkg/dcgm"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/gpudiag/gpudiag/sample"
)

// DCGM's health fields read as the NVML backend reads them, in base units:
// the memory temperature, free and reserved memory (MiB), the video
// engines (percent), the aggregate ECC totals, the clock event times (ns),
// ECC by location and the per-link NVLink errors, links past 11 included
// (their field IDs are not in link order). Blank fields are not read. The
// group is sampled every healthInterval, not every second.
func TestHealthFieldsConvertUnits(t *testing.T) {
	f := newFake(0)
	f.links = []dcgm.NvLinkStatus{
		{ParentId: 0, ParentType: dcgm.FE_GPU, Index: 0, State: dcgm.LS_UP},
		{ParentId: 0, ParentType: dcgm.FE_GPU, Index: 13, State: dcgm.LS_UP},
	}
	for id, v := range map[dcgm.Short]value{
		dcgm.DCGM_FI_DEV_ECC_MODE:                                 i64(1),
		dcgm.DCGM_FI_DEV_MEMORY_TEMP_CELSIUS:                      i64(44),
		dcgm.DCGM_FI_DEV_FB_FREE:                                  i64(1000),
		dcgm.DCGM_FI_DEV_FB_RESERVED:                              i64(512),
		dcgm.DCGM_FI_DEV_ENC_UTIL:                                 i64(dcgm.DCGM_FT_INT32_NOT_SUPPORTED),
		dcgm.DCGM_FI_DEV_DEC_UTIL:                                 i64(25),
		dcgm.DCGM_FI_DEV_ECC_SBE_AGG_TOTAL:                        i64(40),
		dcgm.DCGM_FI_DEV_ECC_DBE_AGG_TOTAL:                        i64(2),
		dcgm.DCGM_FI_DEV_CLOCKS_EVENT_REASON_SW_POWER_CAP_NS:      i64(3_000_000_000),
		dcgm.DCGM_FI_DEV_CLOCKS_EVENT_REASON_HW_THERM_SLOWDOWN_NS: i64(0),
		dcgm.DCGM_FI_DEV_ECC_SBE_VOL_DEV:                          i64(5),
		dcgm.DCGM_FI_DEV_ECC_DBE_AGG_SRM:                          i64(1),
		dcgm.DCGM_FI_DEV_ECC_SBE_VOL_L1:                           blankInt(),
		dcgm.DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_L0_TOTAL:           i64(7),
		dcgm.DCGM_FI_DEV_NVLINK_REPLAY_ERROR_L13_TOTAL:            i64(3),
		dcgm.DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_L13_TOTAL:          i64(0),
	} {
		f.set(0, id, v)
	}
	b, _ := openFake(t, f, nil)
	g := &sampleOK(t, b).Devices[0]
	wantValue(t, g, sample.MemoryTemperatureCelsius, 44)
	wantValue(t, g, sample.MemoryFreeBytes, 1000*mib)
	wantValue(t, g, sample.MemoryReservedBytes, 512*mib)
	wantValue(t, g, sample.EncoderUtilization, math.NaN())
	wantValue(t, g, sample.DecoderUtilization, 0.25)
	wantValue(t, g, sample.ECCCorrectedAggregateTotal, 40)
	wantValue(t, g, sample.ECCUncorrectedAggregateTotal, 2)
	wantValue(t, g, sample.ClockEventSWPowerCapSecondsTotal, 3)
	wantValue(t, g, sample.ClockEventHWThermalSecondsTotal, 0)
	wantValue(t, g, sample.ClockEventSyncBoostSecondsTotal, math.NaN())
	wantECC := []sample.ECCCount{
		{Location: "dram", Counter: sample.ECCVolatile, Type: sample.ECCCorrected, Count: 5},
		{Location: "sram", Counter: sample.ECCAggregate, Type: sample.ECCUncorrected, Count: 1},
	}
	if !slices.Equal(g.ECCErrors, wantECC) {
		t.Errorf("ECC by location %+v; want %+v", g.ECCErrors, wantECC)
	}
	if len(g.Links) != 2 {
		t.Fatalf("links %+v", g.Links)
	}
	if x, ok := g.Links[0].Errors.Get(sample.NVLinkCRCFlit); !ok || x != 7 {
		t.Errorf("link 0 crc_flit %v %v", x, ok)
	}
	if _, ok := g.Links[0].Errors.Get(sample.NVLinkReplay); ok {
		t.Error("link 0: a blank replay counter was read")
	}
	if x, ok := g.Links[1].Errors.Get(sample.NVLinkReplay); !ok || x != 3 {
		t.Errorf("link 13 replay %v %v", x, ok)
	}
	if x, ok := g.Links[1].Errors.Get(sample.NVLinkRecovery); !ok || x != 0 {
		t.Errorf("link 13 recovery %v %v", x, ok)
	}
	var healthGroup []dcgm.Short
	for h, fields := range f.fieldGroups {
		if slices.Contains(fields, dcgm.DCGM_FI_DEV_MEMORY_TEMP_CELSIUS) {
			healthGroup = fields
			if f.every[h] != healthInterval {
				t.Errorf("health fields sampled every %v; want %v", f.every[h], healthInterval)
			}
		}
	}
	// Links 0 … 13 of each kind: the links a GPU has are numbered from 0.
	if !slices.Contains(healthGroup, dcgm.DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_L13_TOTAL) ||
		slices.Contains(healthGroup, dcgm.DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_L14_TOTAL) {
		t.Errorf("health group %v: want the NVLink fields of links 0-13", healthGroup)
	}
}

// With ECC off the ECC counts mean nothing and are not read, as the
// volatile totals.
func TestHealthECCOff(t *testing.T) {
	f := newFake(0)
	f.set(0, dcgm.DCGM_FI_DEV_ECC_MODE, i64(0))
	f.set(0, dcgm.DCGM_FI_DEV_ECC_SBE_AGG_TOTAL, i64(4))
	f.set(0, dcgm.DCGM_FI_DEV_ECC_SBE_VOL_DEV, i64(4))
	b, _ := openFake(t, f, nil)
	g := &sampleOK(t, b).Devices[0]
	wantValue(t, g, sample.ECCCorrectedAggregateTotal, math.NaN())
	if len(g.ECCErrors) != 0 {
		t.Errorf("ECC off: %+v", g.ECCErrors)
	}
}

// A hostengine older than the clock event time fields (DCGM 4.3) refuses
// the group with them: it is watched without; one refusing even that goes
// without the group, says so once, and every other reading goes on.
func TestHealthFieldsRefused(t *testing.T) {
	f := newFake(0)
	f.watchErr = func(fields []dcgm.Short) error {
		if slices.Contains(fields, dcgm.DCGM_FI_DEV_CLOCKS_EVENT_REASON_SW_POWER_CAP_NS) {
			return errors.New("unknown field")
		}
		return nil
	}
	f.set(0, dcgm.DCGM_FI_DEV_MEMORY_TEMP_CELSIUS, i64(44))
	b, _ := openFake(t, f, nil)
	wantValue(t, &sampleOK(t, b).Devices[0], sample.MemoryTemperatureCelsius, 44)

	f = newFake(0)
	f.watchErr = func(fields []dcgm.Short) error {
		if slices.Contains(fields, dcgm.DCGM_FI_DEV_MEMORY_TEMP_CELSIUS) {
			return errors.New("unknown field")
		}
		return nil
	}
	f.set(0, dcgm.DCGM_FI_DEV_GPU_UTIL_RATIO, i64(50))
	core, logs := observer.New(zapcore.InfoLevel)
	b, _ = openFake(t, f, zap.New(core))
	g := &sampleOK(t, b).Devices[0]
	wantValue(t, g, sample.Utilization, 0.5)
	wantValue(t, g, sample.MemoryTemperatureCelsius, math.NaN())
	if n := logs.FilterMessageSnippet("DCGM health fields unavailable").Len(); n != 1 {
		t.Errorf("%d log lines; want 1", n)
	}
}
