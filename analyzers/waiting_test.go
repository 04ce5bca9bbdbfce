package analyzers

import (
	"math"
	"slices"
	"strings"
	"testing"
	"time"
)

// rank is a live rank of a launcher's job (parent 50), WORLD_SIZE 2.
func rank(pid, gpu, id int, state string, cores float64) Rank {
	return Rank{PID: pid, PPID: 50, Comm: "python3", GPU: gpu, State: state, CPUCores: cores, IOWait: 0, WorldSize: 2, RankID: id}
}

// quietFor is a GPU holding a collective kernel whose newest readings have
// made no progress for secs seconds, after a busy NVLink all-reduce; its
// span means still read the all-reduce (NVLink 150 GB/s).
func quietFor(idx, secs int, now time.Time) GPUWindow {
	w := h200(0.08, 0, 0, 0.95, 0.001*gb, 0.001*gb, 150*gb, 150*gb)
	w.Index = idx
	w.Recent = func(yield func(GPUPoint) bool) {
		for i := 0; i <= 600; i++ {
			p := GPUPoint{Time: now.Add(-time.Duration(i) * time.Second), Utilization: 1, SMActive: 0.01}
			if i >= secs {
				p.NVLink, p.SMActive, p.Utilization = 460*gb, 0.15, 0.9
			}
			if !yield(p) {
				return
			}
		}
	}
	return w
}

// idleHeld is a GPU a process holds without using it.
func idleHeld(idx int) GPUWindow {
	w := h200(0, 0, 0, 0, 0, 0, 0, 0)
	w.Index = idx
	return w
}

func findWait(d Diagnosis, gpu int) GPUVerdict {
	i := slices.IndexFunc(d.GPUs, func(g GPUVerdict) bool { return g.GPU == gpu })
	return d.GPUs[i]
}

// A rank stopped mid all-reduce (SIGSTOP; the stopped_rank trace): the
// waiting GPU names it, with its pid, rank, GPU and state, once its newest
// readings show WaitNamedSeconds without progress, while the span's means
// still read the all-reduce; the node is led by the waiting job, never idle
// and never host-bound although the waiting rank spins on one core.
func TestStoppedRankNamed(t *testing.T) {
	now := time.Unix(1000, 0)
	for _, tc := range []struct {
		quiet int
		named bool
	}{{2, false}, {4, true}, {20, true}} {
		w0 := quietFor(0, tc.quiet, now)
		w0.ProcessCPUCores = 1.0
		in := Input{Now: now, SpanSeconds: 10, Node: NaNNode(), GPUs: []GPUWindow{w0, idleHeld(1), h200idle(2)},
			Ranks: []Rank{rank(1067, 0, 0, "R", 1.0), rank(1068, 1, 1, "T", 0)}}
		d := Analyze(in, nil, DefaultThresholds)
		v := findWait(d, 0)
		if !tc.named {
			if v.SubKind != SubNVLink {
				t.Errorf("%d s quiet: %s/%s; want the span's nvlink still", tc.quiet, v.Class, v.SubKind)
			}
			continue
		}
		if v.Class != ClassCommunication || v.SubKind != SubCollectiveWait || len(v.WaitsFor) != 1 {
			t.Fatalf("%d s quiet: %s/%s %+v: %s", tc.quiet, v.Class, v.SubKind, v.WaitsFor, v.Summary)
		}
		p := v.WaitsFor[0]
		if p.PID != 1068 || p.GPU != 1 || p.Rank == nil || *p.Rank != 1 || p.State != peerStopped ||
			!strings.Contains(v.Summary, "rank 1 (pid 1068, python3) on GPU 1, which is stopped (state T)") || !strings.Contains(v.Fix, "kill -CONT 1068") {
			t.Errorf("%d s quiet: peer %+v, summary %q, fix %q", tc.quiet, p, v.Summary, v.Fix)
		}
		if d.Node.Class != ClassCommunication || d.Node.SubKind != SubCollectiveWait || !strings.Contains(d.Node.Summary, "pid 1068") ||
			!strings.Contains(d.Node.Summary, "2 of 3 GPUs free") && !strings.Contains(d.Node.Summary, "1 of 3 GPUs free") {
			t.Errorf("%d s quiet: node %s/%s: %s", tc.quiet, d.Node.Class, d.Node.SubKind, d.Node.Summary)
		}
		if s := findWait(d, 1); !strings.Contains(s.Summary, "pid 1068") || !strings.Contains(s.Summary, "stopped") {
			t.Errorf("the stopped rank's GPU: %s/%s %q; want it named stopped", s.Class, s.SubKind, s.Summary)
		}
	}
}

