package nvmlgpu

import (
	"math"
	"slices"
	"strings"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"go.uber.org/zap"

	"github.com/gpudiag/gpudiag/sample"
)

// The health counters a dcgm-exporter user expects (memory temperature, the
// time held down per clock event reason, ECC totals and ECC by location,
// the PCIe replays, per-link NVLink errors) are read with the slow fields,
// by one GetFieldValues call per GPU for every counter NVML has a field
// for, and by a query of their own for the others (ECC in SRAM and texture
// shared memory, NVLink data CRC errors on Hopper) or where the field is
// not supported.
//
// The per-link NVLink counters are a tier of their own, read every
// linkErrorInterval (see there) and merged into the slow read's
// GetFieldValues call when due, so a GPU still makes one such call a slow
// read.
//
// Which counters a GPU reports is learnt once, at its first slow read: each
// is asked for, by field and then by query, and the ones it answered are
// the GPU's plan from then on. An unsupported counter is left out of the
// exposition and out of every later call, and the GPU's unsupported
// counters are logged once, in one line.

// healthRead is one counter: the field value that reads it (FieldId 0:
// none), the query that reads it where the field does not, and where its
// value goes.
type healthRead struct {
	name  string
	field nvml.FieldValue
	query func(nvml.Device) (uint64, nvml.Return)
	// scale turns NVML's unit into the base unit (ns → s).
	scale float64
	put   func(h *healthValues, x float64)
	// perLink marks an NVLink counter, read on the link errors' clock.
	perLink bool
}

// healthValues are one slow read's counters; links holds the per-link
// ones when linksRead.
type healthValues struct {
	values    sample.Values
	links     map[int]*sample.NVLinkErrors
	linksRead bool
	ecc       []sample.ECCCount
}

// healthPlan is what a GPU reports, learnt at its first slow read: the
// reads by field (in one call, fields[i] reads byField[i]) and by query,
// each the GPU-wide counters first, then from deviceFields and
// deviceQueries on the per-link ones: a read without the links asks for
// the leading part only.
type healthPlan struct {
	ecc bool // planned with ECC on: ECC counters were asked for
	// linksUp is how many NVLinks were up when planned: a link that was
	// down may not have answered, and is asked again once it is up.
	linksUp       int
	fields        []nvml.FieldValue
	byField       []healthRead
	byQuery       []healthRead
	deviceFields  int
	deviceQueries int
}

// nvlinkErrorReads are the per-link counters: field values scoped to the
// link (NVML_FI_DEV_NVLINK_ERROR_DL_*, which all of a GPU's links share one
// call for) where NVML has one, and nvmlDeviceGetNvLinkErrorCounter.
// The data CRC errors have no scoped field, only one per link for links
// 0-11 (linkField, nvml.h's NVML_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_L*),
// which an H200 does not answer (driver 580.159: NOT_SUPPORTED for every
// link, where the query answers): there they stay one query a link.
var nvlinkErrorReads = []struct {
	kind      sample.NVLinkErrorKind
	field     uint32
	linkField func(link int) uint32
	counter   nvml.NvLinkErrorCounter
}{
	{sample.NVLinkCRCFlit, nvml.FI_DEV_NVLINK_ERROR_DL_CRC, nil, nvml.NVLINK_ERROR_DL_CRC_FLIT},
	{sample.NVLinkCRCData, 0, crcDataLinkField, nvml.NVLINK_ERROR_DL_CRC_DATA},
	{sample.NVLinkReplay, nvml.FI_DEV_NVLINK_ERROR_DL_REPLAY, nil, nvml.NVLINK_ERROR_DL_REPLAY},
	{sample.NVLinkRecovery, nvml.FI_DEV_NVLINK_ERROR_DL_RECOVERY, nil, nvml.NVLINK_ERROR_DL_RECOVERY},
}

// crcDataLinkField is the field of link l's data CRC error counter, 0 for
// the links past 11, which have none.
func crcDataLinkField(l int) uint32 {
	switch {
	case l < 6:
		return nvml.FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_L0 + uint32(l)
	case l < 12:
		return nvml.FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_L6 + uint32(l-6)
	}
	return 0
}

