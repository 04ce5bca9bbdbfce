package analyzers

import (
	"math"
	"slices"
	"strings"
	"testing"
	"time"
)

var unixThousand = time.Unix(1000, 0)

// A GPU without a process is idle whatever the node does: one process
// reading a disk made all four GPUs io/storage_read (issue 37). Node-wide
// pressure counts for a GPU only through its own processes: not for one
// whose processes do no I/O or barely run, still for one whose processes
// are not measured.
func TestPressureOnlyThroughOwnProcesses(t *testing.T) {
	node := NaNNode()
	node.IOPressure, node.CPUPressure, node.DiskReadBytes = 0.7, 0.5, 1*gb
	free := h200idle(1)
	free.ProcessCPUCores, free.ProcessIOWait, free.ProcessReadBytes = 0, 0, 0
	reader := h200(0, 0, 0, 0.03, 0, 0, 0, 0)
	reader.ProcessCPUCores, reader.ProcessIOWait, reader.ProcessReadBytes = 0.5, 0, 1.3*gb
	quiet := h200(0, 0, 0, 0, 0, 0, 0, 0)
	quiet.ProcessCPUCores, quiet.ProcessIOWait, quiet.ProcessReadBytes = 0.01, 0, 0
	unmeasured := h200(0, 0, 0, 0, 0, 0, 0, 0)
	for _, tc := range []struct {
		name string
		w    GPUWindow
		want string
	}{
		{"no process", free, "idle/no_process"},
		{"no process, nothing measured", h200idle(1), "idle/no_process"},
		{"its process reads", reader, "io/storage_read"},
		{"its process does nothing", quiet, "idle/process_waiting"},
		{"its process not measured", unmeasured, "io/storage_read"},
	} {
		v := ClassifyGPU(tc.w, node, DefaultThresholds)
		if got := string(v.Class) + "/" + v.SubKind; got != tc.want {
			t.Errorf("%s: %s (%s); want %s", tc.name, got, v.Summary, tc.want)
		}
	}
	// PSI cpu, through processes that run.
	cpuNode := NaNNode()
	cpuNode.CPUPressure = 0.5
	busy := quiet
	busy.ProcessCPUCores = 0.5
	for _, tc := range []struct {
		name string
		w    GPUWindow
		want Class
	}{{"barely runs", quiet, ClassIdle}, {"runs", busy, ClassHost}, {"no process", free, ClassIdle}} {
		if v := ClassifyGPU(tc.w, cpuNode, DefaultThresholds); v.Class != tc.want {
			t.Errorf("PSI cpu, %s: %s/%s; want %s", tc.name, v.Class, v.SubKind, tc.want)
		}
	}
}

