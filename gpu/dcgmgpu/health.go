package dcgmgpu

import (
	"fmt"
	"math"
	"time"

	"github.com/NVIDIA/go-dcgm/pkg/dcgm"
	"go.uber.org/zap"

	"github.com/gpudiag/gpudiag/sample"
)

// The health counters a dcgm-exporter user expects, as DCGM names them,
// watched in a field group of their own every healthInterval: what the NVML
// backend reads with its slow fields, here sampled by the hostengine no
// more often than that (72 per-link NVLink counters a GPU every second
// would be the hostengine's work for nothing).

// healthInterval is how often DCGM samples the health fields, as nvmlgpu's
// DefaultSlowInterval.
const healthInterval = 10 * time.Second

// healthFieldMap maps the health fields that are one sample field each.
var healthFieldMap = []struct {
	id    dcgm.Short
	field sample.Field
	conv  conv
}{
	{dcgm.DCGM_FI_DEV_MEMORY_TEMP_CELSIUS, sample.MemoryTemperatureCelsius, same},
	{dcgm.DCGM_FI_DEV_FB_FREE, sample.MemoryFreeBytes, mibToB},
	{dcgm.DCGM_FI_DEV_FB_RESERVED, sample.MemoryReservedBytes, mibToB},
	{dcgm.DCGM_FI_DEV_ENC_UTIL, sample.EncoderUtilization, percent},
	{dcgm.DCGM_FI_DEV_DEC_UTIL, sample.DecoderUtilization, percent},
	{dcgm.DCGM_FI_DEV_ECC_SBE_AGG_TOTAL, sample.ECCCorrectedAggregateTotal, same},
	{dcgm.DCGM_FI_DEV_ECC_DBE_AGG_TOTAL, sample.ECCUncorrectedAggregateTotal, same},
}

// clockEventFields are the times held down per clock event reason, in ns
// (DCGM 4.3 and newer; an older hostengine refuses them and they are left
// out, see watchHealth).
var clockEventFields = []struct {
	id    dcgm.Short
	field sample.Field
}{
	{dcgm.DCGM_FI_DEV_CLOCKS_EVENT_REASON_SW_POWER_CAP_NS, sample.ClockEventSWPowerCapSecondsTotal},
	{dcgm.DCGM_FI_DEV_CLOCKS_EVENT_REASON_SYNC_BOOST_NS, sample.ClockEventSyncBoostSecondsTotal},
	{dcgm.DCGM_FI_DEV_CLOCKS_EVENT_REASON_SW_THERM_SLOWDOWN_NS, sample.ClockEventSWThermalSecondsTotal},
	{dcgm.DCGM_FI_DEV_CLOCKS_EVENT_REASON_HW_THERM_SLOWDOWN_NS, sample.ClockEventHWThermalSecondsTotal},
	{dcgm.DCGM_FI_DEV_CLOCKS_EVENT_REASON_HW_POWER_BRAKE_SLOWDOWN_NS, sample.ClockEventHWPowerBrakeSecondsTotal},
}

