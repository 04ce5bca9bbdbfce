package nccl

import (
	"slices"
	"sort"
	"strconv"
	"strings"
)

// VisibleGPU is one of the node's GPUs: its NVML index and PCI bus ID.
type VisibleGPU struct {
	Index int
	BusID string
}

// ResolveVisibleGPUs returns the indexes of the GPUs a process may use:
// it applies NVIDIA_VISIBLE_DEVICES (which of the node's
// GPUs a container gets: indexes, UUIDs, all, none or void) and then
// CUDA_VISIBLE_DEVICES (positions in what is visible, or UUID prefixes;
// CUDA ignores everything from the first invalid entry on). It assumes
// CUDA enumerates in PCI order, as NVML does: true for identical GPUs,
// whose speed ties CUDA's default fastest-first order.
func ResolveVisibleGPUs(all []VisibleGPU, cuda string, cudaSet bool, nvidia string, nvidiaSet bool,
	uuid func(VisibleGPU) string) ([]int, bool) {
	visible := all
	if nvidiaSet {
		switch v := strings.ToLower(strings.TrimSpace(nvidia)); v {
		case "all":
		case "", "none", "void":
			visible = nil
		default:
			visible = nil
			for _, e := range strings.Split(v, ",") {
				e = strings.TrimSpace(e)
				g, ok := findVisibleGPU(all, e, uuid, false)
				if !ok {
					return nil, false
				}
				visible = append(visible, g)
			}
			sort.Slice(visible, func(i, j int) bool { return visible[i].Index < visible[j].Index })
		}
	}
	if !cudaSet {
		return gpuIndexes(visible), true
	}
	var out []VisibleGPU
	for _, e := range strings.Split(cuda, ",") {
		e = strings.TrimSpace(e)
		if strings.HasPrefix(strings.ToUpper(e), "MIG-") {
			return nil, false
		}
		var g VisibleGPU
		var ok bool
		if n, err := strconv.Atoi(e); err == nil {
			ok = n >= 0 && n < len(visible)
			if ok {
				g = visible[n]
			}
		} else {
			g, ok = findVisibleGPU(visible, e, uuid, true)
		}
		if !ok {
			break
		}
		out = append(out, g)
	}
	return gpuIndexes(out), true
}

// findVisibleGPU finds a GPU by NVML index or by UUID (a unique prefix
// when prefix is set, as CUDA accepts).
func findVisibleGPU(gpus []VisibleGPU, entry string, uuid func(VisibleGPU) string, prefix bool) (VisibleGPU, bool) {
	if n, err := strconv.Atoi(entry); err == nil {
		for _, g := range gpus {
			if g.Index == n {
				return g, true
			}
		}
		return VisibleGPU{}, false
	}
	entry = strings.ToLower(entry)
	if !strings.HasPrefix(entry, "gpu-") {
		return VisibleGPU{}, false
	}
	var match []VisibleGPU
	for _, g := range gpus {
		u := strings.ToLower(uuid(g))
		if u != "" && (u == entry || prefix && strings.HasPrefix(u, entry)) {
			match = append(match, g)
		}
	}
	if len(match) != 1 {
		return VisibleGPU{}, false
	}
	return match[0], true
}

// gpuIndexes is the distinct indexes of gs, sorted; nil when none.
func gpuIndexes(gs []VisibleGPU) []int {
	var out []int
	for _, g := range gs {
		if !slices.Contains(out, g.Index) {
			out = append(out, g.Index)
		}
	}
	slices.Sort(out)
	return out
}