// The node's headline is the job that costs most, not a vote of GPUs: one
// GEMM on one GPU of four is compute-bound with 3 of 4 GPUs free (it read
// idle, 3 GPUs to 1); an all-reduce job on two GPUs beside a GEMM heads the
// node, the GEMM listed; idle only when no GPU works.
func TestNodeHeadlineIsTheCostliestJob(t *testing.T) {
	gemm := h200(0.9, 0.85, 0.2, 1, 0, 0, 0, 0)
	gemm.Index = 2
	allreduce := func(i int) GPUWindow {
		w := h200(0.15, 0, 0.1, 0.9, 0.01*gb, 0.02*gb, 230*gb, 230*gb)
		w.Index, w.NCCL = i, true
		return w
	}
	copyIn := h200(0, 0, 0, 1, 3*gb, 57*gb, 0, 0)
	copyIn.Index = 1
	for _, tc := range []struct {
		name   string
		gpus   []GPUWindow
		jobs   []GPUJob
		node   string
		free   int
		groups [][]int
		inSum  []string
	}{
		{"one GEMM of four", []GPUWindow{gemmAt(0), h200idle(1), h200idle(2), h200idle(3)}, nil,
			"compute/tensor", 3, [][]int{{0}}, []string{"GPU 0: SM activity 0.90", "3 of 4 GPUs free"}},
		{"one copy loop of four", []GPUWindow{h200idle(0), copyIn, h200idle(2), h200idle(3)}, nil,
			"io/h2d_copy", 3, [][]int{{1}}, []string{"GPU 1: PCIe receives", "3 of 4 GPUs free"}},
		{"two jobs", []GPUWindow{allreduce(0), allreduce(1), gemm, h200idle(3)},
			[]GPUJob{{GPU: 0, Source: JobSourceTorchrun, JobID: "7eec"}, {GPU: 1, Source: JobSourceTorchrun, JobID: "7eec"}, {GPU: 2, Source: JobSourceNone}},
			"communication/nvlink", 1, [][]int{{0, 1}, {2}}, []string{"GPUs 0, 1: NVLink carries", "1 of 4 GPUs free", "other jobs: GPU 2 compute/tensor"}},
		{"all free", []GPUWindow{h200idle(0), h200idle(1)}, nil, "idle/no_process", 2, nil, []string{"2 of 2 GPUs free"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := Analyze(Input{SpanSeconds: 10, Node: NaNNode(), GPUs: tc.gpus, Jobs: tc.jobs}, nil, DefaultThresholds)
			if got := string(d.Node.Class) + "/" + d.Node.SubKind; got != tc.node || d.FreeGPUs != tc.free {
				t.Fatalf("node %s with %d free (%s); want %s with %d", got, d.FreeGPUs, d.Node.Summary, tc.node, tc.free)
			}
			var groups [][]int
			for _, g := range d.Groups {
				groups = append(groups, g.GPUs)
			}
			if !slices.EqualFunc(groups, tc.groups, slices.Equal) {
				t.Errorf("groups %v; want %v", groups, tc.groups)
			}
			for _, s := range tc.inSum {
				if !strings.Contains(d.Node.Summary, s) {
					t.Errorf("node summary %q lacks %q", d.Node.Summary, s)
				}
			}
		})
	}
}

func gemmAt(i int) GPUWindow {
	w := h200(0.9, 0.85, 0.2, 1, 0, 0, 0, 0)
	w.Index = i
	return w
}

// A stalled collective leads the node even against a job that costs more.
func TestCriticalJobLeads(t *testing.T) {
	var ws []GPUWindow
	for i := range 4 {
		w := h200(0, 0, 0, 0, 0.2*gb, 0.2*gb, 0, 0)
		w.Index, w.ProcessCPUCores = i, 2
		ws = append(ws, w)
	}
	stalled := spinningAt(4, 90)
	ws = append(ws, stalled)
	d := Analyze(Input{SpanSeconds: 10, Node: NaNNode(), GPUs: ws,
		Jobs: []GPUJob{{GPU: 0, Source: JobSourceSlurm, JobID: "1"}, {GPU: 1, Source: JobSourceSlurm, JobID: "1"},
			{GPU: 2, Source: JobSourceSlurm, JobID: "1"}, {GPU: 3, Source: JobSourceSlurm, JobID: "1"}, {GPU: 4, Source: JobSourceSlurm, JobID: "2"}}},
		nil, DefaultThresholds)
	if d.Node.SubKind != SubCollectiveStalled || !strings.HasPrefix(d.Node.Summary, "GPU 4: collective stalled") ||
		!strings.Contains(d.Node.Summary, "other jobs: GPUs 0, 1, 2, 3 host/cpu") || d.Groups[1].Cost < 3.9 || math.IsNaN(d.Groups[0].Cost) {
		t.Fatalf("node %s/%s %q groups %+v", d.Node.Class, d.Node.SubKind, d.Node.Summary, d.Groups)
	}
}

// spinningAt is GPU idx holding a collective kernel with no progress for
// secs seconds, up to the Unix epoch's 1000th second.
func spinningAt(idx, secs int) GPUWindow {
	return spinning(idx, secs, unixThousand)
}
