package analyzers

import (
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpudiag/gpudiag/sample"
)

// ndr is an active 400 Gb/s InfiniBand port moving tx and rx bytes/s.
func ndr(name string, tx, rx float64) RDMAPort {
	nan := math.NaN()
	return RDMAPort{Name: name, LinkLayer: "InfiniBand", Active: true, RateBytes: 50 * gb, PeakRateBytes: 50 * gb,
		TxBytes: tx, RxBytes: rx, XmitWaitShare: 0, ECNMarkedShare: nan, CNPHandledPerSecond: nan}
}

// fabricNode is a node with the given ports and a loaded peer-memory module.
func fabricNode(ports ...RDMAPort) NodeWindow {
	n := NaNNode()
	n.RDMAPorts, n.RDMAMeasured, n.GPUDirectModule = ports, true, "nvidia_peermem"
	return n
}

// gpuOn places GPU idx with its NICs (port index → distance); NCCL names
// the ports in viaNCCL.
func gpuOn(w GPUWindow, idx int, distances map[int]string, viaNCCL ...int) GPUWindow {
	w.Index = idx
	for p := 0; p < len(distances); p++ {
		w.NICs = append(w.NICs, GPUNIC{Port: p, Distance: distances[p], NCCL: slices.Contains(viaNCCL, p)})
	}
	slices.SortStableFunc(w.NICs, func(a, b GPUNIC) int {
		return sample.PCIDistanceRank(a.Distance) - sample.PCIDistanceRank(b.Distance)
	})
	return w
}

func analyzeFabric(t *testing.T, n NodeWindow, gpus ...GPUWindow) Diagnosis {
	t.Helper()
	return Analyze(Input{Now: time.Unix(1000, 0), SpanSeconds: 10, GPUs: gpus, Node: n}, nil, DefaultThresholds)
}

func findingChecks(d Diagnosis) []string {
	var out []string
	for _, f := range d.Findings {
		out = append(out, f.Check)
	}
	return out
}

// The GPU side of a GDR all-reduce is the SHM all-reduce's signature
// (symmetric PCIe, idle SMs): with the HCA under the GPU's switch moving
// the same bytes it is communication over InfiniBand, never pcie_peer_shm.
func TestRDMATrafficIsNetworkNotSHM(t *testing.T) {
	gpu := h200(0.03, 0, 0.01, 1, 46*gb, 46*gb, 0, 0)
	d := analyzeFabric(t, fabricNode(ndr("mlx5_0/1", 46*gb, 46*gb), ndr("mlx5_1/1", 0, 0)),
		gpuOn(gpu, 0, map[int]string{0: sample.LinkPIX, 1: sample.LinkSYS}))
	v := d.GPUs[0]
	if v.Class != ClassCommunication || v.SubKind != SubInfiniBand {
		t.Fatalf("%s/%s: %s", v.Class, v.SubKind, v.Summary)
	}
	if !strings.Contains(v.Summary, "mlx5_0/1") || v.Fix != saturatedFix {
		t.Errorf("summary %q fix %q", v.Summary, v.Fix)
	}
	if !slices.Contains(findingChecks(d), "rdma_port_saturated") {
		t.Errorf("findings %v lack rdma_port_saturated", findingChecks(d))
	}
	// Without the HCA's counters the same GPU reads as before.
	if v := ClassifyGPU(gpu, NaNNode(), DefaultThresholds); v.SubKind != SubPCIePeerSHM {
		t.Errorf("without HCAs: %s", v.SubKind)
	}
	// A port moving a fifth of the GPU's PCIe traffic does not explain it.
	d = analyzeFabric(t, fabricNode(ndr("mlx5_0/1", 9*gb, 9*gb)), gpuOn(gpu, 0, map[int]string{0: sample.LinkPIX}))
	if d.GPUs[0].SubKind != SubPCIePeerSHM {
		t.Errorf("port carrying 20%% of PCIe: %s", d.GPUs[0].SubKind)
	}
}

