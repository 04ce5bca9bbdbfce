package sample

// KubeletKey is the kubelet collector's key: its samples are *Kubelet.
var KubeletKey = NewKey[Kubelet]("kubelet")

// Kubelet is one reading of the kubelet's resource managers: the policies
// that decide whether a pod's CPUs and memory sit on its GPUs' NUMA node.
// Found is false on a node without the kubelet's config file, and then
// nothing else is set.
type Kubelet struct {
	Found      bool   `json:"found"`
	ConfigPath string `json:"config_path,omitempty"`
	// The policies, the kubelet's defaults filled in where the config
	// leaves them out (none, None, none, container). CPUManagerPolicy and
	// MemoryManagerPolicy are the state files' policyName when those
	// exist: the kubelet writes what it runs, flags included.
	CPUManagerPolicy      string `json:"cpu_manager_policy"`
	MemoryManagerPolicy   string `json:"memory_manager_policy"`
	TopologyManagerPolicy string `json:"topology_manager_policy"`
	TopologyManagerScope  string `json:"topology_manager_scope"`
	ReservedSystemCPUs    string `json:"reserved_system_cpus,omitempty"`
	// CPUManagerState and MemoryManagerState say whether the state file
	// was read; the pods named are those holding exclusive CPUs (static
	// CPU manager) or pinned memory (Static memory manager), by pod UID.
	CPUManagerState     bool     `json:"cpu_manager_state"`
	DefaultCPUSet       string   `json:"default_cpu_set,omitempty"`
	ExclusiveCPUPods    []string `json:"exclusive_cpu_pods,omitempty"`
	MemoryManagerState  bool     `json:"memory_manager_state"`
	PinnedMemoryPods    []string `json:"pinned_memory_pods,omitempty"`
	ExclusiveContainers int      `json:"exclusive_containers,omitempty"`
	PinnedMemContainers int      `json:"pinned_memory_containers,omitempty"`
	Errors              []string `json:"errors,omitempty"`
}

// NUMAAligned is whether the policies place a pod's CPUs on its devices'
// NUMA node: exclusive CPUs (static CPU manager) and a topology manager
// that refuses a pod it cannot align (restricted, single-numa-node).
// best-effort admits the pod anyway, and none ignores the devices.
func (k *Kubelet) NUMAAligned() bool {
	return k.CPUManagerPolicy != "none" &&
		(k.TopologyManagerPolicy == "single-numa-node" || k.TopologyManagerPolicy == "restricted")
}

// SizeBytes estimates the memory a reading holds, for the window's budget.
func (k *Kubelet) SizeBytes() int {
	n := 160 + len(k.ConfigPath) + len(k.CPUManagerPolicy) + len(k.MemoryManagerPolicy) + len(k.TopologyManagerPolicy) +
		len(k.TopologyManagerScope) + len(k.ReservedSystemCPUs) + len(k.DefaultCPUSet)
	for _, l := range [][]string{k.ExclusiveCPUPods, k.PinnedMemoryPods, k.Errors} {
		n += ncclListSize(l)
	}
	return n
}
