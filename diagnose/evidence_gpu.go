package diagnose

import (
	"math"
	"time"

	"github.com/gpudiag/gpudiag/analyzers"
	"github.com/gpudiag/gpudiag/engine"
	"github.com/gpudiag/gpudiag/sample"
)

// Evidence from the GPU collector: each GPU's means over the span and its
// readings over the whole window.

// gpuEvidence summarises each GPU over the span (analyzers.SummariseGPUs),
// with its links' capacities from the newest reading's topology, keeps the
// span's readings for the audit and the whole window's for what needs more
// than the span: how long a collective has waited (GPUWindow.Recent), the
// ranks gone from the GPUs, who runs on each GPU now.
func gpuEvidence(w *engine.Window, b *build) {
	in := b.in
	span := engine.Range(w, sample.GPUKey, b.since)
	in.GPUs = analyzers.SummariseGPUs(span, b.since)
	if last, ok := newest(span); ok {
		applyTopology(in.GPUs, last.Sample)
		in.Audit.LastGPUs = last.Sample
	}
	for _, g := range span {
		in.Audit.GPUReadings = append(in.Audit.GPUReadings, g.Sample)
	}
	b.gpus = engine.Range(w, sample.GPUKey, time.Time{})
	recentGPUPoints(b.gpus, in.GPUs)
}

// applyTopology fills the link capacities from the newest GPU sample's
// topology (read once by the backend at start).
func applyTopology(ws []analyzers.GPUWindow, s *sample.GPUs) {
	if s.Topology == nil {
		return
	}
	for i := range ws {
		c, ok := s.Topology.GPU(ws[i].Index)
		if !ok {
			continue
		}
		if c.PCIeMaxBytesPerSecond > 0 {
			ws[i].PCIeCapacity = c.PCIeMaxBytesPerSecond
		}
		if c.NVLinkMaxBytesPerSecond > 0 {
			ws[i].NVLinkCapacity = c.NVLinkMaxBytesPerSecond
		}
	}
}

// recentGPUPoints gives each GPU its readings of the whole window, newest
// first, drawn from the window's GPU samples as the analysis asks for them.
func recentGPUPoints(readings []sample.Timed[*sample.GPUs], ws []analyzers.GPUWindow) {
	for i := range ws {
		gpu := ws[i].Index
		ws[i].Recent = func(yield func(analyzers.GPUPoint) bool) {
			for k := len(readings) - 1; k >= 0; k-- {
				e := readings[k]
				for j := range e.Sample.Devices {
					d := &e.Sample.Devices[j]
					if d.Index != gpu || !d.Up {
						continue
					}
					get := valueOrNaN(d)
					if !yield(analyzers.GPUPoint{Time: e.Time,
						Utilization: get(sample.Utilization), SMActive: get(sample.SMActive),
						PCIe:   get(sample.PCIeTxBytesPerSecond) + get(sample.PCIeRxBytesPerSecond),
						NVLink: get(sample.NVLinkTxBytesPerSecond) + get(sample.NVLinkRxBytesPerSecond)}) {
						return
					}
				}
			}
		}
	}
}

// valueOrNaN reads a GPU's fields, NaN for one it did not measure.
func valueOrNaN(d *sample.GPU) func(sample.Field) float64 {
	return func(f sample.Field) float64 {
		if x, ok := d.Values.Get(f); ok {
			return x
		}
		return math.NaN()
	}
}
