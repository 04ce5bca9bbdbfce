package diagnose

import (
	"cmp"
	"slices"
	"time"

	"github.com/gpudiag/gpudiag/analyzers"
	"github.com/gpudiag/gpudiag/engine"
	"github.com/gpudiag/gpudiag/sample"
)

// Evidence from the eBPF programs (ebpf collector): on which disk each GPU's
// processes and their descendants (DataLoader workers included) wait, and
// how much. It names the disk a starved job waits on, which node-wide
// pressure and per-process thread states cannot.

// diskWaitEvidence takes exact means from the cumulative per-GPU totals,
// per disk: the increase from the GPU's first reading in the span to its
// last, over the time between the two (the rules in sample/span.go). A GPU is
// followed from its own first reading: the collector lists a GPU only once
// the GPU collector has published it. A disk missing from a reading of its
// GPU had no I/O charged to it yet (the collector adds a disk at its first
// request), so it counts from zero there, not from its own first reading:
// the requests that made it appear belong to the span. A job that began
// inside the span is followed from its start (spanStarts).
func diskWaitEvidence(w *engine.Window, b *build) {
	in, since := b.in, b.since
	es := engine.Range(w, sample.EBPFKey, since)
	if len(es) == 0 || !es[len(es)-1].Sample.BlockIO.Loaded {
		return
	}
	type totals struct{ bytes, wait float64 }
	type follow struct {
		readings    int
		first, last time.Time
		prev        map[string]totals // each disk's totals at the last reading
		increase    map[string]totals
	}
	starts := jobStarts(in, since)
	byGPU := map[int]*follow{}
	for _, e := range es {
		for _, g := range e.Sample.GPUs {
			if e.Time.Before(starts.of(g.Index)) {
				continue
			}
			f := byGPU[g.Index]
			if f == nil {
				f = &follow{first: e.Time, prev: map[string]totals{}, increase: map[string]totals{}}
				byGPU[g.Index] = f
			}
			now := map[string]totals{}
			for _, b := range g.BlockIO {
				t := now[b.Device]
				t.bytes += float64(b.BytesTotal)
				t.wait += b.WaitSecondsTotal
				now[b.Device] = t
			}
			if f.readings > 0 {
				// A disk absent from the previous reading counts from
				// zero (f.prev's zero value); one absent now restarted.
				for dev, t := range now {
					p, inc := f.prev[dev], f.increase[dev]
					inc.bytes += sample.CounterIncrease(p.bytes, t.bytes)
					inc.wait += sample.CounterIncrease(p.wait, t.wait)
					f.increase[dev] = inc
				}
			}
			f.prev, f.last = now, e.Time
			f.readings++
		}
	}
	for i := range in.GPUs {
		f := byGPU[in.GPUs[i].Index]
		if f == nil || f.readings < 2 || !f.last.After(f.first) {
			continue
		}
		secs := f.last.Sub(f.first).Seconds()
		var waits []analyzers.DiskWait
		for dev, inc := range f.increase {
			d := analyzers.DiskWait{Device: dev, BytesPerSecond: inc.bytes / secs, InFlight: inc.wait / secs}
			if d.InFlight > 0 || d.BytesPerSecond > 0 {
				waits = append(waits, d)
			}
		}
		slices.SortFunc(waits, func(a, b analyzers.DiskWait) int {
			return cmp.Or(cmp.Compare(b.InFlight, a.InFlight), cmp.Compare(a.Device, b.Device))
		})
		in.GPUs[i].DiskWaits = waits
	}
}
