// Package analyzers turns an Input into a diagnosis: for each GPU and for the
// node, what bounds it (compute, communication, I/O, host, or idle), how sure
// we are, the evidence, and what to do about it.
//
// Analyzers are pure functions: they read an Input (built from the sample
// window by diagnose.FromWindow) and the previous Diagnosis (for
// hysteresis), and return a new Diagnosis. No I/O, no clock of their own, no
// package of this module but sample; everything is table-testable.
package analyzers

import (
	"time"

	"github.com/gpudiag/gpudiag/sample"
)

// SchemaVersion is the version of the Diagnosis JSON schema; bump it on any
// incompatible change (docs/diagnosis.md documents each version).
const SchemaVersion = 1

// Class is what bounds a GPU or the node.
type Class string

const (
	// ClassCompute: the SMs are busy; the GPU is doing the work.
	ClassCompute Class = "compute"
	// ClassCommunication: collectives or peer copies dominate (NVLink,
	// PCIe peer or shared memory, network).
	ClassCommunication Class = "communication"
	// ClassIO: the GPU waits on data: storage reads or host→device copies.
	ClassIO Class = "io"
	// ClassHost: the GPU waits on the host CPU (input pipeline, GIL, quota).
	ClassHost Class = "host"
	// ClassIdle: nothing runs, or a process holds the GPU without using it
	// and no host evidence says why.
	ClassIdle Class = "idle"
	// ClassUnknown: not enough data (no activity source, GPU down, too few
	// samples).
	ClassUnknown Class = "unknown"
)

// Classes lists every class, in the order metrics and pages show them.
var Classes = []Class{ClassCompute, ClassCommunication, ClassIO, ClassHost, ClassIdle, ClassUnknown}

// Sub-kinds refine a class.
const (
	SubTensor          = "tensor"
	SubMemoryBandwidth = "memory_bandwidth"
	SubOtherSM         = "other_sm"
	SubNVLink          = "nvlink"
	SubPCIePeerSHM     = "pcie_peer_shm"
	SubNetwork         = "network"
	// SubInfiniBand and SubRoCE: collectives over RDMA, by the HCA port's
	// link layer.
	SubInfiniBand = "infiniband"
	SubRoCE       = "roce"
	// SubCollectiveStalled: a collective has made no progress for
	// HangSeconds; SubPeerWait: the GPU waits in collectives for ranks
	// elsewhere while its own links are far from busy.
	SubCollectiveStalled = "collective_stalled"
	SubPeerWait          = "peer_wait"
	// SubCollectiveWait: the GPU waits in a collective for ranks of its
	// job on this node (or not visible at all): the verdict names them.
	SubCollectiveWait = "waiting"
	SubStorageRead    = "storage_read"
	// SubStorageWrite: the GPU's processes stream its data out to the
	// host while the node's disks write (a checkpoint).
	SubStorageWrite = "storage_write"
	SubH2DCopy      = "h2d_copy"
	SubCPU          = "cpu"
	// SubCPUQuota refines ClassHost: the GPU's processes are throttled by
	// their container's CPU quota.
	SubCPUQuota  = "cpu_quota"
	SubNoProcess = "no_process"
	SubWaiting   = "process_waiting"
	// SubGPUDown refines ClassUnknown: the GPU did not answer at all.
	SubGPUDown = "gpu_down"
)

// Evidence is one signal that supports a verdict.
type Evidence struct {
	Signal    string  `json:"signal"`
	Value     float64 `json:"value"`
	Unit      string  `json:"unit,omitempty"`
	Op        string  `json:"op"` // ">=", "<", ...
	Threshold float64 `json:"threshold"`
	// SpanSeconds is the span the value is a mean over.
	SpanSeconds float64 `json:"span_seconds"`
}

// Verdict is the diagnosis of one GPU or of the node.
type Verdict struct {
	Class      Class      `json:"class"`
	SubKind    string     `json:"sub_kind,omitempty"`
	Confidence float64    `json:"confidence"`
	Summary    string     `json:"summary"`
	Evidence   []Evidence `json:"evidence"`
	Fix        string     `json:"fix,omitempty"`
	// Since is when this class was first reported without interruption.
	Since time.Time `json:"since"`
	// Pending is a different class the latest samples point to, not yet
	// reported because it has not held for the hysteresis count.
	Pending Class `json:"pending,omitempty"`
}

// GPUVerdict is a verdict for one GPU.
type GPUVerdict struct {
	GPU  int    `json:"gpu"`
	UUID string `json:"uuid,omitempty"`
	Verdict
	// WaitsFor names, for a GPU waiting in a collective, the ranks of its
	// job on this node it waits for.
	WaitsFor []Peer `json:"waits_for,omitempty"`
	// pendingCount counts consecutive analyses that pointed to Pending.
	pendingCount int
}

