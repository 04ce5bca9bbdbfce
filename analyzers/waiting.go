package analyzers

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// A GPU whose kernel is resident while its SMs idle waits in a collective.
// Whom it waits for decides the verdict: a rank of its job on this node that
// is stopped, gone, in D state or busy elsewhere (named: its pid, GPU, state
// and what bounds it); ranks on other nodes (peer_wait); or nobody who can
// still move (collective_stalled). The rule in the classification table
// (ruleCollectiveWait, verdict.go) sees one GPU; resolveWaits, once every
// GPU is classified, sees its job.

const stalledFix = "find the rank that stopped (a crashed, stopped or D-state process on this or another node; the findings list the ones visible here); " +
	"set TORCH_NCCL_ASYNC_ERROR_HANDLING=1 (NCCL_ASYNC_ERROR_HANDLING on older PyTorch) and a collective timeout so the job fails fast instead of hanging, then restart it from its checkpoint"

const peerWaitFix = "find the slow rank: compare the job's nodes in the fleet dashboard (the one that is compute-, I/O- or host-bound, or whose port is degraded or congested, holds the others back)"

// waits says whether a verdict is one of a GPU waiting in a collective.
func (v Verdict) waits() bool {
	return v.Class == ClassCommunication && (v.SubKind == SubCollectiveWait || v.SubKind == SubPeerWait || v.SubKind == SubCollectiveStalled)
}

// stalledSince is when the GPU's newest run of readings holding a waiting
// kernel with no link progress began (utilization ≥ HangUtilization, SM
// activity below SMActiveStarved, PCIe and NVLink below
// HangProgressBytes); ok is false when the newest reading is not one.
func stalledSince(g GPUWindow, t Thresholds) (since, last time.Time, ok bool) {
	quiet := func(x float64) bool { return !(x >= t.HangProgressBytes) } // NaN: not measured, no traffic seen
	if g.Recent == nil {
		return since, last, false
	}
	for p := range g.Recent {
		if !(p.Utilization >= t.HangUtilization) || !(p.SMActive < t.SMActiveStarved) || !quiet(p.PCIe) || !quiet(p.NVLink) {
			break
		}
		since, ok = p.Time, true
		if last.IsZero() {
			last = p.Time
		}
	}
	return since, last, ok
}

// kernelWaits says the GPU's n newest readings each hold a kernel with
// idle SMs. A job that has just started has its first readings, before its
// first collective, in the span's means; its newest readings already show
// the collective waiting.
func kernelWaits(g GPUWindow, t Thresholds, n int) bool {
	if g.Recent == nil {
		return false
	}
	k := 0
	for p := range g.Recent {
		if !(p.Utilization >= t.HangUtilization) || !(p.SMActive < t.SMActiveStarved) {
			return false
		}
		if k++; k >= n {
			return true
		}
	}
	return false
}

// quietSeconds is how long the GPU's newest readings have held a kernel
// without progress, 0 when the newest does not: from the reading before the
// run (the run's first reading covers the interval since), or from the
// run's first reading when the window holds none before it.
func quietSeconds(g GPUWindow, t Thresholds) float64 {
	since, last, ok := stalledSince(g, t)
	if !ok {
		return 0
	}
	for p := range g.Recent {
		if p.Time.Before(since) {
			since = p.Time
			break
		}
	}
	return last.Sub(since).Seconds()
}

// linkProgress is the GPU's busiest link over the span (PCIe, NVLink, its
// rank's HCA ports, its processes' TCP) and whether it moves.
func linkProgress(g GPUWindow, t Thresholds) (float64, bool) {
	progress := []float64{g.PCIeTx, g.PCIeRx, g.NVLinkTx, g.NVLinkRx, g.rdma.bytes, g.ProcessTCPBytes}
	return maxOf(progress...), slices.ContainsFunc(progress, func(x float64) bool { return x >= t.HangProgressBytes })
}

