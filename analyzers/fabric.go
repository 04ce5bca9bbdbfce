package analyzers

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/gpudiag/gpudiag/sample"
)

// The inter-node path: which HCA ports carry each GPU's collectives, what
// they say about the fabric, and collectives that wait on ranks elsewhere
// or make no progress at all.

// rdmaUse is what the ports a GPU's rank uses carry, filled by
// attributeRDMA before the GPUs are classified.
type rdmaUse struct {
	ports []int // indexes into NodeWindow.RDMAPorts
	// bytes is the ports' throughput (busier direction, summed), perGPU
	// the share of it of this GPU (the ports' bytes split among the GPUs
	// using them), rate the ports' line rates summed.
	bytes, perGPU, rate float64
	linkLayer           string
	degraded            bool
}

// usedPorts are the ports a GPU's rank sends through: those NCCL's log
// names for it, else the nearest active ports (NCCL picks the HCA closest
// to the GPU, src/graph/search.cc), else, when no distance is known, every
// active port.
func usedPorts(g GPUWindow, n NodeWindow) []int {
	var out []int
	for _, nic := range g.NICs {
		if nic.NCCL {
			out = append(out, nic.Port)
		}
	}
	if len(out) > 0 {
		return out
	}
	best := -1
	for _, nic := range g.NICs {
		p := n.RDMAPorts[nic.Port]
		if !p.Active || nic.Distance == "" {
			continue
		}
		r := sample.PCIDistanceRank(nic.Distance)
		switch {
		case best < 0 || r < best:
			best, out = r, []int{nic.Port}
		case r == best:
			out = append(out, nic.Port)
		}
	}
	if len(out) > 0 {
		return out
	}
	for _, nic := range g.NICs {
		if n.RDMAPorts[nic.Port].Active {
			out = append(out, nic.Port)
		}
	}
	return out
}

// attributeRDMA fills each GPU's rdmaUse: what its ports carry and its
// share of it.
func attributeRDMA(ws []GPUWindow, n NodeWindow) {
	used := make([][]int, len(ws))
	sharers := map[int]int{}
	for i := range ws {
		used[i] = usedPorts(ws[i], n)
		for _, p := range used[i] {
			sharers[p]++
		}
	}
	for i := range ws {
		u := rdmaUse{ports: used[i]}
		for _, pi := range used[i] {
			p := n.RDMAPorts[pi]
			b := p.Bytes()
			if math.IsNaN(b) {
				continue
			}
			u.bytes += b
			u.perGPU += b / float64(sharers[pi])
			u.rate += p.RateBytes
			u.linkLayer = p.LinkLayer
			u.degraded = u.degraded || p.Degraded
		}
		ws[i].rdma = u
	}
}

// portNames lists ports by name.
func portNames(n NodeWindow, ports []int) string {
	var names []string
	for _, p := range ports {
		names = append(names, n.RDMAPorts[p].Name)
	}
	return strings.Join(names, ", ")
}

const (
	gdrFix = "enable GPUDirect RDMA: load nvidia_peermem (modprobe nvidia_peermem, and at boot) or use DMA-BUF (open GPU kernel modules, Linux ≥ 5.12); " +
		"check NCCL_NET_GDR_LEVEL, that GPU and HCA share a PCIe switch, that ACS is off on the switch ports between them and the IOMMU is in passthrough (iommu=pt)"
	degradedPortFix = "the port trained down: reseat or replace the cable or transceiver and check the switch port (mlxlink -d <dev> -m -c, ibstat); drain the node until it runs at full rate"
	saturatedFix    = "the job is bandwidth-bound on the fabric: use every rail (each GPU's nearest HCA in NCCL_IB_HCA), in-network reduction (SHARP) where the fabric has it, or exchange less (overlap, gradient compression, a larger batch per GPU)"
)

// gdrState says how the GPU's network traffic moves: "gdr" or "host" as
// NCCL's log says, "no_module" when no log says and no peer-memory module
// is loaded, "" when unknown.
func gdrState(g GPUWindow, n NodeWindow) string {
	switch {
	case g.NCCLNetGDR != "":
		return g.NCCLNetGDR
	case n.RDMAMeasured && n.GPUDirectModule == "":
		return "no_module"
	}
	return ""
}

