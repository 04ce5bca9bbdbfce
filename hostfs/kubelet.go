package hostfs

import (
	"encoding/json"
	"fmt"
	"sort"

	"sigs.k8s.io/yaml"
)

// The kubelet's resource manager settings: its config file
// (KubeletConfiguration, YAML or JSON) and the checkpoints the CPU and
// memory managers write under its root directory, read-only.

// KubeletFileBytes bounds the read of a kubelet config or state file: a
// config is a few KiB, a state file lists each container's CPUs or memory
// blocks, some hundred bytes each, so 110 pods take some 100 KiB.
const KubeletFileBytes = 4 << 20

// KubeletConfig is what the audit reads of a KubeletConfiguration; a field
// the file leaves out is "".
type KubeletConfig struct {
	CPUManagerPolicy      string `json:"cpuManagerPolicy"`
	MemoryManagerPolicy   string `json:"memoryManagerPolicy"`
	TopologyManagerPolicy string `json:"topologyManagerPolicy"`
	TopologyManagerScope  string `json:"topologyManagerScope"`
	ReservedSystemCPUs    string `json:"reservedSystemCPUs"`
}

// ParseKubeletConfig parses a KubeletConfiguration; other keys are
// ignored, a file that is not a YAML or JSON mapping is an error.
func ParseKubeletConfig(path string, b []byte) (KubeletConfig, error) {
	var c KubeletConfig
	if err := yaml.Unmarshal(b, &c); err != nil {
		return KubeletConfig{}, fmt.Errorf("%s: %w", path, shortError(err))
	}
	return c, nil
}

// ManagerState is a CPU or memory manager checkpoint
// (cpu_manager_state, memory_manager_state): its policy, the CPUs shared
// by the pods without exclusive ones, and the pods (by UID) and containers
// it assigns resources to.
type ManagerState struct {
	PolicyName    string
	DefaultCPUSet string
	Pods          []string
	Containers    int
}

// ParseManagerState parses a manager checkpoint: {"policyName": …,
// "defaultCpuSet": …, "entries": {podUID: {container: …}}, "checksum": …}.
func ParseManagerState(path string, b []byte) (ManagerState, error) {
	var raw struct {
		PolicyName    string                                `json:"policyName"`
		DefaultCPUSet string                                `json:"defaultCpuSet"`
		Entries       map[string]map[string]json.RawMessage `json:"entries"`
	}
	if err := json.Unmarshal(b, &raw); err != nil {
		return ManagerState{}, fmt.Errorf("%s: %w", path, shortError(err))
	}
	s := ManagerState{PolicyName: raw.PolicyName, DefaultCPUSet: raw.DefaultCPUSet}
	for uid, containers := range raw.Entries {
		if len(containers) == 0 {
			continue
		}
		s.Pods = append(s.Pods, uid)
		s.Containers += len(containers)
	}
	sort.Strings(s.Pods)
	return s, nil
}

// shortError keeps a decoder's error within what an error may quote.
func shortError(err error) error {
	if msg := err.Error(); len(msg) > 4*maxQuotedInput {
		return fmt.Errorf("%s…", msg[:4*maxQuotedInput])
	}
	return err
}
