package analyzers

import (
	"fmt"
	"sort"
	"strings"

	"github.com/gpudiag/gpudiag/sample"
)

// Placement: a job whose GPUs sit on different NUMA nodes talks over the
// inter-socket link (nvidia-smi's SYS), the slowest GPU-to-GPU path, when a
// placement inside one node existed (seeds-000-003 row 11: 4 GPUs on one
// NUMA node; cross-NUMA 4+4, never 4+1).

// auditPlacement reports jobs spread over a SYS path while one NUMA node has
// enough GPUs to hold them. A job is a Slurm job, a pod, or else all NCCL
// processes of the node (sample.NCCLHostProcess.Job).
func auditPlacement(a AuditInput) []Finding {
	if a.LastGPUs == nil || a.NCCLProcesses == nil || a.LastGPUs.Topology == nil {
		return nil
	}
	procs, topo, numa := a.NCCLProcesses, a.LastGPUs.Topology, a.NUMA
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
	perNode := map[int][]int{}
	if numa != nil {
		for _, g := range numa.GPUs {
			if g.NUMANode >= 0 && g.GPU >= 0 {
				perNode[g.NUMANode] = append(perNode[g.NUMANode], g.GPU)
			}
		}
	}
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
		who := j
		if who == "" {
			who = "the node's NCCL processes"
		}
		f := Finding{Check: "job_spans_numa_nodes", Severity: SeverityWarning,
			Summary: fmt.Sprintf("%s use GPUs %s; GPUs %d and %d talk across the inter-socket link (SYS, expected %.0f GB/s one way)",
				who, joinInts(gpus), worst.A, worst.B, worst.ExpectedBytesPerSecond/1e9),
			Fix: "place the job's GPUs on one NUMA node (or as equal halves on both, never 4+1); prefer jobs of 4 or 8 GPUs on two-socket hosts"}
		nodes := make([]int, 0, len(perNode))
		for n := range perNode {
			nodes = append(nodes, n)
		}
		sort.Ints(nodes)
		for _, n := range nodes {
			if local := perNode[n]; len(local) >= len(gpus) {
				sort.Ints(local)
				f.Fix = fmt.Sprintf("NUMA node %d alone has %d GPUs (%s): run the job there, with its CPUs and memory bound to node %d",
					n, len(local), joinInts(local), n)
				break
			}
		}
		out = append(out, f)
	}
	return out
}

func joinInts(xs []int) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = fmt.Sprint(x)
	}
	return strings.Join(s, ",")
}