// fabricFindings are the findings only traffic can tell: congested,
// saturated or remote ports, rails left idle while another carries two
// GPUs, and stalled collectives.
func fabricFindings(in Input, vs []GPUVerdict, t Thresholds) []Finding {
	var out []Finding
	n := in.Node
	for _, p := range n.RDMAPorts {
		if !p.Active || !(p.Bytes() >= t.HangProgressBytes) {
			continue
		}
		if p.RateBytes > 0 && p.Bytes() >= t.RDMASaturated*p.RateBytes {
			out = append(out, Finding{Check: "rdma_port_saturated", Severity: SeverityInfo, Device: p.Name,
				Summary:  fmt.Sprintf("port %s moves %.1f GB/s, %.0f%% of its %.0f Gb/s line rate: the fabric is the ceiling of the jobs using it", p.Name, p.Bytes()/1e9, p.Bytes()/p.RateBytes*100, p.RateBytes*8/1e9),
				Evidence: []Evidence{{Signal: "rdma_line_rate_ratio", Value: round(p.Bytes() / p.RateBytes), Unit: "ratio", Op: ">=", Threshold: t.RDMASaturated, SpanSeconds: t.SpanSeconds}},
				Fix:      saturatedFix})
		}
		var ev []Evidence
		var why []string
		if p.XmitWaitShare >= t.XmitWaitShare {
			ev = append(ev, Evidence{Signal: "xmit_wait_share", Value: round(p.XmitWaitShare), Unit: "ratio", Op: ">=", Threshold: t.XmitWaitShare, SpanSeconds: t.SpanSeconds})
			why = append(why, fmt.Sprintf("it waited for credits %.0f%% of the time (port_xmit_wait)", p.XmitWaitShare*100))
		}
		if p.ECNMarkedShare >= t.ECNMarkedShare {
			ev = append(ev, Evidence{Signal: "ecn_marked_share", Value: round(p.ECNMarkedShare), Unit: "ratio", Op: ">=", Threshold: t.ECNMarkedShare, SpanSeconds: t.SpanSeconds})
			why = append(why, fmt.Sprintf("%.1f%% of the packets it received were ECN-marked", p.ECNMarkedShare*100))
		}
		if p.CNPHandledPerSecond >= t.CNPHandledPerSecond {
			ev = append(ev, Evidence{Signal: "cnp_handled_per_second", Value: round(p.CNPHandledPerSecond), Unit: "1/s", Op: ">=", Threshold: t.CNPHandledPerSecond, SpanSeconds: t.SpanSeconds})
			why = append(why, fmt.Sprintf("it cut its rate on %.0f congestion notifications per second", p.CNPHandledPerSecond))
		}
		if len(why) > 0 {
			fix := "congestion is downstream of this port: check the fabric's adaptive routing and the switches' congestion control, spread jobs across leaves (topology-aware scheduling), and look for a slow or flapping link on the path (ib_port_errors on other nodes)"
			if p.LinkLayer == "Ethernet" {
				fix = "RoCE congestion: check PFC and ECN/DCQCN settings on the NIC (mlnx_qos) and the switches, that the traffic class NCCL uses (NCCL_IB_TC) is the lossless one, and spread jobs across leaves"
			}
			out = append(out, Finding{Check: "rdma_congestion", Severity: SeverityWarning, Device: p.Name,
				Summary:  fmt.Sprintf("port %s (%s) is congested while moving %.1f GB/s: %s", p.Name, p.LinkLayer, p.Bytes()/1e9, strings.Join(why, "; ")),
				Evidence: ev, Fix: fix})
		}
	}
	out = append(out, remoteNICFindings(in.GPUs, n, t)...)
	out = append(out, railImbalanceFindings(in.GPUs, n, t)...)
	out = append(out, stalledFindings(in, vs, t)...)
	return out
}

// remoteNICFindings reports a GPU whose rank sends through a port farther
// than the nearest active port of the same link layer: across the
// inter-socket link (SYS) or the host bridges (NODE) when one shares its
// PCIe switch.
func remoteNICFindings(ws []GPUWindow, n NodeWindow, t Thresholds) []Finding {
	var out []Finding
	for _, g := range ws {
		u := g.rdma
		if u.bytes < t.RDMABytes {
			continue
		}
		distance := map[int]string{}
		best, bestName := "", ""
		for _, nic := range g.NICs {
			distance[nic.Port] = nic.Distance
			p := n.RDMAPorts[nic.Port]
			if p.Active && p.LinkLayer == u.linkLayer && nic.Distance != "" &&
				(best == "" || sample.PCIDistanceRank(nic.Distance) < sample.PCIDistanceRank(best)) {
				best, bestName = nic.Distance, p.Name
			}
		}
		for _, pi := range u.ports {
			d := distance[pi]
			if (d != sample.LinkSYS && d != sample.LinkNODE) || sample.PCIDistanceRank(best) >= sample.PCIDistanceRank(d) {
				continue
			}
			idx := g.Index
			out = append(out, Finding{Check: "rdma_nic_remote", Severity: SeverityWarning, GPU: &idx, Device: n.RDMAPorts[pi].Name,
				Summary: fmt.Sprintf("GPU %d's rank sends through %s, %s from the GPU, while %s is %s: its network traffic crosses the host's interconnect",
					g.Index, n.RDMAPorts[pi].Name, d, bestName, best),
				Fix: fmt.Sprintf("let NCCL pick each GPU's nearest HCA: check NCCL_IB_HCA (list every rail), NCCL_CROSS_NIC and the job's GPU-to-rank mapping; %s is the HCA for GPU %d", bestName, g.Index)})
		}
	}
	return out
}

