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

// applyTopology fills the link capacities from the newest GPU sample.
func applyTopology(ws []GPUWindow, s *sample.GPUs) {
	byIndex := map[int]*sample.GPU{}
	for i := range s.Devices {
		byIndex[s.Devices[i].Index] = &s.Devices[i]
	}
	for i := range ws {
		d, ok := byIndex[ws[i].Index]
		if !ok {
			continue
		}
		if c := pcieCapacity(d); c > 0 {
			ws[i].PCIeCapacity = c
		}
	}
}

// pcieCapacity is the one-way rate of the GPU's PCIe link at its maximum
// generation and width (Gen3 0.985, Gen4 1.969, Gen5 3.938 GB/s per lane
// after encoding overhead).
func pcieCapacity(d *sample.GPU) float64 {
	gen, ok1 := d.Values.Get(sample.PCIeLinkMaxGeneration)
	width, ok2 := d.Values.Get(sample.PCIeLinkMaxWidth)
	if !ok1 || !ok2 {
		return 0
	}
	perLane := map[int]float64{1: 0.25e9, 2: 0.5e9, 3: 0.985e9, 4: 1.969e9, 5: 3.938e9, 6: 7.563e9}[int(gen)]
	return perLane * width
}