// stalledVerdict says a collective has made no progress for d seconds
// (threshold thr), naming the ranks it waits for when they are known.
func stalledVerdict(g GPUWindow, since time.Time, d, thr float64, peers []Peer, evidence []Evidence, t Thresholds) Verdict {
	who := "a rank it waits for has died, stopped or hung"
	if len(peers) > 0 {
		who = "it waits for " + peerList(peers)
	}
	return Verdict{Class: ClassCommunication, SubKind: SubCollectiveStalled, Confidence: confidence(d, thr),
		Summary: fmt.Sprintf("collective stalled since %s: the GPU has held a kernel (utilization %.2f, SM activity %.2f) with no NVLink, PCIe, RDMA or TCP progress for %.0f s; %s",
			since.UTC().Format(time.RFC3339), g.Utilization, g.SMActive, d, who),
		Evidence: append(evidence, Evidence{Signal: "stalled_seconds", Value: round(d), Unit: "s", Op: ">=", Threshold: thr, SpanSeconds: t.SpanSeconds}),
		Fix:      stalledFix}
}

// Peer states (Peer.State).
const (
	peerStopped   = "stopped"
	peerZombie    = "zombie"
	peerExited    = "exited"
	peerDiskSleep = "disk_sleep"
	peerBusy      = "busy"
	peerIdle      = "idle"
	peerWaiting   = "waiting"
)

// peerOf describes a rank of the job on GPU index gpu, whose verdict is v
// (nil for a rank gone) and whose newest readings have held a kernel
// without progress for quiet seconds.
func peerOf(r Rank, v *Verdict, t Thresholds) Peer {
	p := Peer{PID: r.PID, GPU: r.GPU}
	if r.RankID >= 0 {
		id := r.RankID
		p.Rank = &id
	}
	name := fmt.Sprintf("pid %d", r.PID)
	if r.Comm != "" {
		name += ", " + r.Comm
	}
	switch {
	case r.PID == 0:
		name = "the process"
	case p.Rank != nil:
		name = fmt.Sprintf("rank %d (%s)", *p.Rank, name)
	default:
		name = "pid " + strings.TrimPrefix(name, "pid ")
	}
	on := fmt.Sprintf("%s on GPU %d", name, r.GPU)
	switch {
	case r.Gone && r.State == "Z":
		p.State, p.Summary = peerZombie, on+", which has exited (zombie): the driver no longer lists it"
	case r.Gone:
		p.State, p.Summary = peerExited, on+", which has exited: the driver no longer lists it"
	case r.State == "Z":
		p.State, p.Summary = peerZombie, on+", which has exited (zombie)"
	case r.State == "T" || r.State == "t":
		p.State, p.Summary = peerStopped, on+", which is stopped (state T)"
	case v != nil && v.waits():
		p.State, p.Summary = peerWaiting, on+", which waits in the collective too"
	case r.State == "D" && !(r.CPUCores >= t.ProcessBusyCores):
		p.State, p.Summary = peerDiskSleep, on+", which is in uninterruptible sleep (D), waiting on I/O"
	case v != nil && v.Class != ClassIdle && v.Class != ClassUnknown:
		p.State, p.Class, p.SubKind = peerBusy, v.Class, v.SubKind
		p.Summary = fmt.Sprintf("%s, which is busy, %s-bound (%s/%s: its GPU's verdict says on what)", on, v.Class, v.Class, v.SubKind)
	case r.CPUCores >= t.ProcessBusyCores:
		p.State, p.Class, p.SubKind = peerBusy, ClassHost, SubCPU
		p.Summary = fmt.Sprintf("%s, which is busy on the host (%.2f cores) with its GPU idle", on, r.CPUCores)
	default:
		p.State, p.Summary = peerIdle, on+", which neither works nor waits in the collective"
		if r.State != "" {
			p.Summary += " (state " + r.State + ")"
		}
	}
	return p
}

// stuck says a peer cannot end the wait by itself: stopped, gone, in D
// state without using the CPU, or waiting too with no progress for at least
// StalledPeersSeconds.
func stuck(p Peer, quiet float64, t Thresholds) bool {
	switch p.State {
	case peerStopped, peerZombie, peerExited, peerDiskSleep:
		return true
	case peerWaiting:
		return quiet >= t.StalledPeersSeconds
	}
	return false
}

// peerList names peers for a summary.
func peerList(ps []Peer) string {
	var s []string
	for _, p := range ps {
		s = append(s, p.Summary)
	}
	return strings.Join(s, "; ")
}

// jobPeer is a peer with how long its GPU has made no progress.
type jobPeer struct {
	Peer
	quiet float64
}

// resolveWaits refines, with its job's other ranks, the verdict of every GPU
// that waits in a collective, and names whom it waits for. It also turns
// to waiting, before the span's means do, a GPU whose newest readings hold
// a kernel without progress for WaitNamedSeconds while a rank of its job is
// stopped or gone; and calls busy on the host a GPU whose rank others wait
// for while it works on the CPU. It returns each GPU's peers waited for.
func resolveWaits(in Input, groups []gpuGroup, fresh []Verdict, t Thresholds) [][]Peer {
	out := make([][]Peer, len(in.GPUs))
	quiet := make([]float64, len(in.GPUs))
	for i, w := range in.GPUs {
		quiet[i] = quietSeconds(w, t)
	}
	ranksOn := map[int][]Rank{}
	for _, r := range in.Ranks {
		if !r.Gone {
			ranksOn[r.GPU] = append(ranksOn[r.GPU], r)
		}
	}
	for i, w := range in.GPUs {
		if fresh[i].SubKind == SubWaiting {
			notStopped(&fresh[i], ranksOn[w.Index])
		}
	}
	for _, gr := range groups {
		if !gr.grouped() {
			continue
		}
		for _, i := range gr.members {
			// A GPU whose own rank has exited (a zombie the driver still
			// lists, as a job ends) waits for nobody.
			if slices.ContainsFunc(ranksOn[in.GPUs[i].Index], func(r Rank) bool { return r.State == "Z" }) {
				continue
			}
			peers := jobPeers(in, gr, i, ranksOn, fresh, quiet, t)
			if !fresh[i].waits() && !fastWait(in.GPUs[i], fresh[i], peers, quiet[i], t) {
				continue
			}
			if v, waitsFor := waitVerdict(in.GPUs[i], fresh[i], peers, t); !verdictDisabled(v) {
				fresh[i], out[i] = v, waitsFor
			}
		}
	}
	// A rank its peers wait for that works on the host while its GPU
	// idles is no "process waiting on something not measured".
	pos := map[int]int{}
	for k, w := range in.GPUs {
		pos[w.Index] = k
	}
	for i := range out {
		for _, p := range out[i] {
			j, ok := pos[p.GPU]
			if ok && p.State == peerBusy && fresh[j].Class == ClassIdle && in.GPUs[j].hasProcess() {
				if v := hostBusyVerdict(in.GPUs[j], p, in.GPUs[i].Index, t); !verdictDisabled(v) {
					fresh[j] = v
				}
			}
		}
	}
	return out
}

// notStopped says why a process that holds its GPU without using it waits,
// when its state does: stopped, or in uninterruptible sleep.
func notStopped(v *Verdict, ranks []Rank) {
	for _, r := range ranks {
		switch r.State {
		case "T", "t":
			v.Summary = fmt.Sprintf("its process pid %d (%s) is stopped (state T): it does nothing until resumed", r.PID, r.Comm)
			v.Fix = fmt.Sprintf("resume it (kill -CONT %d) or end it: a stopped rank holds its whole job", r.PID)
			v.Confidence = 0.9
			return
		case "D":
			v.Summary = fmt.Sprintf("its process pid %d (%s) is in uninterruptible sleep (D): it waits on I/O in the kernel", r.PID, r.Comm)
			v.Fix = "check the storage it reads or writes (dmesg, the filesystem's health)"
			return
		}
	}
}

// fastWait says a GPU's newest readings show a collective that has not
// moved for WaitNamedSeconds while a rank of its job is stopped or gone.
func fastWait(w GPUWindow, v Verdict, peers []jobPeer, quiet float64, t Thresholds) bool {
	if v.SubKind == SubGPUDown || !w.hasProcess() || quiet < t.WaitNamedSeconds {
		return false
	}
	return slices.ContainsFunc(peers, func(p jobPeer) bool {
		return p.State == peerStopped || p.State == peerZombie || p.State == peerExited
	})
}

// jobPeers are the ranks of GPU position i's job other than its own: those
// on the job's other GPUs, and those gone.
func jobPeers(in Input, gr gpuGroup, i int, ranksOn map[int][]Rank, fresh []Verdict, quiet []float64, t Thresholds) []jobPeer {
	var out []jobPeer
	for _, j := range gr.members {
		if j == i {
			continue
		}
		w := in.GPUs[j]
		rs := ranksOn[w.Index]
		switch {
		case len(rs) == 0 && !w.hasProcess():
			continue // the job's rank there is gone: among gr.gone
		case len(rs) == 0:
			rs = []Rank{{GPU: w.Index, RankID: -1, CPUCores: w.ProcessCPUCores, IOWait: w.ProcessIOWait}}
		}
		for _, r := range rs {
			out = append(out, jobPeer{peerOf(r, &fresh[j], t), quiet[j]})
		}
	}
	for _, r := range gr.gone {
		out = append(out, jobPeer{Peer: peerOf(r, nil, t)})
	}
	return out
}

// hostBusyVerdict is the verdict of a GPU whose rank works on the host
// while GPU waiter waits for it in a collective.
func hostBusyVerdict(w GPUWindow, p Peer, waiter int, t Thresholds) Verdict {
	ev := func(signal string, v float64, unit, op string, thr float64) Evidence {
		return Evidence{Signal: signal, Value: round(v), Unit: unit, Op: op, Threshold: thr, SpanSeconds: t.SpanSeconds}
	}
	cores := w.ProcessCPUCores
	return Verdict{Class: ClassHost, SubKind: SubCPU, Confidence: 0.6,
		Summary: fmt.Sprintf("its rank works on the host (%.2f cores) with the GPU idle while GPU %d waits for it in a collective: a checkpoint, an evaluation or an input step pauses the job",
			cores, waiter),
		Evidence: []Evidence{ev("sm_active", w.SMActive, "ratio", "<", t.SMActiveCompute), ev("nvml_utilization", w.Utilization, "ratio", "info", 0),
			ev("process_cpu_cores", cores, "cores", ">=", t.ProcessBusyCores)},
		Fix: "a pause for a checkpoint or an evaluation ends by itself; if it recurs every step, move that work off the training loop (asynchronous checkpoints, evaluation on fewer steps) or spread it over the ranks"}
}

// waitVerdict decides, for GPU g holding a collective kernel with no SM
// work, what it waits for, from the ranks of its job visible here
// (peers). pass1 is the verdict the GPU had seen alone.
func waitVerdict(g GPUWindow, pass1 Verdict, peers []jobPeer, t Thresholds) (Verdict, []Peer) {
	var culprits []Peer
	busy, allStuck := false, len(peers) > 0
	for _, p := range peers {
		if p.State != peerWaiting {
			culprits = append(culprits, p.Peer)
		}
		busy = busy || p.State == peerBusy
		allStuck = allStuck && stuck(p.Peer, p.quiet, t)
	}
	best, moving := linkProgress(g, t)
	ev := func(signal string, v float64, unit, op string, thr float64) Evidence {
		return Evidence{Signal: signal, Value: round(v), Unit: unit, Op: op, Threshold: thr, SpanSeconds: t.SpanSeconds}
	}
	evidence := []Evidence{ev("nvml_utilization", g.Utilization, "ratio", ">=", t.HangUtilization),
		ev("sm_active", g.SMActive, "ratio", "<", t.SMActiveStarved), ev("link_bytes_per_second", best, "B/s", "<", t.HangProgressBytes)}
	// A rank that works (a checkpoint, an evaluation) will come back: no
	// stall while one does, however long.
	thr := t.HangSeconds
	if allStuck {
		thr = t.StalledPeersSeconds
	}
	if since, last, ok := stalledSince(g, t); ok && !moving && !busy && last.Sub(since).Seconds() >= thr {
		v := stalledVerdict(g, since, last.Sub(since).Seconds(), thr, culprits, evidence, t)
		if len(culprits) == 0 {
			v.Summary += "; every rank of its job visible here waits too, so the one holding them is on another node or hung inside the collective"
		}
		return v, culprits
	}
	if len(culprits) > 0 {
		how := fmt.Sprintf("utilization %.2f, SM activity %.2f, links at %.2f GB/s", g.Utilization, g.SMActive, best/1e9)
		if q := quietSeconds(g, t); q > 0 {
			how = fmt.Sprintf("a kernel resident with idle SMs and no link progress for %.0f s", q)
		}
		v := Verdict{Class: ClassCommunication, SubKind: SubCollectiveWait, Confidence: 0.8,
			Summary:  fmt.Sprintf("waiting in a collective (%s) for %s", how, peerList(culprits)),
			Evidence: evidence, Fix: waitFix(culprits)}
		return v, culprits
	}
	if pass1.SubKind == SubPeerWait {
		return pass1, nil
	}
	var with []int
	for _, p := range peers {
		with = append(with, p.GPU)
	}
	v := pass1
	if v.SubKind != SubCollectiveWait {
		v = Verdict{Class: ClassCommunication, SubKind: SubCollectiveWait, Confidence: 0.6, Evidence: evidence}
	}
	v.Summary = fmt.Sprintf("waiting in a collective (utilization %.2f, SM activity %.2f, links at %.2f GB/s) with GPUs %s of its job, which wait too: the rank they wait for is not visible on this node",
		g.Utilization, g.SMActive, best/1e9, intList(with))
	v.Fix = "find the rank the job waits for: on another node (compare the job's nodes), or hung inside the collective (py-spy dump on each rank)"
	return v, nil
}

// waitFix says what to do about the ranks a GPU waits for.
func waitFix(culprits []Peer) string {
	for _, p := range culprits {
		switch p.State {
		case peerStopped:
			return fmt.Sprintf("pid %d was stopped (SIGSTOP, a debugger or ^Z): resume it (kill -CONT %d) or end the job; the other ranks wait for it until the NCCL watchdog kills the job", p.PID, p.PID)
		case peerExited, peerZombie:
			return fmt.Sprintf("pid %d has exited: its job cannot complete a collective any more; read its log for why it died and restart the job from its checkpoint (TORCH_NCCL_ASYNC_ERROR_HANDLING=1 and a collective timeout make the others fail fast)", p.PID)
		case peerDiskSleep:
			return fmt.Sprintf("pid %d waits on I/O in the kernel (D state): check its storage (dmesg, the filesystem it reads or writes); the others wait for it", p.PID)
		}
	}
	for _, p := range culprits {
		if p.State == peerBusy {
			return fmt.Sprintf("the job waits for GPU %d's rank: fix what bounds it (%s/%s, below); a pause for a checkpoint or an evaluation is expected and ends by itself", p.GPU, p.Class, p.SubKind)
		}
	}
	return "the job waits for a rank that neither works nor waits in the collective: look at what it does (py-spy dump, its log)"
}

// intList joins GPU indexes for a summary.
func intList(xs []int) string {
	var s []string
	for _, x := range xs {
		s = append(s, fmt.Sprint(x))
	}
	return strings.Join(s, ", ")
}
