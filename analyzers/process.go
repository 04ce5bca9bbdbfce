package analyzers

import "fmt"

// Checks of the GPU processes (gpuprocess collector): where their memory and
// CPUs sit against their GPU's NUMA node.

// RemoteMemoryWarn is the share of a GPU process's resident memory on another
// NUMA node above which placement is flagged (seeds-000-003 row 8 proposes
// 25%; the example it quotes had 75% remote).
const RemoteMemoryWarn = 0.25

// auditProcesses runs the checks on the newest gpuprocess reading.
func auditProcesses(a AuditInput) []Finding {
	p := a.Processes
	if p == nil {
		return nil
	}
	var out []Finding
	for _, g := range p.GPUs {
		if len(g.Processes) == 0 || g.NUMANode < 0 {
			continue
		}
		idx := g.GPU
		if g.RemoteMemoryRatio != nil && *g.RemoteMemoryRatio > RemoteMemoryWarn {
			out = append(out, Finding{Check: "gpu_process_remote_memory", Severity: SeverityWarning, GPU: &idx,
				Summary: fmt.Sprintf("%.0f%% of a GPU process's resident memory is on a NUMA node other than its GPU's (node %d): host↔GPU copies cross the socket link",
					*g.RemoteMemoryRatio*100, g.NUMANode),
				Evidence: []Evidence{{Signal: "remote_memory_ratio", Value: round(*g.RemoteMemoryRatio), Unit: "ratio", Op: ">", Threshold: RemoteMemoryWarn}},
				Fix:      fmt.Sprintf("bind the job's memory to node %d as well as its CPUs (numactl --membind=%d, docker --cpuset-mems=%d, Kubernetes Topology Manager single-numa-node)", g.NUMANode, g.NUMANode, g.NUMANode)})
		}
		switch {
		case g.CPUsFullyRemote:
			out = append(out, Finding{Check: "gpu_process_remote_cpus", Severity: SeverityWarning, GPU: &idx,
				Summary: fmt.Sprintf("a GPU process may only run on CPUs of another NUMA node than its GPU's (node %d)", g.NUMANode),
				Fix:     fmt.Sprintf("pin it to the GPU's local CPUs (%s): numactl --cpunodebind=%d, taskset, or the container's cpuset", g.LocalCPUList, g.NUMANode)})
		case g.CPUsOffNodeRatio != nil && *g.CPUsOffNodeRatio > 0:
			out = append(out, Finding{Check: "gpu_process_not_pinned", Severity: SeverityInfo, GPU: &idx,
				Summary:  fmt.Sprintf("%.0f%% of the CPUs a GPU process may use are off its GPU's NUMA node: the scheduler may move it away from the GPU", *g.CPUsOffNodeRatio*100),
				Evidence: []Evidence{{Signal: "cpus_off_node_ratio", Value: round(*g.CPUsOffNodeRatio), Unit: "ratio", Op: ">", Threshold: 0}},
				Fix:      fmt.Sprintf("pin the job to node %d's CPUs (%s)", g.NUMANode, g.LocalCPUList)})
		}
	}
	return out
}