// railImbalanceFindings reports a port that carries the traffic of two or
// more GPUs while another active port of the same link layer and rate
// carries less than a tenth of it: the job runs on fewer rails than the
// node has.
func railImbalanceFindings(ws []GPUWindow, n NodeWindow, t Thresholds) []Finding {
	users := map[int][]int{}
	for _, g := range ws {
		if g.rdma.bytes < t.RDMABytes {
			continue
		}
		for _, p := range g.rdma.ports {
			users[p] = append(users[p], g.Index)
		}
	}
	var out []Finding
	for pi, gpus := range users {
		p := n.RDMAPorts[pi]
		if len(gpus) < 2 || !(p.Bytes() >= t.RDMABytes) {
			continue
		}
		var idle []string
		for qi, q := range n.RDMAPorts {
			if qi != pi && q.Active && q.LinkLayer == p.LinkLayer && q.RateBytes == p.RateBytes && len(users[qi]) == 0 && !(q.Bytes() >= 0.1*p.Bytes()) {
				idle = append(idle, q.Name)
			}
		}
		if len(idle) == 0 {
			continue
		}
		slices.Sort(gpus)
		var list []string
		for _, g := range gpus {
			list = append(list, strconv.Itoa(g))
		}
		out = append(out, Finding{Check: "rdma_rail_imbalance", Severity: SeverityWarning, Device: p.Name,
			Summary: fmt.Sprintf("port %s carries %.1f GB/s for GPUs %s while %s, as fast, stay idle: the job uses fewer rails than the node has",
				p.Name, p.Bytes()/1e9, strings.Join(list, ", "), strings.Join(idle, ", ")),
			Evidence: []Evidence{{Signal: "rdma_port_bytes_per_second", Value: round(p.Bytes()), Unit: "B/s", Op: ">=", Threshold: t.RDMABytes, SpanSeconds: t.SpanSeconds},
				{Signal: "gpus_on_port", Value: float64(len(gpus)), Op: ">=", Threshold: 2}},
			Fix: "give every GPU its own rail: list every HCA in NCCL_IB_HCA (or unset it), check the ports' state on the idle rails, and that each GPU's rank maps to the GPU its nearest HCA serves"})
	}
	slices.SortFunc(out, func(a, b Finding) int { return strings.Compare(a.Device, b.Device) })
	return out
}

// stalledFindings names, once per node, the GPUs whose collective is
// stalled and what is visible here of the ranks they wait for: processes
// stopped (T), in uninterruptible sleep (D) or defunct (Z), and NCCL ranks
// whose GPU holds no process any more.
func stalledFindings(in Input, vs []GPUVerdict, t Thresholds) []Finding {
	var stalled []string
	var first *int
	for i := range vs {
		if vs[i].SubKind == SubCollectiveStalled {
			stalled = append(stalled, strconv.Itoa(vs[i].GPU))
			if first == nil {
				g := vs[i].GPU
				first = &g
			}
		}
	}
	if len(stalled) == 0 {
		return nil
	}
	// The ranks the stalled GPUs' verdicts name (their job's, on this
	// node), else what is visible of any GPU process here.
	var suspects []string
	for i := range vs {
		if vs[i].SubKind != SubCollectiveStalled {
			continue
		}
		for _, p := range vs[i].WaitsFor {
			if !slices.Contains(suspects, p.Summary) {
				suspects = append(suspects, p.Summary)
			}
		}
	}
	if p := in.Audit.Processes; p != nil && len(suspects) == 0 {
		for _, g := range p.GPUs {
			for _, proc := range g.Processes {
				switch proc.State {
				case "T", "t":
					suspects = append(suspects, fmt.Sprintf("pid %d (%s) on GPU %d is stopped", proc.PID, proc.Comm, g.GPU))
				case "D":
					suspects = append(suspects, fmt.Sprintf("pid %d (%s) on GPU %d is in uninterruptible sleep (D)", proc.PID, proc.Comm, g.GPU))
				case "Z":
					suspects = append(suspects, fmt.Sprintf("pid %d (%s) on GPU %d has exited (zombie)", proc.PID, proc.Comm, g.GPU))
				}
			}
		}
	}
	if log := in.Audit.NCCL; log != nil && len(suspects) == 0 {
		for _, g := range log.GPUs {
			p := log.Process(g)
			if !p.Current || p.Ended {
				continue
			}
			for _, w := range in.GPUs {
				if w.Index == g.GPU && w.Up && w.ComputeProcesses == 0 {
					suspects = append(suspects, fmt.Sprintf("NCCL rank pid %d on %s (GPU %d) holds no GPU any more: it exited without destroying its communicator", p.PID, p.Host, g.GPU))
				}
			}
		}
	}
	summary := fmt.Sprintf("collective stalled on GPU %s: no progress on any link for at least %.0f s while the GPUs hold NCCL kernels", strings.Join(stalled, ", "), t.HangSeconds)
	if len(suspects) > 0 {
		summary += "; " + strings.Join(suspects, "; ")
	} else {
		summary += "; no local rank is stopped or gone, so the rank it waits for is on another node"
	}
	var gpu *int
	if len(stalled) == 1 {
		gpu = first
	}
	return []Finding{{Check: "nccl_collective_stalled", Severity: SeverityCritical, GPU: gpu, Summary: summary, Fix: stalledFix}}
}
