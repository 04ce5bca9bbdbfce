package diagnose

import (
	"bytes"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/gpudiag/gpudiag/analyzers"
	"github.com/gpudiag/gpudiag/sample"
)

// The text form lists the node's jobs, headline first, with the GPUs free;
// a finding of one cause for the node is placed on the GPUs it lists.
func TestTextListsJobs(t *testing.T) {
	d := analyzers.Diagnosis{Node: analyzers.Verdict{Class: analyzers.ClassCommunication, SubKind: analyzers.SubNVLink, Summary: "GPUs 0, 1: NVLink"},
		GPUs: []analyzers.GPUVerdict{{GPU: 0}, {GPU: 1}, {GPU: 2}, {GPU: 3}},
		Groups: []analyzers.Group{
			{GPUs: []int{0, 1}, By: "job", Verdict: analyzers.Verdict{Class: analyzers.ClassCommunication, SubKind: analyzers.SubNVLink}, Cost: 1.7},
			{GPUs: []int{2}, By: "process", Verdict: analyzers.Verdict{Class: analyzers.ClassCompute, SubKind: analyzers.SubTensor}}},
		FreeGPUs: 1,
		Findings: []analyzers.Finding{{Check: "nccl_fallback", Severity: analyzers.SeverityWarning, Kind: "p2p_disabled", GPUs: []int{0, 1}, Summary: "s", Fix: "f"}}}
	var b bytes.Buffer
	WriteText(&b, &Report{Diagnosis: d})
	for _, want := range []string{"JOBS (2; 1 of 4 GPUs free)", "GPUs 0, 1 (by job): communication/nvlink, costs 1.70 GPUs", "GPU 2 (by process): compute/tensor",
		"[warning] nccl_fallback GPUs 0, 1: s"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("text lacks %q:\n%s", want, b.String())
		}
	}
}

// The node's free GPUs and each job's verdict and cost are exported, a job
// named by its lowest GPU.
func TestGroupMetrics(t *testing.T) {
	r, _ := runnerWith(3, func(int) *sample.GPUs { return gpuSample(0, 59e9) })
	d := *r.Latest()
	d.FreeGPUs = 2
	d.Groups = []analyzers.Group{
		{GPUs: []int{2, 3}, By: "job", Verdict: analyzers.Verdict{Class: analyzers.ClassCommunication, SubKind: analyzers.SubNVLink}, Cost: 1.7},
		{GPUs: []int{0}, By: "process", Verdict: analyzers.Verdict{Class: analyzers.ClassCompute, SubKind: analyzers.SubTensor}}}
	r.mu.Lock()
	r.last = &d
	r.mu.Unlock()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(r.Metrics())
	want := `
# HELP gpudiag_group_bottleneck_cost_gpus GPU time a job's bottleneck costs on this node, in GPUs: over its GPUs that are communication-, I/O- or host-bound, the sum of 1 - SM activity. The node's headline is the costliest job (a critical one first).
# TYPE gpudiag_group_bottleneck_cost_gpus gauge
gpudiag_group_bottleneck_cost_gpus{group="0"} 0
gpudiag_group_bottleneck_cost_gpus{group="2"} 1.7
# HELP gpudiag_group_bottleneck_info Each job on the node (its GPUs grouped by job identity, NCCL communicator or launcher), by its lowest GPU (group) and all of them (gpus, comma-separated): its verdict's class and sub-kind; by says what ties the GPUs (job, nccl, process_tree, process).
# TYPE gpudiag_group_bottleneck_info gauge
gpudiag_group_bottleneck_info{by="job",class="communication",gpus="2,3",group="2",sub_kind="nvlink"} 1
gpudiag_group_bottleneck_info{by="process",class="compute",gpus="0",group="0",sub_kind="tensor"} 1
# HELP gpudiag_node_free_gpus GPUs no process holds, idle: the node's headline verdict is the costliest job's, and a GPU free is no vote for idle.
# TYPE gpudiag_node_free_gpus gauge
gpudiag_node_free_gpus 2
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "gpudiag_group_bottleneck_cost_gpus", "gpudiag_group_bottleneck_info", "gpudiag_node_free_gpus"); err != nil {
		t.Fatal(err)
	}
}
