package diagnose

import (
	"github.com/gpudiag/gpudiag/engine"
	"github.com/gpudiag/gpudiag/sample"
)

// Evidence from the tcp collector: the TCP bytes of the GPU processes.

// tcpEvidence is the exact mean TCP throughput (both directions, both
// scopes) of each GPU's processes: the increase of their byte totals from
// the GPU's first reading in the span to its last, divided by the time
// between the two (sample.SpanCounter). A GPU is followed from its own first
// reading, not the span's: the tcp collector lists a GPU only once the GPU
// collector has published it, so the daemon's (and a trace's) first reading
// lists none, and a span reaching back to it must not drop every GPU. A
// job that began inside the span is followed from its start (spanStarts).
func tcpEvidence(w *engine.Window, b *build) {
	in, since := b.in, b.since
	total := func(g sample.TCPGPU) float64 {
		return float64(g.Loopback.TransmitBytesTotal + g.Loopback.ReceiveBytesTotal + g.Network.TransmitBytesTotal + g.Network.ReceiveBytesTotal)
	}
	starts := jobStarts(in, since)
	byGPU := map[int]*sample.SpanCounter{}
	for _, e := range engine.Range(w, sample.TCPKey, since) {
		for _, g := range e.Sample.GPUs {
			if e.Time.Before(starts.of(g.Index)) {
				continue
			}
			c := byGPU[g.Index]
			if c == nil {
				c = &sample.SpanCounter{}
				byGPU[g.Index] = c
			}
			c.Add(e.Time, total(g))
		}
	}
	for i := range in.GPUs {
		if c := byGPU[in.GPUs[i].Index]; c != nil {
			if r, ok := c.Rate(); ok {
				in.GPUs[i].ProcessTCPBytes = r
			}
		}
	}
}
