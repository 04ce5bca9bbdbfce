package analyzers

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strings"
)

// A job's verdict on this node, from its GPUs' verdicts (verdict.go): the
// GPU that leads it, the rank its GPUs wait for, or the class most of them
// share; and the GPU time its bottleneck costs, by which nodeVerdict
// (verdict_node.go) picks the node's headline job.

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
