package analyzers

import (
	"iter"
	"math"
	"strconv"
	"time"

	"github.com/gpudiag/gpudiag/sample"
)

// Input is what the analyzers see: per-GPU means over the analysis span and
// node-wide host evidence. Values that could not be measured are NaN, and a
// rule that needs them does not fire.
type Input struct {
	Now         time.Time
	SpanSeconds float64
	GPUs        []GPUWindow
	Node        NodeWindow
	// Audit holds the samples the configuration and health checks read;
	// Busy is filled by Analyze from the GPU windows.
	Audit AuditInput
	// Jobs says who runs on each GPU in use, GPU order.
	Jobs []GPUJob
	// Ranks are the processes the GPUs ran in the window: those the
	// driver lists in the newest GPU reading, and those it listed earlier
	// and no longer does. The GPUs are grouped into jobs from them and
	// from Jobs, and a GPU waiting in a collective names from them the
	// ranks it waits for.
	Ranks []Rank
}

// Rank is one process that ran on a GPU of the node in the window.
type Rank struct {
	PID  int
	PPID int // 0 unknown
	Comm string
	// GPU is the GPU the driver listed it on last.
	GPU int
	// State is the newest /proc state letter read for it (R, S, D, T,
	// Z), "" unknown; a rank gone keeps its last.
	State string
	// Gone: the driver listed it earlier in the window and lists it on
	// no GPU now; LastSeen is the newest reading that listed it.
	Gone     bool
	LastSeen time.Time
	// CPUCores is its own CPU use in the newest reading of its
	// processes, IOWait the share of its threads in D state; NaN unknown.
	CPUCores, IOWait float64
	// Job is its job identity, "<source>:<id>" (a Slurm job, a pod, a
	// torchrun run), "" none known. WorldSize and RankID are WORLD_SIZE
	// and RANK of its environment, 0 and -1 when unknown.
	Job       string
	WorldSize int
	RankID    int
	// Comms are the NCCL communicators its log shows it in.
	Comms []string
}

// GPUWindow summarises one GPU over the span.
type GPUWindow struct {
	Index   int
	UUID    string
	Samples int
	// Up is the GPU's state in the newest sample; Error says why it is down.
	Up    bool
	Error string
	// ActivitySource is gpm or dcgm when SM activity is measured.
	ActivitySource sample.ActivitySource

	// Means over the span: ratios 0–1 and bytes/s.
	SMActive, TensorActive, DRAMActive, Utilization float64
	PCIeTx, PCIeRx, NVLinkTx, NVLinkRx              float64

	// Capacities, one way, bytes/s; NaN when unknown.
	PCIeCapacity, NVLinkCapacity float64
	NVLinksUp                    int

	// JobStart is the time of the GPU's first reading listing a compute
	// process after one that listed none, when that reading is inside the
	// span: the GPU's means, and the host evidence of its processes, start
	// there. Zero when the GPU's job began before the span.
	JobStart time.Time

	// Newest readings.
	ComputeProcesses int
	MemoryUsedBytes  float64

	// Host evidence for this GPU's processes; NaN when not measured.
	ProcessCPUCores  float64 // CPU cores used by the processes and their children
	ProcessIOWait    float64 // share of their threads in D state
	ProcessReadBytes float64 // bytes/s read from storage
	ProcessTCPBytes  float64 // bytes/s over TCP, both ways
	// ProcessCPUThrottled is the share of CFS periods in which the
	// processes' cgroups ran out of CPU quota; ProcessCPUQuota that quota
	// in CPUs (newest reading).
	ProcessCPUThrottled float64
	ProcessCPUQuota     float64
	// DiskWaits is where the processes and their descendants wait on
	// block I/O (eBPF collector), busiest disk first; empty when not
	// measured.
	DiskWaits      []DiskWait
	NCCLFallbacks  []string
	NCCLTransports []string
	// NCCLEnv are the NCCL settings the GPU's processes make, from NCCL's
	// log and their environment: a fix names only variables that are set.
	NCCLEnv            []sample.NCCLEnv
	RemoteMemoryRatio  float64
	CPUsOffNodeRatio   float64
	HostEvidenceSource string

	// The inter-node path. NICs are the node's active RDMA ports (and
	// any NCCL's log names for the rank), nearest to the GPU first, those
	// the log names for the rank flagged. NCCLNetGDR is how NCCL's log says the rank's network
	// traffic moves: "gdr" (GPUDirect RDMA), "host" (staged through host
	// memory) or "" unknown. JobNodes is the largest node count of the
	// rank's communicators, 0 when unknown.
	NICs       []GPUNIC
	NCCLNetGDR string
	JobNodes   int
	// NCCL says a process of the GPU uses NCCL: its log names the GPU, or
	// the process maps libnccl. Only then is a waiting kernel taken for a
	// collective.
	NCCL bool
	// Recent gives the GPU's readings of the whole window, newest first,
	// for what needs more than the span: how long a collective has made
	// no progress. A rule ranges over it and stops where it has seen
	// enough, so an analysis a second does not copy ten minutes of
	// readings per GPU. Nil when unknown.
	Recent iter.Seq[GPUPoint]
	// StorageNote names the filesystem the GPU's data comes from and the
	// settings of the disk it waits on, for the storage_read summary.
	StorageNote string

	// rdma is what the ports the rank uses carry (attributeRDMA).
	rdma rdmaUse
}

