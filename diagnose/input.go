package diagnose

import (
	"math"
	"time"

	"github.com/gpudiag/gpudiag/analyzers"
	"github.com/gpudiag/gpudiag/engine"
	"github.com/gpudiag/gpudiag/sample"
)

// FromWindow builds the analyzers' Input from the engine's window: the GPU
// samples of the last span, summarised per GPU, and the host evidence. It
// and the evidence functions it calls are the only code that reads the
// window; each reads its collector's samples by the collector's key.
func FromWindow(w *engine.Window, now time.Time, span time.Duration) analyzers.Input {
	in := analyzers.Input{Now: now, SpanSeconds: span.Seconds(), Node: analyzers.NaNNode()}
	since := now.Add(-span)
	gpus := engine.Range(w, sample.GPUKey, since)
	in.GPUs = analyzers.SummariseGPUs(gpus, since)
	if len(gpus) > 0 {
		applyTopology(in.GPUs, gpus[len(gpus)-1].Sample)
	}
	for _, h := range evidence {
		h(w, since, &in)
	}
	for _, g := range gpus {
		in.Audit.GPUReadings = append(in.Audit.GPUReadings, g.Sample)
	}
	recentGPUPoints(w, in.GPUs)
	if len(gpus) > 0 {
		in.Audit.LastGPUs = gpus[len(gpus)-1].Sample
	}
	for _, r := range engine.Range(w, sample.InfiniBandKey, since) {
		in.Audit.IBReadings = append(in.Audit.IBReadings, r.Sample)
	}
	if n := len(in.Audit.IBReadings); n > 0 {
		in.Audit.LastIB = in.Audit.IBReadings[n-1]
	}
	if cpu := engine.Range(w, sample.CPUKey, since); len(cpu) > 0 {
		in.Audit.FirstCPU, in.Audit.LastCPU = cpu[0].Sample, cpu[len(cpu)-1].Sample
	}
	in.Audit.NCCLHistory = engine.Range(w, sample.NCCLKey, time.Time{})
	if k, ok := engine.Latest(w, sample.KubeletKey); ok {
		in.Audit.Kubelet = k.Sample
	}
	// Tuning facts are sampled every 30 s or so: take the newest whatever
	// its age, they change rarely.
	if t, ok := engine.Latest(w, sample.TuningKey); ok {
		in.Audit.Tuning = t.Sample
	}
	return in
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
func recentGPUPoints(w *engine.Window, ws []analyzers.GPUWindow) {
	readings := engine.Range(w, sample.GPUKey, time.Time{})
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
					get := func(f sample.Field) float64 {
						if x, ok := d.Values.Get(f); ok {
							return x
						}
						return math.NaN()
					}
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
