package main

import (
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpudiag/gpudiag/analyzers"
	"github.com/gpudiag/gpudiag/diagnose"
	"github.com/gpudiag/gpudiag/engine"
	"github.com/gpudiag/gpudiag/record/replay"
)

// The eleven traces recorded on a real 4xH200 node beside known workloads
// (issue 37), with their truth: testdata/traces/multigpu/README.md. Each is
// replayed as the daemon ran it (one analysis after every GPU sample,
// hysteresis carried), and the truth of each phase is asserted at every
// analysis inside it; t is seconds from the first workload's launch
// (workload_start_unix of the trace's live.json), the event times those of
// the README.
const multiGPUDir = "../../testdata/traces/multigpu"

// timedDiagnosis is the daemon's diagnosis after one GPU sample, at t.
type timedDiagnosis struct {
	t float64
	d analyzers.Diagnosis
}

// replayMultiGPU replays a trace of testdata/traces/multigpu and returns
// the diagnosis after each GPU sample.
func replayMultiGPU(t *testing.T, name string) []timedDiagnosis {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(multiGPUDir, name+".live.json"))
	if err != nil {
		t.Fatal(err)
	}
	var live struct {
		WorkloadStartUnix float64 `json:"workload_start_unix"`
	}
	if err := json.Unmarshal(raw, &live); err != nil || live.WorkloadStartUnix == 0 {
		t.Fatalf("%s.live.json: %v (workload_start_unix %v)", name, err, live.WorkloadStartUnix)
	}
	ds := replayDiagnoses(t, filepath.Join(multiGPUDir, name+".gdrec"))
	for i := range ds {
		ds[i].t -= live.WorkloadStartUnix
	}
	return ds
}