func h200idle(idx int) GPUWindow {
	w := h200(0, 0, 0, 0, 0, 0, 0, 0)
	w.Index, w.ComputeProcesses = idx, 0
	return w
}

// A rank killed (the killed_rank trace): gone from the driver's lists, its
// GPU free. The waiting GPU names it exited; with no progress for
// StalledPeersSeconds and no rank of the job left to move, the collective is
// stalled, still naming it, and the critical finding fires once.
func TestGoneRankNamedThenStalled(t *testing.T) {
	now := time.Unix(1000, 0)
	gone := rank(1260, 1, 1, "Z", 0)
	gone.Gone, gone.LastSeen = true, now.Add(-20*time.Second)
	for _, tc := range []struct {
		quiet int
		sub   string
	}{{5, SubCollectiveWait}, {29, SubCollectiveWait}, {31, SubCollectiveStalled}} {
		w0 := quietFor(0, tc.quiet, now)
		w0.NVLinkTx, w0.NVLinkRx = 0, 0
		in := Input{Now: now, SpanSeconds: 10, Node: NaNNode(), GPUs: []GPUWindow{w0, h200idle(1)},
			Ranks: []Rank{rank(1259, 0, 0, "R", 1.0), gone}}
		d := Analyze(in, nil, DefaultThresholds)
		v := findWait(d, 0)
		if v.SubKind != tc.sub || len(v.WaitsFor) != 1 || v.WaitsFor[0].State != peerZombie || !strings.Contains(v.Summary, "pid 1260") {
			t.Fatalf("%d s: %s/%s %+v %q", tc.quiet, v.Class, v.SubKind, v.WaitsFor, v.Summary)
		}
		stalled := slices.ContainsFunc(d.Findings, func(f Finding) bool {
			return f.Check == "nccl_collective_stalled" && strings.Contains(f.Summary, "rank 1 (pid 1260, python3) on GPU 1, which has exited")
		})
		// GPU 1, free, where the gone rank ran, is the job's: its means
		// over the span are still the job's.
		if len(d.Groups) != 1 || !slices.Equal(d.Groups[0].GPUs, []int{0, 1}) {
			t.Errorf("%d s: groups %+v", tc.quiet, d.Groups)
		}
		if stalled != (tc.sub == SubCollectiveStalled) || d.Node.SubKind != tc.sub || d.FreeGPUs != 1 {
			t.Errorf("%d s: finding %v, node %s/%s, %d free", tc.quiet, stalled, d.Node.Class, d.Node.SubKind, d.FreeGPUs)
		}
	}
}

// A rank busy on the host (the checkpoint trace: rank 0 writes for 70 s
// while rank 1 waits in a barrier) is what its peer waits for, named busy
// with its class; however long the wait, no stalled collective and no
// critical finding. The job's verdict is the busy rank's.
func TestBusyPeerNeverStalled(t *testing.T) {
	now := time.Unix(1000, 0)
	writer := h200(0, 0, 0, 0.03, 0.6*gb, 0, 0, 0)
	writer.ProcessCPUCores, writer.ProcessIOWait = 0.78, 0.01
	node := NaNNode()
	node.DiskWriteBytes, node.DiskReadBytes = 0.48*gb, 0
	waiter := quietFor(1, 90, now)
	waiter.NVLinkTx, waiter.NVLinkRx = 0, 0
	in := Input{Now: now, SpanSeconds: 10, Node: node, GPUs: []GPUWindow{writer, waiter},
		Ranks: []Rank{rank(1446, 0, 0, "D", 0.78), rank(1447, 1, 1, "R", 1.0)}}
	d := Analyze(in, nil, DefaultThresholds)
	if v := findWait(d, 0); v.Class != ClassIO || v.SubKind != SubStorageWrite {
		t.Fatalf("writer: %s/%s %q", v.Class, v.SubKind, v.Summary)
	}
	v := findWait(d, 1)
	if v.SubKind != SubCollectiveWait || len(v.WaitsFor) != 1 || v.WaitsFor[0].State != peerBusy || v.WaitsFor[0].Class != ClassIO || v.WaitsFor[0].PID != 1446 {
		t.Fatalf("waiter: %s/%s %+v", v.Class, v.SubKind, v.WaitsFor)
	}
	if slices.ContainsFunc(d.Findings, func(f Finding) bool { return f.Severity == SeverityCritical }) {
		t.Errorf("critical finding for a checkpoint: %+v", d.Findings)
	}
	if d.Node.Class != ClassIO || d.Node.SubKind != SubStorageWrite || !strings.HasPrefix(d.Node.Summary, "GPU 1 waits for GPU 0, io-bound") {
		t.Errorf("node %s/%s %q", d.Node.Class, d.Node.SubKind, d.Node.Summary)
	}
	// The same rank working on the CPU without the disk: its GPU, idle with
	// a process below ProcessCPUCores, is busy on the host, not "waiting on
	// something not measured".
	writer.PCIeTx = 0
	in.GPUs[0] = writer
	d = Analyze(in, nil, DefaultThresholds)
	if v := findWait(d, 0); v.Class != ClassHost || !strings.Contains(v.Summary, "GPU 1 waits for it") {
		t.Errorf("busy on the host: %s/%s %q", v.Class, v.SubKind, v.Summary)
	}
	if v := findWait(d, 1); v.SubKind != SubCollectiveWait || v.WaitsFor[0].Class != ClassHost {
		t.Errorf("waiter: %s/%s %+v", v.Class, v.SubKind, v.WaitsFor)
	}
}

