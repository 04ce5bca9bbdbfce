package analyzers

import (
	"fmt"
	"math"
	"slices"
	"strings"
)

// A GPU's verdict is decided in three steps (gpuVerdicts). One ordered
// table, gpuRules, sees the GPU alone: the first rule that matches its
// window decides, each rule a function below, in the table's order, that
// gives the verdict with its evidence and fix. Then its job names whom a GPU
// waiting in a collective waits for (resolveWaits, waiting.go). Last,
// hysteresis keeps the reported class until a new one has won
// Thresholds.Hysteresis analyses in a row (stabilize). The job's verdict
// is groupVerdict's (verdict_group.go), the node's nodeVerdict's
// (verdict_node.go).

// gpuVerdicts decides each GPU's verdict, in the order of in.GPUs: the
// rule table for the GPU alone, its job's pass, then hysteresis against
// prev (nil at start).
func gpuVerdicts(in Input, groups []gpuGroup, prev *Diagnosis, t Thresholds) []GPUVerdict {
	grouped := make([]bool, len(in.GPUs))
	for _, gr := range groups {
		for _, i := range gr.members {
			grouped[i] = gr.grouped()
		}
	}
	fresh := make([]Verdict, len(in.GPUs))
	for i, w := range in.GPUs {
		fresh[i] = classifyGPU(w, in.Node, t, grouped[i])
	}
	waits := resolveWaits(in, groups, fresh, t)
	prevByGPU := map[int]GPUVerdict{}
	if prev != nil {
		for _, g := range prev.GPUs {
			prevByGPU[g.GPU] = g
		}
	}
	var out []GPUVerdict
	for i, w := range in.GPUs {
		g := GPUVerdict{GPU: w.Index, UUID: w.UUID, Verdict: fresh[i], WaitsFor: waits[i]}
		g.Since = in.Now
		p, ok := prevByGPU[w.Index]
		out = append(out, stabilize(p, ok, g, t.Hysteresis))
	}
	return out
}

// gpuRule is one row of the classification table.
type gpuRule struct {
	name  string
	match func(c *ruleCtx) (Verdict, bool)
}

// gpuRules is the classification, in order: the first rule that matches
// decides a GPU's verdict (docs/diagnosis.md numbers them). Communication
// is tested before compute because a communication-bound data-parallel step
// still keeps the SMs 60–70% busy (NCCL and optimizer kernels); link
// throughput against capacity is what tells it apart. A collective waiting
// for its peers is tested before storage and the host: its rank spins in
// the driver on one core, which is no input pipeline.
var gpuRules = []gpuRule{
	{"gpu_down", ruleDown},
	{"unmeasured", ruleUnmeasured},
	{"nvlink", ruleNVLink},
	{"rdma", ruleRDMA},
	{"pcie_peer_shm", rulePCIePeer},
	{"network", ruleNetwork},
	{"h2d_copy", ruleH2D},
	{"compute", ruleCompute},
	{"collective_wait", ruleCollectiveWait},
	{"storage_read", ruleStorage},
	{"storage_write", ruleStorageWrite},
	{"host", ruleHost},
	{"partly_busy", rulePartlyBusy},
	{"no_process", ruleNoProcess},
	{"process_waiting", ruleProcessWaiting},
}

// ClassifyGPU decides what bounds one GPU over the span, as a GPU on its own
// (no other GPU of the node in its job).
func ClassifyGPU(g GPUWindow, n NodeWindow, t Thresholds) Verdict {
	return classifyGPU(g, n, t, false)
}

func classifyGPU(g GPUWindow, n NodeWindow, t Thresholds, grouped bool) Verdict {
	c := &ruleCtx{g: g, n: n, t: t, grouped: grouped}
	for _, r := range gpuRules {
		if v, ok := r.match(c); ok && !verdictDisabled(v) {
			return v
		}
	}
	return Verdict{Class: ClassUnknown, Summary: "no rule matched"} // unreachable: process_waiting always matches
}

