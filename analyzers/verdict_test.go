package analyzers

import (
	"math"
	"strings"
	"testing"
	"time"
)

const gb = 1e9

// h200 returns a GPU window with the H200's capacities (PCIe Gen5 x16 one
// way, NV18) and no host evidence.
func h200(sm, tensor, dram, util, pcieTx, pcieRx, nvTx, nvRx float64) GPUWindow {
	nan := math.NaN()
	return GPUWindow{Index: 0, Samples: 10, Up: true, ActivitySource: "gpm",
		SMActive: sm, TensorActive: tensor, DRAMActive: dram, Utilization: util,
		PCIeTx: pcieTx, PCIeRx: pcieRx, NVLinkTx: nvTx, NVLinkRx: nvRx,
		PCIeCapacity: 63 * gb, NVLinkCapacity: 450 * gb, NVLinksUp: 18, ComputeProcesses: 1,
		ProcessCPUCores: nan, ProcessIOWait: nan, ProcessReadBytes: nan, ProcessTCPBytes: nan,
		RemoteMemoryRatio: nan, CPUsOffNodeRatio: nan}
}

// The signatures measured on real H200s (../shared/research/device-probe.md,
// docs/validation.md). NVML utilization is 93–100% in every busy row and
// never decides.
func TestClassifyMeasuredSignatures(t *testing.T) {
	withHost := func(w GPUWindow, cpu, iowait, tcp float64) GPUWindow {
		w.ProcessCPUCores, w.ProcessIOWait, w.ProcessTCPBytes = cpu, iowait, tcp
		return w
	}
	noLinks := func(w GPUWindow) GPUWindow { w.NVLinksUp, w.NVLinkCapacity = 0, math.NaN(); return w }
	idle := h200(0, 0, 0, 0, 0.0004*gb, 0.0001*gb, 0, 0)
	idle.ComputeProcesses = 0
	node := NaNNode()
	ioNode := NaNNode()
	ioNode.IOPressure = 0.72
	for _, tc := range []struct {
		name      string
		w         GPUWindow
		node      NodeWindow
		class     Class
		sub       string
		minConfid float64
	}{
		{"bf16 GEMM", noLinks(h200(0.88, 0.85, 0.16, 0.93, 0.005*gb, 0.012*gb, 0, 0)), node, ClassCompute, SubTensor, 0.9},
		{"D2D copy", noLinks(h200(0.99, 0, 0.88, 1, 0.01*gb, 0.03*gb, 0, 0)), node, ClassCompute, SubMemoryBandwidth, 0.9},
		{"pinned H2D copy", noLinks(h200(0, 0, 0.01, 1, 3.5*gb, 59.2*gb, 0, 0)), node, ClassIO, SubH2DCopy, 0.9},
		{"idle", noLinks(idle), node, ClassIdle, SubNoProcess, 0.9},
		{"NVLink all-reduce", h200(0.174, 0, 0.247, 0.99, 0.003*gb, 0.010*gb, 289*gb, 289*gb), node, ClassCommunication, SubNVLink, 0.9},
		{"comm-bound DDP step", h200(0.65, 0.3, 0.5, 1, 0.01*gb, 0.01*gb, 200*gb, 200*gb), node, ClassCommunication, SubNVLink, 0.9},
		{"compute-bound DDP", h200(0.9, 0.7, 0.3, 1, 0.01*gb, 0.01*gb, 12*gb, 12*gb), node, ClassCompute, SubTensor, 0.9},
		{"P2P disabled (SHM)", h200(0.03, 0, 0.012, 1, 33.7*gb, 29.5*gb, 0, 0), node, ClassCommunication, SubPCIePeerSHM, 0.9},
		{"sockets", withHost(h200(0.015, 0, 0.001, 1, 4.0*gb, 3.6*gb, 0, 0), 2.0, 0, 3*gb), node, ClassCommunication, SubNetwork, 0.9},
		{"GIL-bound input loop", withHost(h200(0.001, 0, 0, 0, 0.0001*gb, 0.0001*gb, 0, 0), 1.0, 0, 0), node, ClassHost, SubCPU, 0.6},
		{"storage-bound reader", withHost(h200(0.001, 0, 0, 0, 0, 0, 0, 0), 0.1, 0.5, 0), ioNode, ClassIO, SubStorageRead, 0.9},
		{"starved, no host evidence", h200(0.001, 0, 0, 0, 0, 0, 0, 0), node, ClassIdle, SubWaiting, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := ClassifyGPU(tc.w, tc.node, DefaultThresholds)
			if v.Class != tc.class || v.SubKind != tc.sub || v.Confidence < tc.minConfid {
				t.Fatalf("got %s/%s (%.2f): %s; want %s/%s ≥ %.2f", v.Class, v.SubKind, v.Confidence, v.Summary, tc.class, tc.sub, tc.minConfid)
			}
			if len(v.Evidence) == 0 || v.Summary == "" {
				t.Fatalf("verdict without evidence or summary: %+v", v)
			}
			for _, e := range v.Evidence {
				if e.Signal == "nvml_utilization" && e.Op != "info" {
					t.Fatalf("NVML utilization used as a deciding signal: %+v", e)
				}
			}
		})
	}
}

