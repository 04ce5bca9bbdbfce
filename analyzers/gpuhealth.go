package analyzers

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/gpudiag/gpudiag/sample"
)

// The GPU's error counters that grew in the span: NVLink link-level errors
// and corrected ECC errors. Both are corrected by the hardware (the link
// layer replays a bad flit, ECC fixes a flipped bit), so they warn: a link
// or a memory that keeps making them is wearing out, and the next step is
// a link that goes down (XID 74) or an uncorrectable error (ecc_uncorrectable,
// critical, in audit.go). Counters are followed per GPU through the span's
// readings by the rules of sample/span.go, a reset counting from zero.

// nvlinkErrorEvents is what one GPU's NVLink counters say of the span:
// the increase per kind and link.
type nvlinkErrorEvents map[sample.NVLinkErrorKind]map[int]*sample.SpanCounter

// eccCorrectedEvents is what one GPU's corrected ECC counters say of the
// span: the volatile total and per location.
type eccCorrectedEvents struct {
	total    sample.SpanCounter
	read     bool
	location map[string]*sample.SpanCounter
}

// spanHealthEvents follows each GPU's NVLink and corrected ECC counters
// through the readings. A GPU that does not answer has no counters: the
// next reading that has them continues from the last.
func spanHealthEvents(readings []*sample.GPUs) (map[int]nvlinkErrorEvents, map[int]*eccCorrectedEvents) {
	links := map[int]nvlinkErrorEvents{}
	ecc := map[int]*eccCorrectedEvents{}
	for _, s := range readings {
		if s == nil {
			continue
		}
		for i := range s.Devices {
			d := &s.Devices[i]
			if !d.Up {
				continue
			}
			for _, l := range d.Links {
				for k := range sample.NumNVLinkErrorKinds {
					x, ok := l.Errors.Get(k)
					if !ok {
						continue
					}
					ev := links[d.Index]
					if ev == nil {
						ev = nvlinkErrorEvents{}
						links[d.Index] = ev
					}
					if ev[k] == nil {
						ev[k] = map[int]*sample.SpanCounter{}
					}
					c := ev[k][l.Link]
					if c == nil {
						c = &sample.SpanCounter{}
						ev[k][l.Link] = c
					}
					c.Add(time.Time{}, x)
				}
			}
			e := ecc[d.Index]
			if e == nil {
				e = &eccCorrectedEvents{location: map[string]*sample.SpanCounter{}}
				ecc[d.Index] = e
			}
			if x, ok := d.Values.Get(sample.ECCCorrectedErrorsTotal); ok {
				e.total.Add(time.Time{}, x)
				e.read = true
			}
			for _, c := range d.ECCErrors {
				if c.Counter != sample.ECCVolatile || c.Type != sample.ECCCorrected {
					continue
				}
				lc := e.location[c.Location]
				if lc == nil {
					lc = &sample.SpanCounter{}
					e.location[c.Location] = lc
				}
				lc.Add(time.Time{}, c.Count)
			}
		}
	}
	return links, ecc
}

// nvlinkErrorNames say what each kind of NVLink error is, for summaries.
var nvlinkErrorNames = map[sample.NVLinkErrorKind]string{
	sample.NVLinkCRCFlit:  "flow-control CRC error(s)",
	sample.NVLinkCRCData:  "data CRC error(s)",
	sample.NVLinkReplay:   "replay(s)",
	sample.NVLinkRecovery: "link recovery(ies)",
}

const nvlinkErrorsFix = "check the link and its peer: nvidia-smi nvlink -e -i <gpu> (error counters), nvidia-smi nvlink -s (state), dmesg for XID 74; " +
	"errors on one link point at its cable, connector or NVSwitch tray, on every link of a GPU at the GPU or its baseboard; " +
	"drain and reset the GPU if they keep rising, open a vendor case if they do after a reset"

// grew reports whether any link's counter of kind k grew in the span.
func (ev nvlinkErrorEvents) grew(k sample.NVLinkErrorKind) bool {
	for _, c := range ev[k] {
		if c.Increase() > 0 {
			return true
		}
	}
	return false
}