// stabilize applies hysteresis. The fresh verdict replaces the previous one
// when the class is the same (refreshing evidence, keeping Since), when there
// is no previous one, or when the new class has now won `need` times in a row.
// Otherwise the previous class is kept and the new one shown as Pending. A
// GPU going down or coming back is no noisy ratio but a fact the driver
// reports, so it shows at once.
func stabilize(prev GPUVerdict, havePrev bool, fresh GPUVerdict, need int) GPUVerdict {
	switch {
	case !havePrev:
		return fresh
	case prev.Class == fresh.Class && prev.SubKind == SubGPUDown && fresh.SubKind != SubGPUDown:
		return fresh // back up, but not yet classified: a new verdict
	case prev.Class == fresh.Class:
		fresh.Since = prev.Since
		return fresh
	case prev.SubKind == SubGPUDown || fresh.SubKind == SubGPUDown:
		return fresh
	}
	count := 1
	if prev.Pending == fresh.Class {
		count = prev.pendingCount + 1
	}
	if count >= need {
		return fresh
	}
	kept := prev
	kept.Pending = fresh.Class
	kept.pendingCount = count
	return kept
}

// ruleCtx is what one GPU's rules read: its window, the node's, the
// thresholds, and whether the GPU runs a job spread over several GPUs of
// this node (its group), which makes a resident kernel with idle SMs a
// collective even before NCCL's log or the process scan says so.
type ruleCtx struct {
	g       GPUWindow
	n       NodeWindow
	t       Thresholds
	grouped bool
}

// ev builds one line of evidence over the span.
func (c *ruleCtx) ev(signal string, v float64, unit, op string, thr float64) Evidence {
	return Evidence{Signal: signal, Value: round(v), Unit: unit, Op: op, Threshold: thr, SpanSeconds: c.t.SpanSeconds}
}

// smEvidence is SM activity against SMActiveCompute and NVML utilization as
// information, the pair most verdicts show.
func (c *ruleCtx) smEvidence() (sm, util Evidence) {
	return c.ev("sm_active", c.g.SMActive, "ratio", "<", c.t.SMActiveCompute), c.ev("nvml_utilization", c.g.Utilization, "ratio", "info", 0)
}

// starvedEvidence is what every "the GPU waits" verdict starts from.
func (c *ruleCtx) starvedEvidence() []Evidence {
	sm, util := c.smEvidence()
	return []Evidence{withOp(sm, "<"), util}
}

// The GPU did not answer in the newest sample: nothing else of it can be
// read, and the node leads with it.
func ruleDown(c *ruleCtx) (Verdict, bool) {
	if c.g.Up {
		return Verdict{}, false
	}
	summary := "the GPU did not answer in the newest sample"
	if c.g.Error != "" {
		summary += ": " + c.g.Error
	}
	return Verdict{Class: ClassUnknown, SubKind: SubGPUDown, Summary: summary,
		Evidence: []Evidence{c.ev("gpu_up", 0, "", "<", 1)}, Fix: gpuLostFix}, true
}

// Without SM activity no rule below can tell compute from copies and waits.
func ruleUnmeasured(c *ruleCtx) (Verdict, bool) {
	if !math.IsNaN(c.g.SMActive) {
		return Verdict{}, false
	}
	return Verdict{Class: ClassUnknown, Summary: "SM activity is not measured on this GPU (no GPM or DCGM profiling); " +
		"NVML utilization alone cannot tell compute from copies and waits",
		Fix: "use a Hopper or newer GPU (GPM), or run DCGM with its profiling module for older GPUs"}, true
}

// Communication over NVLink.
func ruleNVLink(c *ruleCtx) (Verdict, bool) {
	g, t := c.g, c.t
	nvl := maxNaN(g.NVLinkTx, g.NVLinkRx)
	thr := t.NVLinkBusyBytes
	if g.NVLinkCapacity > 0 {
		thr = t.NVLinkBusyFraction * g.NVLinkCapacity
	}
	if !(nvl >= thr) {
		return Verdict{}, false
	}
	sm, util := c.smEvidence()
	v := Verdict{Class: ClassCommunication, SubKind: SubNVLink, Confidence: confidence(nvl, thr),
		Summary: fmt.Sprintf("NVLink carries %.0f GB/s (threshold %.0f GB/s) while SM activity is %.2f: collectives over NVLink dominate",
			nvl/1e9, thr/1e9, g.SMActive),
		Evidence: []Evidence{c.ev("nvlink_bytes_per_second", nvl, "B/s", ">=", thr), withOp(sm, "info"), util},
		Fix:      "overlap communication with compute (bucketed DDP/FSDP), raise the batch per GPU, or shrink what is exchanged (gradient compression, lower precision)"}
	addNCCL(&v, g, c.n)
	return v, true
}

