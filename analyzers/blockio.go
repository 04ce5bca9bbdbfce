package analyzers

import (
	"cmp"
	"slices"
	"time"

	"github.com/gpudiag/gpudiag/engine"
	"github.com/gpudiag/gpudiag/sample"
)

// Evidence from the eBPF programs (ebpf collector): on which disk each GPU's
// processes and their descendants (DataLoader workers included) wait, and
// how much. It names the disk a starved job waits on, which node-wide
// pressure and per-process thread states cannot.
func init() {
	hostEvidence = append(hostEvidence, diskWaitEvidence)
}

// diskWaitEvidence takes exact means over the span from the cumulative
// per-GPU totals: (last − first) / the time between the two readings.
func diskWaitEvidence(w *engine.Window, since time.Time, in *Input) {
	es := w.Range("ebpf", since)
	if len(es) < 2 {
		return
	}
	first, ok1 := es[0].Sample.(*sample.EBPF)
	last, ok2 := es[len(es)-1].Sample.(*sample.EBPF)
	secs := es[len(es)-1].Time.Sub(es[0].Time).Seconds()
	if !ok1 || !ok2 || secs <= 0 || !last.BlockIO.Loaded {
		return
	}
	type totals struct{ bytes, wait float64 }
	byDisk := func(g sample.EBPFGPU) map[string]totals {
		m := map[string]totals{}
		for _, b := range g.BlockIO {
			t := m[b.Device]
			t.bytes += float64(b.BytesTotal)
			t.wait += b.WaitSecondsTotal
			m[b.Device] = t
		}
		return m
	}
	before := map[int]map[string]totals{}
	for _, g := range first.GPUs {
		before[g.Index] = byDisk(g)
	}
	for _, g := range last.GPUs {
		prev, ok := before[g.Index]
		if !ok {
			continue
		}
		var waits []DiskWait
		for dev, t := range byDisk(g) {
			p := prev[dev]
			d := DiskWait{Device: dev,
				InFlight:       sample.CounterDelta(p.wait, t.wait) / secs,
				BytesPerSecond: sample.CounterDelta(p.bytes, t.bytes) / secs}
			if d.InFlight > 0 || d.BytesPerSecond > 0 {
				waits = append(waits, d)
			}
		}
		slices.SortFunc(waits, func(a, b DiskWait) int {
			return cmp.Or(cmp.Compare(b.InFlight, a.InFlight), cmp.Compare(a.Device, b.Device))
		})
		for i := range in.GPUs {
			if in.GPUs[i].Index == g.Index {
				in.GPUs[i].DiskWaits = waits
			}
		}
	}
}