func TestRDMAHostStagedAndDegraded(t *testing.T) {
	gpu := h200(0.03, 0, 0.01, 1, 17*gb, 17*gb, 0, 0)
	gpu.NCCLNetGDR = "host"
	d := analyzeFabric(t, fabricNode(ndr("mlx5_0/1", 17*gb, 17*gb)), gpuOn(gpu, 0, map[int]string{0: sample.LinkPIX}, 0))
	if v := d.GPUs[0]; v.SubKind != SubInfiniBand || v.Fix != gdrFix || !strings.Contains(v.Summary, "host memory") {
		t.Errorf("host-staged: %s %q %q", v.SubKind, v.Summary, v.Fix)
	}
	gpu.NCCLNetGDR = ""
	n := fabricNode(ndr("mlx5_0/1", 17*gb, 17*gb))
	n.GPUDirectModule = ""
	if v := analyzeFabric(t, n, gpuOn(gpu, 0, map[int]string{0: sample.LinkPIX})).GPUs[0]; v.Fix != gdrFix {
		t.Errorf("no module, no log: fix %q", v.Fix)
	}
	slow := ndr("mlx5_0/1", 24*gb, 24*gb)
	slow.RateBytes, slow.Degraded = 25*gb, true
	if v := analyzeFabric(t, fabricNode(slow), gpuOn(h200(0.03, 0, 0, 1, 24*gb, 24*gb, 0, 0), 0, map[int]string{0: sample.LinkPIX})).GPUs[0]; v.Fix != degradedPortFix {
		t.Errorf("degraded port: %s fix %q", v.SubKind, v.Fix)
	}
}

func TestRoCECongestion(t *testing.T) {
	p := ndr("mlx5_0/1", 20*gb, 20*gb)
	p.LinkLayer, p.ECNMarkedShare, p.CNPHandledPerSecond, p.XmitWaitShare = "Ethernet", 0.05, 20000, math.NaN()
	d := analyzeFabric(t, fabricNode(p), gpuOn(h200(0.03, 0, 0, 1, 20*gb, 20*gb, 0, 0), 0, map[int]string{0: sample.LinkPIX}))
	if d.GPUs[0].SubKind != SubRoCE {
		t.Errorf("sub-kind %s", d.GPUs[0].SubKind)
	}
	if !slices.Contains(findingChecks(d), "rdma_congestion") {
		t.Errorf("findings %v", findingChecks(d))
	}
	ib := ndr("mlx5_0/1", 20*gb, 20*gb)
	ib.XmitWaitShare = 0.3
	if d := analyzeFabric(t, fabricNode(ib), gpuOn(h200(0.03, 0, 0, 1, 20*gb, 20*gb, 0, 0), 0, map[int]string{0: sample.LinkPIX})); !slices.Contains(findingChecks(d), "rdma_congestion") {
		t.Errorf("xmit_wait 30%%: findings %v", findingChecks(d))
	}
	ib.XmitWaitShare = 0.02
	if d := analyzeFabric(t, fabricNode(ib), gpuOn(h200(0.03, 0, 0, 1, 20*gb, 20*gb, 0, 0), 0, map[int]string{0: sample.LinkPIX})); slices.Contains(findingChecks(d), "rdma_congestion") {
		t.Errorf("xmit_wait 2%%: findings %v", findingChecks(d))
	}
}

func TestRemoteNICAndRailImbalance(t *testing.T) {
	g0 := gpuOn(h200(0.03, 0, 0, 1, 20*gb, 20*gb, 0, 0), 0, map[int]string{0: sample.LinkPIX, 1: sample.LinkSYS}, 1)
	g1 := gpuOn(h200(0.03, 0, 0, 1, 20*gb, 20*gb, 0, 0), 1, map[int]string{0: sample.LinkSYS, 1: sample.LinkPIX}, 1)
	d := analyzeFabric(t, fabricNode(ndr("mlx5_0/1", 0.01*gb, 0.01*gb), ndr("mlx5_1/1", 40*gb, 40*gb)), g0, g1)
	checks := findingChecks(d)
	if !slices.Contains(checks, "rdma_nic_remote") || !slices.Contains(checks, "rdma_rail_imbalance") {
		t.Fatalf("findings %v", checks)
	}
	for _, f := range d.Findings {
		if f.Check == "rdma_nic_remote" && (f.GPU == nil || *f.GPU != 0 || f.Device != "mlx5_1/1") {
			t.Errorf("remote NIC finding about GPU %v %s", f.GPU, f.Device)
		}
	}
	// Each GPU on its own nearest rail: nothing to say.
	g0 = gpuOn(h200(0.03, 0, 0, 1, 20*gb, 20*gb, 0, 0), 0, map[int]string{0: sample.LinkPIX, 1: sample.LinkSYS})
	g1 = gpuOn(h200(0.03, 0, 0, 1, 20*gb, 20*gb, 0, 0), 1, map[int]string{0: sample.LinkSYS, 1: sample.LinkPIX})
	d = analyzeFabric(t, fabricNode(ndr("mlx5_0/1", 20*gb, 20*gb), ndr("mlx5_1/1", 20*gb, 20*gb)), g0, g1)
	if c := findingChecks(d); slices.Contains(c, "rdma_nic_remote") || slices.Contains(c, "rdma_rail_imbalance") {
		t.Errorf("balanced rails: findings %v", c)
	}
}

