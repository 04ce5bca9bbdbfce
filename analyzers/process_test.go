package analyzers

import (
	"testing"
	"time"

	"github.com/gpudiag/gpudiag/engine"
	"github.com/gpudiag/gpudiag/sample"
)

func ptr(x float64) *float64 { return &x }

// A GIL-bound loop: the GPU's process uses one core while the SMs idle; the
// process evidence turns "waiting" into host-bound, and placement findings
// come from the same samples.
func TestProcessEvidenceMakesHostVerdict(t *testing.T) {
	w := engine.NewWindow(time.Minute, 1<<20)
	t0 := time.Unix(1_800_000_000, 0)
	for i := 0; i < 10; i++ {
		now := t0.Add(time.Duration(i) * time.Second)
		v := sample.NewValues()
		v.Set(sample.SMActive, 0.001)
		v.Set(sample.Utilization, 0.02)
		v.Set(sample.ComputeProcesses, 1)
		w.Add("gpu", now, &sample.GPUs{Devices: []sample.GPU{{Index: 4, Up: true, ActivitySource: sample.SourceGPM, IntervalSeconds: 1, Values: v}}})
		w.Add("gpuprocess", now, &sample.GPUProcesses{IntervalSeconds: 1, GPUs: []sample.GPUProcessGroup{{
			GPU: 4, NUMANode: 1, LocalCPUList: "32-63,96-127", Processes: []sample.GPUProcess{{PID: 4343, OnGPU: true, CPUCoresUsed: ptr(1.0)}},
			CPUCoresUsed: 1.0, IOWaitThreadsRatio: ptr(0), RemoteMemoryRatio: ptr(0.75), CPUsOffNodeRatio: ptr(1), CPUsFullyRemote: true}}})
	}
	in := FromWindow(w, t0.Add(9*time.Second), 10*time.Second)
	d := Analyze(in, nil, DefaultThresholds)
	if g := d.GPUs[0]; g.Class != ClassHost || g.SubKind != SubCPU {
		t.Fatalf("verdict %s/%s: %s", g.Class, g.SubKind, g.Summary)
	}
	if got := checks(d.Findings); got != "gpu_process_remote_cpus:warning,gpu_process_remote_memory:warning" {
		t.Fatalf("findings %q", got)
	}
	if !d.Inputs.HostEvidence {
		t.Fatal("host evidence not reported as present")
	}
}
