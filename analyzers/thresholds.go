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
	// CPUPressure: PSI cpu "some" share marking a CPU-starved node.
	CPUPressure float64
	// IOPressure: PSI io "some" share marking an I/O-starved node.
	IOPressure float64
	// IOWaitThreads: share of a GPU process's threads in D state.
	IOWaitThreads float64
	// DiskInFlight: mean block requests of a GPU's processes and their
	// descendants outstanding on one disk (eBPF) marking a job that waits
	// on that disk.
	DiskInFlight float64
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
	SMActiveCompute:    0.5,
	SMActiveIdle:       0.05,
	SMActiveStarved:    0.3,
	TensorActive:       0.3,
	DRAMActive:         0.5,
	NVLinkBusyFraction: 0.1,
	NVLinkBusyBytes:    45e9,
	PCIePeerBytes:      5e9,
	PCIePeerSymmetry:   0.5,
	H2DBytes:           5e9,
	H2DAsymmetry:       4,
	NetworkBytes:       0.5e9,
	ProcessCPUCores:    0.8,
	CPUPressure:        0.2,
	IOPressure:         0.2,
	IOWaitThreads:      0.25,
	DiskInFlight:       1,
	StragglerRatio:     0.6,
	Hysteresis:         2,
	SpanSeconds:        10,
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
		{"CPUPressure", f(t.CPUPressure), "PSI cpu some share; proposal from seed-001 row 16 (CPU PSI some > 20% with workers contending); to be confirmed on recorded traces."},
		{"IOPressure", f(t.IOPressure), "PSI io some share; a storage-bound reader showed io some ≈ full ≥ 0.7 (H200 host); seed-001 row 14 proposes 10%."},
		{"IOWaitThreads", f(t.IOWaitThreads), "the storage-bound reader sat in D state; a quarter of the process's threads leaves room for loader pools that are partly busy."},
		{"DiskInFlight", f(t.DiskInFlight), "mean requests of the GPU's processes and descendants outstanding on one disk (eBPF wait time per second): at 1 the job has a read waiting on that disk at every moment, while its GPU idles. On the H200 host a loop that read with direct I/O for part of each step (7.5 GB in 30 s) averaged 0.19. A proposal to be confirmed on recorded traces."},
		{"StragglerRatio", f(t.StragglerRatio), "proposal: in a synchronous job all GPUs wait for the slowest; a GPU at < 60% of the median SM activity of its peers stands out beyond sampling noise (gauge vs counter means agreed within 0.003 on the H200)."},
		{"Hysteresis", f(float64(t.Hysteresis)), "analyses in a row a new class must win before it replaces the old one: a verdict follows a workload change within SpanSeconds plus two sampling intervals, and one noisy interval cannot flip it."},
		{"SpanSeconds", f(t.SpanSeconds), "the means are taken over this span: long enough to cover several training steps (steps of 0.1–2 s), short enough to follow a phase change."},
	}
}