// eccLocationFields are DCGM's ECC counters by location (SBE corrected,
// DBE uncorrected; VOL volatile, AGG aggregate; DEV is device memory).
var eccLocationFields = []struct {
	id                     dcgm.Short
	location, counter, typ string
}{
	{dcgm.DCGM_FI_DEV_ECC_SBE_VOL_L1, "l1_cache", sample.ECCVolatile, sample.ECCCorrected},
	{dcgm.DCGM_FI_DEV_ECC_DBE_VOL_L1, "l1_cache", sample.ECCVolatile, sample.ECCUncorrected},
	{dcgm.DCGM_FI_DEV_ECC_SBE_AGG_L1, "l1_cache", sample.ECCAggregate, sample.ECCCorrected},
	{dcgm.DCGM_FI_DEV_ECC_DBE_AGG_L1, "l1_cache", sample.ECCAggregate, sample.ECCUncorrected},
	{dcgm.DCGM_FI_DEV_ECC_SBE_VOL_L2, "l2_cache", sample.ECCVolatile, sample.ECCCorrected},
	{dcgm.DCGM_FI_DEV_ECC_DBE_VOL_L2, "l2_cache", sample.ECCVolatile, sample.ECCUncorrected},
	{dcgm.DCGM_FI_DEV_ECC_SBE_AGG_L2, "l2_cache", sample.ECCAggregate, sample.ECCCorrected},
	{dcgm.DCGM_FI_DEV_ECC_DBE_AGG_L2, "l2_cache", sample.ECCAggregate, sample.ECCUncorrected},
	{dcgm.DCGM_FI_DEV_ECC_SBE_VOL_DEV, "dram", sample.ECCVolatile, sample.ECCCorrected},
	{dcgm.DCGM_FI_DEV_ECC_DBE_VOL_DEV, "dram", sample.ECCVolatile, sample.ECCUncorrected},
	{dcgm.DCGM_FI_DEV_ECC_SBE_AGG_DEV, "dram", sample.ECCAggregate, sample.ECCCorrected},
	{dcgm.DCGM_FI_DEV_ECC_DBE_AGG_DEV, "dram", sample.ECCAggregate, sample.ECCUncorrected},
	{dcgm.DCGM_FI_DEV_ECC_SBE_VOL_REG, "register_file", sample.ECCVolatile, sample.ECCCorrected},
	{dcgm.DCGM_FI_DEV_ECC_DBE_VOL_REG, "register_file", sample.ECCVolatile, sample.ECCUncorrected},
	{dcgm.DCGM_FI_DEV_ECC_SBE_AGG_REG, "register_file", sample.ECCAggregate, sample.ECCCorrected},
	{dcgm.DCGM_FI_DEV_ECC_DBE_AGG_REG, "register_file", sample.ECCAggregate, sample.ECCUncorrected},
	{dcgm.DCGM_FI_DEV_ECC_SBE_VOL_TEX, "texture_memory", sample.ECCVolatile, sample.ECCCorrected},
	{dcgm.DCGM_FI_DEV_ECC_DBE_VOL_TEX, "texture_memory", sample.ECCVolatile, sample.ECCUncorrected},
	{dcgm.DCGM_FI_DEV_ECC_SBE_AGG_TEX, "texture_memory", sample.ECCAggregate, sample.ECCCorrected},
	{dcgm.DCGM_FI_DEV_ECC_DBE_AGG_TEX, "texture_memory", sample.ECCAggregate, sample.ECCUncorrected},
	{dcgm.DCGM_FI_DEV_ECC_SBE_VOL_SHM, "texture_shm", sample.ECCVolatile, sample.ECCCorrected},
	{dcgm.DCGM_FI_DEV_ECC_DBE_VOL_SHM, "texture_shm", sample.ECCVolatile, sample.ECCUncorrected},
	{dcgm.DCGM_FI_DEV_ECC_SBE_AGG_SHM, "texture_shm", sample.ECCAggregate, sample.ECCCorrected},
	{dcgm.DCGM_FI_DEV_ECC_DBE_AGG_SHM, "texture_shm", sample.ECCAggregate, sample.ECCUncorrected},
	{dcgm.DCGM_FI_DEV_ECC_SBE_VOL_CBU, "cbu", sample.ECCVolatile, sample.ECCCorrected},
	{dcgm.DCGM_FI_DEV_ECC_DBE_VOL_CBU, "cbu", sample.ECCVolatile, sample.ECCUncorrected},
	{dcgm.DCGM_FI_DEV_ECC_SBE_AGG_CBU, "cbu", sample.ECCAggregate, sample.ECCCorrected},
	{dcgm.DCGM_FI_DEV_ECC_DBE_AGG_CBU, "cbu", sample.ECCAggregate, sample.ECCUncorrected},
	{dcgm.DCGM_FI_DEV_ECC_SBE_VOL_SRM, "sram", sample.ECCVolatile, sample.ECCCorrected},
	{dcgm.DCGM_FI_DEV_ECC_DBE_VOL_SRM, "sram", sample.ECCVolatile, sample.ECCUncorrected},
	{dcgm.DCGM_FI_DEV_ECC_SBE_AGG_SRM, "sram", sample.ECCAggregate, sample.ECCCorrected},
	{dcgm.DCGM_FI_DEV_ECC_DBE_AGG_SRM, "sram", sample.ECCAggregate, sample.ECCUncorrected},
}

