package diagnose

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gpudiag/gpudiag/analyzers"
	"github.com/gpudiag/gpudiag/engine"
	"github.com/gpudiag/gpudiag/sample"
)

// Evidence about the inter-node path: what each RDMA port carried over the
// span (infiniband collector), which ports each GPU's rank can use and how
// far they sit from it (numa collector's PCIe paths), and which ports and
// transport NCCL's log says the rank uses (nccl collector).

// xmitWaitBytesPerTick converts port_xmit_wait to bytes the port could not
// send: NVIDIA Quantum-generation devices count one tick per 8 bytes' time
// whatever the width (ibdiagnet user manual, "Congestion Assessment on
// InfiniBand Links": lost bytes = xmit_wait × (tick + 1), tick = 7).
const xmitWaitBytesPerTick = 8

// fabricEvidence fills Node.RDMAPorts with each port's means over the span
// and every GPU's NICs, JobNodes and NCCLNetGDR.
func fabricEvidence(w *engine.Window, since time.Time, in *analyzers.Input) {
	es := engine.Range(w, sample.InfiniBandKey, since)
	if len(es) == 0 {
		return
	}
	last := es[len(es)-1].Sample
	in.Node.RDMAMeasured = true
	in.Node.GPUDirectModule = last.GPUDirectRDMAModule
	accs := map[string]map[sample.InfiniBandCounter]*sample.SpanMean{}
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
			means := accs[portName(p)]
			if means == nil {
				means = map[sample.InfiniBandCounter]*sample.SpanMean{}
				accs[portName(p)] = means
			}
			for k, v := range p.Rates {
				if means[k] == nil {
					means[k] = &sample.SpanMean{}
				}
				means[k].Add(v, weight)
			}
		}
	}
	peak := map[string]float64{}
	for i := range last.Ports {
		p := &last.Ports[i]
		if g := p.LinkLayer + "\x00" + p.HCAType; p.Active() && p.RateBytesPerSecond > peak[g] {
			peak[g] = p.RateBytesPerSecond
		}
	}
	for i := range last.Ports {
		p := &last.Ports[i]
		mean := func(k sample.InfiniBandCounter) float64 {
			if m := accs[portName(p)][k]; m != nil {
				return m.MeanOr(math.NaN())
			}
			return math.NaN()
		}
		r := analyzers.RDMAPort{Name: portName(p), LinkLayer: p.LinkLayer, Active: p.Active(),
			RateBytes: p.RateBytesPerSecond, PeakRateBytes: peak[p.LinkLayer+"\x00"+p.HCAType], Degraded: p.RateDegraded,
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
		in.Node.RDMAPorts = append(in.Node.RDMAPorts, r)
	}
	gpuNICs(w, last, in)
}

// gpuNICs lists, for each GPU, the ports its rank can use with their PCIe
// distance, and what NCCL's log says of the rank's network path.
func gpuNICs(w *engine.Window, ib *sample.InfiniBand, in *analyzers.Input) {
	type place struct {
		path sample.PCIPath
		node int
	}
	places := map[int]place{}
	if e, ok := engine.Latest(w, sample.NUMAKey); ok {
		for _, g := range e.Sample.GPUs {
			if g.GPU >= 0 {
				places[g.GPU] = place{g.PCIPath, g.NUMANode}
			}
		}
	}
	var log *sample.NCCL
	if e, ok := engine.Latest(w, sample.NCCLKey); ok {
		log = e.Sample
	}
	for gi := range in.GPUs {
		g := &in.GPUs[gi]
		named, gdr, nodes := ncclRankNetwork(log, g.Index)
		g.NCCLNetGDR, g.JobNodes = gdr, nodes
		pl, placed := places[g.Index]
		if !placed {
			pl.node = -1
		}
		for i := range ib.Ports {
			p := &ib.Ports[i]
			viaNCCL := slices.Contains(named, p.Device+":"+strconv.FormatUint(uint64(p.Port), 10))
			if !p.Active() && !viaNCCL {
				continue
			}
			g.NICs = append(g.NICs, analyzers.GPUNIC{Port: i, NCCL: viaNCCL,
				Distance: sample.PCIDistance(pl.path, pl.node, p.PCIPath, p.NUMANode)})
		}
		slices.SortStableFunc(g.NICs, func(a, b analyzers.GPUNIC) int {
			return cmp.Compare(sample.PCIDistanceRank(a.Distance), sample.PCIDistanceRank(b.Distance))
		})
	}
}

// ncclRankNetwork reads, from NCCL's log, the ports ("mlx5_0:1") the
// GPU's rank connects through, whether its network connections use
// GPUDirect RDMA ("gdr"), host staging ("host") or neither is known (""),
// and the largest node count of its communicators.
func ncclRankNetwork(log *sample.NCCL, gpu int) (ports []string, gdr string, nodes int) {
	if log == nil {
		return nil, "", 0
	}
	for _, g := range log.GPUs {
		if g.GPU != gpu {
			continue
		}
		p := log.Process(g)
		if !p.Current {
			continue
		}
		type rankRef struct {
			comm string
			rank int
		}
		ranks := map[rankRef]bool{}
		for _, c := range p.Comms {
			if c.NVMLDev == gpu {
				ranks[rankRef{c.CommID, c.Rank}] = true
			}
			nodes = max(nodes, c.NNodes)
		}
		for _, t := range p.Transports {
			switch t.Transport {
			case "NET/IB+GDRDMA", "NET/other+GDRDMA":
				gdr = "gdr"
			case "NET/IB", "NET/other":
				if gdr == "" {
					gdr = "host"
				}
			}
		}
		for _, peer := range p.Peers {
			if len(ranks) > 0 && !ranks[rankRef{peer.CommID, peer.Rank}] {
				continue
			}
			i, ok := netDeviceIndex(peer.Path)
			if !ok || i >= len(p.IBDevices) {
				continue
			}
			name, _, _ := strings.Cut(p.IBDevices[i], "/") // mlx5_0:1/IB
			if !slices.Contains(ports, name) {
				ports = append(ports, name)
			}
		}
	}
	return ports, gdr, nodes
}

// netDeviceIndex reads the NCCL net device index of a connection path
// ("NET/IB/1/GDRDMA", "NET/IB/0(1)/GDRDMA(PCI)/Shared").
func netDeviceIndex(path string) (int, bool) {
	rest, ok := strings.CutPrefix(path, "NET/IB/")
	if !ok {
		return 0, false
	}
	end := 0
	for end < len(rest) && rest[end] >= '0' && rest[end] <= '9' {
		end++
	}
	i, err := strconv.Atoi(rest[:end])
	return i, err == nil
}

func portName(p *sample.InfiniBandPort) string {
	return fmt.Sprintf("%s/%d", p.Device, p.Port)
}
