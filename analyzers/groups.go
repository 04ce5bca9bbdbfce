package analyzers

import (
	"cmp"
	"slices"
	"time"
)

// The node runs jobs, not GPUs: its GPUs are grouped by job (a job identity;
// else an NCCL communicator; else the process tree), each group gets a
// verdict (groupVerdict, verdict_group.go), and the node's headline is the
// group whose bottleneck costs the most GPU time, with the GPUs free and the
// other groups named (nodeVerdict, verdict_node.go). A GPU without a
// process belongs to no group: it is free.

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
