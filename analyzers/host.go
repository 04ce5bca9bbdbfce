package analyzers

import (
	"time"

	"github.com/gpudiag/gpudiag/engine"
	"github.com/gpudiag/gpudiag/sample"
)

// Host evidence from the node-wide collectors. Each function averages its
// collector's per-interval values over the span, weighting each by the part
// of its interval inside the span (spanWeight); a collector that is off or
// has no reading leaves the field NaN.
func init() {
	hostEvidence = append(hostEvidence, pressureEvidence, cpuEvidence, diskEvidence)
}

// meanOver averages f over the entries that carry a value, weighted by the
// part of the interval each reading covers (f's weight) that lies after
// since: the span's first reading mostly covers time before the span.
func meanOver[T any](entries []engine.Entry, since time.Time, f func(T) (v, weight float64, ok bool)) (float64, bool) {
	var sum, weights float64
	for _, e := range entries {
		s, ok := e.Sample.(T)
		if !ok {
			continue
		}
		v, w, ok := f(s)
		if !ok {
			continue
		}
		if w = spanWeight(e.Time, since, w); w <= 0 {
			continue
		}
		sum += v * w
		weights += w
	}
	if weights == 0 {
		return 0, false
	}
	return sum / weights, true
}

func pressureEvidence(w *engine.Window, since time.Time, in *Input) {
	entries := w.Range("pressure", since)
	line := func(resource string, full bool) func(*sample.Pressure) (float64, float64, bool) {
		return func(p *sample.Pressure) (float64, float64, bool) {
			r := p.Resource(resource)
			if r == nil || p.IntervalSeconds <= 0 {
				return 0, 0, false
			}
			l := r.Some
			if full {
				l = r.Full
			}
			if l == nil {
				return 0, 0, false
			}
			return l.IntervalRatio, p.IntervalSeconds, true
		}
	}
	if v, ok := meanOver(entries, since, line("cpu", false)); ok {
		in.Node.CPUPressure = v
	}
	if v, ok := meanOver(entries, since, line("io", false)); ok {
		in.Node.IOPressure = v
	}
	if v, ok := meanOver(entries, since, line("io", true)); ok {
		in.Node.IOFull = v
	}
}

func cpuEvidence(w *engine.Window, since time.Time, in *Input) {
	swap := func(c *sample.CPU) (float64, float64, bool) {
		if c.Interval == nil || c.IntervalSeconds <= 0 {
			return 0, 0, false
		}
		return c.Interval.SwapInPagesPerSecond + c.Interval.SwapOutPagesPerSecond, c.IntervalSeconds, true
	}
	if v, ok := meanOver(w.Range("cpu", since), since, swap); ok {
		in.Node.SwapPagesPerSecond = v
	}
}

// diskEvidence takes the busiest disk's mean read rate: a starved input
// pipeline reads from one dataset volume, not from all disks at once.
func diskEvidence(w *engine.Window, since time.Time, in *Input) {
	sums := map[string]float64{}
	weights := map[string]float64{}
	for _, e := range w.Range("diskstats", since) {
		d, ok := e.Sample.(*sample.Disks)
		if !ok {
			continue
		}
		weight := spanWeight(e.Time, since, d.IntervalSeconds)
		if weight <= 0 {
			continue
		}
		for _, dev := range d.Devices {
			if dev.Rates == nil {
				continue // a disk's first reading: a baseline, no rate yet
			}
			sums[dev.Name] += dev.Rates.ReadBytesPerSecond * weight
			weights[dev.Name] += weight
		}
	}
	best, found := 0.0, false
	for name, s := range sums {
		if v := s / weights[name]; !found || v > best {
			best, found = v, true
		}
	}
	if found {
		in.Node.DiskReadBytes = best
	}
}