// spinning is a GPU holding a collective kernel for secs seconds with no
// link traffic, readings every second up to now.
func spinning(idx int, secs int, now time.Time) GPUWindow {
	w := h200(0.12, 0, 0, 1, 0.0003*gb, 0.0003*gb, 0, 0)
	w.Index, w.NCCL = idx, true
	w.Recent = func(yield func(GPUPoint) bool) {
		for i := 0; i <= secs; i++ {
			if !yield(GPUPoint{Time: now.Add(-time.Duration(i) * time.Second), Utilization: 1, SMActive: 0.12, PCIe: 0.0006 * gb, NVLink: 0}) {
				return
			}
		}
	}
	return w
}

func TestCollectiveStalled(t *testing.T) {
	now := time.Unix(1000, 0)
	stopped := h200(0, 0, 0, 0, 0, 0, 0, 0)
	stopped.Index = 1
	in := Input{Now: now, SpanSeconds: 10, GPUs: []GPUWindow{spinning(0, 90, now), stopped}, Node: NaNNode()}
	in.Audit.Processes = &sample.GPUProcesses{GPUs: []sample.GPUProcessGroup{
		{GPU: 0, Processes: []sample.GPUProcess{{PID: 100, Comm: "python", State: "R", OnGPU: true}}},
		{GPU: 1, Processes: []sample.GPUProcess{{PID: 101, Comm: "python", State: "T", OnGPU: true}}}}}
	d := Analyze(in, nil, DefaultThresholds)
	if v := d.GPUs[0]; v.Class != ClassCommunication || v.SubKind != SubCollectiveStalled || !strings.Contains(v.Summary, "since 1970-01-01T00:15:10Z") {
		t.Fatalf("%s/%s: %s", v.Class, v.SubKind, v.Summary)
	}
	i := slices.IndexFunc(d.Findings, func(f Finding) bool { return f.Check == "nccl_collective_stalled" })
	if i < 0 || d.Findings[i].Severity != SeverityCritical || !strings.Contains(d.Findings[i].Summary, "pid 101 (python) on GPU 1 is stopped") {
		t.Fatalf("findings %+v", d.Findings)
	}
	// Thirty seconds without progress is not yet a hang; on a job known to
	// span nodes it is waiting on them.
	short := spinning(0, 30, now)
	if v := ClassifyGPU(short, NaNNode(), DefaultThresholds); v.SubKind == SubCollectiveStalled {
		t.Errorf("30 s: %s", v.SubKind)
	}
	short.JobNodes = 8
	if v := ClassifyGPU(short, NaNNode(), DefaultThresholds); v.SubKind != SubPeerWait {
		t.Errorf("30 s on 8 nodes: %s", v.SubKind)
	}
	// Traffic that still moves is no hang, whatever its duration.
	moving := spinning(0, 90, now)
	moving.ProcessTCPBytes = 0.2 * gb
	if v := ClassifyGPU(moving, NaNNode(), DefaultThresholds); v.SubKind != SubPeerWait {
		t.Errorf("moving: %s", v.SubKind)
	}
	// A kernel that spins without NCCL (torch.cuda._sleep, a persistent
	// kernel) is no collective.
	alone := spinning(0, 90, now)
	alone.NCCL = false
	if v := ClassifyGPU(alone, NaNNode(), DefaultThresholds); v.Class == ClassCommunication {
		t.Errorf("a spinning kernel without NCCL: %s/%s", v.Class, v.SubKind)
	}
	// An idle GPU holds no kernel: no stall, no waiting.
	idle := h200(0, 0, 0, 0, 0, 0, 0, 0)
	idle.ComputeProcesses, idle.JobNodes = 0, 8
	if v := ClassifyGPU(idle, NaNNode(), DefaultThresholds); v.Class != ClassIdle {
		t.Errorf("idle: %s/%s", v.Class, v.SubKind)
	}
}

// A GPU in a collective whose own port moves 2% of its line rate waits on
// slower ranks; a compute-bound GPU with the same light traffic computes.
func TestPeerWaitAndComputeWithLightFabric(t *testing.T) {
	wait := h200(0.10, 0, 0, 0.95, 1*gb, 1*gb, 0, 0)
	wait.JobNodes, wait.NCCL = 8, true
	d := analyzeFabric(t, fabricNode(ndr("mlx5_0/1", 1*gb, 1*gb)), gpuOn(wait, 0, map[int]string{0: sample.LinkPIX}))
	if v := d.GPUs[0]; v.SubKind != SubPeerWait || !strings.Contains(v.Summary, "8 nodes") {
		t.Errorf("peer wait: %s %s", v.SubKind, v.Summary)
	}
	compute := h200(0.96, 0.9, 0.2, 1, 1.5*gb, 1.5*gb, 0, 0)
	d = analyzeFabric(t, fabricNode(ndr("mlx5_0/1", 1.5*gb, 1.5*gb)), gpuOn(compute, 0, map[int]string{0: sample.LinkPIX}))
	if v := d.GPUs[0]; v.Class != ClassCompute || len(findingChecks(d)) != 0 {
		t.Errorf("compute with light fabric: %s/%s findings %v", v.Class, v.SubKind, findingChecks(d))
	}
}

