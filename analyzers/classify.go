package analyzers

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"strconv"
)

// ClassifyGPU decides what bounds one GPU over the span. Communication is
// tested before compute because a communication-bound data-parallel step
// still keeps the SMs 60–70% busy (NCCL and optimizer kernels); link
// throughput against capacity is what tells it apart.
func ClassifyGPU(g GPUWindow, n NodeWindow, t Thresholds) Verdict {
	span := t.SpanSeconds
	ev := func(signal string, v float64, unit, op string, thr float64) Evidence {
		return Evidence{Signal: signal, Value: round(v), Unit: unit, Op: op, Threshold: thr, SpanSeconds: span}
	}
	if !g.Up {
		summary := "the GPU did not answer in the newest sample"
		if g.Error != "" {
			summary += ": " + g.Error
		}
		return Verdict{Class: ClassUnknown, SubKind: SubGPUDown, Summary: summary,
			Evidence: []Evidence{ev("gpu_up", 0, "", "<", 1)}, Fix: gpuLostFix}
	}
	if math.IsNaN(g.SMActive) {
		return Verdict{Class: ClassUnknown, Summary: "SM activity is not measured on this GPU (no GPM or DCGM profiling); " +
			"NVML utilization alone cannot tell compute from copies and waits",
			Fix: "use a Hopper or newer GPU (GPM), or run DCGM with its profiling module for older GPUs"}
	}
	sm := ev("sm_active", g.SMActive, "ratio", "<", t.SMActiveCompute)
	util := ev("nvml_utilization", g.Utilization, "ratio", "info", 0)

	// Communication over NVLink.
	nvl := maxNaN(g.NVLinkTx, g.NVLinkRx)
	nvlThr := t.NVLinkBusyBytes
	if g.NVLinkCapacity > 0 {
		nvlThr = t.NVLinkBusyFraction * g.NVLinkCapacity
	}
	if nvl >= nvlThr {
		v := Verdict{Class: ClassCommunication, SubKind: SubNVLink,
			Confidence: confidence(nvl, nvlThr),
			Summary: fmt.Sprintf("NVLink carries %.0f GB/s (threshold %.0f GB/s) while SM activity is %.2f: collectives over NVLink dominate",
				nvl/1e9, nvlThr/1e9, g.SMActive),
			Evidence: []Evidence{ev("nvlink_bytes_per_second", nvl, "B/s", ">=", nvlThr), withOp(sm, "info"), util},
			Fix:      "overlap communication with compute (bucketed DDP/FSDP), raise the batch per GPU, or shrink what is exchanged (gradient compression, lower precision)"}
		addNCCL(&v, g)
		return v
	}

	// Collectives over InfiniBand or RoCE: tested before PCIe peer traffic,
	// which GPUDirect RDMA looks like from the GPU.
	if v, ok := classifyRDMA(g, n, t, ev); ok {
		return v
	}

	// Peer traffic over PCIe or host shared memory: both directions busy,
	// NVLink quiet. With NVLinks up this is NCCL's SHM fallback.
	lo, hi := math.Min(g.PCIeTx, g.PCIeRx), maxNaN(g.PCIeTx, g.PCIeRx)
	if lo >= t.PCIePeerBytes && hi > 0 && lo/hi >= t.PCIePeerSymmetry && g.SMActive < t.SMActiveCompute {
		v := Verdict{Class: ClassCommunication, SubKind: SubPCIePeerSHM, Confidence: confidence(lo, t.PCIePeerBytes),
			Summary: fmt.Sprintf("PCIe moves %.1f GB/s out and %.1f GB/s in with NVLink at %.1f GB/s and SM activity %.2f: GPU-to-GPU traffic goes through PCIe or host memory",
				g.PCIeTx/1e9, g.PCIeRx/1e9, nvl/1e9, g.SMActive),
			Evidence: []Evidence{ev("pcie_min_direction_bytes_per_second", lo, "B/s", ">=", t.PCIePeerBytes),
				ev("pcie_direction_symmetry", lo/hi, "ratio", ">=", t.PCIePeerSymmetry), sm, util},
			Fix: "check NCCL_P2P_DISABLE and NCCL_P2P_LEVEL in the job's environment and the GPU topology (nvidia-smi topo -m); on PCIe-only hosts keep each job's GPUs under one PCIe switch"}
		addNCCL(&v, g)
		if g.NVLinksUp > 0 {
			v.Summary += fmt.Sprintf("; %d NVLinks are up but idle, so NCCL is not using them (shared-memory fallback)", g.NVLinksUp)
			v.Evidence = append(v.Evidence, ev("nvlinks_up", float64(g.NVLinksUp), "links", "info", 0))
			v.Fix = "NCCL fell back from NVLink to shared memory: remove NCCL_P2P_DISABLE=1 (or a restrictive NCCL_P2P_LEVEL) from the job's environment"
		}
		return v
	}

	// Collectives over TCP sockets.
	if g.ProcessTCPBytes >= t.NetworkBytes && g.SMActive < t.SMActiveCompute {
		v := Verdict{Class: ClassCommunication, SubKind: SubNetwork, Confidence: confidence(g.ProcessTCPBytes, t.NetworkBytes),
			Summary: fmt.Sprintf("the GPU's processes move %.2f GB/s over TCP while SM activity is %.2f: collectives run over sockets",
				g.ProcessTCPBytes/1e9, g.SMActive),
			Evidence: []Evidence{ev("process_tcp_bytes_per_second", g.ProcessTCPBytes, "B/s", ">=", t.NetworkBytes), sm, util},
			Fix:      "NCCL is using sockets: check NCCL_NET, NCCL_IB_DISABLE and NCCL_SHM_DISABLE in the job's environment, that the InfiniBand/RoCE ports are active, and NCCL_SOCKET_IFNAME"}
		addNCCL(&v, g)
		return v
	}

	// Host→device upload.
	if g.SMActive < t.SMActiveStarved && g.PCIeRx >= t.H2DBytes && g.PCIeRx >= t.H2DAsymmetry*g.PCIeTx {
		return Verdict{Class: ClassIO, SubKind: SubH2DCopy, Confidence: confidence(g.PCIeRx, t.H2DBytes),
			Summary: fmt.Sprintf("PCIe receives %.1f GB/s while SM activity is %.2f: the GPU is busy copying data in, not computing", g.PCIeRx/1e9, g.SMActive),
			Evidence: []Evidence{ev("pcie_rx_bytes_per_second", g.PCIeRx, "B/s", ">=", t.H2DBytes),
				ev("pcie_rx_tx_ratio", g.PCIeRx/math.Max(g.PCIeTx, 1), "ratio", ">=", t.H2DAsymmetry), withOp(sm, "<"), util},
			Fix: "keep data on the GPU between steps, overlap copies with compute (pin_memory=True with non_blocking copies on a side stream), or move decode and augmentation to the GPU"}
	}

	// The SMs do the work.
	if g.SMActive >= t.SMActiveCompute {
		v := Verdict{Class: ClassCompute, Confidence: confidence(g.SMActive, t.SMActiveCompute),
			Evidence: []Evidence{withOp(sm, ">=")}}
		switch {
		case g.TensorActive >= t.TensorActive:
			v.SubKind = SubTensor
			v.Summary = fmt.Sprintf("SM activity %.2f with tensor pipes %.2f busy: tensor-core bound", g.SMActive, g.TensorActive)
			v.Evidence = append(v.Evidence, ev("tensor_active", g.TensorActive, "ratio", ">=", t.TensorActive))
			v.Fix = "this is the goal state; gains come from the model (fused kernels, FP8 where accuracy allows) or more GPUs"
		case g.DRAMActive >= t.DRAMActive:
			v.SubKind = SubMemoryBandwidth
			v.Summary = fmt.Sprintf("SM activity %.2f with DRAM bandwidth %.2f used: memory-bandwidth bound", g.SMActive, g.DRAMActive)
			v.Evidence = append(v.Evidence, ev("dram_active", g.DRAMActive, "ratio", ">=", t.DRAMActive))
			v.Fix = "fuse memory-bound kernels (torch.compile), raise arithmetic intensity (larger batches), use lower-precision activations"
		default:
			v.SubKind = SubOtherSM
			v.Summary = fmt.Sprintf("SM activity %.2f with tensor %.2f and DRAM %.2f: SM-bound on non-tensor work", g.SMActive, g.TensorActive, g.DRAMActive)
			v.Fix = "profile the top kernels (Nsight Systems); move matmuls to tensor-core dtypes (bf16/fp16/tf32)"
		}
		v.Evidence = append(v.Evidence, util)
		return v
	}

	// A kernel is resident but the SMs wait: a collective waiting for its
	// peers, stalled or slowed by ranks elsewhere.
	if v, ok := classifyWaiting(g, t, ev); ok {
		return v
	}

	// The GPU waits. Host evidence says on what.
	starved := []Evidence{withOp(sm, "<"), util}
	var disk DiskWait // the disk the GPU's processes wait on most
	if len(g.DiskWaits) > 0 {
		disk = g.DiskWaits[0]
	}
	if g.ProcessIOWait >= t.IOWaitThreads || n.IOPressure >= t.IOPressure || disk.InFlight >= t.DiskInFlight {
		v := Verdict{Class: ClassIO, SubKind: SubStorageRead, Summary: "SM activity is low and the host waits on storage", Evidence: starved,
			Fix: "read larger sequential chunks (pack small files into shards), add DataLoader workers and prefetch, use faster or striped local NVMe, raise read_ahead_kb"}
		c := 0.0
		if disk.InFlight >= t.DiskInFlight {
			v.Summary = fmt.Sprintf("SM activity is low and the GPU's processes wait on %s: %.1f of their requests outstanding on average, reading %.2f GB/s",
				disk.Device, disk.InFlight, disk.BytesPerSecond/1e9)
			v.Evidence = append(v.Evidence, ev("process_disk_requests_in_flight", disk.InFlight, "requests", ">=", t.DiskInFlight),
				ev("process_disk_bytes_per_second", disk.BytesPerSecond, "B/s", "info", 0))
			c = math.Max(c, confidence(disk.InFlight, t.DiskInFlight))
		}
		if g.ProcessIOWait >= t.IOWaitThreads {
			v.Evidence = append(v.Evidence, ev("process_threads_in_io_wait", g.ProcessIOWait, "ratio", ">=", t.IOWaitThreads))
			c = math.Max(c, confidence(g.ProcessIOWait, t.IOWaitThreads))
		}
		if n.IOPressure >= t.IOPressure {
			v.Evidence = append(v.Evidence, ev("psi_io_some", n.IOPressure, "ratio", ">=", t.IOPressure))
			c = math.Max(c, confidence(n.IOPressure, t.IOPressure))
		}
		if !math.IsNaN(n.DiskReadBytes) {
			v.Evidence = append(v.Evidence, ev("disk_read_bytes_per_second", n.DiskReadBytes, "B/s", "info", 0))
		}
		if g.StorageNote != "" {
			v.Summary += "; " + g.StorageNote
		}
		v.Confidence = c
		return v
	}
	// A quota caps the cores the processes can use, below ProcessCPUCores
	// when it is under one CPU: throttling alone makes the host rule.
	throttled := g.ProcessCPUThrottled >= t.CPUThrottled
	if g.ProcessCPUCores >= t.ProcessCPUCores || n.CPUPressure >= t.CPUPressure || throttled {
		v := Verdict{Class: ClassHost, SubKind: SubCPU, Summary: "SM activity is low while the GPU's processes keep the CPU busy: the input pipeline cannot feed the GPU", Evidence: starved,
			Fix: "raise DataLoader num_workers and prefetch_factor, move decode/augmentation to the GPU (DALI), pin the job to its GPU's NUMA node, check the container's CPU quota"}
		c := 0.0
		if throttled {
			v.SubKind, v.Fix = SubCPUQuota, cpuQuotaFix
			v.Summary = fmt.Sprintf("SM activity is low while the GPU's processes are throttled by their container's CPU quota in %.0f%% of periods: more DataLoader workers would share the same quota", g.ProcessCPUThrottled*100)
			if !math.IsNaN(g.ProcessCPUQuota) {
				v.Summary = fmt.Sprintf("SM activity is low while the GPU's processes are throttled by their container's CPU quota (%.3g CPUs) in %.0f%% of periods: more DataLoader workers would share the same quota", g.ProcessCPUQuota, g.ProcessCPUThrottled*100)
				v.Evidence = append(v.Evidence, ev("process_cpu_quota_cores", g.ProcessCPUQuota, "cores", "info", 0))
			}
			v.Evidence = append(v.Evidence, ev("process_cpu_throttled_periods", g.ProcessCPUThrottled, "ratio", ">=", t.CPUThrottled))
			c = math.Max(c, confidence(g.ProcessCPUThrottled, t.CPUThrottled))
		}
		if g.ProcessCPUCores >= t.ProcessCPUCores {
			v.Evidence = append(v.Evidence, ev("process_cpu_cores", g.ProcessCPUCores, "cores", ">=", t.ProcessCPUCores))
			c = math.Max(c, confidence(g.ProcessCPUCores, t.ProcessCPUCores))
		}
		if n.CPUPressure >= t.CPUPressure {
			v.Evidence = append(v.Evidence, ev("psi_cpu_some", n.CPUPressure, "ratio", ">=", t.CPUPressure))
			c = math.Max(c, confidence(n.CPUPressure, t.CPUPressure))
		}
		v.Confidence = c
		return v
	}
	if g.SMActive >= t.SMActiveStarved {
		return Verdict{Class: ClassCompute, SubKind: SubOtherSM, Confidence: 0.4,
			Summary:  fmt.Sprintf("SM activity %.2f: partly busy, with no link, storage or host signal over its threshold", g.SMActive),
			Evidence: []Evidence{withOp(sm, "<"), util},
			Fix:      "profile a few steps (Nsight Systems) to see what fills the gaps between kernels"}
	}
	if g.ComputeProcesses == 0 && g.SMActive < t.SMActiveIdle {
		return Verdict{Class: ClassIdle, SubKind: SubNoProcess, Confidence: 0.9,
			Summary: "no compute process and no SM activity", Evidence: starved}
	}
	v := Verdict{Class: ClassIdle, SubKind: SubWaiting, Confidence: 0.5,
		Summary:  "a process holds the GPU but the SMs, links, storage and host show no load that explains the wait",
		Evidence: starved,
		Fix:      "the process waits on something not measured here (a remote peer, a lock, a sleep); if host collectors are off, enable them"}
	if math.IsNaN(g.ProcessCPUCores) && math.IsNaN(n.CPUPressure) && math.IsNaN(n.IOPressure) {
		v.Summary = "a process holds the GPU without using it, and no host evidence is available to say why"
		v.Confidence = 0.3
	}
	return v
}

