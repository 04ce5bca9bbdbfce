package main

import (
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gpudiag/gpudiag/analyzers"
)

// The recorded traces (testdata/traces, testdata/traces/multigpu and its
// h200x2), each replayed as the daemon ran it, one analysis after each GPU
// sample. Every trace is listed here. A healthy run, a known workload on a
// node with nothing wrong, must raise no warning or critical finding at any
// analysis, whatever it is bound by: a bottleneck is a verdict, not a
// finding. A run made unhealthy on purpose lists the findings it raises
// with why; the replay must raise exactly those, so a finding that goes
// missing fails as well as a new one.
var (
	healthyTraces = []string{
		"allreduce_nvlink_nccl_log", "bf16_gemm", "d2d_copy", "disk_reader", "idle", "pinned_h2d_copy", "python_input_pipeline",
		// A 30 s SIGSTOP, shorter than HangSeconds: a paused job, not a hang.
		"multigpu/stopped_rank", "multigpu/h200x2/stopped_rank",
		// A 71 s checkpoint write with the other rank in a barrier: a
		// healthy pause (issue 37), never a stalled collective.
		"multigpu/checkpoint", "multigpu/h200x2/checkpoint",
		"multigpu/ddp_nvlink", "multigpu/one_gemm", "multigpu/one_h2d", "multigpu/slow_rank", "multigpu/two_jobs",
	}
	unhealthyTraces = map[string]map[string]string{
		// NCCL_P2P_DISABLE=1 (NCCL_SHM_DISABLE=1 for sockets) set by hand:
		// without NCCL's log only the info-level override is seen.
		"allreduce_p2p_disabled": {},
		"allreduce_sockets":      {},
		"allreduce_p2p_disabled_nccl_log": {
			"nccl_fallback:warning:p2p_disabled": "NCCL_P2P_DISABLE=1 sends the all-reduce through host memory; NCCL's log says so"},
		"allreduce_sockets_nccl_log": {
			"nccl_fallback:warning:p2p_disabled": "NCCL_P2P_DISABLE=1, in NCCL's log",
			"nccl_fallback:warning:shm_disabled": "NCCL_SHM_DISABLE=1: the ranks talk over sockets, in NCCL's log"},
		"multigpu/ddp_shm": {
			"nccl_fallback:warning:p2p_disabled": "NCCL_P2P_DISABLE=1 on NVLinked GPUs"},
		"multigpu/ddp_socket": {
			"nccl_fallback:warning:p2p_disabled": "NCCL_P2P_DISABLE=1 on NVLinked GPUs",
			"nccl_fallback:warning:shm_disabled": "NCCL_SHM_DISABLE=1 as well: sockets between GPUs of one node"},
		"multigpu/ranks_as_hosts": {
			"nccl_fallback:warning:net_within_node": "NCCL_HOSTID makes the ranks of one node talk over the network"},
		// SIGKILL on a rank: the survivor's collective never completes,
		// which is what nccl_collective_stalled pages for.
		"multigpu/killed_rank":        {"nccl_collective_stalled:critical:": "a rank was killed and its peer waits forever"},
		"multigpu/h200x2/killed_rank": {"nccl_collective_stalled:critical:": "a rank was killed and its peer waits forever"},
	}
)

func TestRecordedTracesHealthyRaiseNothing(t *testing.T) {
	var all []string
	for _, pattern := range []string{"*.gdrec", "multigpu/*.gdrec", "multigpu/h200x2/*.gdrec"} {
		paths, err := filepath.Glob(filepath.Join(tracesDir, pattern))
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range paths {
			rel, _ := filepath.Rel(tracesDir, p)
			all = append(all, strings.TrimSuffix(filepath.ToSlash(rel), ".gdrec"))
		}
	}
	listed := append(slices.Clone(healthyTraces), slices.Collect(maps.Keys(unhealthyTraces))...)
	slices.Sort(all)
	slices.Sort(listed)
	if !slices.Equal(all, listed) {
		t.Fatalf("traces %q; listed %q: list each trace as healthy or with its findings", all, listed)
	}
	for _, name := range all {
		t.Run(name, func(t *testing.T) {
			want, unhealthy := unhealthyTraces[name]
			raised := map[string]bool{}
			for _, td := range replayDiagnoses(t, filepath.Join(tracesDir, name+".gdrec")) {
				for _, f := range td.d.Findings {
					if f.Severity == analyzers.SeverityInfo {
						continue
					}
					key := f.Check + ":" + string(f.Severity) + ":" + f.Kind
					if !unhealthy && !raised[key] {
						t.Errorf("a healthy run raised %s at %.0f: %s", key, td.t, f.Summary)
					}
					raised[key] = true
				}
			}
			if unhealthy {
				if got, want := slices.Sorted(maps.Keys(raised)), slices.Sorted(maps.Keys(want)); !slices.Equal(got, want) {
					t.Errorf("findings %q; want %q", got, want)
				}
			}
		})
	}
}
