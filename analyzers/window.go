package analyzers

import (
	"math"
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
	in.GPUs = SummariseGPUs(gpus, since)
	if len(gpus) > 0 {
		applyTopology(in.GPUs, gpus[len(gpus)-1].Sample)
	}
	for _, h := range hostEvidence {
		h(w, since, &in)
	}
	for _, g := range gpus {
		in.Audit.GPUReadings = append(in.Audit.GPUReadings, g.Sample)
	}
	if len(gpus) > 0 {
		in.Audit.LastGPUs = gpus[len(gpus)-1].Sample
	}
	in.Audit.IBReadings = readings[*sample.InfiniBand](w, "infiniband", since)
	if n := len(in.Audit.IBReadings); n > 0 {
		in.Audit.LastIB = in.Audit.IBReadings[n-1]
	}
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

// readings returns a collector's samples in the span, oldest first.
func readings[T any](w *engine.Window, collector string, since time.Time) []T {
	var out []T
	for _, e := range w.Range(collector, since) {
		if s, ok := e.Sample.(T); ok {
			out = append(out, s)
		}
	}
	return out
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

// How the evidence functions read the span. Two kinds of readings reach
// them, and each has one rule, so that a verdict does not depend on how long
// the span is (issue 14):
//
//   - A cumulative counter (TCP bytes, eBPF wait seconds) is followed per
//     entity (a GPU, a disk under a GPU): its mean rate is its increase from
//     the entity's own first reading in the span to its own last one,
//     divided by the time between those two readings. An entity absent from
//     the span's first reading (a GPU the collector met later, a job that
//     started in the span) counts from its first reading; one that vanished
//     counts up to its last. A counter lower than its previous reading was
//     restarted (the collector forgot the entity and met it again, a replay
//     that looped, counters cleared by hand): it counted from zero, so all
//     of its new value is increase.
//   - A per-interval rate or ratio (a reading's IntervalSeconds before it)
//     is weighted by the part of its interval inside the span (spanWeight):
//     the first reading of a span mostly covers time before the span began.
//     A rate that is the collector's baseline for an entity (the gpuprocess
//     reading where a job's processes first show reads zero for them) is no
//     measurement and is left out (processEvidence).
//
// The audit counts events (XIDs, PCIe replays, InfiniBand port errors) by
// the first rule.

// counterIncrease is the increase of a cumulative counter between two
// readings, a counter that went back having restarted from zero. Unlike
// sample.CounterDelta, which makes a collector's rate for one interval 0
// rather than negative, this is summed over a span: dropping the reading
// after a restart would lose everything counted since.
func counterIncrease(prev, cur float64) float64 {
	if cur < prev {
		return cur
	}
	return cur - prev
}

// spanCounter follows one entity's cumulative counter through the span's
// readings, oldest first.
type spanCounter struct {
	first, last time.Time
	prev        float64
	increase    float64
	readings    int
}

// add takes the entity's reading at t.
func (c *spanCounter) add(t time.Time, v float64) {
	if c.readings == 0 {
		c.first = t
	} else {
		c.increase += counterIncrease(c.prev, v)
	}
	c.prev, c.last = v, t
	c.readings++
}

// seconds is the time between the entity's first and last reading.
func (c *spanCounter) seconds() float64 { return c.last.Sub(c.first).Seconds() }

// rate is the mean increase per second between the entity's first and last
// reading; false with fewer than two readings apart in time.
func (c *spanCounter) rate() (float64, bool) {
	secs := c.seconds()
	if c.readings < 2 || secs <= 0 {
		return 0, false
	}
	return c.increase / secs, true
}

// spanWeight is the part of a reading's interval (seconds, ending at t)
// that lies after since, the start of the span.
func spanWeight(t, since time.Time, seconds float64) float64 {
	return math.Max(0, math.Min(seconds, t.Sub(since).Seconds()))
}