// replayDiagnoses replays a trace as the daemon ran it and returns the
// diagnosis after each GPU sample, timed in Unix seconds.
func replayDiagnoses(t *testing.T, path string) []timedDiagnosis {
	t.Helper()
	frames := readFrames(t, path)
	names := map[string]bool{}
	for _, f := range frames {
		names[f.Collector] = true
	}
	cs, decoders, _, err := replay.Collectors(slices.Sorted(maps.Keys(names)), nil, false, recordedCollector)
	if err != nil {
		t.Fatal(err)
	}
	clock := &replay.Clock{}
	window := engine.NewWindow(10*time.Minute, 16<<20)
	runner := diagnose.NewRunner(window, analyzers.DefaultThresholds)
	var out []timedDiagnosis
	eng := engine.New(engine.Options{Interval: time.Second, Window: window, Now: clock.Now,
		OnSample: func(c string, ts time.Time, s any) {
			runner.OnSample(c, ts, s)
			if c == diagnose.TriggerCollector {
				out = append(out, timedDiagnosis{float64(ts.UnixNano()) / 1e9, *runner.Latest()})
			}
		}})
	for _, c := range cs {
		eng.Add(c, 0)
	}
	for _, fr := range frames {
		s := decoders[fr.Collector]()
		if err := json.Unmarshal(fr.Sample, s); err != nil {
			t.Fatal(err)
		}
		clock.Set(fr.Time())
		if err := eng.Ingest(fr.Collector, fr.Time(), s); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// gpu is GPU i's verdict in a diagnosis, zero when absent.
func (td timedDiagnosis) gpu(i int) analyzers.GPUVerdict {
	for _, g := range td.d.GPUs {
		if g.GPU == i {
			return g
		}
	}
	return analyzers.GPUVerdict{}
}

func kind(v analyzers.Verdict) string { return string(v.Class) + "/" + v.SubKind }

// phase asserts check on every analysis with from ≤ t ≤ to, and that there
// is at least one.
func phase(t *testing.T, ds []timedDiagnosis, from, to float64, what string, check func(timedDiagnosis) string) {
	t.Helper()
	n := 0
	for _, td := range ds {
		if td.t < from || td.t > to {
			continue
		}
		n++
		if msg := check(td); msg != "" {
			t.Errorf("%s, t=%.1f: %s", what, td.t, msg)
			return
		}
	}
	if n == 0 {
		t.Errorf("%s: no analysis between t=%v and t=%v", what, from, to)
	}
}

// gpus checks GPU verdicts: want maps a GPU to its class/sub-kind.
func gpus(want map[int]string) func(timedDiagnosis) string {
	return func(td timedDiagnosis) string {
		for i, w := range want {
			if got := kind(td.gpu(i).Verdict); got != w {
				return fmt.Sprintf("GPU %d is %s (%s); want %s", i, got, td.gpu(i).Summary, w)
			}
		}
		return ""
	}
}

// node checks the node's class/sub-kind and that its summary says each of
// says.
func node(want string, says ...string) func(timedDiagnosis) string {
	return func(td timedDiagnosis) string {
		if got := kind(td.d.Node); got != want {
			return fmt.Sprintf("node is %s (%s); want %s", got, td.d.Node.Summary, want)
		}
		for _, s := range says {
			if !strings.Contains(td.d.Node.Summary, s) {
				return fmt.Sprintf("node summary %q lacks %q", td.d.Node.Summary, s)
			}
		}
		return ""
	}
}

// all combines checks.
func all(cs ...func(timedDiagnosis) string) func(timedDiagnosis) string {
	return func(td timedDiagnosis) string {
		for _, c := range cs {
			if msg := c(td); msg != "" {
				return msg
			}
		}
		return ""
	}
}

// notIdle: the node is not idle while a job runs.
func notIdle(td timedDiagnosis) string {
	if td.d.Node.Class == analyzers.ClassIdle {
		return "node idle: " + td.d.Node.Summary
	}
	return ""
}

// neverHost: a GPU whose rank spins in the driver is never host/cpu.
func neverHost(i int) func(timedDiagnosis) string {
	return func(td timedDiagnosis) string {
		if v := td.gpu(i); v.Class == analyzers.ClassHost {
			return fmt.Sprintf("GPU %d host-bound: %s", i, v.Summary)
		}
		return ""
	}
}

// waitsFor checks that GPU i waits in a collective (waiting, or stalled)
// naming pid on GPU peer in one of the states.
func waitsFor(i, pid, peer int, states ...string) func(timedDiagnosis) string {
	return func(td timedDiagnosis) string {
		v := td.gpu(i)
		if v.Class != analyzers.ClassCommunication || (v.SubKind != analyzers.SubCollectiveWait && v.SubKind != analyzers.SubCollectiveStalled) {
			return fmt.Sprintf("GPU %d is %s (%s); want waiting", i, kind(v.Verdict), v.Summary)
		}
		for _, p := range v.WaitsFor {
			if p.PID == pid && p.GPU == peer && slices.Contains(states, p.State) {
				if !strings.Contains(v.Summary, fmt.Sprintf("pid %d", pid)) {
					return fmt.Sprintf("GPU %d's summary does not name pid %d: %s", i, pid, v.Summary)
				}
				return ""
			}
		}
		return fmt.Sprintf("GPU %d waits for %+v; want pid %d on GPU %d, %v", i, v.WaitsFor, pid, peer, states)
	}
}

// findings checks the findings of the checks named: each kind once
// (check:kind), and nothing else of those checks.
func findings(checks []string, want ...string) func(timedDiagnosis) string {
	return func(td timedDiagnosis) string {
		var got []string
		for _, f := range td.d.Findings {
			if slices.Contains(checks, f.Check) {
				got = append(got, f.Check+":"+f.Kind)
			}
		}
		slices.Sort(got)
		w := slices.Sorted(slices.Values(want))
		if !slices.Equal(got, w) {
			return fmt.Sprintf("findings %v; want %v", got, w)
		}
		return ""
	}
}

// noCritical: no critical finding, no stalled collective.
func noCritical(td timedDiagnosis) string {
	for _, f := range td.d.Findings {
		if f.Severity == analyzers.SeverityCritical {
			return "critical finding " + f.Check + ": " + f.Summary
		}
	}
	for _, g := range td.d.GPUs {
		if g.SubKind == analyzers.SubCollectiveStalled {
			return fmt.Sprintf("GPU %d collective_stalled: %s", g.GPU, g.Summary)
		}
	}
	return ""
}

// fixSays checks GPU i's fix says each of says and none of never.
func fixSays(i int, says, never []string) func(timedDiagnosis) string {
	return func(td timedDiagnosis) string {
		fix := td.gpu(i).Fix
		for _, s := range says {
			if !strings.Contains(fix, s) {
				return fmt.Sprintf("GPU %d's fix %q lacks %q", i, fix, s)
			}
		}
		for _, s := range never {
			if strings.Contains(fix, s) {
				return fmt.Sprintf("GPU %d's fix %q says %q", i, fix, s)
			}
		}
		return ""
	}
}

var (
	ncclChecks = []string{"nccl_fallback", "nccl_env_override"}
	// What a socket path's fix must not say on a node without an RDMA
	// device when none of these is set: issue 37.
	unsetAdvice = []string{"NCCL_NET", "NCCL_IB_DISABLE", "NCCL_SHM_DISABLE", "InfiniBand/RoCE ports are active"}
)

// One GPU of four works: the node is that job's, 3 of 4 GPUs free; never
// idle (it read idle/no_process throughout, 3 GPUs to 1).
func TestMultiGPUOneJobOfFour(t *testing.T) {
	for _, tc := range []struct {
		trace, verdict string
		gpu            int
	}{{"one_gemm", "compute/tensor", 0}, {"one_h2d", "io/h2d_copy", 1}} {
		t.Run(tc.trace, func(t *testing.T) {
			ds := replayMultiGPU(t, tc.trace)
			want := map[int]string{0: "idle/no_process", 1: "idle/no_process", 2: "idle/no_process", 3: "idle/no_process"}
			want[tc.gpu] = tc.verdict
			phase(t, ds, 8, 32, "running", all(gpus(want), node(tc.verdict, fmt.Sprintf("GPU %d:", tc.gpu), "3 of 4 GPUs free"), func(td timedDiagnosis) string {
				if td.d.FreeGPUs != 3 || len(td.d.Groups) != 1 {
					return fmt.Sprintf("%d free, groups %+v", td.d.FreeGPUs, td.d.Groups)
				}
				return ""
			}))
		})
	}
}

// Two jobs: torchrun's all-reduce on GPUs 0-1 and a GEMM on GPU 2. The
// all-reduce heads the node, the GEMM listed, 1 of 4 GPUs free.
func TestMultiGPUTwoJobs(t *testing.T) {
	ds := replayMultiGPU(t, "two_jobs")
	phase(t, ds, 14, 34, "both jobs", all(
		gpus(map[int]string{0: "communication/nvlink", 1: "communication/nvlink", 2: "compute/tensor", 3: "idle/no_process"}),
		node("communication/nvlink", "GPUs 0, 1:", "1 of 4 GPUs free", "other jobs: GPU 2 compute/tensor"),
		func(td timedDiagnosis) string {
			if len(td.d.Groups) != 2 || !slices.Equal(td.d.Groups[0].GPUs, []int{0, 1}) || td.d.Groups[0].By != "job" || !slices.Equal(td.d.Groups[1].GPUs, []int{2}) {
				return fmt.Sprintf("groups %+v", td.d.Groups)
			}
			return ""
		}))
}

// DDP on four GPUs over each NCCL path: every GPU and the node read the
// path; one finding per cause for the node; on the socket path no
// socket_instead_of_ib (no RDMA device, IB not disabled) and no advice about
// variables that are not set.
func TestMultiGPUDDPPaths(t *testing.T) {
	every := func(v string) map[int]string { return map[int]string{0: v, 1: v, 2: v, 3: v} }
	for _, tc := range []struct {
		trace, verdict string
		from, to       float64
		findings       []string
		fix            func(timedDiagnosis) string
	}{
		{"ddp_nvlink", "communication/nvlink", 16, 40, nil, nil},
		{"ddp_shm", "communication/pcie_peer_shm", 16, 38, []string{"nccl_fallback:p2p_disabled", "nccl_env_override:"}, nil},
		{"ddp_socket", "communication/network", 16, 38, []string{"nccl_fallback:p2p_disabled", "nccl_fallback:shm_disabled", "nccl_env_override:"},
			fixSays(0, []string{"unset NCCL_P2P_DISABLE=1, NCCL_SHM_DISABLE=1", "no RDMA NIC on this node"}, []string{"NCCL_NET", "NCCL_IB_DISABLE", "InfiniBand/RoCE ports are active"})},
	} {
		t.Run(tc.trace, func(t *testing.T) {
			ds := replayMultiGPU(t, tc.trace)
			checks := []func(timedDiagnosis) string{gpus(every(tc.verdict)), node(tc.verdict, "GPUs 0, 1, 2, 3:"), findings(ncclChecks, tc.findings...)}
			if tc.fix != nil {
				checks = append(checks, tc.fix)
			}
			phase(t, ds, tc.from, tc.to, "all-reduce", all(checks...))
		})
	}
}

// Ranks claiming two hosts (NCCL_HOSTID) over TCP on a node without an RDMA
// device: GPUs 0 and 2 carry the sockets (network); GPUs 1 and 3 wait on them,
// never host/cpu; the node is told it has no RDMA NIC and that NCCL_HOSTID
// splits it, with no advice about unset variables or absent ports and no
// socket_instead_of_ib.
func TestMultiGPURanksAsHosts(t *testing.T) {
	ds := replayMultiGPU(t, "ranks_as_hosts")
	phase(t, ds, 6, 37, "job", all(neverHost(1), neverHost(3)))
	waiting := func(i int) func(timedDiagnosis) string {
		return func(td timedDiagnosis) string {
			if v := td.gpu(i); v.Class != analyzers.ClassCommunication || (v.SubKind != analyzers.SubCollectiveWait && v.SubKind != analyzers.SubPeerWait) {
				return fmt.Sprintf("GPU %d %s: %s", i, kind(v.Verdict), v.Summary)
			}
			return ""
		}
	}
	phase(t, ds, 12, 35, "all-reduce between the two hosts", all(
		gpus(map[int]string{0: "communication/network", 2: "communication/network"}), waiting(1), waiting(3),
		node("communication/network"),
		fixSays(0, []string{"no RDMA NIC on this node", "NCCL_HOSTID=a"}, unsetAdvice),
		findings([]string{"nccl_fallback"}, "nccl_fallback:net_within_node")))
}

// SIGSTOP on rank 1 (pid 1068) mid all-reduce at 15.41, SIGCONT at 45.41:
// GPU 0 waits naming the stopped rank within 10 s and never reads host/cpu;
// GPU 1 is named as holding a stopped process; the node is led by the
// waiting job, never idle; NVLink again after SIGCONT.
func TestMultiGPUStoppedRank(t *testing.T) {
	ds := replayMultiGPU(t, "stopped_rank")
	const stop, cont = 15.41, 45.41
	both := map[int]string{0: "communication/nvlink", 1: "communication/nvlink"}
	phase(t, ds, 8, stop, "before the stop", gpus(both))
	named := namedAt(ds, stop, waitsFor(0, 1068, 1, "stopped"))
	if named < 0 || named > 10 {
		t.Fatalf("the stopped rank was named %.1f s after the stop; want within 10 s", named)
	}
	t.Logf("the stopped rank named %.1f s after SIGSTOP", named)
	phase(t, ds, stop+named, cont, "stopped", all(waitsFor(0, 1068, 1, "stopped"), node("communication/waiting", "pid 1068")))
	phase(t, ds, stop+10, cont, "stopped rank's GPU", func(td timedDiagnosis) string {
		if v := td.gpu(1); !strings.Contains(v.Summary, "pid 1068") || !strings.Contains(v.Summary, "stopped") {
			return "GPU 1: " + v.Summary
		}
		return ""
	})
	phase(t, ds, 6, 57, "job", all(neverHost(0), notIdle))
	phase(t, ds, cont+5, 56, "after SIGCONT", gpus(both))
}

// namedAt is how long after at the check first held, -1 when never.
func namedAt(ds []timedDiagnosis, at float64, check func(timedDiagnosis) string) float64 {
	for _, td := range ds {
		if td.t >= at && check(td) == "" {
			return td.t - at
		}
	}
	return -1
}

// SIGKILL on rank 1 (pid 1260) at 15.61; it stays a zombie the driver no
// longer lists, GPU 1 free. GPU 0 waits naming it exited within 10 s, never
// host/cpu; the node is led by the waiting job, never idle. With no rank
// left to move for StalledPeersSeconds the collective is stalled, still
// naming it.
func TestMultiGPUKilledRank(t *testing.T) {
	ds := replayMultiGPU(t, "killed_rank")
	const kill = 15.61
	phase(t, ds, 8, kill, "before the kill", gpus(map[int]string{0: "communication/nvlink", 1: "communication/nvlink"}))
	named := namedAt(ds, kill, waitsFor(0, 1260, 1, "exited", "zombie"))
	if named < 0 || named > 10 {
		t.Fatalf("the killed rank was named %.1f s after the kill; want within 10 s", named)
	}
	t.Logf("the killed rank named %.1f s after SIGKILL", named)
	phase(t, ds, kill+named, 55.6, "killed", all(waitsFor(0, 1260, 1, "exited", "zombie"), neverHost(0), notIdle,
		func(td timedDiagnosis) string {
			if !strings.Contains(td.d.Node.Summary, "pid 1260") {
				return "node summary: " + td.d.Node.Summary
			}
			return ""
		}))
	phase(t, ds, 26, 55.6, "the killed rank's GPU", gpus(map[int]string{1: "idle/no_process"}))
	phase(t, ds, kill+analyzers.DefaultThresholds.StalledPeersSeconds+3, 55.6, "stalled", all(
		gpus(map[int]string{0: "communication/collective_stalled"}),
		findings([]string{"nccl_collective_stalled"}, "nccl_collective_stalled:")))
}

// A slow rank (rank 1 on one core, a Python loop every step): GPU 1 is
// host-bound; GPU 0 waits naming rank 1 bound by the host, never host/cpu;
// the node is host/cpu.
func TestMultiGPUSlowRank(t *testing.T) {
	ds := replayMultiGPU(t, "slow_rank")
	phase(t, ds, 6, 37, "job", neverHost(0))
	phase(t, ds, 14, 35, "steps", all(gpus(map[int]string{0: "communication/waiting", 1: "host/cpu"}), waitsFor(0, 1656, 1, "busy"),
		node("host/cpu", "GPU 0 waits for GPU 1, host-bound"),
		func(td timedDiagnosis) string {
			if p := td.gpu(0).WaitsFor[0]; p.Class != analyzers.ClassHost {
				return fmt.Sprintf("rank 1 bound by %s", p.Class)
			}
			return ""
		}))
}

// Rank 0 writes a 31 GiB checkpoint from 12.88 to 83.62 while rank 1 waits
// in a barrier: GPU 0 writes (io/storage_write, not waiting); GPU 1 waits
// naming rank 0 (pid 1446) busy; never a stalled collective nor a critical
// finding (it fired at 76 s); the node a pause, never idle; the free GPUs
// never io/storage_*.
func TestMultiGPUCheckpoint(t *testing.T) {
	ds := replayMultiGPU(t, "checkpoint")
	phase(t, ds, 8, 12.8, "loop", gpus(map[int]string{0: "communication/nvlink", 1: "communication/nvlink"}))
	phase(t, ds, 25, 83, "writing", all(gpus(map[int]string{0: "io/storage_write"}), waitsFor(1, 1446, 0, "busy"),
		node("io/storage_write", "GPU 1 waits for GPU 0")))
	phase(t, ds, -3, 95, "whole trace", all(noCritical, gpus(map[int]string{2: "idle/no_process", 3: "idle/no_process"})))
	phase(t, ds, 13, 84, "pause", notIdle)
}