// GPUNIC is one RDMA port a GPU's rank may use.
type GPUNIC struct {
	// Port indexes NodeWindow.RDMAPorts.
	Port int
	// Distance is the PCIe path between GPU and HCA (sample.LinkPIX …
	// LinkSYS), "" unknown.
	Distance string
	// NCCL is set when NCCL's log shows the rank's connections on it.
	NCCL bool
}

// GPUPoint is one reading of a GPU: NVML utilization, SM activity, and
// link traffic (PCIe and NVLink, both directions summed), NaN unmeasured.
type GPUPoint struct {
	Time                                time.Time
	Utilization, SMActive, PCIe, NVLink float64
}

// RDMAPort is one InfiniBand or RoCE port over the span; rates are means,
// NaN when not measured (the port's first reading, or a counter the HCA
// lacks).
type RDMAPort struct {
	Name      string // mlx5_0/1
	LinkLayer string // InfiniBand, or Ethernet for RoCE
	Active    bool
	// RateBytes is the line rate, one way; PeakRateBytes the fastest
	// active port of the same link layer and HCA model on the node.
	RateBytes, PeakRateBytes float64
	Degraded                 bool
	NUMANode                 int
	TxBytes, RxBytes         float64
	// XmitWaitShare is the share of the line rate lost waiting for
	// credits (InfiniBand port_xmit_wait × 8 bytes per tick over the line
	// rate).
	XmitWaitShare float64
	// ECNMarkedShare is ECN-marked RoCE packets over packets received;
	// CNPHandledPerSecond the congestion notifications that cut this
	// sender's rate.
	ECNMarkedShare      float64
	CNPHandledPerSecond float64
}

// Bytes is the busier direction's throughput.
func (p RDMAPort) Bytes() float64 { return maxNaN(p.TxBytes, p.RxBytes) }

// DiskWait is a GPU's processes' block I/O on one disk over the span.
type DiskWait struct {
	Device string
	// InFlight is the mean number of their requests outstanding on the
	// disk, from creation to completion: 1 means the job always waits on
	// it.
	InFlight       float64
	BytesPerSecond float64
}

// NodeWindow is node-wide host evidence, NaN when not measured.
type NodeWindow struct {
	CPUPressure        float64 // PSI cpu some share
	IOPressure         float64 // PSI io some share
	IOFull             float64 // PSI io full share
	DiskReadBytes      float64 // bytes/s, busiest disk
	DiskWriteBytes     float64 // bytes/s, the disk that writes most
	SwapPagesPerSecond float64
	// RDMAPorts are the node's InfiniBand and RoCE ports; GPUDirectModule
	// names the loaded peer-memory module ("" none), meaningful when
	// RDMAMeasured (the infiniband collector gave a reading).
	RDMAPorts       []RDMAPort
	GPUDirectModule string
	RDMAMeasured    bool
}

// NaNNode returns a NodeWindow with nothing measured.
func NaNNode() NodeWindow {
	n := math.NaN()
	return NodeWindow{CPUPressure: n, IOPressure: n, IOFull: n, DiskReadBytes: n, DiskWriteBytes: n, SwapPagesPerSecond: n}
}

// noRDMADevice says the infiniband collector read the node and found no
// InfiniBand or RoCE port: inter-node traffic can only go over TCP.
func (n NodeWindow) noRDMADevice() bool { return n.RDMAMeasured && len(n.RDMAPorts) == 0 }

