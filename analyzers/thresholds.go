package analyzers

// Thresholds are the numbers the verdicts turn on. Each has its justification
// next to it; docs/diagnosis.md is generated from this table (see
// TestDiagnosisDocTable), so the documentation cannot drift from the code.
type Thresholds struct {
	// SMActiveCompute: mean SM activity at or above which a GPU does real work.
	SMActiveCompute float64
	// SMActiveIdle: mean SM activity below which the SMs are idle.
	SMActiveIdle float64
	// SMActiveStarved: below this the GPU is not the bottleneck; look at links,
	// storage and the host.
	SMActiveStarved float64
	// TensorActive: tensor pipe activity marking a tensor-bound compute GPU.
	TensorActive float64
	// DRAMActive: DRAM bandwidth utilisation marking a memory-bound GPU.
	DRAMActive float64
	// NVLinkBusyFraction: NVLink throughput (max of TX, RX) as a fraction of
	// the GPU's NVLink capacity that marks communication over NVLink.
	NVLinkBusyFraction float64
	// NVLinkBusyBytes: the same in bytes/s when the capacity is unknown.
	NVLinkBusyBytes float64
	// PCIePeerBytes: PCIe TX and RX both at least this, roughly symmetric,
	// with NVLink quiet: peer traffic through host memory (SHM) or PCIe P2P.
	PCIePeerBytes float64
	// PCIeSymmetry: min(TX,RX)/max(TX,RX) at or above which PCIe traffic is
	// peer traffic rather than a one-way upload.
	PCIePeerSymmetry float64
	// H2DBytes: PCIe RX at least this, with RX ≥ H2DAsymmetry × TX and idle
	// SMs, marks an upload-bound GPU.
	H2DBytes float64
	// H2DAsymmetry: RX/TX ratio of a host→device upload.
	H2DAsymmetry float64
	// NetworkBytes: TCP bytes/s of the GPU's processes marking collectives
	// over sockets.
	NetworkBytes float64
	// ProcessCPUCores: CPU cores used by a GPU's processes and children at
	// or above which a starved GPU is host-bound (a GIL-bound loop is one
	// core).
	ProcessCPUCores float64
	// ProcessBusyCores: CPU cores a GPU process uses from which it works on
	// the host: a rank its peers wait for is busy, not stuck, and the
	// node's CPU pressure counts for a GPU whose processes use this much.
	ProcessBusyCores float64
	// CPUThrottled: share of CFS periods in which a GPU's processes'
	// cgroups ran out of CPU quota; a starved GPU so throttled is held
	// back by the quota (host / cpu_quota).
	CPUThrottled float64
	// CPUPressure: PSI cpu "some" share marking a CPU-starved node.
	CPUPressure float64
	// IOPressure: PSI io "some" share marking an I/O-starved node.
	IOPressure float64
	// IOWaitThreads: share of a GPU process's threads in D state.
	IOWaitThreads float64
	// StorageWriteBytes: the node's writes to its busiest disk from which
	// a GPU whose processes stream its data out to the host while busy on
	// it is writing to storage.
	StorageWriteBytes float64
	// DiskInFlight: mean block requests of a GPU's processes and their
	// descendants outstanding on one disk (eBPF) marking a job that waits
	// on that disk.
	DiskInFlight float64
	// RDMABytes: throughput of the HCA port a GPU's rank uses (busier
	// direction) from which the port carries the GPU's collectives.
	RDMABytes float64
	// RDMAMatch: the port's throughput per GPU using it over the GPU's
	// PCIe throughput at or above which the GPU's PCIe traffic is network
	// traffic (GPUDirect RDMA moves the same bytes over both).
	RDMAMatch float64
	// RDMABusyFraction: port throughput over line rate at which the GPU is
	// communication-bound whatever its SM activity.
	RDMABusyFraction float64
	// RDMAWaitFraction: port throughput over line rate below which a GPU
	// waiting in a collective is held by ranks elsewhere, not by its port.
	RDMAWaitFraction float64
	// RDMASaturated: port throughput over line rate at which the port is
	// the job's ceiling.
	RDMASaturated float64
	// XmitWaitShare: share of an InfiniBand port's line rate lost waiting
	// for credits marking congestion.
	XmitWaitShare float64
	// ECNMarkedShare and CNPHandledPerSecond: RoCE congestion marks.
	ECNMarkedShare      float64
	CNPHandledPerSecond float64
	// HangUtilization: NVML utilization of a GPU holding a kernel; with SM
	// activity below SMActiveStarved the kernel waits (a collective).
	HangUtilization float64
	// HangProgressBytes: link throughput (PCIe, NVLink, HCA, TCP) below
	// which a waiting collective makes no progress.
	HangProgressBytes float64
	// HangSeconds: how long a collective must make no progress to be
	// called stalled.
	HangSeconds float64
	// StalledPeersSeconds: how long a collective must make no progress,
	// while every rank of its job visible on the node is stuck too
	// (stopped, exited, in D state, or waiting without progress), to be
	// called stalled.
	StalledPeersSeconds float64
	// WaitNamedSeconds: how long a GPU's newest readings must show a
	// collective without progress to name a rank of its job that is
	// stopped or gone, before the span's means turn.
	WaitNamedSeconds float64
	// StragglerRatio: a GPU whose SM activity is below this fraction of the
	// median of its peers (same class, compute) is a straggler.
	StragglerRatio float64
	// Hysteresis: consecutive analyses a new class must win before it is
	// reported.
	Hysteresis int
	// SpanSeconds: the span the means are taken over.
	SpanSeconds float64
}