// A slow rank (the slow_rank trace: one rank pinned to one core runs a
// Python loop each step): its GPU is host-bound, the other waits naming it
// bound by the host, never host/cpu itself though its rank spins on a core,
// and the node is host/cpu.
func TestSlowRankBoundsTheJob(t *testing.T) {
	now := time.Unix(1000, 0)
	waiter := h200(0.19, 0.01, 0, 1, 0.001*gb, 0.001*gb, 0.2*gb, 0.2*gb)
	waiter.ProcessCPUCores = 1.0
	slow := h200(0.01, 0.01, 0, 0.02, 0, 0, 0.2*gb, 0.2*gb)
	slow.Index, slow.ProcessCPUCores = 1, 1.0
	in := Input{Now: now, SpanSeconds: 10, Node: NaNNode(), GPUs: []GPUWindow{waiter, slow, h200idle(2), h200idle(3)},
		Ranks: []Rank{rank(1655, 0, 0, "R", 1.0), rank(1656, 1, 1, "R", 1.0)}}
	d := Analyze(in, nil, DefaultThresholds)
	v := findWait(d, 0)
	if v.SubKind != SubCollectiveWait || len(v.WaitsFor) != 1 || v.WaitsFor[0].PID != 1656 || v.WaitsFor[0].Class != ClassHost {
		t.Fatalf("waiter: %s/%s %+v %q", v.Class, v.SubKind, v.WaitsFor, v.Summary)
	}
	if s := findWait(d, 1); s.Class != ClassHost {
		t.Errorf("slow rank: %s/%s", s.Class, s.SubKind)
	}
	if d.Node.Class != ClassHost || !strings.Contains(d.Node.Summary, "GPU 0 waits for GPU 1, host-bound") || !strings.Contains(d.Node.Summary, "2 of 4 GPUs free") ||
		len(d.Groups) != 1 || !slices.Equal(d.Groups[0].GPUs, []int{0, 1}) || d.Groups[0].By != groupByProcessTree {
		t.Errorf("node %s/%s %q, groups %+v", d.Node.Class, d.Node.SubKind, d.Node.Summary, d.Groups)
	}
	// Alone (no rank of its job visible, no NCCL known), the same spinning
	// GPU is host-bound: nothing says its kernel is a collective.
	alone := waiter
	if v := ClassifyGPU(alone, NaNNode(), DefaultThresholds); v.Class != ClassHost {
		t.Errorf("alone: %s/%s", v.Class, v.SubKind)
	}
}

