package diagnose

import (
	"github.com/gpudiag/gpudiag/engine"
	"github.com/gpudiag/gpudiag/sample"
)

// diskEvidence takes the busiest disk's mean read rate, and the mean write
// rate of the disk that writes most: a starved input pipeline reads from one
// dataset volume, not from all disks at once, and a checkpoint writes to one.
func diskEvidence(w *engine.Window, b *build) {
	in, since := b.in, b.since
	if d, ok := engine.Latest(w, sample.DiskstatsKey); ok {
		b.disks = d.Sample
	}
	type acc struct{ read, write sample.SpanMean }
	accs := map[string]*acc{}
	for _, e := range engine.Range(w, sample.DiskstatsKey, since) {
		d := e.Sample
		weight := sample.SpanWeight(e.Time, since, d.IntervalSeconds)
		if weight <= 0 {
			continue
		}
		for _, dev := range d.Devices {
			if dev.Rates == nil {
				continue // a disk's first reading: a baseline, no rate yet
			}
			a := accs[dev.Name]
			if a == nil {
				a = &acc{}
				accs[dev.Name] = a
			}
			a.read.Add(dev.Rates.ReadBytesPerSecond, weight)
			a.write.Add(dev.Rates.WriteBytesPerSecond, weight)
		}
	}
	if len(accs) == 0 {
		return
	}
	in.Node.DiskReadBytes, in.Node.DiskWriteBytes = 0, 0
	for _, a := range accs {
		// Every disk's first reading in the span weighs something: a
		// disk is added only then.
		in.Node.DiskReadBytes = max(in.Node.DiskReadBytes, a.read.MeanOr(0))
		in.Node.DiskWriteBytes = max(in.Node.DiskWriteBytes, a.write.MeanOr(0))
	}
}