// Peer is a rank a waiting GPU waits for, as this node sees it.
type Peer struct {
	PID int `json:"pid"`
	// GPU is the GPU the rank runs on (ran on, when it is gone).
	GPU int `json:"gpu"`
	// Rank is RANK of its environment, when known.
	Rank *int `json:"rank,omitempty"`
	// State is how it stands: stopped (state T), zombie, exited (no GPU
	// lists it any more), disk_sleep (D state, not using the CPU), busy
	// (it works, on the GPU or the host: Class and SubKind say on what),
	// idle (it neither works nor waits in the collective) or waiting (in
	// the collective too).
	State string `json:"state"`
	// Class and SubKind are what bounds the peer's GPU, for a busy peer.
	Class   Class  `json:"class,omitempty"`
	SubKind string `json:"sub_kind,omitempty"`
	// Summary says in words what the peer does.
	Summary string `json:"summary"`
}

// Group is the GPUs of one job on this node and what bounds the job here.
type Group struct {
	GPUs []int `json:"gpus"`
	// By says what ties the GPUs: job (a scheduler's or launcher's job
	// identity), nccl (an NCCL communicator), process_tree (ranks of one
	// launcher) or process (one process).
	By string `json:"by"`
	Verdict
	// Cost is the GPU time the job's bottleneck costs, in GPUs: the sum,
	// over its GPUs that are communication-, I/O- or host-bound, of the
	// share of the SMs left idle. The node's headline is the group that
	// costs most.
	Cost float64 `json:"cost"`
}

// Straggler is a GPU whose SM activity is far below its peers' while they
// share a class: in a synchronous job it sets everybody's pace.
type Straggler struct {
	GPU          int     `json:"gpu"`
	SMActive     float64 `json:"sm_active"`
	PeerSMActive float64 `json:"peer_sm_active_median"`
}

// Diagnosis is the analyzers' output for one point in time.
type Diagnosis struct {
	SchemaVersion int          `json:"schema_version"`
	Time          time.Time    `json:"time"`
	SpanSeconds   float64      `json:"span_seconds"`
	Node          Verdict      `json:"node"`
	GPUs          []GPUVerdict `json:"gpus"`
	Stragglers    []Straggler  `json:"stragglers,omitempty"`
	Findings      []Finding    `json:"findings"`
	// Groups are the jobs the GPUs run, each with its verdict, the
	// node's headline first; FreeGPUs counts the GPUs no process holds.
	Groups   []Group `json:"groups,omitempty"`
	FreeGPUs int     `json:"free_gpus"`
	// Jobs says who runs on each GPU in use.
	Jobs   []GPUJob      `json:"jobs,omitempty"`
	Inputs InputsSummary `json:"inputs"`
}

// InputsSummary says what the diagnosis could see, so a reader can tell "no
// problem" from "no data".
type InputsSummary struct {
	GPUSamples     int    `json:"gpu_samples"`
	ActivitySource string `json:"activity_source,omitempty"`
	HostEvidence   bool   `json:"host_evidence"`
	// GPUBackend is the backend of the newest GPU sample (dcgm, nvml);
	// GPUBackendFallback says why it is not the preferred one.
	GPUBackend         string                  `json:"gpu_backend,omitempty"`
	GPUBackendFallback *sample.BackendFallback `json:"gpu_backend_fallback,omitempty"`
}

// Severity of a finding.
type Severity string

const (
	SeverityCritical Severity = "critical"
	SeverityWarning  Severity = "warning"
	SeverityInfo     Severity = "info"
)

// Finding is a configuration or health problem, independent of the verdict.
type Finding struct {
	Check    string   `json:"check"`
	Severity Severity `json:"severity"`
	GPU      *int     `json:"gpu,omitempty"`
	// GPUs lists the GPUs a finding of one cause for the node is about
	// (an NCCL fallback or override that several GPUs' processes share);
	// GPU is set too when it is one.
	GPUs []int `json:"gpus,omitempty"`
	// Device names the device the finding is about (a port, disk,
	// interface); Kind refines the check from a small fixed set (an NCCL
	// fallback kind, an error counter, the backend that failed). Neither
	// ever holds a job or process identity: those are on
	// gpudiag_gpu_job_info only.
	Device   string     `json:"device,omitempty"`
	Kind     string     `json:"kind,omitempty"`
	Summary  string     `json:"summary"`
	Evidence []Evidence `json:"evidence,omitempty"`
	Fix      string     `json:"fix"`
}