// Collectives over InfiniBand or RoCE: the ports the GPU's rank uses
// (attributeRDMA) carry at least RDMABytes, at least RDMAMatch of the GPU's
// PCIe traffic (GPUDirect RDMA moves the same bytes over both), and either
// the SMs are not busy or the ports run at RDMABusyFraction of their line
// rate.
func ruleRDMA(c *ruleCtx) (Verdict, bool) {
	g, n, t := c.g, c.n, c.t
	u := g.rdma
	if u.bytes < t.RDMABytes || u.rate <= 0 {
		return Verdict{}, false
	}
	pcie := maxNaN(g.PCIeTx, g.PCIeRx)
	matched := math.IsNaN(pcie) || pcie <= 0 || u.perGPU >= t.RDMAMatch*pcie
	use := u.bytes / u.rate
	if !matched || (g.SMActive >= t.SMActiveCompute && use < t.RDMABusyFraction) {
		return Verdict{}, false
	}
	if use < t.RDMAWaitFraction && g.Utilization >= t.HangUtilization && g.SMActive < t.SMActiveStarved {
		return Verdict{}, false // a collective waiting on ranks elsewhere: ruleCollectiveWait
	}
	sub, fabric := SubInfiniBand, "InfiniBand"
	if u.linkLayer == "Ethernet" {
		sub, fabric = SubRoCE, "RoCE"
	}
	thr := t.RDMABytes
	v := Verdict{Class: ClassCommunication, SubKind: sub, Confidence: confidence(u.bytes, thr),
		Summary: fmt.Sprintf("%s (%s, %.0f Gb/s) moves %.1f GB/s for this GPU's rank, %.0f%% of its line rate, while SM activity is %.2f: collectives over the network dominate",
			portNames(n, u.ports), fabric, u.rate*8/1e9, u.bytes/1e9, use*100, g.SMActive),
		Evidence: []Evidence{c.ev("rdma_port_bytes_per_second", u.bytes, "B/s", ">=", thr),
			c.ev("rdma_line_rate_ratio", use, "ratio", "info", t.RDMABusyFraction),
			c.ev("pcie_max_direction_bytes_per_second", pcie, "B/s", "info", 0),
			withOp(c.ev("sm_active", g.SMActive, "ratio", "<", t.SMActiveCompute), "info"),
			c.ev("nvml_utilization", g.Utilization, "ratio", "info", 0)},
		Fix: "overlap communication with compute (bucketed DDP/FSDP), raise the batch per GPU, or exchange less (gradient compression, lower precision, hierarchical or in-network reduction such as SHARP)"}
	if use >= t.RDMABusyFraction {
		v.Confidence = math.Max(v.Confidence, confidence(use, t.RDMABusyFraction))
	}
	addRDMAPath(&v, c, use)
	addNCCL(&v, g, n)
	return v, true
}

// addRDMAPath says how the GPU's network traffic moves (GPUDirect or
// staged through host memory) and what holds the port back, when
// something does: a port trained down, or one at its line rate. Each
// replaces the fix: it is what to act on first.
func addRDMAPath(v *Verdict, c *ruleCtx, use float64) {
	g, n, t, u := c.g, c.n, c.t, c.g.rdma
	switch gdrState(g, n) {
	case "gdr":
		v.Summary += "; GPUDirect RDMA (NCCL's log shows GDRDMA)"
	case "host":
		v.Summary += "; staged through host memory: NCCL's log shows no GDRDMA on its network connections"
		v.Evidence = append(v.Evidence, c.ev("gpudirect_rdma", 0, "", "info", 1))
		v.Fix = gdrFix
	case "no_module":
		v.Summary += "; no peer-memory module is loaded, so unless the driver uses DMA-BUF the traffic is staged through host memory"
		v.Evidence = append(v.Evidence, c.ev("gpudirect_rdma", 0, "", "info", 1))
		v.Fix = gdrFix
	}
	switch {
	case u.degraded:
		v.Summary += fmt.Sprintf("; %s trained down below its peers and the job runs at its rate", portNames(n, u.ports))
		v.Fix = degradedPortFix
	case use >= t.RDMASaturated:
		v.Summary += "; the port is at its line rate: the fabric is the job's ceiling"
		v.Fix = saturatedFix
	}
}