// nvlinkErrorFields are DCGM's per-link NVLink error counters, by kind
// then link (their IDs are not in link order past link 5).
var nvlinkErrorFields = [sample.NumNVLinkErrorKinds][maxProfLinks]dcgm.Short{
	sample.NVLinkCRCFlit: {
		dcgm.DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_L0_TOTAL, dcgm.DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_L1_TOTAL, dcgm.DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_L2_TOTAL,
		dcgm.DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_L3_TOTAL, dcgm.DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_L4_TOTAL, dcgm.DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_L5_TOTAL,
		dcgm.DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_L6_TOTAL, dcgm.DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_L7_TOTAL, dcgm.DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_L8_TOTAL,
		dcgm.DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_L9_TOTAL, dcgm.DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_L10_TOTAL, dcgm.DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_L11_TOTAL,
		dcgm.DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_L12_TOTAL, dcgm.DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_L13_TOTAL, dcgm.DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_L14_TOTAL,
		dcgm.DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_L15_TOTAL, dcgm.DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_L16_TOTAL, dcgm.DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_L17_TOTAL,
	},
	sample.NVLinkCRCData: {
		dcgm.DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_L0_TOTAL, dcgm.DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_L1_TOTAL, dcgm.DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_L2_TOTAL,
		dcgm.DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_L3_TOTAL, dcgm.DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_L4_TOTAL, dcgm.DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_L5_TOTAL,
		dcgm.DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_L6_TOTAL, dcgm.DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_L7_TOTAL, dcgm.DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_L8_TOTAL,
		dcgm.DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_L9_TOTAL, dcgm.DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_L10_TOTAL, dcgm.DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_L11_TOTAL,
		dcgm.DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_L12_TOTAL, dcgm.DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_L13_TOTAL, dcgm.DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_L14_TOTAL,
		dcgm.DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_L15_TOTAL, dcgm.DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_L16_TOTAL, dcgm.DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_L17_TOTAL,
	},
	sample.NVLinkReplay: {
		dcgm.DCGM_FI_DEV_NVLINK_REPLAY_ERROR_L0_TOTAL, dcgm.DCGM_FI_DEV_NVLINK_REPLAY_ERROR_L1_TOTAL, dcgm.DCGM_FI_DEV_NVLINK_REPLAY_ERROR_L2_TOTAL,
		dcgm.DCGM_FI_DEV_NVLINK_REPLAY_ERROR_L3_TOTAL, dcgm.DCGM_FI_DEV_NVLINK_REPLAY_ERROR_L4_TOTAL, dcgm.DCGM_FI_DEV_NVLINK_REPLAY_ERROR_L5_TOTAL,
		dcgm.DCGM_FI_DEV_NVLINK_REPLAY_ERROR_L6_TOTAL, dcgm.DCGM_FI_DEV_NVLINK_REPLAY_ERROR_L7_TOTAL, dcgm.DCGM_FI_DEV_NVLINK_REPLAY_ERROR_L8_TOTAL,
		dcgm.DCGM_FI_DEV_NVLINK_REPLAY_ERROR_L9_TOTAL, dcgm.DCGM_FI_DEV_NVLINK_REPLAY_ERROR_L10_TOTAL, dcgm.DCGM_FI_DEV_NVLINK_REPLAY_ERROR_L11_TOTAL,
		dcgm.DCGM_FI_DEV_NVLINK_REPLAY_ERROR_L12_TOTAL, dcgm.DCGM_FI_DEV_NVLINK_REPLAY_ERROR_L13_TOTAL, dcgm.DCGM_FI_DEV_NVLINK_REPLAY_ERROR_L14_TOTAL,
		dcgm.DCGM_FI_DEV_NVLINK_REPLAY_ERROR_L15_TOTAL, dcgm.DCGM_FI_DEV_NVLINK_REPLAY_ERROR_L16_TOTAL, dcgm.DCGM_FI_DEV_NVLINK_REPLAY_ERROR_L17_TOTAL,
	},
	sample.NVLinkRecovery: {
		dcgm.DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_L0_TOTAL, dcgm.DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_L1_TOTAL, dcgm.DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_L2_TOTAL,
		dcgm.DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_L3_TOTAL, dcgm.DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_L4_TOTAL, dcgm.DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_L5_TOTAL,
		dcgm.DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_L6_TOTAL, dcgm.DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_L7_TOTAL, dcgm.DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_L8_TOTAL,
		dcgm.DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_L9_TOTAL, dcgm.DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_L10_TOTAL, dcgm.DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_L11_TOTAL,
		dcgm.DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_L12_TOTAL, dcgm.DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_L13_TOTAL, dcgm.DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_L14_TOTAL,
		dcgm.DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_L15_TOTAL, dcgm.DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_L16_TOTAL, dcgm.DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_L17_TOTAL,
	},
}