// addNCCL names what NCCL's own log says about the path, when a log is read.
func addNCCL(v *Verdict, g GPUWindow) {
	if len(g.NCCLTransports) > 0 {
		v.Summary += "; NCCL's log shows transport " + joinComma(g.NCCLTransports)
	}
	if len(g.NCCLFallbacks) > 0 {
		v.Summary += " and fallback " + joinComma(g.NCCLFallbacks)
	}
}

// NodeVerdict combines the GPUs: the most common known class wins; ties go
// to the class that hurts most (communication, I/O, host, compute, idle).
func NodeVerdict(gpus []GPUVerdict) Verdict {
	rank := map[Class]int{ClassCommunication: 0, ClassIO: 1, ClassHost: 2, ClassCompute: 3, ClassIdle: 4, ClassUnknown: 5}
	count := map[Class]int{}
	conf := map[Class]float64{}
	subs := map[Class]map[string]int{}
	known := 0
	for _, g := range gpus {
		count[g.Class]++
		conf[g.Class] += g.Confidence
		if subs[g.Class] == nil {
			subs[g.Class] = map[string]int{}
		}
		subs[g.Class][g.SubKind]++
		if g.Class != ClassUnknown {
			known++
		}
	}
	if known == 0 {
		return Verdict{Class: ClassUnknown, Summary: "no GPU could be classified" + downNote(gpus)}
	}
	classes := make([]Class, 0, len(count))
	for c := range count {
		if c != ClassUnknown {
			classes = append(classes, c)
		}
	}
	sort.Slice(classes, func(i, j int) bool {
		if count[classes[i]] != count[classes[j]] {
			return count[classes[i]] > count[classes[j]]
		}
		return rank[classes[i]] < rank[classes[j]]
	})
	best := classes[0]
	sub, subN := "", 0
	for s, k := range subs[best] {
		if k > subN || (k == subN && s < sub) {
			sub, subN = s, k
		}
	}
	share := float64(count[best]) / float64(known)
	v := Verdict{Class: best, SubKind: sub, Confidence: round(conf[best] / float64(count[best]) * share),
		Summary: fmt.Sprintf("%d of %d GPUs are %s-bound", count[best], known, best)}
	if best == ClassIdle {
		v.Summary = fmt.Sprintf("%d of %d GPUs are idle", count[best], known)
	}
	if len(classes) > 1 {
		var others []string
		for _, c := range classes[1:] {
			others = append(others, fmt.Sprintf("%d %s", count[c], c))
		}
		v.Summary += "; the GPUs disagree (" + joinComma(others) + ")"
	}
	v.Summary += downNote(gpus)
	for _, g := range gpus {
		if g.Class == best && g.SubKind == sub {
			v.Evidence = g.Evidence
			v.Fix = g.Fix
			break
		}
	}
	return v
}