// eccLocationFields are the field values of the ECC counters by location,
// [volatile, aggregate][corrected, uncorrected], 0 where NVML has none
// (SRAM and texture shared memory only have the query, CBU no corrected
// count). Indexed as sample.ECCLocations.
var eccLocationFields = [][2][2]uint32{
	{{nvml.FI_DEV_ECC_SBE_VOL_L1, nvml.FI_DEV_ECC_DBE_VOL_L1}, {nvml.FI_DEV_ECC_SBE_AGG_L1, nvml.FI_DEV_ECC_DBE_AGG_L1}},
	{{nvml.FI_DEV_ECC_SBE_VOL_L2, nvml.FI_DEV_ECC_DBE_VOL_L2}, {nvml.FI_DEV_ECC_SBE_AGG_L2, nvml.FI_DEV_ECC_DBE_AGG_L2}},
	{{nvml.FI_DEV_ECC_SBE_VOL_DEV, nvml.FI_DEV_ECC_DBE_VOL_DEV}, {nvml.FI_DEV_ECC_SBE_AGG_DEV, nvml.FI_DEV_ECC_DBE_AGG_DEV}},
	{{nvml.FI_DEV_ECC_SBE_VOL_REG, nvml.FI_DEV_ECC_DBE_VOL_REG}, {nvml.FI_DEV_ECC_SBE_AGG_REG, nvml.FI_DEV_ECC_DBE_AGG_REG}},
	{{nvml.FI_DEV_ECC_SBE_VOL_TEX, nvml.FI_DEV_ECC_DBE_VOL_TEX}, {nvml.FI_DEV_ECC_SBE_AGG_TEX, nvml.FI_DEV_ECC_DBE_AGG_TEX}},
	{{0, 0}, {0, 0}},
	{{0, nvml.FI_DEV_ECC_DBE_VOL_CBU}, {0, nvml.FI_DEV_ECC_DBE_AGG_CBU}},
	{{0, 0}, {0, 0}},
}

var (
	eccCounters = [2]struct {
		name string
		typ  nvml.EccCounterType
	}{{sample.ECCVolatile, nvml.VOLATILE_ECC}, {sample.ECCAggregate, nvml.AGGREGATE_ECC}}
	eccTypes = [2]struct {
		name string
		typ  nvml.MemoryErrorType
	}{{sample.ECCCorrected, nvml.MEMORY_ERROR_TYPE_CORRECTED}, {sample.ECCUncorrected, nvml.MEMORY_ERROR_TYPE_UNCORRECTED}}
)

// clockEventFields are the fields of the time held down per clock event
// reason, in ns, by the field that keeps it in seconds.
var clockEventFields = map[sample.Field]uint32{
	sample.ClockEventSWPowerCapSecondsTotal:   nvml.FI_DEV_CLOCKS_EVENT_REASON_SW_POWER_CAP,
	sample.ClockEventSyncBoostSecondsTotal:    nvml.FI_DEV_CLOCKS_EVENT_REASON_SYNC_BOOST,
	sample.ClockEventSWThermalSecondsTotal:    nvml.FI_DEV_CLOCKS_EVENT_REASON_SW_THERM_SLOWDOWN,
	sample.ClockEventHWThermalSecondsTotal:    nvml.FI_DEV_CLOCKS_EVENT_REASON_HW_THERM_SLOWDOWN,
	sample.ClockEventHWPowerBrakeSecondsTotal: nvml.FI_DEV_CLOCKS_EVENT_REASON_HW_POWER_BRAKE_SLOWDOWN,
}