// healthFields are the fields of the health group: the scalars, ECC by
// location, the NVLink counters of links 0 … linkCount-1 and, with
// clockEvents, the clock event times.
func healthFields(linkCount int, clockEvents bool) []dcgm.Short {
	var out []dcgm.Short
	for _, m := range healthFieldMap {
		out = append(out, m.id)
	}
	for _, e := range eccLocationFields {
		out = append(out, e.id)
	}
	for k := range sample.NumNVLinkErrorKinds {
		out = append(out, nvlinkErrorFields[k][:min(linkCount, maxProfLinks)]...)
	}
	if clockEvents {
		for _, c := range clockEventFields {
			out = append(out, c.id)
		}
	}
	return out
}

// watchHealth watches the health fields every healthInterval, without
// the clock event times when the hostengine refuses them (older than DCGM
// 4.3), and goes without the group, saying so once, when it refuses even
// that: the other fields work without it.
func (b *Backend) watchHealth(name string) {
	linkCount := 0
	for _, d := range b.devices {
		for _, l := range d.links {
			linkCount = max(linkCount, min(l+1, maxProfLinks))
		}
	}
	every := max(healthInterval, b.interval)
	var lastErr error
	for _, clock := range []bool{true, false} {
		fields := healthFields(linkCount, clock)
		f, err := b.watchEvery(fmt.Sprintf("%s-%d", name, len(fields)), fields, every)
		if err == nil {
			b.health, b.haveHealth = f, true
			b.fields = append(append([]dcgm.Short(nil), b.fields...), fields...)
			return
		}
		lastErr = err
		b.log.Debug("DCGM health fields refused", zap.Int("fields", len(fields)), zap.Error(err))
	}
	b.log.Info("DCGM health fields unavailable; memory temperature, ECC by location, NVLink errors and the clock event times are off",
		zap.Error(lastErr))
}

// fillHealth maps one GPU's health values into g: a field DCGM reports as
// blank or unsupported is left unread.
func fillHealth(g *sample.GPU, vals map[dcgm.Short]value) {
	v := &g.Values
	for _, m := range healthFieldMap {
		if x, ok := number(vals[m.id]); ok {
			v.Set(m.field, m.conv.apply(x))
		}
	}
	for _, c := range clockEventFields {
		if x, ok := number(vals[c.id]); ok {
			v.Set(c.field, x/1e9)
		}
	}
	eccOff := false
	if ecc, ok := v.Get(sample.ECCEnabled); ok && ecc == 0 {
		eccOff = true // counts mean nothing with ECC off, as in fill
		v.Set(sample.ECCCorrectedAggregateTotal, math.NaN())
		v.Set(sample.ECCUncorrectedAggregateTotal, math.NaN())
	}
	for _, e := range eccLocationFields {
		if x, ok := number(vals[e.id]); ok && !eccOff {
			g.ECCErrors = append(g.ECCErrors, sample.ECCCount{Location: e.location, Counter: e.counter, Type: e.typ, Count: x})
		}
	}
	for i := range g.Links {
		l := &g.Links[i]
		if l.Link >= maxProfLinks {
			continue
		}
		for k := range sample.NumNVLinkErrorKinds {
			if x, ok := number(vals[nvlinkErrorFields[k][l.Link]]); ok {
				l.Errors.Set(k, x)
			}
		}
	}
}
