package diagnose

import (
	"cmp"
	"slices"
	"strconv"
	"strings"

	"github.com/gpudiag/gpudiag/analyzers"
	"github.com/gpudiag/gpudiag/sample"
)

// Evidence about the inter-node path, joined from three collectors: which
// of the RDMA ports (infiniband collector) each GPU's rank can use and how
// far they sit from it (numa collector's PCIe paths), and which ports and
// transport NCCL's log says the rank uses (nccl collector).

// gpuNICs lists, for each GPU, the ports of the span's newest infiniband
// reading its rank can use with their PCIe distance (the newest NUMA
// reading), and what NCCL's log says of the rank's network path. Without
// an infiniband reading in the span it says nothing.
func gpuNICs(b *build) {
	in, ib := b.in, b.in.Audit.LastIB
	if ib == nil {
		return
	}
	type place struct {
		path sample.PCIPath
		node int
	}
	places := map[int]place{}
	if numa := in.Audit.NUMA; numa != nil {
		for _, g := range numa.GPUs {
			if g.GPU >= 0 {
				places[g.GPU] = place{g.PCIPath, g.NUMANode}
			}
		}
	}
	log := b.ncclLog
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
