package analyzers

import (
	"fmt"
	"maps"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/gpudiag/gpudiag/sample"
)

// Placement: a job whose GPUs sit on different NUMA nodes talks over the
// inter-socket link (nvidia-smi's SYS), the slowest GPU-to-GPU path, when a
// placement inside one node existed (seeds-000-003 row 11: 4 GPUs on one
// NUMA node; cross-NUMA 4+4, never 4+1).

// auditPlacement reports jobs whose GPUs talk over a SYS path when the
// split is avoidable or lopsided: one NUMA node alone has enough GPUs to
// hold the job, or the job holds unequal numbers of GPUs on its NUMA nodes
// (4+1). An even split no single node could hold (4+4 on a two-socket
// host of 8, the whole node) is what the seed recommends for a job that
// large: flagging it would tell the user to do what they already did. A
// job is a Slurm job, a pod, or else all NCCL processes of the node
// (sample.NCCLHostProcess.Job).
func auditPlacement(a AuditInput) []Finding {
	if a.LastGPUs == nil || a.NCCLProcesses == nil || a.LastGPUs.Topology == nil {
		return nil
	}
	procs, topo := a.NCCLProcesses, a.LastGPUs.Topology
	jobs := map[string]map[int]bool{}
	for i := range procs.Processes {
		p := &procs.Processes[i]
		if len(p.GPUs) == 0 {
			continue
		}
		j := p.Job()
		if jobs[j] == nil {
			jobs[j] = map[int]bool{}
		}
		for _, g := range p.GPUs {
			jobs[j][g] = true
		}
	}
	nodeOf, perNode := gpuSockets(topo, a.NUMA)
	names := make([]string, 0, len(jobs))
	for j := range jobs {
		names = append(names, j)
	}
	sort.Strings(names)
	var out []Finding
	for _, j := range names {
		var gpus []int
		for g := range jobs[j] {
			gpus = append(gpus, g)
		}
		if len(gpus) < 2 {
			continue
		}
		sort.Ints(gpus)
		worst, ok := topo.SlowestPair(gpus)
		if !ok || worst.Link != sample.LinkSYS {
			continue
		}
		split, balanced, known := jobSplit(gpus, nodeOf)
		fitsOne := -1
		nodes := make([]int, 0, len(perNode))
		for n := range perNode {
			nodes = append(nodes, n)
		}
		sort.Ints(nodes)
		for _, n := range nodes {
			if len(perNode[n]) >= len(gpus) {
				fitsOne = n
				break
			}
		}
		if known && balanced && fitsOne < 0 {
			continue // an even split too large for one node: the seed's 4+4
		}
		who := j
		if who == "" {
			who = "the node's NCCL processes"
		}
		summary := fmt.Sprintf("%s use GPUs %s; GPUs %d and %d talk across the inter-socket link (SYS, expected %.0f GB/s one way)",
			who, joinInts(gpus), worst.A, worst.B, worst.ExpectedBytesPerSecond/1e9)
		if known && !balanced {
			summary += fmt.Sprintf("; the split over NUMA nodes is lopsided (%s)", split)
		}
		f := Finding{Check: "job_spans_numa_nodes", Severity: SeverityWarning, Summary: summary,
			Fix: "place the job's GPUs on one NUMA node (or as equal halves on both, never 4+1); prefer jobs of 4 or 8 GPUs on two-socket hosts"}
		if fitsOne >= 0 {
			local := perNode[fitsOne]
			f.Fix = fmt.Sprintf("NUMA node %d alone has %d GPUs (%s): run the job there, with its CPUs and memory bound to node %d",
				fitsOne, len(local), joinInts(local), fitsOne)
		}
		out = append(out, f)
	}
	return out
}