func TestShmFallbackNamesIdleNVLinks(t *testing.T) {
	v := ClassifyGPU(h200(0.03, 0, 0.012, 1, 33.7*gb, 29.5*gb, 0, 0), NaNNode(), DefaultThresholds)
	if v.SubKind != SubPCIePeerSHM || !contains(v.Summary, "18 NVLinks are up but idle") || !contains(v.Fix, "NCCL_P2P_DISABLE") {
		t.Fatalf("%+v", v)
	}
}

func TestUnknownWithoutActivitySource(t *testing.T) {
	w := h200(math.NaN(), math.NaN(), math.NaN(), 1, 0, 59*gb, 0, 0)
	w.ActivitySource = "nvml"
	if v := ClassifyGPU(w, NaNNode(), DefaultThresholds); v.Class != ClassUnknown {
		t.Fatalf("classified without SM activity: %+v", v)
	}
	w.Up, w.Error = false, "memory info: ERROR_GPU_IS_LOST"
	v := ClassifyGPU(w, NaNNode(), DefaultThresholds)
	if v.Class != ClassUnknown || v.SubKind != SubGPUDown || !contains(v.Summary, w.Error) ||
		len(v.Evidence) != 1 || v.Evidence[0].Signal != "gpu_up" || v.Evidence[0].Value != 0 || v.Fix == "" {
		t.Fatalf("down GPU: %+v; want unknown/gpu_down naming the error, with gpu_up = 0 as evidence and a fix", v)
	}
}

// A GPU that goes down is shown down at the next analysis, and one that comes
// back is classified at once: hysteresis guards against noisy ratios, and
// "the driver says lost" is no noise.
func TestGPUDownShowsAtOnce(t *testing.T) {
	up := h200(0.9, 0.8, 0.2, 1, 0, 0, 0, 0)
	down := up
	down.Up, down.Error = false, "memory info: ERROR_GPU_IS_LOST"
	t0 := time.Unix(1000, 0)
	at := func(w GPUWindow, s int) Input {
		return Input{Now: t0.Add(time.Duration(s) * time.Second), SpanSeconds: 10, Node: NaNNode(), GPUs: []GPUWindow{w}}
	}
	d := Analyze(at(up, 0), nil, DefaultThresholds)
	d = Analyze(at(up, 1), &d, DefaultThresholds)
	d = Analyze(at(down, 2), &d, DefaultThresholds)
	if g := d.GPUs[0]; g.Class != ClassUnknown || g.SubKind != SubGPUDown || !g.Since.Equal(t0.Add(2*time.Second)) {
		t.Fatalf("lost GPU after one analysis: %+v", g)
	}
	d = Analyze(at(down, 3), &d, DefaultThresholds)
	if g := d.GPUs[0]; g.SubKind != SubGPUDown || !g.Since.Equal(t0.Add(2*time.Second)) {
		t.Fatalf("still lost: %+v; want Since kept", g)
	}
	d = Analyze(at(up, 4), &d, DefaultThresholds)
	if g := d.GPUs[0]; g.Class != ClassCompute || g.Pending != "" || !g.Since.Equal(t0.Add(4*time.Second)) {
		t.Fatalf("GPU back: %+v; want compute at once", g)
	}
}