// The stall rule reads the GPU's readings newest first and stops at the
// first that is not waiting: a stall that began 90 s ago is dated from its
// start, and the ten minutes of busy readings before it are never asked for.
func TestStalledRunReadBackToItsStart(t *testing.T) {
	now := time.Unix(1000, 0)
	w := h200(0.12, 0, 0, 1, 0.0003*gb, 0.0003*gb, 0, 0)
	w.NCCL = true
	asked := 0
	w.Recent = func(yield func(GPUPoint) bool) {
		for i := 0; i <= 690; i++ {
			p := GPUPoint{Time: now.Add(-time.Duration(i) * time.Second), Utilization: 1, SMActive: 0.12, PCIe: 0.0006 * gb}
			if i > 90 {
				p.SMActive = 0.9 // computing before the stall
			}
			asked++
			if !yield(p) {
				return
			}
		}
	}
	v := ClassifyGPU(w, NaNNode(), DefaultThresholds)
	if v.SubKind != SubCollectiveStalled || !strings.Contains(v.Summary, "for 90 s") {
		t.Fatalf("%s/%s: %s", v.Class, v.SubKind, v.Summary)
	}
	if asked > 92 {
		t.Errorf("%d readings asked for; want the 91 of the stall and the one before it", asked)
	}
}

// A port that is down while the node's NCCL ranks name it in NCCL_IB_HCA
// is a lost rail; a port no rank names, one excluded by "^", or one an
// administrator disabled is not.
func TestAuditIBPortDown(t *testing.T) {
	ports := func(state, phys string) *sample.InfiniBand {
		return &sample.InfiniBand{Ports: []sample.InfiniBandPort{
			{Device: "mlx5_0", Port: 1, State: "ACTIVE", StateID: 4, PhysState: "LinkUp"},
			{Device: "mlx5_1", Port: 1, State: state, StateID: 1, PhysState: phys},
		}}
	}
	ranks := func(hca string) *sample.NCCLHostProcesses {
		return &sample.NCCLHostProcesses{Processes: []sample.NCCLHostProcess{ncclRank(1, "a", []int{0}, "NCCL_IB_HCA", hca), ncclRank(2, "a", []int{1}, "NCCL_IB_HCA", hca)}}
	}
	for _, tc := range []struct {
		name, want, summary string
		ib                  *sample.InfiniBand
		procs               *sample.NCCLHostProcesses
	}{
		{name: "a named rail polling", ib: ports("DOWN", "Polling"), procs: ranks("mlx5_0,mlx5_1"),
			want: "ib_port_down:warning", summary: "port mlx5_1/1 is DOWN (Polling), but NCCL ranks on the node (pid 1, pid 2) are set to use it"},
		{name: "a prefix names every HCA", ib: ports("DOWN", "Polling"), procs: ranks("mlx5"), want: "ib_port_down:warning", summary: "NCCL_IB_HCA=mlx5"},
		{name: "named with another port", ib: ports("DOWN", "Polling"), procs: ranks("mlx5_0:1,mlx5_1:2")},
		{name: "excluded", ib: ports("DOWN", "Polling"), procs: ranks("^mlx5_1")},
		{name: "exact names, not this one", ib: ports("DOWN", "Polling"), procs: ranks("=mlx5_0,mlx5_10")},
		{name: "disabled on purpose", ib: ports("DOWN", "Disabled"), procs: ranks("mlx5_0,mlx5_1")},
		{name: "no rank names HCAs", ib: ports("DOWN", "Polling"), procs: &sample.NCCLHostProcesses{Processes: []sample.NCCLHostProcess{ncclRank(1, "a", []int{0})}}},
		{name: "every named port active", ib: &sample.InfiniBand{Ports: ports("DOWN", "Polling").Ports[:1]}, procs: ranks("mlx5_0,mlx5_1")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []Finding
			for _, f := range Audit(AuditInput{LastIB: tc.ib, NCCLProcesses: tc.procs}) {
				if f.Check == "ib_port_down" {
					got = append(got, f)
				}
			}
			if checks(got) != tc.want {
				t.Fatalf("findings %q; want %q", checks(got), tc.want)
			}
			if tc.want != "" && (!strings.Contains(got[0].Summary, tc.summary) || got[0].Device != "mlx5_1/1") {
				t.Errorf("finding %+v lacks %q", got[0], tc.summary)
			}
		})
	}
}
