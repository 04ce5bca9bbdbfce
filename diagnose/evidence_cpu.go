package diagnose

import (
	"math"

	"github.com/gpudiag/gpudiag/engine"
	"github.com/gpudiag/gpudiag/sample"
)

// cpuEvidence is the node's swapping and page cache refaults over the span
// (vmstat), and the span's first and last readings for the audit.
func cpuEvidence(w *engine.Window, b *build) {
	in := b.in
	entries := engine.Range(w, sample.CPUKey, b.since)
	if len(entries) > 0 {
		in.Audit.FirstCPU, in.Audit.LastCPU = entries[0].Sample, entries[len(entries)-1].Sample
	}
	swap := func(c *sample.CPU) (float64, float64, bool) {
		if c.Interval == nil || c.IntervalSeconds <= 0 ||
			!c.Interval.Measured(sample.VMSwapIn) || !c.Interval.Measured(sample.VMSwapOut) {
			return 0, 0, false
		}
		return c.Interval.SwapInPagesPerSecond + c.Interval.SwapOutPagesPerSecond, c.IntervalSeconds, true
	}
	if v, ok := meanOver(entries, b.since, swap); ok {
		in.Node.SwapPagesPerSecond = v
	}
	refaults := func(c *sample.CPU) (float64, float64, bool) {
		if c.Interval == nil || c.IntervalSeconds <= 0 || !c.Interval.Measured(sample.VMPageCacheRefaults) {
			return 0, 0, false
		}
		return c.Interval.PageCacheRefaultsPerSecond, c.IntervalSeconds, true
	}
	b.nodeRefaults = math.NaN()
	if v, ok := meanOver(entries, b.since, refaults); ok {
		b.nodeRefaults = v
	}
}