// downNote names the GPUs that did not answer, for the node summary: "7 of
// 7 GPUs are compute-bound" must not read as the whole node on an 8-GPU
// board.
func downNote(gpus []GPUVerdict) string {
	var down []string
	for _, g := range gpus {
		if g.SubKind == SubGPUDown {
			down = append(down, strconv.Itoa(g.GPU))
		}
	}
	switch len(down) {
	case 0:
		return ""
	case 1:
		return "; GPU " + down[0] + " does not answer"
	}
	return "; GPUs " + joinComma(down) + " do not answer"
}

// FindStragglers reports GPUs far below the median SM activity of their
// peers, among GPUs that compute or communicate (an idle GPU is not a
// straggler, it is unused).
func FindStragglers(ws []GPUWindow, vs []GPUVerdict, t Thresholds) []Straggler {
	var sms []float64
	active := map[int]bool{}
	for i, v := range vs {
		// A GPU waiting in a collective is the straggler's victim, not
		// the straggler: its SMs idle because another rank is late.
		waiting := v.SubKind == SubPeerWait || v.SubKind == SubCollectiveStalled
		if (v.Class == ClassCompute || v.Class == ClassCommunication) && !waiting && !math.IsNaN(ws[i].SMActive) {
			sms = append(sms, ws[i].SMActive)
			active[i] = true
		}
	}
	if len(sms) < 3 {
		return nil // with two GPUs there is no majority to compare against
	}
	sorted := slices.Clone(sms)
	sort.Float64s(sorted)
	median := sorted[len(sorted)/2]
	if median < t.SMActiveCompute {
		return nil
	}
	var out []Straggler
	for i, w := range ws {
		if active[i] && w.SMActive < t.StragglerRatio*median {
			out = append(out, Straggler{GPU: w.Index, SMActive: round(w.SMActive), PeerSMActive: round(median)})
		}
	}
	return out
}

// confidence grows from 0.6 at the threshold to 1 at twice the threshold:
// a value just over the line is a weaker claim than one far past it.
func confidence(v, thr float64) float64 {
	if thr <= 0 || math.IsNaN(v) {
		return 0.6
	}
	x := (v - thr) / thr
	return round(0.6 + 0.4*math.Max(0, math.Min(1, x)))
}

func withOp(e Evidence, op string) Evidence {
	e.Op = op
	return e
}

func maxNaN(a, b float64) float64 {
	switch {
	case math.IsNaN(a):
		return b
	case math.IsNaN(b):
		return a
	}
	return math.Max(a, b)
}

func round(x float64) float64 {
	if math.IsNaN(x) || math.IsInf(x, 0) {
		return x
	}
	return math.Round(x*1e4) / 1e4
}

func joinComma(s []string) string {
	out := ""
	for i, x := range s {
		if i > 0 {
			out += ", "
		}
		out += x
	}
	return out
}
