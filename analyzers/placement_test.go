package analyzers

import (
	"strings"
	"testing"

	"github.com/gpudiag/gpudiag/sample"
)

// The reference host: GPUs 0–3 on NUMA node 0, 4–7 on node 1, PCIe only
// (NODE inside a socket, SYS across).
func twoSocketTopology() (*sample.Topology, *sample.NUMA) {
	t := &sample.Topology{}
	n := &sample.NUMA{}
	for a := 0; a < 8; a++ {
		n.GPUs = append(n.GPUs, sample.GPUNUMA{GPU: a, NUMANode: a / 4})
		for b := a + 1; b < 8; b++ {
			link := sample.LinkNODE
			if a/4 != b/4 {
				link = sample.LinkSYS
			}
			t.Pairs = append(t.Pairs, sample.GPUPair{A: a, B: b, Link: link, ExpectedBytesPerSecond: 63e9})
		}
	}
	return t, n
}

// placement is auditPlacement as Audit runs it: without the rules the
// tests switched off (TestSeedConditionTestsFire).
func placement(a AuditInput) []Finding { return withoutDisabled(auditPlacement(a)) }

func TestJobSpanningNUMANodes(t *testing.T) {
	topo, numa := twoSocketTopology()
	job := func(id string, gpus ...int) sample.NCCLHostProcess {
		return sample.NCCLHostProcess{SlurmJobID: id, GPUs: gpus}
	}
	procs := &sample.NCCLHostProcesses{Processes: []sample.NCCLHostProcess{
		job("11", 0), job("11", 1), // inside node 0: fine
		job("22", 3), job("22", 4), // 3 and 4 straddle the sockets
		job("33", 4, 5, 6, 7), // a whole socket: fine
	}}
	fs := placement(AuditInput{NCCLProcesses: procs, LastGPUs: &sample.GPUs{Topology: topo}, NUMA: numa})
	if len(fs) != 1 || fs[0].Check != "job_spans_numa_nodes" || fs[0].Device != "" || !strings.Contains(fs[0].Summary, "slurm job 22 use GPUs 3,4") || !strings.Contains(fs[0].Summary, "GPUs 3 and 4") ||
		!strings.Contains(fs[0].Fix, "NUMA node 0 alone has 4 GPUs (0,1,2,3)") {
		t.Fatalf("findings %+v", fs)
	}
	// 5 GPUs cannot fit one socket of 4: still flagged, with the generic fix.
	procs = &sample.NCCLHostProcesses{Processes: []sample.NCCLHostProcess{job("44", 0, 1, 2, 3, 4)}}
	fs = placement(AuditInput{NCCLProcesses: procs, LastGPUs: &sample.GPUs{Topology: topo}, NUMA: numa})
	if len(fs) != 1 || !strings.Contains(fs[0].Fix, "never 4+1") {
		t.Fatalf("5-GPU job: %+v", fs)
	}
	if fs := placement(AuditInput{NCCLProcesses: procs, LastGPUs: &sample.GPUs{}, NUMA: numa}); fs != nil {
		t.Fatalf("no topology, yet %+v", fs)
	}
	// Without the NUMA collector the topology's non-SYS groups stand in
	// for the sockets: the 4+1 split is still seen as lopsided.
	fs = placement(AuditInput{NCCLProcesses: procs, LastGPUs: &sample.GPUs{Topology: topo}})
	if len(fs) != 1 || !strings.Contains(fs[0].Summary, "lopsided (4+1)") {
		t.Fatalf("5-GPU job without NUMA reading: %+v", fs)
	}
}

// An 8-GPU job on the whole two-socket host is the seed's 4+4: its SYS
// pairs are unavoidable and no placement is better, so no finding. A 3+3
// split no socket could hold is as even; a 2+2 split is not needed (one
// socket holds 4) and still fires.
func TestJobSpanningNUMANodesEvenSplit(t *testing.T) {
	topo, numa := twoSocketTopology()
	procs := func(gpus ...int) *sample.NCCLHostProcesses {
		var ps []sample.NCCLHostProcess
		for _, g := range gpus {
			ps = append(ps, sample.NCCLHostProcess{SlurmJobID: "7", GPUs: []int{g}})
		}
		return &sample.NCCLHostProcesses{Processes: ps}
	}
	for _, n := range []*sample.NUMA{numa, nil} {
		for _, gpus := range [][]int{{0, 1, 2, 3, 4, 5, 6, 7}, {1, 2, 3, 4, 5, 6}} {
			if fs := placement(AuditInput{NCCLProcesses: procs(gpus...), LastGPUs: &sample.GPUs{Topology: topo}, NUMA: n}); len(fs) != 0 {
				t.Errorf("GPUs %v (NUMA reading %v): even split no socket holds, yet %+v", gpus, n != nil, fs)
			}
		}
	}
	fs := placement(AuditInput{NCCLProcesses: procs(2, 3, 4, 5), LastGPUs: &sample.GPUs{Topology: topo}, NUMA: numa})
	if len(fs) != 1 || fs[0].Check != "job_spans_numa_nodes" || !strings.Contains(fs[0].Fix, "NUMA node 0 alone has 4 GPUs") {
		t.Fatalf("2+2 job that fits one socket: %+v", fs)
	}
}