// Peer traffic over PCIe or host shared memory: both directions busy,
// NVLink quiet. With NVLinks up this is NCCL's SHM fallback.
func rulePCIePeer(c *ruleCtx) (Verdict, bool) {
	g, t := c.g, c.t
	lo, hi := math.Min(g.PCIeTx, g.PCIeRx), maxNaN(g.PCIeTx, g.PCIeRx)
	if !(lo >= t.PCIePeerBytes && hi > 0 && lo/hi >= t.PCIePeerSymmetry && g.SMActive < t.SMActiveCompute) {
		return Verdict{}, false
	}
	sm, util := c.smEvidence()
	nvl := maxNaN(g.NVLinkTx, g.NVLinkRx)
	v := Verdict{Class: ClassCommunication, SubKind: SubPCIePeerSHM, Confidence: confidence(lo, t.PCIePeerBytes),
		Summary: fmt.Sprintf("PCIe moves %.1f GB/s out and %.1f GB/s in with NVLink at %.1f GB/s and SM activity %.2f: GPU-to-GPU traffic goes through PCIe or host memory",
			g.PCIeTx/1e9, g.PCIeRx/1e9, nvl/1e9, g.SMActive),
		Evidence: []Evidence{c.ev("pcie_min_direction_bytes_per_second", lo, "B/s", ">=", t.PCIePeerBytes),
			c.ev("pcie_direction_symmetry", lo/hi, "ratio", ">=", t.PCIePeerSymmetry), sm, util},
		Fix: "check NCCL_P2P_DISABLE and NCCL_P2P_LEVEL in the job's environment and the GPU topology (nvidia-smi topo -m); on PCIe-only hosts keep each job's GPUs under one PCIe switch"}
	addNCCL(&v, g, c.n)
	if g.NVLinksUp > 0 {
		v.Summary += fmt.Sprintf("; %d NVLinks are up but idle, so NCCL is not using them (shared-memory fallback)", g.NVLinksUp)
		v.Evidence = append(v.Evidence, c.ev("nvlinks_up", float64(g.NVLinksUp), "links", "info", 0))
		v.Fix = "NCCL fell back from NVLink to shared memory: remove NCCL_P2P_DISABLE=1 (or a restrictive NCCL_P2P_LEVEL) from the job's environment"
	}
	return v, true
}

// Collectives over TCP sockets.
func ruleNetwork(c *ruleCtx) (Verdict, bool) {
	g, t := c.g, c.t
	if !(g.ProcessTCPBytes >= t.NetworkBytes && g.SMActive < t.SMActiveCompute) {
		return Verdict{}, false
	}
	sm, util := c.smEvidence()
	v := Verdict{Class: ClassCommunication, SubKind: SubNetwork, Confidence: confidence(g.ProcessTCPBytes, t.NetworkBytes),
		Summary: fmt.Sprintf("the GPU's processes move %.2f GB/s over TCP while SM activity is %.2f: collectives run over sockets",
			g.ProcessTCPBytes/1e9, g.SMActive),
		Evidence: []Evidence{c.ev("process_tcp_bytes_per_second", g.ProcessTCPBytes, "B/s", ">=", t.NetworkBytes), sm, util},
		Fix:      socketFix(g, c.n)}
	if c.n.noRDMADevice() {
		v.Summary += "; this node has no RDMA NIC"
		v.Evidence = append(v.Evidence, c.ev("rdma_ports", 0, "ports", "info", 0))
	}
	addNCCL(&v, g, c.n)
	return v, true
}

// Host→device upload.
func ruleH2D(c *ruleCtx) (Verdict, bool) {
	g, t := c.g, c.t
	if !(g.SMActive < t.SMActiveStarved && g.PCIeRx >= t.H2DBytes && g.PCIeRx >= t.H2DAsymmetry*g.PCIeTx) {
		return Verdict{}, false
	}
	sm, util := c.smEvidence()
	return Verdict{Class: ClassIO, SubKind: SubH2DCopy, Confidence: confidence(g.PCIeRx, t.H2DBytes),
		Summary: fmt.Sprintf("PCIe receives %.1f GB/s while SM activity is %.2f: the GPU is busy copying data in, not computing", g.PCIeRx/1e9, g.SMActive),
		Evidence: []Evidence{c.ev("pcie_rx_bytes_per_second", g.PCIeRx, "B/s", ">=", t.H2DBytes),
			c.ev("pcie_rx_tx_ratio", g.PCIeRx/math.Max(g.PCIeTx, 1), "ratio", ">=", t.H2DAsymmetry), withOp(sm, "<"), util},
		Fix: "keep data on the GPU between steps, overlap copies with compute (pin_memory=True with non_blocking copies on a side stream), or move decode and augmentation to the GPU"}, true
}