// DefaultThresholds are the defaults; ThresholdDocs justifies each.
var DefaultThresholds = Thresholds{
	SMActiveCompute:     0.5,
	SMActiveIdle:        0.05,
	SMActiveStarved:     0.3,
	TensorActive:        0.3,
	DRAMActive:          0.5,
	NVLinkBusyFraction:  0.1,
	NVLinkBusyBytes:     45e9,
	PCIePeerBytes:       5e9,
	PCIePeerSymmetry:    0.5,
	H2DBytes:            5e9,
	H2DAsymmetry:        4,
	NetworkBytes:        0.5e9,
	ProcessCPUCores:     0.8,
	ProcessBusyCores:    0.25,
	StorageWriteBytes:   0.1e9,
	CPUThrottled:        CPUThrottledWarn,
	CPUPressure:         0.2,
	IOPressure:          0.2,
	IOWaitThreads:       0.25,
	DiskInFlight:        1,
	StragglerRatio:      0.6,
	RDMABytes:           1e9,
	RDMAMatch:           0.5,
	RDMABusyFraction:    0.5,
	RDMASaturated:       0.9,
	RDMAWaitFraction:    0.1,
	XmitWaitShare:       0.1,
	ECNMarkedShare:      0.01,
	CNPHandledPerSecond: 1000,
	HangUtilization:     0.9,
	HangProgressBytes:   50e6,
	HangSeconds:         60,
	StalledPeersSeconds: 30,
	WaitNamedSeconds:    3,
	Hysteresis:          2,
	SpanSeconds:         10,
}

// ThresholdDoc documents one threshold.
type ThresholdDoc struct {
	Name, Value, Why string
}

