package analyzers

import (
	"fmt"
	"strings"

	"github.com/gpudiag/gpudiag/sample"
)

// kubelet_numa_unaware: GPU pods whose CPUs or memory sit on another NUMA
// node than their GPU, on a kubelet whose resource managers do not align
// them (seeds-000-003 rows 38–41). The policies alone are no finding: a
// node that places its pods well by luck or by the job's own pinning costs
// nothing; the remote access (gpu_process_remote_memory or
// gpu_process_remote_cpus, the same conditions) is what makes the policy
// the fix.
func auditKubelet(a AuditInput) []Finding {
	k, procs := a.Kubelet, a.Processes
	if k == nil || !k.Found || procs == nil || k.NUMAAligned() {
		return nil
	}
	var gpus []string
	for _, g := range procs.GPUs {
		if g.NUMANode < 0 || !podOnGPU(g) {
			continue
		}
		remoteMem := g.RemoteMemoryRatio != nil && *g.RemoteMemoryRatio > RemoteMemoryWarn
		if remoteMem || g.CPUsFullyRemote {
			what := "CPUs"
			if remoteMem {
				what = fmt.Sprintf("%.0f%% of memory", *g.RemoteMemoryRatio*100)
			}
			gpus = append(gpus, fmt.Sprintf("GPU %d (node %d: %s remote)", g.GPU, g.NUMANode, what))
		}
	}
	if len(gpus) == 0 {
		return nil
	}
	var why []string
	if k.CPUManagerPolicy == "none" {
		why = append(why, "cpuManagerPolicy none (no exclusive CPUs)")
	}
	if k.TopologyManagerPolicy != "single-numa-node" && k.TopologyManagerPolicy != "restricted" {
		why = append(why, fmt.Sprintf("topologyManagerPolicy %s (a pod is admitted whatever its alignment)", k.TopologyManagerPolicy))
	}
	fix := "set cpuManagerPolicy: static and topologyManagerPolicy: single-numa-node (or restricted)"
	if k.MemoryManagerPolicy != "Static" {
		fix += ", memoryManagerPolicy: Static with reservedMemory to pin memory as well"
	}
	fix += " in the kubelet's config, drain the node, remove cpu_manager_state (and memory_manager_state) and restart the kubelet; GPU pods need Guaranteed QoS with integer CPUs to get exclusive ones"
	return []Finding{{Check: "kubelet_numa_unaware", Severity: SeverityWarning,
		Summary: fmt.Sprintf("GPU pods reach their GPU's NUMA node remotely (%s) and the kubelet does not align pods to NUMA nodes: %s",
			strings.Join(gpus, ", "), strings.Join(why, ", ")),
		Fix: fix}}
}

// podOnGPU is whether a Kubernetes pod's process holds the GPU.
func podOnGPU(g sample.GPUProcessGroup) bool {
	for _, p := range g.Processes {
		if p.OnGPU && p.PodUID != "" {
			return true
		}
	}
	return false
}