// The SMs do the work.
func ruleCompute(c *ruleCtx) (Verdict, bool) {
	g, t := c.g, c.t
	if !(g.SMActive >= t.SMActiveCompute) {
		return Verdict{}, false
	}
	sm, util := c.smEvidence()
	v := Verdict{Class: ClassCompute, Confidence: confidence(g.SMActive, t.SMActiveCompute),
		Evidence: []Evidence{withOp(sm, ">=")}}
	switch {
	case g.TensorActive >= t.TensorActive:
		v.SubKind = SubTensor
		v.Summary = fmt.Sprintf("SM activity %.2f with tensor pipes %.2f busy: tensor-core bound", g.SMActive, g.TensorActive)
		v.Evidence = append(v.Evidence, c.ev("tensor_active", g.TensorActive, "ratio", ">=", t.TensorActive))
		v.Fix = "this is the goal state; gains come from the model (fused kernels, FP8 where accuracy allows) or more GPUs"
	case g.DRAMActive >= t.DRAMActive:
		v.SubKind = SubMemoryBandwidth
		v.Summary = fmt.Sprintf("SM activity %.2f with DRAM bandwidth %.2f used: memory-bandwidth bound", g.SMActive, g.DRAMActive)
		v.Evidence = append(v.Evidence, c.ev("dram_active", g.DRAMActive, "ratio", ">=", t.DRAMActive))
		v.Fix = "fuse memory-bound kernels (torch.compile), raise arithmetic intensity (larger batches), use lower-precision activations"
	default:
		v.SubKind = SubOtherSM
		v.Summary = fmt.Sprintf("SM activity %.2f with tensor %.2f and DRAM %.2f: SM-bound on non-tensor work", g.SMActive, g.TensorActive, g.DRAMActive)
		v.Fix = "profile the top kernels (Nsight Systems); move matmuls to tensor-core dtypes (bf16/fp16/tf32)"
	}
	v.Evidence = append(v.Evidence, util)
	return v, true
}

// A GPU that holds a kernel whose SMs do nothing: a collective waiting for
// its peers. The kernel is taken for a collective when a process of the
// GPU uses NCCL, or when the GPU runs a job spread over several GPUs of the
// node (grouped). Seen alone: with no progress on any link for HangSeconds
// it is stalled; with a job known to span nodes, or traffic still moving,
// it waits on ranks elsewhere; otherwise it waits for a rank not visible
// here. resolveWaits refines it with the job's other ranks.
func ruleCollectiveWait(c *ruleCtx) (Verdict, bool) {
	g, t := c.g, c.t
	if !(g.NCCL || c.grouped) || !(g.SMActive < t.SMActiveStarved) || !(g.Utilization >= t.HangUtilization || kernelWaits(g, t, 2)) {
		return Verdict{}, false // no collective: a kernel of another kind spins (torch.cuda._sleep, a persistent kernel)
	}
	best, moving := linkProgress(g, t)
	links := c.ev("link_bytes_per_second", best, "B/s", "<", t.HangProgressBytes)
	base := []Evidence{c.ev("nvml_utilization", g.Utilization, "ratio", ">=", t.HangUtilization),
		c.ev("sm_active", g.SMActive, "ratio", "<", t.SMActiveStarved)}
	if since, last, ok := stalledSince(g, t); ok && !moving {
		if d := last.Sub(since).Seconds(); d >= t.HangSeconds {
			return stalledVerdict(g, since, d, t.HangSeconds, nil, append(base, withOp(links, "<")), t), true
		}
	}
	if g.JobNodes > 1 || g.rdma.bytes >= t.HangProgressBytes || g.ProcessTCPBytes >= t.HangProgressBytes {
		where := "the job's other nodes"
		if g.JobNodes > 1 {
			where = fmt.Sprintf("the job's other nodes (its communicators span %d nodes)", g.JobNodes)
		}
		return Verdict{Class: ClassCommunication, SubKind: SubPeerWait, Confidence: 0.6,
			Summary: fmt.Sprintf("waiting on %s: the GPU holds a collective kernel (utilization %.2f, SM activity %.2f) while its own links move only %.2f GB/s; a slower rank elsewhere sets the pace",
				where, g.Utilization, g.SMActive, best/1e9),
			Evidence: append(base, withOp(links, "info")),
			Fix:      peerWaitFix}, true
	}
	return Verdict{Class: ClassCommunication, SubKind: SubCollectiveWait, Confidence: 0.6,
		Summary: fmt.Sprintf("waiting in a collective: the GPU holds a collective kernel (utilization %.2f, SM activity %.2f) with its links at %.2f GB/s; the rank it waits for is not visible on this node",
			g.Utilization, g.SMActive, best/1e9),
		Evidence: append(base, withOp(links, "info")),
		Fix:      "find the rank the job waits for (its log, or py-spy dump on each rank): one that computes, reads or writes while the others wait sets the pace"}, true
}