// healthCandidates lists every counter a GPU might report: the ECC ones
// only with ECC on (they mean nothing with it off), the NVLink ones for
// the GPU's links.
func healthCandidates(links []int, ecc bool) []healthRead {
	setField := func(f sample.Field) func(*healthValues, float64) {
		return func(h *healthValues, x float64) { h.values.Set(f, x) }
	}
	out := []healthRead{{name: "memory_temperature", field: nvml.FieldValue{FieldId: nvml.FI_DEV_MEMORY_TEMP}, scale: 1,
		put: setField(sample.MemoryTemperatureCelsius)}}
	for _, c := range sample.ClockEventDurations {
		out = append(out, healthRead{name: "clock_event_" + c.Reason, field: nvml.FieldValue{FieldId: clockEventFields[c.Field]},
			scale: 1e-9, put: setField(c.Field)})
	}
	// The field costs what the query does (160 µs, H200), and saves a call.
	out = append(out, healthRead{name: "pcie_replays", field: nvml.FieldValue{FieldId: nvml.FI_DEV_PCIE_REPLAY_COUNTER}, scale: 1,
		put: setField(sample.PCIeReplaysTotal),
		query: func(h nvml.Device) (uint64, nvml.Return) {
			n, ret := h.GetPcieReplayCounter()
			return uint64(n), ret
		}})
	if ecc {
		for _, t := range []struct {
			name     string
			field    uint32
			counter  nvml.EccCounterType
			typ      nvml.MemoryErrorType
			setField sample.Field
		}{
			{"ecc_corrected_volatile", nvml.FI_DEV_ECC_SBE_VOL_TOTAL, nvml.VOLATILE_ECC, nvml.MEMORY_ERROR_TYPE_CORRECTED, sample.ECCCorrectedErrorsTotal},
			{"ecc_uncorrected_volatile", nvml.FI_DEV_ECC_DBE_VOL_TOTAL, nvml.VOLATILE_ECC, nvml.MEMORY_ERROR_TYPE_UNCORRECTED, sample.ECCUncorrectedErrorsTotal},
			{"ecc_corrected_aggregate", nvml.FI_DEV_ECC_SBE_AGG_TOTAL, nvml.AGGREGATE_ECC, nvml.MEMORY_ERROR_TYPE_CORRECTED, sample.ECCCorrectedAggregateTotal},
			{"ecc_uncorrected_aggregate", nvml.FI_DEV_ECC_DBE_AGG_TOTAL, nvml.AGGREGATE_ECC, nvml.MEMORY_ERROR_TYPE_UNCORRECTED, sample.ECCUncorrectedAggregateTotal},
		} {
			out = append(out, healthRead{name: t.name, field: nvml.FieldValue{FieldId: t.field}, scale: 1, put: setField(t.setField),
				query: func(h nvml.Device) (uint64, nvml.Return) { return h.GetTotalEccErrors(t.typ, t.counter) }})
		}
		for li, loc := range sample.ECCLocations {
			for ci, c := range eccCounters {
				for ti, t := range eccTypes {
					count := sample.ECCCount{Location: loc, Counter: c.name, Type: t.name}
					nvmlLoc := nvml.MemoryLocation(li)
					out = append(out, healthRead{name: "ecc_" + loc + "_" + c.name + "_" + t.name,
						field: nvml.FieldValue{FieldId: eccLocationFields[li][ci][ti]}, scale: 1,
						query: func(h nvml.Device) (uint64, nvml.Return) { return h.GetMemoryErrorCounter(t.typ, c.typ, nvmlLoc) },
						put: func(h *healthValues, x float64) {
							count.Count = x
							h.ecc = append(h.ecc, count)
						}})
				}
			}
		}
	}
	for _, l := range links {
		for _, r := range nvlinkErrorReads {
			var fv nvml.FieldValue
			switch {
			case r.field != 0:
				fv = nvml.FieldValue{FieldId: r.field, ScopeId: uint32(l)}
			case r.linkField != nil && r.linkField(l) != 0:
				// nvml.h asks for the link in the scope of these too.
				fv = nvml.FieldValue{FieldId: r.linkField(l), ScopeId: uint32(l)}
			}
			out = append(out, healthRead{name: "nvlink_" + r.kind.String(), field: fv, scale: 1, perLink: true,
				query: func(h nvml.Device) (uint64, nvml.Return) { return h.GetNvLinkErrorCounter(l, r.counter) },
				put: func(h *healthValues, x float64) {
					e := h.links[l]
					if e == nil {
						e = &sample.NVLinkErrors{}
						h.links[l] = e
					}
					e.Set(r.kind, x)
				}})
		}
	}
	return out
}

// readHealth reads the GPU's health counters, the per-link ones only with
// readLinks, planning them first when the GPU has no plan, or its ECC mode
// or the number of its NVLinks up changed since: planning reads them all.
// It returns nothing when the GPU did not answer the planning call: it is
// planned at the next slow read.
func (b *Backend) readHealth(d *device, eccOn, readLinks bool) *healthValues {
	h := &healthValues{values: sample.NewValues(), links: map[int]*sample.NVLinkErrors{}}
	up := 0
	for _, l := range d.links {
		if d.linkUp[l] {
			up++
		}
	}
	if d.health == nil || d.health.ecc != eccOn || d.health.linksUp != up {
		p, ok := b.planHealth(d, eccOn, h)
		if !ok {
			return nil
		}
		p.linksUp = up
		d.health = p
		h.linksRead = true
		return h
	}
	p := d.health
	fv, byField, byQuery := p.fields[:p.deviceFields], p.byField[:p.deviceFields], p.byQuery[:p.deviceQueries]
	if readLinks {
		fv, byField, byQuery = p.fields, p.byField, p.byQuery
		h.linksRead = true
	}
	if len(fv) > 0 {
		for i := range fv {
			fv[i].NvmlReturn, fv[i].ValueType, fv[i].Value = 0, 0, [8]byte{}
		}
		if ret := d.h.GetFieldValues(fv); ret == nvml.SUCCESS {
			for i := range fv {
				if x, ok := fieldFloat(fv[i]); ok {
					byField[i].put(h, x*byField[i].scale)
				}
			}
		}
	}
	for _, r := range byQuery {
		if x, ret := r.query(d.h); ret == nvml.SUCCESS {
			r.put(h, float64(x)*r.scale)
		}
	}
	return h
}

