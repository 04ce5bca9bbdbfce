package analyzers

import (
	"time"

	"github.com/gpudiag/gpudiag/engine"
	"github.com/gpudiag/gpudiag/sample"
)

// FromWindow builds the analyzers' Input from the engine's window: the GPU
// samples of the last span, summarised per GPU, and the host evidence. It is
// the only place that knows which collector produced which sample type.
func FromWindow(w *engine.Window, now time.Time, span time.Duration) Input {
	in := Input{Now: now, SpanSeconds: span.Seconds(), Node: NaNNode()}
	since := now.Add(-span)
	var gpus []Timed[*sample.GPUs]
	for _, e := range w.Range("gpu", since) {
		if s, ok := e.Sample.(*sample.GPUs); ok {
			gpus = append(gpus, Timed[*sample.GPUs]{Time: e.Time, Sample: s})
		}
	}
	in.GPUs = SummariseGPUs(gpus)
	if len(gpus) > 0 {
		applyTopology(in.GPUs, gpus[len(gpus)-1].Sample)
	}
	for _, h := range hostEvidence {
		h(w, since, &in)
	}
	in.Audit.FirstGPUs, in.Audit.LastGPUs = firstLast[*sample.GPUs](w, "gpu", since)
	in.Audit.FirstIB, in.Audit.LastIB = firstLast[*sample.InfiniBand](w, "infiniband", since)
	in.Audit.FirstCPU, in.Audit.LastCPU = firstLast[*sample.CPU](w, "cpu", since)
	// Tuning facts are sampled every 30 s or so: take the newest whatever
	// its age, they change rarely.
	if e, ok := w.Latest("tuning"); ok {
		in.Audit.Tuning, _ = e.Sample.(*sample.HostTuning)
	}
	return in
}

// firstLast returns the oldest and newest sample of a collector in the span.
func firstLast[T any](w *engine.Window, collector string, since time.Time) (first, last T) {
	es := w.Range(collector, since)
	if len(es) == 0 {
		return first, last
	}
	first, _ = es[0].Sample.(T)
	last, _ = es[len(es)-1].Sample.(T)
	return first, last
}

// hostEvidence holds the functions that add host evidence to an Input, one
// per host collector, registered by the files that know those samples.
var hostEvidence []func(w *engine.Window, since time.Time, in *Input)

// applyTopology fills the link capacities from the newest GPU sample's
// topology (read once by the backend at start).
func applyTopology(ws []GPUWindow, s *sample.GPUs) {
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
