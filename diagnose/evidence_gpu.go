package diagnose

import (
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/gpudiag/gpudiag/analyzers"
	"github.com/gpudiag/gpudiag/engine"
	"github.com/gpudiag/gpudiag/sample"
)

// Evidence from the GPU collector: each GPU's means over the span, its
// readings over the whole window, and what the page shows of each GPU.

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

// gpuPageEvidence reads the GPU readings from start for the page: the
// newest (nil when none), and each GPU's sparklines up to now.
func gpuPageEvidence(w *engine.Window, start, now time.Time) (*sample.GPUs, map[int][]Sparkline) {
	gpus := engine.Range(w, sample.GPUKey, start)
	last, ok := newest(gpus)
	if !ok {
		return nil, nil
	}
	return last.Sample, sparklines(gpus, start, now)
}

// modelNames names each GPU's model and counts the node's ("8 × H100").
func modelNames(s *sample.GPUs) (node string, byGPU map[int]string) {
	byGPU = map[int]string{}
	if s == nil {
		return "", byGPU
	}
	var names []string
	count := map[string]int{}
	for _, d := range s.Devices {
		byGPU[d.Index] = d.Model
		if d.Model != "" {
			if count[d.Model] == 0 {
				names = append(names, d.Model)
			}
			count[d.Model]++
		}
	}
	for i, m := range names {
		names[i] = fmt.Sprintf("%d × %s", count[m], m)
	}
	return strings.Join(names, ", "), byGPU
}

// pidNames names each GPU's processes by the PIDs the driver lists, the
// first most of them, for a node without the gpuprocess collector.
func pidNames(s *sample.GPUs, most int) map[int][]string {
	out := map[int][]string{}
	if s == nil {
		return out
	}
	for _, d := range s.Devices {
		for i, pr := range d.Processes {
			if i == most {
				out[d.Index] = append(out[d.Index], fmt.Sprintf("+ %d more", len(d.Processes)-most))
				break
			}
			out[d.Index] = append(out[d.Index], fmt.Sprintf("pid %d (%.1f GiB)", pr.PID, float64(pr.UsedMemoryBytes)/(1<<30)))
		}
	}
	return out
}

// sparkBuckets is the number of points of a sparkline: enough to show a
// change within a 10-minute window, few enough to keep the page small.
const sparkBuckets = 90

// Sparkline is one GPU signal over the window: a polyline's points in a
// 100×24 box, each a bucket's mean, and its peak.
type Sparkline struct {
	Name   string
	Points string
	Peak   string
}

// sparkSum is one signal's sum and count of readings per bucket.
type sparkSum struct{ sum, n [sparkBuckets]float64 }

func (a *sparkSum) add(bucket int, v float64) {
	if !math.IsNaN(v) && !math.IsInf(v, 0) {
		a.sum[bucket] += v
		a.n[bucket]++
	}
}

// sparklines draws, per GPU, SM activity, PCIe and NVLink traffic over the
// window, each bucket a mean of its samples.
func sparklines(gpus []sample.Timed[*sample.GPUs], start, end time.Time) map[int][]Sparkline {
	type series struct{ sm, pcie, nvlink sparkSum }
	all := map[int]*series{}
	span := end.Sub(start).Seconds()
	if span <= 0 || len(gpus) == 0 {
		return nil
	}
	for _, e := range gpus {
		b := int(e.Time.Sub(start).Seconds() / span * sparkBuckets)
		b = min(max(b, 0), sparkBuckets-1)
		for i := range e.Sample.Devices {
			d := &e.Sample.Devices[i]
			if !d.Up {
				continue
			}
			s := all[d.Index]
			if s == nil {
				s = &series{}
				all[d.Index] = s
			}
			get := valueOrNaN(d)
			s.sm.add(b, get(sample.SMActive))
			s.pcie.add(b, get(sample.PCIeTxBytesPerSecond)+get(sample.PCIeRxBytesPerSecond))
			s.nvlink.add(b, get(sample.NVLinkTxBytesPerSecond)+get(sample.NVLinkRxBytesPerSecond))
		}
	}
	out := map[int][]Sparkline{}
	for id, s := range all {
		out[id] = []Sparkline{sparkline("SM active", &s.sm, 1, "ratio"), sparkline("PCIe", &s.pcie, 0, "B/s"), sparkline("NVLink", &s.nvlink, 0, "B/s")}
	}
	return out
}

// sparkline scales a signal's bucket means to fixedMax, or to its peak when
// fixedMax is 0.
func sparkline(name string, a *sparkSum, fixedMax float64, unit string) Sparkline {
	peak := 0.0
	var means [sparkBuckets]float64
	have := false
	for i := range means {
		if a.n[i] == 0 {
			means[i] = math.NaN()
			continue
		}
		means[i] = a.sum[i] / a.n[i]
		peak = max(peak, means[i])
		have = true
	}
	sl := Sparkline{Name: name}
	if !have {
		sl.Peak = "no data"
		return sl
	}
	scale := fixedMax
	if scale == 0 {
		scale = peak
	}
	if scale <= 0 {
		scale = 1
	}
	var b strings.Builder
	for i, m := range means {
		if math.IsNaN(m) {
			continue
		}
		fmt.Fprintf(&b, "%.1f,%.1f ", float64(i)*100/(sparkBuckets-1), 23-22*min(m/scale, 1))
	}
	sl.Points = strings.TrimSpace(b.String())
	sl.Peak = "peak " + formatValue(peak, unit)
	if unit == "ratio" {
		sl.Peak = fmt.Sprintf("peak %.0f%%", peak*100)
	}
	return sl
}
