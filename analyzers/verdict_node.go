package analyzers

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
	"time"
)

// The node's verdict: its jobs' (groupVerdict, verdict_group.go), the
// headline first, with the GPUs free; and the stragglers among the GPUs
// that compute or communicate.

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

// FindStragglers reports GPUs far below the median SM activity of their
// peers, among GPUs that compute or communicate (an idle GPU is not a
// straggler, it is unused).
func FindStragglers(ws []GPUWindow, vs []GPUVerdict, t Thresholds) []Straggler {
	var sms []float64
	active := map[int]bool{}
	for i, v := range vs {
		// A GPU waiting in a collective is the straggler's victim, not
		// the straggler: its SMs idle because another rank is late.
		if (v.Class == ClassCompute || v.Class == ClassCommunication) && !v.waits() && !math.IsNaN(ws[i].SMActive) {
			sms = append(sms, ws[i].SMActive)
			active[i] = true
		}
	}
	if len(sms) < 3 {
		return nil // with two GPUs there is no majority to compare against
	}
	sorted := slices.Clone(sms)
	sort.Float64s(sorted)
	median := sorted[len(sorted)/2]
	if median < t.SMActiveCompute {
		return nil
	}
	var out []Straggler
	for i, w := range ws {
		if active[i] && w.SMActive < t.StragglerRatio*median {
			out = append(out, Straggler{GPU: w.Index, SMActive: round(w.SMActive), PeerSMActive: round(median)})
		}
	}
	return out
}