// auditGPUHealth raises nvlink_errors, one finding per GPU and kind of
// NVLink error that grew in the span (kind: crc_flit, crc_data, replay,
// recovery; one evidence line per link), and ecc_correctable_rising per
// GPU whose corrected ECC errors grew (evidence per memory location where
// the GPU reports them).
//
// CRC errors alone raise nothing. A healthy 2xH200 (NV18) under an
// all-reduce at 105 GB/s counted about 10 data CRC errors a second on each
// of its 18 links, with no replay and no recovery, for as long as it ran
// (testdata/traces/multigpu/h200x2): a warning there would fire on every
// busy Hopper node. What a CRC error costs is the replay that resends the
// flit, or the recovery when the link retrains; those are what NVIDIA's
// health checks act on (DCGM fails a GPU on one replay or recovery, and on
// CRC errors only at 100 a second). So a GPU whose replays or recoveries
// grew gets its CRC counts as findings too, as the same links' story; the
// counters themselves are always exported.
func auditGPUHealth(a AuditInput) []Finding {
	if a.LastGPUs == nil {
		return nil // no GPU reading: nothing to say of the GPUs' health
	}
	links, ecc := spanHealthEvents(a.GPUReadings)
	var out []Finding
	for _, gpu := range slices.Sorted(maps.Keys(links)) {
		costly := links[gpu].grew(sample.NVLinkReplay) || links[gpu].grew(sample.NVLinkRecovery)
		for _, k := range slices.Sorted(maps.Keys(links[gpu])) {
			if !costly && (k == sample.NVLinkCRCFlit || k == sample.NVLinkCRCData) {
				continue
			}
			var ev []Evidence
			var total float64
			var where []string
			for _, l := range slices.Sorted(maps.Keys(links[gpu][k])) {
				n := links[gpu][k][l].Increase()
				if n <= 0 {
					continue
				}
				total += n
				where = append(where, fmt.Sprintf("%d", l))
				ev = append(ev, Evidence{Signal: fmt.Sprintf("nvlink_%s_errors_link_%d", k, l), Value: n, Op: ">", Threshold: 0})
			}
			if total == 0 {
				continue
			}
			idx := gpu
			out = append(out, Finding{Check: "nvlink_errors", Severity: SeverityWarning, GPU: &idx, Kind: k.String(),
				Summary: fmt.Sprintf("%.0f NVLink %s in the span on link(s) %s: the link layer corrects them at the cost of bandwidth, and a link that keeps making them is failing",
					total, nvlinkErrorNames[k], strings.Join(where, ", ")),
				Fix: nvlinkErrorsFix, Evidence: ev})
		}
	}
	for _, gpu := range slices.Sorted(maps.Keys(ecc)) {
		e := ecc[gpu]
		n := e.total.Increase()
		if !e.read || n <= 0 {
			continue
		}
		ev := []Evidence{{Signal: "ecc_corrected_errors", Value: n, Op: ">", Threshold: 0}}
		for _, loc := range slices.Sorted(maps.Keys(e.location)) {
			if m := e.location[loc].Increase(); m > 0 {
				ev = append(ev, Evidence{Signal: "ecc_corrected_errors_" + loc, Value: m, Op: ">", Threshold: 0})
			}
		}
		idx := gpu
		out = append(out, Finding{Check: "ecc_correctable_rising", Severity: SeverityWarning, GPU: &idx,
			Summary: fmt.Sprintf("%.0f corrected ECC error(s) in the span: the memory still corrects them, but a GPU whose corrected errors keep rising is the one whose next error may not be correctable", n),
			Fix: "watch gpudiag_gpu_ecc_errors_total{type=\"corrected\"} and the remapped rows (nvidia-smi -q -d ECC,ROW_REMAPPER -i <gpu>); " +
				"if they keep rising, drain the GPU at the next opportunity and reset it so that row remapping retires the failing rows; replace it if they go on after that",
			Evidence: ev})
	}
	return out
}
