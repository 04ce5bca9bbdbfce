package gpu

import (
	"cmp"
	"slices"
	"strconv"

	"github.com/gpudiag/gpudiag/sample"
)

// PCIeBytesPerSecond is the one-way data rate of a PCIe link: transfers per
// second per lane × line-code efficiency ÷ 8 bits × lanes. Gen1/2 use 8b/10b,
// Gen3–5 128b/130b, Gen6 FLIT mode (242 of 256 bytes carry data). Per lane:
// Gen3 0.985, Gen4 1.969, Gen5 3.938 GB/s, so Gen4 x16 is the 32 GB/s and
// Gen5 x16 the 64 GB/s "one-way" of research/seeds-002-004.md §2.3 (which
// rounds the encoding away). TLP headers take another 5–10%: a pinned H2D
// copy on Gen5 x16 reached 59.2 of the 63.0 GB/s (docs/validation.md).
// It returns 0 for an unknown generation or width.
func PCIeBytesPerSecond(generation, width int) float64 {
	if width <= 0 {
		return 0
	}
	var perLane float64
	switch generation {
	case 1:
		perLane = 2.5e9 * 8 / 10 / 8
	case 2:
		perLane = 5e9 * 8 / 10 / 8
	case 3:
		perLane = 8e9 * 128 / 130 / 8
	case 4:
		perLane = 16e9 * 128 / 130 / 8
	case 5:
		perLane = 32e9 * 128 / 130 / 8
	case 6:
		perLane = 64e9 * 242 / 256 / 8
	default:
		return 0
	}
	return perLane * float64(width)
}

// NVLinkBytesPerSecond is the one-way data rate of one NVLink of the given
// generation (major version). From research/seeds-002-004.md §2.2 and §0.1:
// A100 (NVLink 3) has 12 links and 600 GB/s both ways together, H100 (NVLink
// 4) 18 links and 900 GB/s, so each link carries 25 GB/s each way; V100
// (NVLink 2) 6 links and 300 GB/s, 25 GB/s again; P100 (NVLink 1) 4 links and
// 160 GB/s, 20 GB/s. Blackwell (NVLink 5) doubles the link to 50 GB/s each
// way (18 links, 1.8 TB/s, NVIDIA's B200 specification). nvidia-smi nvlink -s
// prints 26.562 GB/s for an H100/H200 link and 53.125 GB/s for a GB200 one:
// the signalling rate, before the link's own framing; the data rates above
// are what transfers can approach. Later generations return 0 (unknown)
// until their per-link rate is known, rather than a guess.
func NVLinkBytesPerSecond(generation int) float64 {
	switch generation {
	case 1:
		return 20e9
	case 2, 3, 4:
		return 25e9
	case 5:
		return 50e9
	}
	return 0
}

// NVLinkRemote is what sits at the far end of an NVLink.
type NVLinkRemote int

const (
	// RemoteUnknown: the driver did not say (the remote type query is
	// unsupported); the builder then decides by the remote's bus ID.
	RemoteUnknown NVLinkRemote = iota
	RemoteGPU
	RemoteSwitch
	// RemoteOther is a CPU (IBM NPU) or another device that is no GPU peer.
	RemoteOther
)

// NVLinkEnd is one active NVLink of a GPU.
type NVLinkEnd struct {
	Remote NVLinkRemote
	// RemoteBusID is the far device's PCI bus ID in kernel form; empty when
	// unknown.
	RemoteBusID string
	// Generation is the NVLink major version (4 on Hopper); 0 when unknown.
	Generation int
}

// TopologyGPU is what a backend read of one GPU's links.
type TopologyGPU struct {
	Index int
	// BusID is the GPU's PCI bus ID in kernel form, as NVLink remote bus
	// IDs name it.
	BusID                           string
	PCIeMaxGeneration, PCIeMaxWidth int
	NVLinks                         []NVLinkEnd
}