// planHealth asks for every candidate counter, by field in one call and
// then by query where the field was not answered, fills h with what was
// read, and returns the plan of what was. ok is false when the GPU did not
// answer the field call at all (lost, or a driver error): nothing was
// learnt.
func (b *Backend) planHealth(d *device, eccOn bool, h *healthValues) (_ *healthPlan, ok bool) {
	cands := healthCandidates(d.links, eccOn)
	var fv []nvml.FieldValue
	var withField []int
	for i, c := range cands {
		if c.field.FieldId != 0 {
			fv = append(fv, c.field)
			withField = append(withField, i)
		}
	}
	answered := make([]bool, len(cands))
	p := &healthPlan{ecc: eccOn}
	var linkPlan healthPlan // the per-link reads, appended after the GPU's
	if len(fv) > 0 {
		ret := d.h.GetFieldValues(fv)
		switch {
		case ret == nvml.SUCCESS:
			for j, i := range withField {
				x, read := fieldFloat(fv[j])
				if !read {
					continue
				}
				answered[i] = true
				cands[i].put(h, x*cands[i].scale)
				to := p
				if cands[i].perLink {
					to = &linkPlan
				}
				to.fields = append(to.fields, cands[i].field)
				to.byField = append(to.byField, cands[i])
			}
		case !fieldCallAnswered(ret):
			return nil, false
		}
	}
	var unsupported []string
	for i, c := range cands {
		if answered[i] {
			continue
		}
		if c.query != nil {
			if x, ret := c.query(d.h); ret == nvml.SUCCESS {
				c.put(h, float64(x)*c.scale)
				if c.perLink {
					linkPlan.byQuery = append(linkPlan.byQuery, c)
				} else {
					p.byQuery = append(p.byQuery, c)
				}
				continue
			}
		}
		if !slices.Contains(unsupported, c.name) && !d.unsupportedLogged[c.name] {
			unsupported = append(unsupported, c.name)
		}
	}
	p.deviceFields, p.deviceQueries = len(p.fields), len(p.byQuery)
	p.fields = append(p.fields, linkPlan.fields...)
	p.byField = append(p.byField, linkPlan.byField...)
	p.byQuery = append(p.byQuery, linkPlan.byQuery...)
	if len(unsupported) > 0 {
		if d.unsupportedLogged == nil {
			d.unsupportedLogged = map[string]bool{}
		}
		for _, n := range unsupported {
			d.unsupportedLogged[n] = true
		}
		b.log.Info("GPU health counters not supported; not exported",
			zap.Int("gpu", d.index), zap.String("model", d.model), zap.String("counters", strings.Join(unsupported, ",")))
	}
	return p, true
}

// fieldCallAnswered tells a GetFieldValues call the GPU refused as a whole (the
// driver has no field values, or none for this GPU) from one it could not
// answer.
func fieldCallAnswered(ret nvml.Return) bool {
	return answered(ret) || ret == nvml.ERROR_FUNCTION_NOT_FOUND || ret == nvml.ERROR_INVALID_ARGUMENT
}

// fieldFloat decodes a field value by its type; false when NVML did not
// read it.
func fieldFloat(f nvml.FieldValue) (float64, bool) {
	if nvml.Return(f.NvmlReturn) != nvml.SUCCESS {
		return 0, false
	}
	var x uint64
	for i := 7; i >= 0; i-- { // little-endian union, as NVML fills it on x86-64 and arm64
		x = x<<8 | uint64(f.Value[i])
	}
	switch nvml.ValueType(f.ValueType) {
	case nvml.VALUE_TYPE_DOUBLE:
		v := math.Float64frombits(x)
		return v, !math.IsNaN(v) && !math.IsInf(v, 0)
	case nvml.VALUE_TYPE_UNSIGNED_INT:
		return float64(uint32(x)), true
	case nvml.VALUE_TYPE_SIGNED_INT:
		return float64(int32(uint32(x))), true
	case nvml.VALUE_TYPE_SIGNED_LONG_LONG:
		return float64(int64(x)), true
	case nvml.VALUE_TYPE_UNSIGNED_SHORT:
		return float64(uint16(x)), true
	}
	return float64(x), true
}