// The GPU's processes wait on storage: their threads in D state, their
// block requests (eBPF), or the node's I/O pressure while they do I/O.
func ruleStorage(c *ruleCtx) (Verdict, bool) {
	g, n, t := c.g, c.n, c.t
	if !g.hasProcess() {
		return Verdict{}, false
	}
	var disk DiskWait // the disk the GPU's processes wait on most
	if len(g.DiskWaits) > 0 {
		disk = g.DiskWaits[0]
	}
	psi := n.IOPressure >= t.IOPressure && g.ownIO()
	if !(g.ProcessIOWait >= t.IOWaitThreads || psi || disk.InFlight >= t.DiskInFlight) {
		return Verdict{}, false
	}
	v := Verdict{Class: ClassIO, SubKind: SubStorageRead, Summary: "SM activity is low and the host waits on storage", Evidence: c.starvedEvidence(),
		Fix: "read larger sequential chunks (pack small files into shards), add DataLoader workers and prefetch, use faster or striped local NVMe, raise read_ahead_kb"}
	conf := 0.0
	if disk.InFlight >= t.DiskInFlight {
		v.Summary = fmt.Sprintf("SM activity is low and the GPU's processes wait on %s: %.1f of their requests outstanding on average, reading %.2f GB/s",
			disk.Device, disk.InFlight, disk.BytesPerSecond/1e9)
		v.Evidence = append(v.Evidence, c.ev("process_disk_requests_in_flight", disk.InFlight, "requests", ">=", t.DiskInFlight),
			c.ev("process_disk_bytes_per_second", disk.BytesPerSecond, "B/s", "info", 0))
		conf = math.Max(conf, confidence(disk.InFlight, t.DiskInFlight))
	}
	if g.ProcessIOWait >= t.IOWaitThreads {
		v.Evidence = append(v.Evidence, c.ev("process_threads_in_io_wait", g.ProcessIOWait, "ratio", ">=", t.IOWaitThreads))
		conf = math.Max(conf, confidence(g.ProcessIOWait, t.IOWaitThreads))
	}
	if psi {
		v.Evidence = append(v.Evidence, c.ev("psi_io_some", n.IOPressure, "ratio", ">=", t.IOPressure))
		if g.ProcessReadBytes > 0 {
			v.Evidence = append(v.Evidence, c.ev("process_read_bytes_per_second", g.ProcessReadBytes, "B/s", "info", 0))
		}
		conf = math.Max(conf, confidence(n.IOPressure, t.IOPressure))
	}
	if !math.IsNaN(n.DiskReadBytes) {
		v.Evidence = append(v.Evidence, c.ev("disk_read_bytes_per_second", n.DiskReadBytes, "B/s", "info", 0))
	}
	if g.StorageNote != "" {
		v.Summary += "; " + g.StorageNote
	}
	v.Confidence = conf
	return v, true
}

