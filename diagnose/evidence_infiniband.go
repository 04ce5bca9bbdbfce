package diagnose

import (
	"fmt"
	"math"
	"time"

	"github.com/gpudiag/gpudiag/analyzers"
	"github.com/gpudiag/gpudiag/engine"
	"github.com/gpudiag/gpudiag/sample"
)

// Evidence from the infiniband collector: what each RDMA port carried over
// the span.

// xmitWaitBytesPerTick converts port_xmit_wait to bytes the port could not
// send: NVIDIA Quantum-generation devices count one tick per 8 bytes' time
// whatever the width (ibdiagnet user manual, "Congestion Assessment on
// InfiniBand Links": lost bytes = xmit_wait × (tick + 1), tick = 7).
const xmitWaitBytesPerTick = 8

// rdmaPortEvidence fills Node.RDMAPorts with each port's means over the
// span, and keeps the span's readings for the audit; the newest is the
// fabric's (gpuNICs).
func rdmaPortEvidence(w *engine.Window, b *build) {
	in := b.in
	es := engine.Range(w, sample.InfiniBandKey, b.since)
	for _, r := range es {
		in.Audit.IBReadings = append(in.Audit.IBReadings, r.Sample)
	}
	e, ok := newest(es)
	if !ok {
		return
	}
	last := e.Sample
	in.Audit.LastIB = last
	in.Node.RDMAMeasured = true
	in.Node.GPUDirectModule = last.GPUDirectRDMAModule
	means := portMeans(es, b.since)
	peak := map[string]float64{}
	for i := range last.Ports {
		p := &last.Ports[i]
		if g := p.LinkLayer + "\x00" + p.HCAType; p.Active() && p.RateBytesPerSecond > peak[g] {
			peak[g] = p.RateBytesPerSecond
		}
	}
	for i := range last.Ports {
		p := &last.Ports[i]
		in.Node.RDMAPorts = append(in.Node.RDMAPorts, rdmaPort(p, means[portName(p)], peak[p.LinkLayer+"\x00"+p.HCAType]))
	}
}

// portMeans averages each port's counters' rates over the span.
func portMeans(es []sample.Timed[*sample.InfiniBand], since time.Time) map[string]map[sample.InfiniBandCounter]*sample.SpanMean {
	means := map[string]map[sample.InfiniBandCounter]*sample.SpanMean{}
	for _, e := range es {
		weight := sample.SpanWeight(e.Time, since, e.Sample.IntervalSeconds)
		if weight <= 0 {
			continue
		}
		for i := range e.Sample.Ports {
			p := &e.Sample.Ports[i]
			if p.Rates == nil {
				continue // the port's first reading: no rate yet
			}
			port := means[portName(p)]
			if port == nil {
				port = map[sample.InfiniBandCounter]*sample.SpanMean{}
				means[portName(p)] = port
			}
			for k, v := range p.Rates {
				if port[k] == nil {
					port[k] = &sample.SpanMean{}
				}
				port[k].Add(v, weight)
			}
		}
	}
	return means
}

// rdmaPort is a port of the newest reading with its counters' means (NaN
// where none was measured) and the fastest line rate of its kind.
func rdmaPort(p *sample.InfiniBandPort, means map[sample.InfiniBandCounter]*sample.SpanMean, peakRate float64) analyzers.RDMAPort {
	mean := func(k sample.InfiniBandCounter) float64 {
		if m := means[k]; m != nil {
			return m.MeanOr(math.NaN())
		}
		return math.NaN()
	}
	r := analyzers.RDMAPort{Name: portName(p), LinkLayer: p.LinkLayer, Active: p.Active(),
		RateBytes: p.RateBytesPerSecond, PeakRateBytes: peakRate, Degraded: p.RateDegraded,
		NUMANode: p.NUMANode, TxBytes: mean(sample.IBTransmitBytes), RxBytes: mean(sample.IBReceiveBytes),
		XmitWaitShare: math.NaN(), ECNMarkedShare: math.NaN(), CNPHandledPerSecond: mean(sample.IBCNPHandled)}
	if wait := mean(sample.IBTransmitWait); p.RateBytesPerSecond > 0 && p.LinkLayer == "InfiniBand" {
		r.XmitWaitShare = math.Min(1, wait*xmitWaitBytesPerTick/p.RateBytesPerSecond)
	}
	if ecn, rcv := mean(sample.IBECNMarkedRoCEPackets), mean(sample.IBReceivePackets); rcv > 0 {
		r.ECNMarkedShare = math.Min(1, ecn/rcv)
	} else if ecn == 0 {
		r.ECNMarkedShare = 0
	}
	return r
}

func portName(p *sample.InfiniBandPort) string {
	return fmt.Sprintf("%s/%d", p.Device, p.Port)
}