// gpuSockets says which NUMA node each GPU sits on and lists each node's
// GPUs. The NUMA collector's placement is used when it knows a node for
// the GPUs; without it (numa_node -1 in a VM, no reading) the topology
// stands in: GPUs joined by any path better than SYS share a socket, so
// the groups of GPUs joined that way are the nodes, numbered by their
// lowest GPU.
func gpuSockets(topo *sample.Topology, numa *sample.NUMA) (map[int]int, map[int][]int) {
	nodeOf := map[int]int{}
	perNode := map[int][]int{}
	if numa != nil {
		for _, g := range numa.GPUs {
			if g.NUMANode >= 0 && g.GPU >= 0 {
				nodeOf[g.GPU] = g.NUMANode
				perNode[g.NUMANode] = append(perNode[g.NUMANode], g.GPU)
			}
		}
	}
	if len(nodeOf) > 0 || topo == nil {
		for n := range perNode {
			sort.Ints(perNode[n])
		}
		return nodeOf, perNode
	}
	// Union-find over the pairs not joined by SYS.
	parent := map[int]int{}
	var find func(int) int
	find = func(x int) int {
		if p, ok := parent[x]; ok && p != x {
			r := find(p)
			parent[x] = r
			return r
		}
		parent[x] = x
		return x
	}
	for _, p := range topo.Pairs {
		ra, rb := find(p.A), find(p.B)
		if p.Link != "" && p.Link != sample.LinkSYS && ra != rb {
			parent[max(ra, rb)] = min(ra, rb)
		}
	}
	for g := range parent {
		r := find(g)
		nodeOf[g] = r
		perNode[r] = append(perNode[r], g)
	}
	for n := range perNode {
		sort.Ints(perNode[n])
	}
	return nodeOf, perNode
}

// jobSplit counts a job's GPUs per NUMA node: the split as "4+1" (nodes in
// order), whether every node holds as many, and whether each GPU's node
// is known.
func jobSplit(gpus []int, nodeOf map[int]int) (split string, balanced, known bool) {
	count := map[int]int{}
	for _, g := range gpus {
		n, ok := nodeOf[g]
		if !ok {
			return "", false, false
		}
		count[n]++
	}
	nodes := make([]int, 0, len(count))
	for n := range count {
		nodes = append(nodes, n)
	}
	sort.Ints(nodes)
	parts := make([]string, len(nodes))
	balanced = true
	for i, n := range nodes {
		parts[i] = fmt.Sprint(count[n])
		balanced = balanced && count[n] == count[nodes[0]]
	}
	return strings.Join(parts, "+"), balanced, true
}

func joinInts(xs []int) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = fmt.Sprint(x)
	}
	return strings.Join(s, ",")
}

// auditOMPAffinity reports GPU processes whose OpenMP threads are pinned
// (GOMP_CPU_AFFINITY, libgomp's list) to CPUs none of which is local to
// the process's GPUs: an affinity written for another GPU's NUMA node,
// typically GPU 0's, copied to every rank (seeds-000-003 rows 18 and 40:
// the seed's own Pod Example 1 sets GOMP_CPU_AFFINITY="0-31 64-95"
// whatever GPU the device plugin gives). The threads that feed the GPU
// then run across the inter-socket link from it, whatever the cpuset
// allows. A list with some local CPUs is a choice, not a copy: no finding.
func auditOMPAffinity(a AuditInput) []Finding {
	if a.NCCLProcesses == nil || a.NUMA == nil {
		return nil
	}
	local := map[int]map[int]bool{}
	node := map[int]int{}
	lists := map[int]string{}
	for _, g := range a.NUMA.GPUs {
		// numa_node -1 lists every CPU as local: nothing to compare with.
		if set, ok := cpuSet(g.LocalCPUList); ok && g.NUMANode >= 0 && g.GPU >= 0 && len(set) > 0 {
			local[g.GPU], node[g.GPU], lists[g.GPU] = set, g.NUMANode, g.LocalCPUList
		}
	}
	type remote struct {
		pids     []string
		affinity string
	}
	byGPU := map[int]*remote{}
	for i := range a.NCCLProcesses.Processes {
		p := &a.NCCLProcesses.Processes[i]
		v, ok := p.EnvValue("GOMP_CPU_AFFINITY")
		if !ok || p.ForkOf != 0 || len(p.GPUs) == 0 {
			continue // no pinning, a fork sharing its parent's, or no GPU known
		}
		pinned, ok := gompCPUs(v)
		if !ok || len(pinned) == 0 {
			continue
		}
		near, known := false, true
		for _, g := range p.GPUs {
			set, ok := local[g]
			known = known && ok
			for c := range pinned {
				near = near || set[c]
			}
		}
		if !known || near {
			continue
		}
		g := slices.Min(p.GPUs)
		if byGPU[g] == nil {
			byGPU[g] = &remote{affinity: v}
		}
		byGPU[g].pids = append(byGPU[g].pids, fmt.Sprintf("pid %d", p.PID))
	}
	var out []Finding
	for _, g := range slices.Sorted(maps.Keys(byGPU)) {
		r, idx := byGPU[g], g
		out = append(out, Finding{Check: "omp_affinity_remote", Severity: SeverityWarning, GPU: &idx,
			Summary: fmt.Sprintf("%s on GPU %d pin their OpenMP threads to CPUs %q (GOMP_CPU_AFFINITY), none local to the GPU (NUMA node %d: %s): an affinity written for another GPU's node",
				whoList(r.pids), g, r.affinity, node[g], lists[g]),
			Fix: fmt.Sprintf("derive GOMP_CPU_AFFINITY from the GPU's node (here %s, /sys/bus/pci/devices/<bdf>/local_cpulist) or drop it and bind the process with numactl --cpunodebind=%d, or Kubernetes Topology Manager single-numa-node", lists[g], node[g])})
	}
	return out
}