// The GPU's processes send its data out to the host and work on it while
// the node's disks write more than they read: a checkpoint being saved.
// Writes are counted per disk, not per process; the GPU's own outbound
// PCIe traffic and its processes' work tie them to it.
func ruleStorageWrite(c *ruleCtx) (Verdict, bool) {
	g, n, t := c.g, c.n, c.t
	out := g.PCIeTx >= t.HangProgressBytes && g.PCIeTx >= t.H2DAsymmetry*g.PCIeRx
	busy := g.ProcessCPUCores >= t.ProcessBusyCores || g.ProcessIOWait > 0
	writes := n.DiskWriteBytes >= t.StorageWriteBytes && !(n.DiskReadBytes >= n.DiskWriteBytes)
	if !g.hasProcess() || !(g.SMActive < t.SMActiveStarved) || !out || !busy || !writes {
		return Verdict{}, false
	}
	v := Verdict{Class: ClassIO, SubKind: SubStorageWrite, Confidence: confidence(n.DiskWriteBytes, t.StorageWriteBytes),
		Summary: fmt.Sprintf("SM activity is %.2f while the GPU sends %.2f GB/s to the host and the node's disks write %.2f GB/s: its processes are saving data (a checkpoint), not feeding the GPU",
			g.SMActive, g.PCIeTx/1e9, n.DiskWriteBytes/1e9),
		Evidence: append(c.starvedEvidence(), c.ev("disk_write_bytes_per_second", n.DiskWriteBytes, "B/s", ">=", t.StorageWriteBytes),
			c.ev("pcie_tx_bytes_per_second", g.PCIeTx, "B/s", ">=", t.HangProgressBytes)),
		Fix: "a checkpoint pauses the job while it is written: write it asynchronously (torch.distributed.checkpoint.async_save), to faster local storage, or less often; shard it across the ranks so that no one rank writes it all"}
	if g.ProcessCPUCores >= t.ProcessBusyCores {
		v.Evidence = append(v.Evidence, c.ev("process_cpu_cores", g.ProcessCPUCores, "cores", ">=", t.ProcessBusyCores))
	}
	return v, true
}

// The GPU's processes keep the CPU busy, are throttled by their quota, or
// run on a node whose CPU pressure they share. A quota caps the cores the
// processes can use, below ProcessCPUCores when it is under one CPU:
// throttling alone makes the rule.
func ruleHost(c *ruleCtx) (Verdict, bool) {
	g, n, t := c.g, c.n, c.t
	if !g.hasProcess() {
		return Verdict{}, false
	}
	throttled := g.ProcessCPUThrottled >= t.CPUThrottled
	psi := n.CPUPressure >= t.CPUPressure && g.ownCPU(t)
	if !(g.ProcessCPUCores >= t.ProcessCPUCores || psi || throttled) {
		return Verdict{}, false
	}
	v := Verdict{Class: ClassHost, SubKind: SubCPU, Summary: "SM activity is low while the GPU's processes keep the CPU busy: the input pipeline cannot feed the GPU", Evidence: c.starvedEvidence(),
		Fix: "raise DataLoader num_workers and prefetch_factor, move decode/augmentation to the GPU (DALI), pin the job to its GPU's NUMA node, check the container's CPU quota"}
	conf := 0.0
	if throttled {
		v.SubKind, v.Fix = SubCPUQuota, cpuQuotaFix
		v.Summary = fmt.Sprintf("SM activity is low while the GPU's processes are throttled by their container's CPU quota in %.0f%% of periods: more DataLoader workers would share the same quota", g.ProcessCPUThrottled*100)
		if !math.IsNaN(g.ProcessCPUQuota) {
			v.Summary = fmt.Sprintf("SM activity is low while the GPU's processes are throttled by their container's CPU quota (%.3g CPUs) in %.0f%% of periods: more DataLoader workers would share the same quota", g.ProcessCPUQuota, g.ProcessCPUThrottled*100)
			v.Evidence = append(v.Evidence, c.ev("process_cpu_quota_cores", g.ProcessCPUQuota, "cores", "info", 0))
		}
		v.Evidence = append(v.Evidence, c.ev("process_cpu_throttled_periods", g.ProcessCPUThrottled, "ratio", ">=", t.CPUThrottled))
		conf = math.Max(conf, confidence(g.ProcessCPUThrottled, t.CPUThrottled))
	}
	if g.ProcessCPUCores >= t.ProcessCPUCores {
		v.Evidence = append(v.Evidence, c.ev("process_cpu_cores", g.ProcessCPUCores, "cores", ">=", t.ProcessCPUCores))
		conf = math.Max(conf, confidence(g.ProcessCPUCores, t.ProcessCPUCores))
	}
	if psi {
		v.Evidence = append(v.Evidence, c.ev("psi_cpu_some", n.CPUPressure, "ratio", ">=", t.CPUPressure))
		conf = math.Max(conf, confidence(n.CPUPressure, t.CPUPressure))
	}
	v.Confidence = conf
	return v, true
}

