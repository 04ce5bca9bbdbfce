package diagnose

import (
	"github.com/gpudiag/gpudiag/engine"
	"github.com/gpudiag/gpudiag/sample"
)

// pressureEvidence is the node's PSI shares over the span: CPU some, I/O
// some and I/O full.
func pressureEvidence(w *engine.Window, b *build) {
	in, since := b.in, b.since
	entries := engine.Range(w, sample.PressureKey, since)
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
