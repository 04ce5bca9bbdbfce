package sample

import (
	"slices"
	"strconv"
)

// NUMAKey is the numa collector's key: its samples are *NUMA.
var NUMAKey = NewKey[NUMA]("numa")

// NUMA is one reading of the host's NUMA layout: each node's CPUs, distances
// and allocation counters, and the node each GPU is attached to.
type NUMA struct {
	// StatisticsEnabled mirrors vm.numa_stat; nil on kernels without that
	// switch. While it is off the allocation counters stand still, so flat
	// counters then mean "not counted", not "no remote allocations".
	StatisticsEnabled *bool `json:"statistics_enabled,omitempty"`
	// IntervalSeconds is the span the per-node rates cover; 0 on the first
	// reading.
	IntervalSeconds float64    `json:"interval_seconds,omitempty"`
	Nodes           []NUMANode `json:"nodes"`
	GPUs            []GPUNUMA  `json:"gpus"`
}

// NUMANode is one NUMA node.
type NUMANode struct {
	Node int `json:"node"`
	// CPUList is the node's CPUs as the kernel prints them ("0-31,64-95");
	// empty for a memory-only node.
	CPUList string `json:"cpulist"`
	CPUs    int    `json:"cpus"`
	// Distances are the firmware's relative distances (ACPI SLIT) to every
	// online node, itself included (10 = local).
	Distances []NUMADistance `json:"distances"`
	// Allocations are the kernel's counters since boot.
	Allocations NUMAAllocations `json:"allocations"`
	// AllocationsPerSecond covers the last interval; nil on the first reading.
	AllocationsPerSecond *NUMAAllocationRates `json:"allocations_per_second,omitempty"`
	// OtherNodeRatio is, over the last interval, the share of the pages
	// allocated on this node that went to tasks running on another node:
	// other_node / (local_node + other_node). Nil when nothing was allocated
	// or on the first reading.
	OtherNodeRatio *float64 `json:"other_node_ratio,omitempty"`
	// Unmeasured names what the node's directory lacked (NUMACPUList,
	// NUMADistances, NUMAAllocationCounters): CPUList, CPUs and Distances,
	// or Allocations, are then empty and mean nothing (not a memory-only
	// node, not zero allocations), and their series are left out.
	Unmeasured []string `json:"unmeasured,omitempty"`
}

// What a NUMANode's Unmeasured names: its cpulist, its distance file, and
// its allocation counters (neither node<N>/vmstat nor numastat held them).
const (
	NUMACPUList            = "cpulist"
	NUMADistances          = "distance"
	NUMAAllocationCounters = "allocations"
)

// Measured is whether the node's part of that name (NUMACPUList, …) was
// read.
func (n *NUMANode) Measured(name string) bool { return !slices.Contains(n.Unmeasured, name) }

// UnmeasuredFields names, for the collector's health, what each node
// lacked: "node0 distance".
func (s *NUMA) UnmeasuredFields() []string {
	var out []string
	for i := range s.Nodes {
		for _, name := range s.Nodes[i].Unmeasured {
			out = append(out, "node"+strconv.Itoa(s.Nodes[i].Node)+" "+name)
		}
	}
	return out
}

// NUMADistance is the distance from a node to PeerNode.
type NUMADistance struct {
	PeerNode int `json:"peer_node"`
	Distance int `json:"distance"`
}

// NUMAAllocations are the page allocator's per-node NUMA counters, those
// that /sys/devices/system/node/node<N>/numastat prints (read from the
// numa_* lines of node<N>/vmstat, which hold the same counters). The kernel
// counts one per allocation whatever its order, so a 2 MiB THP counts as
// one, like a 4 KiB page.
type NUMAAllocations struct {
	// Hit: the allocation wanted this node and got it.
	Hit uint64 `json:"numa_hit"`
	// Miss: the allocation wanted another node but got this one.
	Miss uint64 `json:"numa_miss"`
	// Foreign: the allocation wanted this node but got another one.
	Foreign uint64 `json:"numa_foreign"`
	// InterleaveHit: an interleave policy wanted this node and got it.
	InterleaveHit uint64 `json:"interleave_hit"`
	// LocalNode: a task running on this node got memory from this node.
	LocalNode uint64 `json:"local_node"`
	// OtherNode: a task running on another node got memory from this node.
	OtherNode uint64 `json:"other_node"`
}

// NUMAAllocationRates are NUMAAllocations per second over an interval.
type NUMAAllocationRates struct {
	Hit           float64 `json:"numa_hit"`
	Miss          float64 `json:"numa_miss"`
	Foreign       float64 `json:"numa_foreign"`
	InterleaveHit float64 `json:"interleave_hit"`
	LocalNode     float64 `json:"local_node"`
	OtherNode     float64 `json:"other_node"`
}

// GPUNUMA says where one GPU sits.
type GPUNUMA struct {
	// GPU is the GPU collector's index, or -1 when the GPU collector has not
	// published any GPU and this one was found on the PCI bus.
	GPU      int    `json:"gpu"`
	PCIBusID string `json:"pci_bus_id"`
	// PCIDeviceID is the PCI device ID (0x2330 for an H100 SXM5), which
	// names the model when no GPU backend is available.
	PCIDeviceID string `json:"pci_device_id,omitempty"`
	// NUMANode is the node the device is attached to; -1 means the platform
	// does not say (most VMs and some single-socket BIOSes). Nothing is
	// guessed in that case.
	NUMANode int `json:"numa_node"`
	// LocalCPUList is the kernel's local_cpulist for the device: the CPUs of
	// its node, or every CPU when NUMANode is -1.
	LocalCPUList string `json:"local_cpulist"`
	LocalCPUs    int    `json:"local_cpus"`
	// PCIPath places the GPU in the PCIe tree, to tell which NICs share its
	// PCIe switch (PCIDistance).
	PCIPath PCIPath `json:"pci_path,omitempty"`
}

// SizeBytes estimates the memory a reading holds, for the window's budget.
func (s *NUMA) SizeBytes() int {
	n := 64
	for i := range s.Nodes {
		d := &s.Nodes[i]
		n += 200 + len(d.CPUList) + len(d.Distances)*16 + len(d.Unmeasured)*24
		if d.AllocationsPerSecond != nil {
			n += 48
		}
	}
	for i := range s.GPUs {
		g := &s.GPUs[i]
		n += 80 + len(g.PCIBusID) + len(g.PCIDeviceID) + len(g.LocalCPUList) + g.PCIPath.size()
	}
	return n
}