// A GPU that does not answer is critical: the node leads with it, naming
// it, whether the other GPUs could be classified or not.
func TestNodeLeadsWithLostGPU(t *testing.T) {
	compute := h200(0.9, 0.8, 0.2, 1, 0, 0, 0, 0)
	down := func(i int) GPUWindow {
		w := compute
		w.Index, w.Up, w.Error = i, false, "memory info: ERROR_GPU_IS_LOST"
		return w
	}
	for _, tc := range []struct {
		gpus []GPUWindow
		want string
	}{
		{[]GPUWindow{compute, down(3)}, "GPU 3: the GPU did not answer in the newest sample: memory info: ERROR_GPU_IS_LOST; other jobs: GPU 0 compute/tensor"},
		{[]GPUWindow{down(2), down(5)}, "GPU 2: the GPU did not answer in the newest sample: memory info: ERROR_GPU_IS_LOST; other jobs: GPU 5 unknown/gpu_down"},
		{[]GPUWindow{compute}, "GPU 0: SM activity 0.90 with tensor pipes 0.80 busy: tensor-core bound"},
	} {
		d := Analyze(Input{SpanSeconds: 10, Node: NaNNode(), GPUs: tc.gpus}, nil, DefaultThresholds)
		if d.Node.Summary != tc.want {
			t.Errorf("summary %q; want %q", d.Node.Summary, tc.want)
		}
	}
}

func TestHysteresis(t *testing.T) {
	compute := Input{SpanSeconds: 10, Node: NaNNode(), GPUs: []GPUWindow{h200(0.9, 0.8, 0.2, 1, 0, 0, 0, 0)}}
	copyIn := Input{SpanSeconds: 10, Node: NaNNode(), GPUs: []GPUWindow{h200(0, 0, 0, 1, 1*gb, 59*gb, 0, 0)}}
	t0 := time.Unix(1000, 0)
	at := func(in Input, s int) Input { in.Now = t0.Add(time.Duration(s) * time.Second); return in }

	d := Analyze(at(compute, 0), nil, DefaultThresholds)
	d = Analyze(at(compute, 1), &d, DefaultThresholds)
	if d.GPUs[0].Class != ClassCompute || !d.GPUs[0].Since.Equal(t0) {
		t.Fatalf("steady compute: %+v", d.GPUs[0])
	}
	// One interval of a different class is not enough to switch.
	d = Analyze(at(copyIn, 2), &d, DefaultThresholds)
	if d.GPUs[0].Class != ClassCompute || d.GPUs[0].Pending != ClassIO {
		t.Fatalf("switched after one analysis: %+v", d.GPUs[0])
	}
	// A blip back resets the count.
	d = Analyze(at(compute, 3), &d, DefaultThresholds)
	d = Analyze(at(copyIn, 4), &d, DefaultThresholds)
	if d.GPUs[0].Class != ClassCompute {
		t.Fatalf("flapped: %+v", d.GPUs[0])
	}
	// The second analysis in a row switches, and Since moves.
	d = Analyze(at(copyIn, 5), &d, DefaultThresholds)
	if d.GPUs[0].Class != ClassIO || !d.GPUs[0].Since.Equal(t0.Add(5*time.Second)) || d.Node.Class != ClassIO {
		t.Fatalf("did not follow: gpu %+v node %+v", d.GPUs[0], d.Node)
	}
}

func TestNodeVerdictAndStragglers(t *testing.T) {
	var ws []GPUWindow
	for i := 0; i < 8; i++ {
		w := h200(0.9, 0.8, 0.2, 1, 0, 0, 12*gb, 12*gb)
		w.Index = i
		ws = append(ws, w)
	}
	ws[5].SMActive = 0.35 // a slow GPU in a synchronous job
	ws[5].TensorActive = 0.3
	d := Analyze(Input{SpanSeconds: 10, Node: NaNNode(), GPUs: ws}, nil, DefaultThresholds)
	if d.Node.Class != ClassCompute || d.Node.SubKind != SubTensor {
		t.Fatalf("node %+v", d.Node)
	}
	if len(d.Stragglers) != 1 || d.Stragglers[0].GPU != 5 {
		t.Fatalf("stragglers %+v", d.Stragglers)
	}
	if !contains(d.Node.Summary, "straggler") {
		t.Fatalf("node summary %q", d.Node.Summary)
	}
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }
