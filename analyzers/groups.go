package analyzers

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
)

// The node runs jobs, not GPUs: its GPUs are grouped by job (a job identity;
// else an NCCL communicator; else the process tree), each group gets a
// verdict, and the node's headline is the group whose bottleneck costs the
// most GPU time, with the GPUs free and the other groups named. A GPU
// without a process belongs to no group: it is free.

// Ties between GPUs, weakest first (gpuGroup.by).
const (
	groupByProcess     = "process"
	groupByProcessTree = "process_tree"
	groupByNCCL        = "nccl"
	groupByJob         = "job"
)

// gpuGroup is one job's GPUs, as positions in Input.GPUs, and its ranks
// that are gone.
type gpuGroup struct {
	members []int
	by      string
	gone    []Rank
}

// grouped says whether the group spans more than one GPU's process: a
// kernel its GPUs hold with idle SMs is then a collective.
func (g gpuGroup) grouped() bool { return len(g.members) > 1 || len(g.gone) > 0 }

// unionFind ties positions, keeping for each root the strongest tie.
type unionFind struct {
	parent []int
	by     []string
}

func (u *unionFind) find(i int) int {
	for u.parent[i] != i {
		u.parent[i] = u.parent[u.parent[i]]
		i = u.parent[i]
	}
	return i
}

func (u *unionFind) union(a, b int, by string) {
	ra, rb := u.find(a), u.find(b)
	strength := func(s string) int {
		return slices.Index([]string{groupByProcess, groupByProcessTree, groupByNCCL, groupByJob}, s)
	}
	best := slices.MaxFunc([]string{u.by[ra], u.by[rb], by}, func(x, y string) int { return cmp.Compare(strength(x), strength(y)) })
	u.parent[ra] = rb
	u.by[rb] = best
}

// sameJob says whether two ranks may be of one job by what they carry:
// not when their job identities differ, when their WORLD_SIZE says one
// runs alone or they differ, or when both logs name communicators and
// they share none.
func sameJob(a, b Rank) bool {
	if a.Job != "" && b.Job != "" && a.Job != b.Job {
		return false
	}
	if (a.WorldSize == 1 || b.WorldSize == 1) || (a.WorldSize > 1 && b.WorldSize > 1 && a.WorldSize != b.WorldSize) {
		return false
	}
	if len(a.Comms) > 0 && len(b.Comms) > 0 && !slices.ContainsFunc(a.Comms, func(c string) bool { return slices.Contains(b.Comms, c) }) {
		return false
	}
	return true
}

// tie says how two ranks are tied into one job, "" when they are not: the
// same process, the same job identity, a communicator in common, or the
// same parent (a launcher's children) with nothing against it.
func tie(a, b Rank) string {
	switch {
	case a.PID == b.PID:
		return groupByProcess
	case a.Job != "" && a.Job == b.Job:
		return groupByJob
	case !sameJob(a, b):
		return ""
	case slices.ContainsFunc(a.Comms, func(c string) bool { return slices.Contains(b.Comms, c) }):
		return groupByNCCL
	case a.PPID > 1 && a.PPID == b.PPID:
		return groupByProcessTree
	}
	return ""
}

// groupGPUs ties the GPUs of in into jobs. Each GPU speaks through its
// ranks: those the newest reading lists on it, or, on a GPU no process holds
// any more, the ranks last seen on it, gone since (a job's GPU whose rank
// died or ended is still that job's: its means over the span are the job's).
func groupGPUs(in Input) []gpuGroup {
	pos := map[int]int{}
	for i, w := range in.GPUs {
		pos[w.Index] = i
	}
	job := make([]string, len(in.GPUs))
	for _, j := range in.Jobs {
		if i, ok := pos[j.GPU]; ok && j.Source != JobSourceNone && j.JobID != "" {
			job[i] = j.Source + ":" + j.Namespace + "/" + j.JobID
		}
	}
	u := unionFind{parent: make([]int, len(in.GPUs)), by: make([]string, len(in.GPUs))}
	for i := range u.parent {
		u.parent[i], u.by[i] = i, groupByProcess
		if job[i] != "" {
			u.by[i] = groupByJob
		}
	}
	for i := range job {
		for k := i + 1; k < len(job); k++ {
			if job[i] != "" && job[i] == job[k] {
				u.union(i, k, groupByJob)
			}
		}
	}
	speak := speakingRanks(in, pos)
	for a := range speak {
		for b := a + 1; b < len(speak); b++ {
			ia, ib := pos[speak[a].GPU], pos[speak[b].GPU]
			if ia == ib || (job[ia] != "" && job[ib] != "" && job[ia] != job[ib]) {
				continue
			}
			if by := tie(speak[a], speak[b]); by != "" {
				u.union(ia, ib, by)
			}
		}
	}
	byRoot := map[int]*gpuGroup{}
	var out []*gpuGroup
	for i := range in.GPUs {
		r := u.find(i)
		if byRoot[r] == nil {
			byRoot[r] = &gpuGroup{by: u.by[r]}
			out = append(out, byRoot[r])
		}
		byRoot[r].members = append(byRoot[r].members, i)
	}
	// A gone rank belongs to the job of the GPU it speaks for, or else to
	// the job of a live rank it is tied to (its GPU taken by another job).
	for _, r := range in.Ranks {
		if !r.Gone {
			continue
		}
		var g *gpuGroup
		if slices.ContainsFunc(speak, func(x Rank) bool { return x.PID == r.PID && x.Gone }) {
			g = byRoot[u.find(pos[r.GPU])]
		} else if k := slices.IndexFunc(speak, func(x Rank) bool { return !x.Gone && tie(r, x) != "" }); k >= 0 {
			g = byRoot[u.find(pos[speak[k].GPU])]
		}
		if g != nil && !slices.ContainsFunc(g.gone, func(x Rank) bool { return x.PID == r.PID }) {
			g.gone = append(g.gone, r)
		}
	}
	groups := make([]gpuGroup, len(out))
	for i, g := range out {
		groups[i] = *g
	}
	return groups
}

// speakingRanks are the ranks each GPU of the input is tied by: those the
// newest reading lists on it; on a GPU no process holds, those last seen on
// it, gone since.
func speakingRanks(in Input, pos map[int]int) []Rank {
	var out []Rank
	last := map[int]time.Time{}
	for _, r := range in.Ranks {
		i, ok := pos[r.GPU]
		switch {
		case !ok:
		case !r.Gone:
			out = append(out, r)
		case !in.GPUs[i].hasProcess() && r.LastSeen.After(last[r.GPU]):
			last[r.GPU] = r.LastSeen
		}
	}
	for _, r := range in.Ranks {
		if r.Gone && !last[r.GPU].IsZero() && r.LastSeen.Equal(last[r.GPU]) && !hasLiveRank(out, r.GPU) {
			out = append(out, r)
		}
	}
	return out
}

func hasLiveRank(live []Rank, gpu int) bool {
	return slices.ContainsFunc(live, func(r Rank) bool { return r.GPU == gpu })
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
			fresh[i], out[i] = waitVerdict(in.GPUs[i], fresh[i], peers, t)
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
				fresh[j] = hostBusyVerdict(in.GPUs[j], p, in.GPUs[i].Index, t)
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

// critical says a verdict is one the node leads with: a GPU lost, or a
// collective that no longer moves.
func critical(v Verdict) bool { return v.SubKind == SubGPUDown || v.SubKind == SubCollectiveStalled }

// working says a verdict is of a GPU that does something.
func working(v Verdict) bool { return v.Class != ClassIdle && v.Class != ClassUnknown }

// groupVerdict is what bounds a job on this node, from its GPUs' verdicts
// (vs, in member order; ws their windows). A critical GPU leads; a job
// whose GPUs wait for a busy rank of theirs is bound by what bounds that
// rank; one that waits for a stopped or gone rank waits; otherwise the most
// common class, ties to the one that hurts most.
func groupVerdict(vs []GPUVerdict, ws []GPUWindow) (Verdict, float64) {
	cost := 0.0
	for k, v := range vs {
		// A GPU whose process has gone costs nothing any more, whatever
		// its means over the span still say.
		if ws[k].hasProcess() && (v.Class == ClassCommunication || v.Class == ClassIO || v.Class == ClassHost) {
			idle := 1 - ws[k].SMActive
			if math.IsNaN(idle) {
				idle = 1
			}
			cost += math.Max(0, math.Min(1, idle))
		}
	}
	if k := slices.IndexFunc(vs, func(v GPUVerdict) bool { return critical(v.Verdict) }); k >= 0 {
		v := vs[k].Verdict
		v.Summary = fmt.Sprintf("GPU %d: %s", vs[k].GPU, v.Summary)
		return v, cost
	}
	for _, w := range vs {
		if !w.waits() {
			continue
		}
		for _, p := range w.WaitsFor {
			k := slices.IndexFunc(vs, func(v GPUVerdict) bool { return v.GPU == p.GPU })
			if p.State == peerBusy && k >= 0 && working(vs[k].Verdict) && !vs[k].waits() {
				v := vs[k].Verdict
				v.Summary = fmt.Sprintf("GPU %d waits for GPU %d, %s-bound: %s", w.GPU, p.GPU, v.Class, v.Summary)
				return v, cost
			}
		}
	}
	for _, w := range vs {
		if w.waits() && len(w.WaitsFor) > 0 {
			v := w.Verdict
			v.Summary = fmt.Sprintf("GPU %d: %s", w.GPU, v.Summary)
			return v, cost
		}
	}
	return majority(vs), cost
}

// hurt orders classes by how much they hurt, for ties.
var hurt = map[Class]int{ClassCommunication: 0, ClassIO: 1, ClassHost: 2, ClassCompute: 3, ClassIdle: 4, ClassUnknown: 5}

// majority is the most common class among vs, ties to the one that hurts
// most, with its most common sub-kind; its evidence and fix are those of the
// first GPU of that class and sub-kind.
func majority(vs []GPUVerdict) Verdict {
	// A GPU of the job that holds no process yet (a rank starting) or any
	// more says nothing of what bounds the job while another does.
	if held := slices.DeleteFunc(slices.Clone(vs), func(v GPUVerdict) bool { return v.SubKind == SubNoProcess }); len(held) > 0 {
		vs = held
	}
	count := map[Class]int{}
	conf := map[Class]float64{}
	subs := map[Class]map[string]int{}
	for _, g := range vs {
		count[g.Class]++
		conf[g.Class] += g.Confidence
		if subs[g.Class] == nil {
			subs[g.Class] = map[string]int{}
		}
		subs[g.Class][g.SubKind]++
	}
	best := slices.MinFunc(vs, func(a, b GPUVerdict) int {
		return cmp.Or(cmp.Compare(count[b.Class], count[a.Class]), cmp.Compare(hurt[a.Class], hurt[b.Class]))
	}).Class
	sub, subN := "", 0
	for s, k := range subs[best] {
		if k > subN || (k == subN && s < sub) {
			sub, subN = s, k
		}
	}
	var gpus []int
	for _, g := range vs {
		if g.Class == best {
			gpus = append(gpus, g.GPU)
		}
	}
	v := Verdict{Class: best, SubKind: sub, Confidence: round(conf[best] / float64(count[best]))}
	for _, g := range vs {
		if g.Class == best && g.SubKind == sub {
			v.Summary, v.Evidence, v.Fix = g.Summary, g.Evidence, g.Fix
			break
		}
	}
	v.Summary = fmt.Sprintf("%s %s: %s", plural("GPU", len(gpus)), intList(gpus), v.Summary)
	if len(gpus) < len(vs) {
		var others []string
		for _, g := range vs {
			if g.Class != best {
				others = append(others, fmt.Sprintf("GPU %d %s/%s", g.GPU, g.Class, g.SubKind))
			}
		}
		v.Summary += "; the job's other GPUs: " + strings.Join(others, ", ")
	}
	return v
}

func plural(word string, n int) string {
	if n == 1 {
		return word
	}
	return word + "s"
}

// nodeVerdict lists the node's jobs with their verdicts, the headline first,
// counts the free GPUs (no process, no group), and says the node's verdict:
// the headline job's, named with its GPUs, the GPUs free and the other
// jobs. The headline is a critical job (a GPU lost, a stalled collective),
// else the one whose bottleneck costs the most GPU time, else one that
// works; the node is idle only when no GPU works.
func nodeVerdict(in Input, groups []gpuGroup, gv []GPUVerdict) (Verdict, []Group, int) {
	var out []Group
	free, known := 0, false
	for _, gr := range groups {
		vs := make([]GPUVerdict, len(gr.members))
		ws := make([]GPUWindow, len(gr.members))
		gpus := make([]int, len(gr.members))
		isFree := true
		for k, i := range gr.members {
			vs[k], ws[k], gpus[k] = gv[i], in.GPUs[i], gv[i].GPU
			// A GPU of a job whose rank there is gone is free too.
			if isFreeGPU(in.GPUs[i], gv[i].Verdict) {
				free++
				known = known || gv[i].Class != ClassUnknown
			} else {
				isFree = false
			}
		}
		if isFree {
			continue
		}
		v, cost := groupVerdict(vs, ws)
		// The job's verdict holds since the earliest of its GPUs' of the
		// same class; a GPU's pending class is the GPU's, not the job's.
		v.Pending, v.Since = "", time.Time{}
		for _, g := range vs {
			if g.Class == v.Class && (v.Since.IsZero() || g.Since.Before(v.Since)) {
				v.Since = g.Since
			}
		}
		out = append(out, Group{GPUs: gpus, By: gr.by, Verdict: v, Cost: round(cost)})
	}
	flag := func(b bool) int {
		if b {
			return 1
		}
		return 0
	}
	slices.SortStableFunc(out, func(a, b Group) int {
		return cmp.Or(cmp.Compare(flag(critical(b.Verdict)), flag(critical(a.Verdict))), cmp.Compare(b.Cost, a.Cost),
			cmp.Compare(flag(working(b.Verdict)), flag(working(a.Verdict))), cmp.Compare(len(b.GPUs), len(a.GPUs)),
			cmp.Compare(hurt[a.Class], hurt[b.Class]), cmp.Compare(a.GPUs[0], b.GPUs[0]))
	})
	n := len(in.GPUs)
	if len(out) == 0 {
		if n == 0 {
			return Verdict{Class: ClassUnknown, Summary: "no GPU seen: no GPU backend (for example no NVIDIA driver), no GPU on the host, or the GPU collector failing (see collectors)"}, nil, free
		}
		if !known {
			return Verdict{Class: ClassUnknown, Summary: "no GPU could be classified"}, nil, free
		}
		return Verdict{Class: ClassIdle, SubKind: SubNoProcess, Confidence: 0.9,
			Summary: fmt.Sprintf("%d of %d GPUs free: no process holds them and their SMs idle", free, n)}, nil, free
	}
	v := out[0].Verdict
	if v.Class == ClassUnknown && !critical(v) {
		v.Summary = "no GPU could be classified: " + v.Summary
	}
	if free > 0 {
		v.Summary += fmt.Sprintf("; %d of %d GPUs free", free, n)
	}
	if len(out) > 1 {
		var others []string
		for _, g := range out[1:] {
			others = append(others, fmt.Sprintf("%s %s %s/%s", plural("GPU", len(g.GPUs)), intList(g.GPUs), g.Class, g.SubKind))
		}
		v.Summary += "; other jobs: " + strings.Join(others, "; ")
	}
	return v, out, free
}

// isFreeGPU says no process holds the GPU and it does nothing: idle, or not
// measured (its first reading) with no process. A GPU that does not answer
// is not free.
func isFreeGPU(w GPUWindow, v Verdict) bool {
	switch {
	case v.Class == ClassIdle && v.SubKind == SubNoProcess:
		return true
	case v.Class == ClassUnknown && v.SubKind != SubGPUDown:
		return !w.hasProcess()
	}
	return false
}