// Every rank given GPU 0's OpenMP affinity: the ranks on the second
// socket's GPUs feed them from the first socket's CPUs.
func TestOMPAffinityRemote(t *testing.T) {
	numa := &sample.NUMA{}
	for g := 0; g < 8; g++ {
		list := "0-31,64-95"
		if g >= 4 {
			list = "32-63,96-127"
		}
		numa.GPUs = append(numa.GPUs, sample.GPUNUMA{GPU: g, NUMANode: g / 4, LocalCPUList: list})
	}
	rank := func(pid, gpu int, affinity string) sample.NCCLHostProcess {
		p := ncclRank(pid, "a", []int{gpu})
		if affinity != "" {
			p.Env = append(p.Env, sample.NCCLEnv{Name: "GOMP_CPU_AFFINITY", Value: affinity})
		}
		return p
	}
	for _, tc := range []struct {
		name, want, summary string
		procs               []sample.NCCLHostProcess
		numa                *sample.NUMA
	}{
		{name: "no affinity", procs: []sample.NCCLHostProcess{rank(1, 0, ""), rank(2, 5, "")}, numa: numa},
		{name: "each rank its own node", procs: []sample.NCCLHostProcess{rank(1, 0, "0-31 64-95"), rank(2, 5, "32-63 96-127")}, numa: numa},
		{name: "GPU 0's affinity everywhere", procs: []sample.NCCLHostProcess{rank(1, 0, "0-31 64-95"), rank(2, 5, "0-31 64-95"), rank(3, 6, "0-31 64-95")}, numa: numa,
			want: "omp_affinity_remote:warning,omp_affinity_remote:warning", summary: `pid 2 on GPU 5 pin their OpenMP threads to CPUs "0-31 64-95" (GOMP_CPU_AFFINITY), none local to the GPU (NUMA node 1: 32-63,96-127)`},
		{name: "strided, some local", procs: []sample.NCCLHostProcess{rank(2, 5, "0-63:2")}, numa: numa},
		{name: "strided, none local", procs: []sample.NCCLHostProcess{rank(2, 5, "0-30:2,64-94:2")}, numa: numa,
			want: "omp_affinity_remote:warning", summary: "pid 2 on GPU 5"},
		{name: "no NUMA reading", procs: []sample.NCCLHostProcess{rank(2, 5, "0-31 64-95")}},
		{name: "not a CPU list", procs: []sample.NCCLHostProcess{rank(2, 5, "cores")}, numa: numa},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs := Audit(AuditInput{NCCLProcesses: &sample.NCCLHostProcesses{Processes: tc.procs}, NUMA: tc.numa})
			if got := checks(fs); got != tc.want {
				t.Fatalf("findings %q; want %q", got, tc.want)
			}
			if tc.want != "" && (!strings.Contains(fs[0].Summary, tc.summary) || !strings.Contains(fs[0].Fix, "numactl --cpunodebind=1")) {
				t.Errorf("%+v; want %q in the summary", fs[0], tc.summary)
			}
		})
	}
}

// A NUMA node with GPUs that hands a large share of its page allocations
// to tasks on another node, at a rate that is more than noise, has its
// processes split across the sockets; a few allocations, a local node, or
// a node without GPUs are no finding.
func TestNodeRemoteAllocations(t *testing.T) {
	node := func(id int, ratio, otherPerSecond float64) sample.NUMANode {
		return sample.NUMANode{Node: id, OtherNodeRatio: &ratio,
			AllocationsPerSecond: &sample.NUMAAllocationRates{OtherNode: otherPerSecond, LocalNode: otherPerSecond / ratio * (1 - ratio)}}
	}
	gpus := []sample.GPUNUMA{{GPU: 0, NUMANode: 0}, {GPU: 1, NUMANode: 0}, {GPU: 2, NUMANode: 1}}
	for _, tc := range []struct {
		name, want, summary string
		nodes               []sample.NUMANode
		gpus                []sample.GPUNUMA
	}{
		{name: "half remote on GPU node 0", nodes: []sample.NUMANode{node(0, 0.5, 20000), node(1, 0.01, 100)}, gpus: gpus,
			want: "numa_remote_allocations:info", summary: "NUMA node 0 (GPUs 0, 1) gave 50% of the pages it allocated (20000 pages/s)"},
		{name: "local", nodes: []sample.NUMANode{node(0, 0.05, 20000)}, gpus: gpus},
		{name: "a trickle", nodes: []sample.NUMANode{node(0, 0.9, 100)}, gpus: gpus},
		{name: "no GPU on the node", nodes: []sample.NUMANode{node(2, 0.9, 20000)}, gpus: gpus},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []Finding
			for _, f := range Audit(AuditInput{NUMA: &sample.NUMA{Nodes: tc.nodes, GPUs: tc.gpus}}) {
				if f.Check == "numa_remote_allocations" {
					got = append(got, f)
				}
			}
			if checks(got) != tc.want {
				t.Fatalf("findings %q; want %q", checks(got), tc.want)
			}
			if tc.want != "" && (!strings.Contains(got[0].Summary, tc.summary) || got[0].Device != "node0") {
				t.Errorf("finding %+v lacks %q", got[0], tc.summary)
			}
		})
	}
}
