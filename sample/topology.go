package sample

// Topology is how the GPUs of a node reach each other and the host, with the
// theoretical one-way bandwidth of every path. It is read once when the GPU
// backend opens: links are wired in hardware, and a link that fails later
// shows in GPU.Links (Up false) of each sample, not here.
//
// Analyzers use it to judge link throughput against the link's capacity
// (communication-bound), and to flag a job whose GPUs talk over a slow path
// (a SYS pair when the node has NVLink elsewhere). Capacities are the line
// rate after encoding; real transfers reach less of it: a pinned H2D copy on
// PCIe Gen5 x16 moved 56.6–59.2 GB/s of the 63.0 (90–94%), an NCCL
// all-reduce over an NV18 H200 pair 289 GB/s of NVLink RX per GPU of the 450
// (64%) (research/device-probe.md, docs/validation.md).
type Topology struct {
	// GPUs holds each GPU's own link capacities, in GPU index order.
	GPUs []GPULinkCapacity `json:"gpus"`
	// Pairs holds every unordered pair of GPUs once (A < B), sorted by A
	// then B.
	Pairs []GPUPair `json:"pairs"`
}

// GPULinkCapacity is what one GPU's links can carry, one way (bytes per
// second in each direction: compare TX or RX throughput, not their sum).
// Zero means unknown.
type GPULinkCapacity struct {
	Index int `json:"index"`
	// PCIeMaxBytesPerSecond is the rate of the widest, fastest PCIe link the
	// GPU and its slot support (nvmlDeviceGetMaxPcieLinkGeneration/Width),
	// not the current one, which drops at idle.
	PCIeMaxBytesPerSecond float64 `json:"pcie_max_bps,omitempty"`
	// NVLinks counts the NVLinks active when the backend opened.
	NVLinks int `json:"nvlinks,omitempty"`
	// NVLinkMaxBytesPerSecond is the sum of those links' rates.
	NVLinkMaxBytesPerSecond float64 `json:"nvlink_max_bps,omitempty"`
}

// Link types, named as nvidia-smi topo -m names them, best first. An NVLink
// path is "NV" followed by its number of links (NV18).
const (
	LinkPIX  = "PIX"  // through at most one PCIe bridge (one PCIe switch)
	LinkPXB  = "PXB"  // through several PCIe bridges, not the host bridge
	LinkPHB  = "PHB"  // through a PCIe host bridge (the CPU's root complex)
	LinkNODE = "NODE" // between host bridges inside one NUMA node
	LinkSYS  = "SYS"  // across the SMP interconnect between NUMA nodes (UPI, xGMI)
)

// GPUPair is the best path between two GPUs.
type GPUPair struct {
	A int `json:"a"`
	B int `json:"b"`
	// Link is NV<n> when the GPUs share NVLinks, else the PCIe path type;
	// empty when the driver reported neither.
	Link string `json:"link"`
	// NVLinks is the number of NVLinks between the two (direct links plus,
	// through NVSwitches, the lesser of the two GPUs' switch links).
	NVLinks int `json:"nvlinks,omitempty"`
	// ViaSwitch says the NVLinks go through NVSwitches (HGX/DGX boards).
	ViaSwitch bool `json:"via_switch,omitempty"`
	// PCIePath is the PCIe path type between the two, also for NVLink
	// pairs: it is where traffic goes when NCCL cannot use the NVLinks
	// (NCCL_P2P_DISABLE, a broken fabric).
	PCIePath string `json:"pcie_path,omitempty"`
	// ExpectedBytesPerSecond is the one-way theoretical bandwidth of Link;
	// 0 when unknown.
	ExpectedBytesPerSecond float64 `json:"expected_bps,omitempty"`
}

// GPU returns the capacities of the GPU with the given index.
func (t *Topology) GPU(index int) (GPULinkCapacity, bool) {
	if t == nil {
		return GPULinkCapacity{}, false
	}
	for _, g := range t.GPUs {
		if g.Index == index {
			return g, true
		}
	}
	return GPULinkCapacity{}, false
}

// Pair returns the path between GPUs a and b, in either order.
func (t *Topology) Pair(a, b int) (GPUPair, bool) {
	if t == nil {
		return GPUPair{}, false
	}
	if a > b {
		a, b = b, a
	}
	for _, p := range t.Pairs {
		if p.A == a && p.B == b {
			return p, true
		}
	}
	return GPUPair{}, false
}

// SlowestPair returns the worst path among the given GPUs (those of one job):
// the one a collective spanning them is held to. It reports false when fewer
// than two of the GPUs have a known path.
func (t *Topology) SlowestPair(gpus []int) (GPUPair, bool) {
	var worst GPUPair
	found := false
	for i, a := range gpus {
		for _, b := range gpus[i+1:] {
			p, ok := t.Pair(a, b)
			if ok && p.Link != "" && (!found || p.slowerThan(worst)) {
				worst, found = p, true
			}
		}
	}
	return worst, found
}

// slowerThan orders paths as nvidia-smi's legend does (NV# > PIX > PXB > PHB >
// NODE > SYS), then by fewer NVLinks, then by lower expected bandwidth.
func (p GPUPair) slowerThan(q GPUPair) bool {
	if rp, rq := linkRank(p.Link), linkRank(q.Link); rp != rq {
		return rp > rq
	}
	if p.NVLinks != q.NVLinks {
		return p.NVLinks < q.NVLinks
	}
	return p.ExpectedBytesPerSecond < q.ExpectedBytesPerSecond
}

func linkRank(link string) int {
	switch link {
	case LinkPIX:
		return 1
	case LinkPXB:
		return 2
	case LinkPHB:
		return 3
	case LinkNODE:
		return 4
	case LinkSYS:
		return 5
	}
	return 0 // NV<n>
}