// ThresholdDocs is the table of docs/diagnosis.md. Measurements cited are in
// ../shared/research/device-probe.md (H200, driver 580) and docs/validation.md.
func ThresholdDocs(t Thresholds) []ThresholdDoc {
	f := func(x float64) string { return trimFloat(x) }
	gb := func(x float64) string { return trimFloat(x/1e9) + " GB/s" }
	return []ThresholdDoc{
		{"SMActiveCompute", f(t.SMActiveCompute), "bf16 GEMM 0.88–0.96 and D2D copy 0.99 SM active, against 0.00 for a pinned H2D copy, 0.03 for all-reduce over SHM and 0.015 over sockets (H200). A DDP step that is communication-bound still shows 0.6–0.7, so communication is tested first, by link throughput."},
		{"SMActiveIdle", f(t.SMActiveIdle), "idle 0.00 and a starved loop (tiny kernels, 50 ms host sleep) 0.001 SM active (H200)."},
		{"SMActiveStarved", f(t.SMActiveStarved), "below it a GPU is not compute-bound; all three fallback modes and every starved workload measured read ≤ 0.03."},
		{"TensorActive", f(t.TensorActive), "bf16 GEMM 0.85–0.94 tensor active; D2D copy 0.00."},
		{"DRAMActive", f(t.DRAMActive), "D2D copy 0.88 DRAM active; bf16 GEMM 0.16–0.18."},
		{"NVLinkBusyFraction", f(t.NVLinkBusyFraction), "of NVLink capacity (NV18 = 450 GB/s one way): bare all-reduce 289 GB/s (0.64), a communication-bound DDP step ~200 GB/s (0.45), a compute-bound DDP job ~12 GB/s (0.03)."},
		{"NVLinkBusyBytes", gb(t.NVLinkBusyBytes), "the same fraction of an NV18 link, used when the capacity is unknown."},
		{"PCIePeerBytes", gb(t.PCIePeerBytes), "all-reduce with NCCL_P2P_DISABLE=1 moved 33.7 GB/s TX and 29.5 GB/s RX over PCIe with NVLink idle; the socket path moved 4.0/3.6 GB/s and is caught by NetworkBytes instead."},
		{"PCIePeerSymmetry", f(t.PCIePeerSymmetry), "SHM all-reduce TX/RX = 0.88; a pinned H2D upload 0.06 (3.5 vs 59.2 GB/s)."},
		{"H2DBytes", gb(t.H2DBytes), "pinned H2D copy 56.6–59.2 GB/s, pageable 8–9 GB/s (H200, Gen5 x16); a GEMM moves 0.01 GB/s."},
		{"H2DAsymmetry", f(t.H2DAsymmetry), "pinned H2D RX/TX = 17; SHM all-reduce 0.9–1.1."},
		{"NetworkBytes", gb(t.NetworkBytes), "all-reduce over NET/Socket ran at 3.0 GB/s bus bandwidth; gradient sync on a healthy NVLink job sends no TCP traffic."},
		{"ProcessCPUCores", f(t.ProcessCPUCores), "a GIL-bound Python input loop is one process at 100% of one core while system-wide CPU reads 3% on a 32-core host."},
		{"ProcessBusyCores", f(t.ProcessBusyCores), "a rank writing a checkpoint used 0.74–0.82 cores while its peer waited in a barrier (4×H200, testdata/traces/multigpu/checkpoint); a stopped rank uses 0, an idle one 0.00–0.02. Below it a peer is not busy on the host, and node-wide CPU pressure is not pinned on a GPU whose processes barely run."},
		{"CPUThrottled", f(t.CPUThrottled), "share of CFS periods (100 ms) in which the GPU's processes' cgroups ran out of quota: one period in ten the job's threads stop until the next, a stall on every training step of 0.1–2 s. seeds-000-003 row 17 proposes 5%; 10% leaves alone the occasional burst of a job sized close to its limit. Also the cpu_quota_throttled finding's threshold. A proposal."},
		{"CPUPressure", f(t.CPUPressure), "PSI cpu some share; proposal from seed-001 row 16 (CPU PSI some > 20% with workers contending); to be confirmed on recorded traces."},
		{"IOPressure", f(t.IOPressure), "PSI io some share; a storage-bound reader showed io some ≈ full ≥ 0.7 (H200 host); seed-001 row 14 proposes 10%."},
		{"IOWaitThreads", f(t.IOWaitThreads), "the storage-bound reader sat in D state; a quarter of the process's threads leaves room for loader pools that are partly busy."},
		{"StorageWriteBytes", gb(t.StorageWriteBytes), "a rank saving a 31 GiB checkpoint to local ext4 wrote 0.47 GB/s on average while its GPU sent 0.5 GB/s to the host (testdata/traces/multigpu/checkpoint); logging writes kilobytes to megabytes a second. A proposal."},
		{"DiskInFlight", f(t.DiskInFlight), "mean requests of the GPU's processes and descendants outstanding on one disk (eBPF wait time per second): at 1 the job has a read waiting on that disk at every moment, while its GPU idles. On the H200 host a loop that read with direct I/O for part of each step (7.5 GB in 30 s) averaged 0.19. A proposal to be confirmed on recorded traces."},
		{"RDMABytes", gb(t.RDMABytes), "an HCA port moving 1 GB/s (2% of a 400 Gb/s NDR port) for a GPU's rank carries its collectives; the simulated compute-bound multi-node job moves 1.5 GB/s per port with SM activity 0.96 and stays compute-bound through SMActiveCompute (docs/simulation.md). A proposal: no fabric was measured here."},
		{"RDMAMatch", f(t.RDMAMatch), "with GPUDirect RDMA the GPU's PCIe link carries what its HCA sends and receives (and, staged through host memory, the same bytes as device↔host copies): a port moving at least half of the GPU's PCIe traffic explains it; below, most PCIe traffic is peer traffic (SHM) and pcie_peer_shm is tested next."},
		{"RDMABusyFraction", f(t.RDMABusyFraction), "of the port's line rate: NCCL all-reduce over NDR reaches 90–96% of line rate; a communication-bound step that keeps the SMs 0.6–0.7 busy (like NVLink's) still moves half the line rate. A proposal."},
		{"RDMAWaitFraction", f(t.RDMAWaitFraction), "of line rate: a GPU holding a collective kernel (utilization ≥ HangUtilization, SM below SMActiveStarved) whose port moves less than a tenth of its line rate is not limited by its port; it waits for slower ranks (peer_wait). Host-staged traffic still moves 0.375 of GDR's rate (seeds-002-004 F7), well above. A proposal."},
		{"RDMASaturated", f(t.RDMASaturated), "of line rate: seeds-002-004 N1 (achieved ≥ 90% of line rate during communication = the link is the ceiling)."},
		{"XmitWaitShare", f(t.XmitWaitShare), "port_xmit_wait × 8 bytes per tick (Quantum, ibdiagnet manual) over the line rate: a tenth of the port's time spent without credits is congestion downstream. A proposal."},
		{"ECNMarkedShare", f(t.ECNMarkedShare), "RoCE packets received with an ECN mark over packets received: 1% means the switches mark persistently (DCQCN). A proposal; the seeds give no threshold."},
		{"CNPHandledPerSecond", f(t.CNPHandledPerSecond), "congestion notifications that cut this sender's rate, per second: at 1000/s DCQCN cuts the rate every millisecond. A proposal; the seeds give no threshold."},
		{"HangUtilization", f(t.HangUtilization), "a spinning NCCL kernel keeps NVML utilization at 1.0 (all-reduce over sockets: utilization 1.0 with SM activity 0.015, H200); an idle GPU reads 0."},
		{"HangProgressBytes", gb(t.HangProgressBytes), "an idle H200 moves 0.1–0.6 MB/s over PCIe and a GEMM 5–14 MB/s of control traffic; a collective that moves data moves GB/s."},
		{"HangSeconds", f(t.HangSeconds), "seeds-002-004 F13: flat link counters with a busy GPU for more than 60 s; PyTorch's NCCL watchdog waits 10 minutes by default, so the finding comes well before the job dies."},
		{"StalledPeersSeconds", f(t.StalledPeersSeconds), "with every rank of the job visible on the node stuck (stopped, exited, in D state, or itself waiting without progress) nothing here can end the wait; half of HangSeconds, as issue 37 asks, and still under PyTorch's 10-minute watchdog by far. A rank waited on that is busy on the host (a checkpoint, an evaluation) never makes the collective stalled."},
		{"WaitNamedSeconds", f(t.WaitNamedSeconds), "three readings of a kernel without progress: a collective step over NVLink takes 10–300 ms, so three flat seconds with a rank of the job stopped or gone is that rank's doing, named before the span's means (10 s) turn."},
		{"StragglerRatio", f(t.StragglerRatio), "proposal: in a synchronous job all GPUs wait for the slowest; a GPU at < 60% of the median SM activity of its peers stands out beyond sampling noise (gauge vs counter means agreed within 0.003 on the H200)."},
		{"Hysteresis", f(float64(t.Hysteresis)), "analyses in a row a new class must win before it replaces the old one: a verdict follows a workload change within SpanSeconds plus two sampling intervals, and one noisy interval cannot flip it."},
		{"SpanSeconds", f(t.SpanSeconds), "the means are taken over this span: long enough to cover several training steps (steps of 0.1–2 s), short enough to follow a phase change."},
	}
}