// The SMs work part of the time and nothing above explains the rest.
func rulePartlyBusy(c *ruleCtx) (Verdict, bool) {
	if !(c.g.SMActive >= c.t.SMActiveStarved) {
		return Verdict{}, false
	}
	return Verdict{Class: ClassCompute, SubKind: SubOtherSM, Confidence: 0.4,
		Summary:  fmt.Sprintf("SM activity %.2f: partly busy, with no link, storage or host signal over its threshold", c.g.SMActive),
		Evidence: c.starvedEvidence(),
		Fix:      "profile a few steps (Nsight Systems) to see what fills the gaps between kernels"}, true
}

// No process holds the GPU and its SMs idle: the GPU is free.
func ruleNoProcess(c *ruleCtx) (Verdict, bool) {
	if c.g.hasProcess() || !(c.g.SMActive < c.t.SMActiveIdle) {
		return Verdict{}, false
	}
	return Verdict{Class: ClassIdle, SubKind: SubNoProcess, Confidence: 0.9,
		Summary: "no compute process and no SM activity", Evidence: c.starvedEvidence()}, true
}

// A process holds the GPU and nothing measured explains its wait; the last
// rule, it always matches.
func ruleProcessWaiting(c *ruleCtx) (Verdict, bool) {
	v := Verdict{Class: ClassIdle, SubKind: SubWaiting, Confidence: 0.5,
		Summary:  "a process holds the GPU but the SMs, links, storage and host show no load that explains the wait",
		Evidence: c.starvedEvidence(),
		Fix:      "the process waits on something not measured here (a remote peer, a lock, a sleep); if host collectors are off, enable them"}
	if math.IsNaN(c.g.ProcessCPUCores) && math.IsNaN(c.n.CPUPressure) && math.IsNaN(c.n.IOPressure) {
		v.Summary = "a process holds the GPU without using it, and no host evidence is available to say why"
		v.Confidence = 0.3
	}
	return v, true
}

// addNCCL names what NCCL's own log says about the path, when a log is read.
// Its fallbacks are those the audit reports (fallbackSupported): not
// sockets "instead of InfiniBand" on a node without an RDMA device where IB
// was not disabled, nor ranks of the node over the network when P2P and
// shared memory were both disabled.
func addNCCL(v *Verdict, g GPUWindow, n NodeWindow) {
	if len(g.NCCLTransports) > 0 {
		v.Summary += "; NCCL's log shows transport " + strings.Join(g.NCCLTransports, ", ")
	}
	ibOff := func() bool {
		for name, want := range map[string]string{"NCCL_IB_DISABLE": "1", "NCCL_NET": "Socket"} {
			if x, ok := envValue(g.NCCLEnv, name); ok && strings.EqualFold(x, want) {
				return true
			}
		}
		return false
	}
	var shown []string
	for _, f := range g.NCCLFallbacks {
		switch {
		case f == "socket_instead_of_ib" && n.noRDMADevice() && !ibOff():
		case f == "net_within_node" && slices.Contains(g.NCCLFallbacks, "p2p_disabled") && slices.Contains(g.NCCLFallbacks, "shm_disabled"):
		default:
			shown = append(shown, f)
		}
	}
	if len(shown) > 0 {
		v.Summary += " and fallback " + strings.Join(shown, ", ")
	}
}

// hasProcess says whether a process holds the GPU. Host evidence (storage,
// CPU, pressure) speaks of a GPU only through its own processes: a GPU
// without one is idle whatever the node does.
func (g GPUWindow) hasProcess() bool { return g.ComputeProcesses > 0 }

// ownIO says whether the GPU's processes do I/O of their own over the span:
// threads in D state, reads from storage, or block requests (eBPF). Only
// then does the node's I/O pressure count for the GPU; where their reads
// are not measured (no gpuprocess or eBPF collector, or a job's first
// reading, a baseline), the pressure is all there is and counts.
func (g GPUWindow) ownIO() bool {
	if math.IsNaN(g.ProcessReadBytes) && len(g.DiskWaits) == 0 {
		return true // reads not measured (yet: a job's first reading is a baseline)
	}
	return g.ProcessIOWait > 0 || g.ProcessReadBytes > 0 ||
		slices.ContainsFunc(g.DiskWaits, func(d DiskWait) bool { return d.InFlight > 0 || d.BytesPerSecond > 0 })
}

// ownCPU says whether the GPU's processes run on the CPU enough for the
// node's CPU pressure to be theirs (ProcessBusyCores), or are not measured.
func (g GPUWindow) ownCPU(t Thresholds) bool {
	return math.IsNaN(g.ProcessCPUCores) || g.ProcessCPUCores >= t.ProcessBusyCores
}
