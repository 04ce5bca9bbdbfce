package main

import (
	"testing"

	"github.com/gpudiag/gpudiag/analyzers"
)

// The live re-measurement of issue 37 on a 2xH200 host (NV18), recorded by
// the daemon whose verdicts were being measured (main at 151ae10, with the
// groups and the waiting verdict): testdata/traces/multigpu/h200x2, whose
// machine.txt is the host. The 4xH200 traces beside them were recorded
// before those verdicts existed; these were recorded after, so the replay
// here is also what the on-call engineer saw live (docs/validation.md).

// SIGSTOP on rank 1 (pid 743) at 14.81, SIGCONT at 44.81: GPU 0 names the
// stopped rank within 10 s (live: 3.2 s), the node is led by the waiting
// job, and NVLink comes back after SIGCONT.
func TestMultiGPUH200x2StoppedRank(t *testing.T) {
	ds := replayMultiGPU(t, "h200x2/stopped_rank")
	const stop, cont = 14.81, 44.81
	both := map[int]string{0: "communication/nvlink", 1: "communication/nvlink"}
	phase(t, ds, 8, stop, "before the stop", gpus(both))
	named := namedAt(ds, stop, waitsFor(0, 743, 1, "stopped"))
	if named < 0 || named > 10 {
		t.Fatalf("the stopped rank was named %.1f s after the stop; want within 10 s", named)
	}
	t.Logf("the stopped rank named %.1f s after SIGSTOP", named)
	phase(t, ds, stop+named, cont, "stopped", all(waitsFor(0, 743, 1, "stopped"), node("communication/waiting", "pid 743")))
	phase(t, ds, 6, 56, "job", all(neverHost(0), notIdle, noCritical))
	// The links counted data CRC errors throughout, with no replay or
	// recovery: a healthy busy node, no finding (gpuhealth.go).
	phase(t, ds, -3, 60, "NVLink health", findings([]string{"nvlink_errors"}))
	phase(t, ds, cont+5, 56, "after SIGCONT", gpus(both))
}

// SIGKILL on rank 1 (pid 1017) at 14.61: GPU 0 names it exited within
// 10 s (live: 4.4 s), GPU 1 is free once the driver lets go, and with no
// rank left to move the collective is stalled after StalledPeersSeconds.
func TestMultiGPUH200x2KilledRank(t *testing.T) {
	ds := replayMultiGPU(t, "h200x2/killed_rank")
	const kill = 14.61
	named := namedAt(ds, kill, waitsFor(0, 1017, 1, "exited", "zombie"))
	if named < 0 || named > 10 {
		t.Fatalf("the killed rank was named %.1f s after the kill; want within 10 s", named)
	}
	t.Logf("the killed rank named %.1f s after SIGKILL", named)
	phase(t, ds, kill+named, 54.6, "killed", all(waitsFor(0, 1017, 1, "exited", "zombie"), neverHost(0), notIdle))
	phase(t, ds, 26, 54.6, "the killed rank's GPU", gpus(map[int]string{1: "idle/no_process"}))
	phase(t, ds, kill+analyzers.DefaultThresholds.StalledPeersSeconds+3, 54.6, "stalled", all(
		gpus(map[int]string{0: "communication/collective_stalled"}),
		findings([]string{"nccl_collective_stalled"}, "nccl_collective_stalled:")))
}

// Rank 0 (pid 870) writes a 33 GiB checkpoint from 12.23 to 83.68 while
// rank 1 waits in a barrier: GPU 0 io/storage_write, GPU 1 waiting on rank
// 0 busy, the node led by the write; never a stalled collective or a
// critical finding over the whole 71 s pause.
func TestMultiGPUH200x2Checkpoint(t *testing.T) {
	ds := replayMultiGPU(t, "h200x2/checkpoint")
	phase(t, ds, 8, 12.2, "loop", gpus(map[int]string{0: "communication/nvlink", 1: "communication/nvlink"}))
	phase(t, ds, 23, 83, "writing", all(gpus(map[int]string{0: "io/storage_write"}), waitsFor(1, 870, 0, "busy"),
		node("io/storage_write", "GPU 1 waits for GPU 0")))
	phase(t, ds, -3, 92, "whole trace", all(noCritical, findings([]string{"nvlink_errors"})))
	phase(t, ds, 13, 84, "pause", notIdle)
}