// Every rank of the job visible here waits too, with no progress: after
// StalledPeersSeconds the collective is stalled (the rank holding them is on
// another node or hung inside it); before, they wait. Ranks of a job known to
// span nodes, with no local rank to wait for, wait on the other nodes.
func TestAllPeersStuck(t *testing.T) {
	now := time.Unix(1000, 0)
	for _, tc := range []struct {
		quiet    int
		nodes    int
		sub      string
		inSumary string
	}{
		{20, 0, SubCollectiveWait, "which wait too"},
		{31, 0, SubCollectiveStalled, "every rank of its job visible here waits too"},
		{20, 4, SubPeerWait, "other nodes"},
		{31, 4, SubCollectiveStalled, "every rank of its job visible here waits too"},
	} {
		var ws []GPUWindow
		var rs []Rank
		for i := range 2 {
			w := quietFor(i, tc.quiet, now)
			w.NVLinkTx, w.NVLinkRx, w.JobNodes, w.NCCL = 0, 0, tc.nodes, true
			ws = append(ws, w)
			rs = append(rs, rank(100+i, i, i, "R", 1.0))
		}
		d := Analyze(Input{Now: now, SpanSeconds: 10, Node: NaNNode(), GPUs: ws, Ranks: rs}, nil, DefaultThresholds)
		for _, v := range d.GPUs {
			if v.SubKind != tc.sub || !strings.Contains(v.Summary, tc.inSumary) {
				t.Errorf("%d s, %d nodes: GPU %d %s/%s %q", tc.quiet, tc.nodes, v.GPU, v.Class, v.SubKind, v.Summary)
			}
		}
	}
}

// The ranks' job ties: a job identity, an NCCL communicator, the launcher
// (the same parent) with nothing against it; never two identities, two
// WORLD_SIZEs, or logs without a communicator in common.
func TestTies(t *testing.T) {
	base := Rank{PID: 1, PPID: 50, GPU: 0, RankID: -1, CPUCores: math.NaN(), IOWait: math.NaN()}
	with := func(f func(*Rank)) Rank { r := base; r.PID++; r.GPU = 1; f(&r); return r }
	for _, tc := range []struct {
		name string
		a, b Rank
		want string
	}{
		{"one launcher", base, with(func(*Rank) {}), groupByProcessTree},
		{"launched by init", Rank{PID: 1, PPID: 1}, Rank{PID: 2, PPID: 1}, ""},
		{"same job", Rank{PID: 1, PPID: 5, Job: "torchrun:x"}, Rank{PID: 2, PPID: 6, Job: "torchrun:x"}, groupByJob},
		{"two jobs, one launcher", Rank{PID: 1, PPID: 50, Job: "slurm:1"}, Rank{PID: 2, PPID: 50, Job: "slurm:2"}, ""},
		{"a communicator", Rank{PID: 1, PPID: 5, Comms: []string{"a", "b"}}, Rank{PID: 2, PPID: 6, Comms: []string{"b"}}, groupByNCCL},
		{"disjoint communicators", Rank{PID: 1, PPID: 50, Comms: []string{"a"}}, Rank{PID: 2, PPID: 50, Comms: []string{"b"}}, ""},
		{"world of one", Rank{PID: 1, PPID: 50, WorldSize: 1}, Rank{PID: 2, PPID: 50, WorldSize: 1}, ""},
		{"worlds differ", Rank{PID: 1, PPID: 50, WorldSize: 2}, Rank{PID: 2, PPID: 50, WorldSize: 4}, ""},
		{"one process", Rank{PID: 7}, Rank{PID: 7}, groupByProcess},
	} {
		if got := tie(tc.a, tc.b); got != tc.want {
			t.Errorf("%s: %q; want %q", tc.name, got, tc.want)
		}
	}
}

// As a job ends, the driver may still list ranks that have exited: a GPU
// whose own rank is a zombie waits for nobody, and names no peer (the
// simulated peer_wait trace ends so, both ranks zombies).
func TestExitingRankWaitsForNobody(t *testing.T) {
	now := time.Unix(1000, 0)
	var ws []GPUWindow
	for i := range 2 {
		w := quietFor(i, 20, now)
		w.NVLinkTx, w.NVLinkRx, w.JobNodes, w.NCCL = 0, 0, 2, true
		ws = append(ws, w)
	}
	d := Analyze(Input{Now: now, SpanSeconds: 10, Node: NaNNode(), GPUs: ws,
		Ranks: []Rank{rank(1175, 0, 0, "Z", 0.9), rank(1176, 1, 1, "Z", 0.9)}}, nil, DefaultThresholds)
	for _, v := range d.GPUs {
		if v.SubKind != SubPeerWait || len(v.WaitsFor) != 0 {
			t.Errorf("GPU %d: %s/%s %+v", v.GPU, v.Class, v.SubKind, v.WaitsFor)
		}
	}
}