// gompCPUs parses a GOMP_CPU_AFFINITY list: CPU numbers and ranges
// ("0-31", "0-31:2" for every second), separated by spaces or commas
// (libgomp's documentation); false for anything else.
func gompCPUs(v string) (map[int]bool, bool) {
	out := map[int]bool{}
	for _, part := range strings.FieldsFunc(v, func(r rune) bool { return r == ' ' || r == ',' || r == '\t' }) {
		rng, strideText, hasStride := strings.Cut(part, ":")
		lo, hi, isRange := strings.Cut(rng, "-")
		a, err := strconv.Atoi(lo)
		if err != nil || a < 0 {
			return nil, false
		}
		b, stride := a, 1
		if isRange {
			if b, err = strconv.Atoi(hi); err != nil || b < a {
				return nil, false
			}
		}
		if hasStride {
			if stride, err = strconv.Atoi(strideText); err != nil || stride < 1 {
				return nil, false
			}
		}
		if b >= 1<<16 || len(out)+(b-a)/stride >= 1<<16 {
			return nil, false // no host has so many CPUs: a corrupt value
		}
		for c := a; c <= b; c += stride {
			out[c] = true
		}
	}
	return out, true
}

// NUMA allocations node-wide (seeds-000-003 row 9): the rate of other_node
// over local_node plus other_node per node. The seed gives no threshold;
// RemoteMemoryWarn, row 8's proposal for one process's memory, is used,
// with a floor on the rate so that an idle node's few allocations say
// nothing: 2560 pages a second is 10 MiB/s of 4 KiB pages.
const remoteAllocationsMinPagesPerSecond = 2560

// auditNodeRemoteAllocations reports the NUMA nodes with GPUs attached
// that, over the newest interval, hand a large share of the pages they
// allocate to tasks running on another node: processes run on one socket
// with memory on the other, the node-wide form of gpu_process_remote_memory
// (which names the process). Info: the counters count allocations, not
// accesses, and which processes make them the per-process check tells.
func auditNodeRemoteAllocations(a AuditInput) []Finding {
	if a.NUMA == nil {
		return nil
	}
	gpusOn := map[int][]int{}
	for _, g := range a.NUMA.GPUs {
		if g.NUMANode >= 0 && g.GPU >= 0 {
			gpusOn[g.NUMANode] = append(gpusOn[g.NUMANode], g.GPU)
		}
	}
	var out []Finding
	for _, n := range a.NUMA.Nodes {
		gpus := gpusOn[n.Node]
		if len(gpus) == 0 || n.OtherNodeRatio == nil || n.AllocationsPerSecond == nil ||
			*n.OtherNodeRatio <= RemoteMemoryWarn || n.AllocationsPerSecond.OtherNode < remoteAllocationsMinPagesPerSecond {
			continue
		}
		slices.Sort(gpus)
		out = append(out, Finding{Check: "numa_remote_allocations", Severity: SeverityInfo, GPUs: gpus, Device: fmt.Sprintf("node%d", n.Node),
			Summary: fmt.Sprintf("NUMA node %d (GPUs %s) gave %.0f%% of the pages it allocated (%.0f pages/s) to tasks running on another node: memory and CPUs of the node's processes are split across the sockets",
				n.Node, intList(gpus), *n.OtherNodeRatio*100, n.AllocationsPerSecond.OtherNode),
			Evidence: []Evidence{
				{Signal: "other_node_ratio", Value: round(*n.OtherNodeRatio), Unit: "ratio", Op: ">", Threshold: RemoteMemoryWarn},
				{Signal: "other_node_pages_per_second", Value: round(n.AllocationsPerSecond.OtherNode), Unit: "pages/s", Op: ">=", Threshold: remoteAllocationsMinPagesPerSecond},
			},
			Fix: "bind each GPU process's memory with its CPUs to its GPU's node (numactl --cpunodebind=N --membind=N, --cpuset-mems, or Kubernetes Memory Manager Static with Topology Manager single-numa-node); numastat -p <pid> names the processes"})
	}
	return out
}