// SummariseGPUs computes each GPU's means over the samples of the span that
// starts at since, weighting each by the part of its interval inside the
// span (sample.SpanWeight), so that an irregular clock does not bias the mean and
// the span's first reading, whose rates cover the interval before it, does
// not reach back before the span. A reading without an interval (the
// collector's or the GPU's first) carries point values only and weighs 1.
// Each GPU is followed by UUID from its own readings: one met in the
// middle of the span is averaged over the readings that list it.
func SummariseGPUs(samples []sample.Timed[*sample.GPUs], since time.Time) []GPUWindow {
	if len(samples) == 0 {
		return nil
	}
	type acc struct {
		w     GPUWindow
		means [8]sample.SpanMean
		// idleBefore: the GPU's previous reading listed no compute
		// process.
		idleBefore bool
	}
	fields := [8]sample.Field{sample.SMActive, sample.TensorActive, sample.DRAMActive, sample.Utilization,
		sample.PCIeTxBytesPerSecond, sample.PCIeRxBytesPerSecond, sample.NVLinkTxBytesPerSecond, sample.NVLinkRxBytesPerSecond}
	byKey := map[string]*acc{}
	var order []string
	for _, ts := range samples {
		for i := range ts.Sample.Devices {
			d := &ts.Sample.Devices[i]
			key := d.UUID
			if key == "" {
				key = "index:" + strconv.Itoa(d.Index)
			}
			a, ok := byKey[key]
			if !ok {
				a = &acc{w: GPUWindow{Index: d.Index, UUID: d.UUID}}
				byKey[key] = a
				order = append(order, key)
			}
			a.w.Samples++
			a.w.Up, a.w.Error = d.Up, d.Error
			if !d.Up {
				continue
			}
			if d.ActivitySource != "" {
				a.w.ActivitySource = d.ActivitySource
			}
			weight := 1.0
			if d.IntervalSeconds > 0 {
				weight = sample.SpanWeight(ts.Time, since, d.IntervalSeconds)
			}
			// A job that started inside the span is judged from its start:
			// the idle readings before its first process would dilute its
			// means and delay its verdict by up to a span.
			// A reading without the process count (the driver's query
			// failed) says nothing either way.
			if procs, ok := d.Values.Get(sample.ComputeProcesses); ok {
				if procs > 0 && a.idleBefore {
					a.means = [8]sample.SpanMean{}
					a.w.JobStart = ts.Time
				}
				a.idleBefore = procs == 0
			}
			for k, f := range fields {
				if x, ok := d.Values.Get(f); ok {
					a.means[k].Add(x, weight)
				}
			}
			a.w.ComputeProcesses = int(valueOr(d.Values, sample.ComputeProcesses, 0))
			a.w.MemoryUsedBytes = valueOr(d.Values, sample.MemoryUsedBytes, math.NaN())
			up := 0
			for _, l := range d.Links {
				if l.Up {
					up++
				}
			}
			a.w.NVLinksUp = up
		}
	}
	out := make([]GPUWindow, 0, len(order))
	for _, key := range order {
		a := byKey[key]
		means := [8]float64{}
		for k := range means {
			means[k] = a.means[k].MeanOr(math.NaN())
		}
		w := a.w
		w.SMActive, w.TensorActive, w.DRAMActive, w.Utilization = means[0], means[1], means[2], means[3]
		w.PCIeTx, w.PCIeRx, w.NVLinkTx, w.NVLinkRx = means[4], means[5], means[6], means[7]
		w.PCIeCapacity, w.NVLinkCapacity = math.NaN(), math.NaN()
		w.ProcessCPUCores, w.ProcessIOWait, w.ProcessReadBytes, w.ProcessTCPBytes = math.NaN(), math.NaN(), math.NaN(), math.NaN()
		w.ProcessCPUThrottled, w.ProcessCPUQuota = math.NaN(), math.NaN()
		w.RemoteMemoryRatio, w.CPUsOffNodeRatio = math.NaN(), math.NaN()
		out = append(out, w)
	}
	return out
}

func valueOr(v sample.Values, f sample.Field, def float64) float64 {
	if x, ok := v.Get(f); ok {
		return x
	}
	return def
}

func trimFloat(x float64) string {
	return strconv.FormatFloat(x, 'f', -1, 64)
}