// BuildTopology derives the GPU pair matrix from each GPU's links. pciePath
// returns the PCIe path type (sample.LinkPIX … LinkSYS) between two GPU
// indexes, or "" when unknown.
//
// NVLinks are counted per remote GPU. On HGX/DGX boards every GPU's links go
// to NVSwitches instead (18 links to 4 switches on H100/H200), and any two
// GPUs with switch links talk at the lesser GPU's switch link count, which is
// what nvidia-smi topo shows (NV18 between every pair). A link whose remote
// type the driver does not report counts as a switch link when its remote is
// none of our GPUs.
func BuildTopology(gpus []TopologyGPU, pciePath func(a, b int) string) *sample.Topology {
	gpus = slices.SortedFunc(slices.Values(gpus), func(a, b TopologyGPU) int { return cmp.Compare(a.Index, b.Index) })
	byBus := make(map[string]int, len(gpus))
	for _, g := range gpus {
		if g.BusID != "" {
			byBus[g.BusID] = g.Index
		}
	}
	type linkCounts struct {
		toGPU    map[int]int // by peer index
		toSwitch int
		rate     float64 // the slowest known per-link rate
	}
	counts := make([]linkCounts, len(gpus))
	t := &sample.Topology{GPUs: make([]sample.GPULinkCapacity, len(gpus))}
	for i, g := range gpus {
		c := linkCounts{toGPU: map[int]int{}}
		capacity := sample.GPULinkCapacity{Index: g.Index, NVLinks: len(g.NVLinks),
			PCIeMaxBytesPerSecond: PCIeBytesPerSecond(g.PCIeMaxGeneration, g.PCIeMaxWidth)}
		for _, l := range g.NVLinks {
			r := NVLinkBytesPerSecond(l.Generation)
			capacity.NVLinkMaxBytesPerSecond += r
			if r > 0 && (c.rate == 0 || r < c.rate) {
				c.rate = r
			}
			peer, ours := byBus[l.RemoteBusID]
			switch {
			case (l.Remote == RemoteGPU || l.Remote == RemoteUnknown) && ours && peer != g.Index:
				c.toGPU[peer]++
			case l.Remote == RemoteSwitch || (l.Remote == RemoteUnknown && !ours && l.RemoteBusID != ""):
				c.toSwitch++
			}
		}
		counts[i], t.GPUs[i] = c, capacity
	}
	for i := range gpus {
		for j := i + 1; j < len(gpus); j++ {
			a, b := gpus[i], gpus[j]
			ca, cb := counts[i], counts[j]
			p := sample.GPUPair{A: a.Index, B: b.Index, PCIePath: pciePath(a.Index, b.Index)}
			// Both ends see the same physical links; take the larger
			// count so a query that failed on one side hides none.
			direct := max(ca.toGPU[b.Index], cb.toGPU[a.Index])
			switched := min(ca.toSwitch, cb.toSwitch)
			p.NVLinks, p.ViaSwitch = direct+switched, switched > 0
			if p.NVLinks > 0 {
				p.Link = "NV" + strconv.Itoa(p.NVLinks)
				if ca.rate > 0 && cb.rate > 0 {
					p.ExpectedBytesPerSecond = float64(p.NVLinks) * min(ca.rate, cb.rate)
				}
			} else {
				// Peer traffic crosses both GPUs' PCIe links, so the
				// slower one bounds it. Across sockets (SYS) the
				// inter-socket link (UPI, xGMI) is not measured and is
				// assumed no slower than PCIe.
				p.Link = p.PCIePath
				if pa, pb := t.GPUs[i].PCIeMaxBytesPerSecond, t.GPUs[j].PCIeMaxBytesPerSecond; pa > 0 && pb > 0 {
					p.ExpectedBytesPerSecond = min(pa, pb)
				}
			}
			t.Pairs = append(t.Pairs, p)
		}
	}
	return t
}
