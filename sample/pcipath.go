package sample

import "strings"

// PCIPath is where a PCI function sits in the PCIe tree: its sysfs device
// path below /sys/devices, from the host bridge down to the function, as
// ["pci0000:17", "0000:17:01.0", "0000:18:00.0", "0000:19:01.0",
// "0000:1a:00.0"] (host bridge, root port, switch upstream port, switch
// downstream port, device). Empty when unknown.
type PCIPath []string

// PCIDistance names the path between two PCI functions as nvidia-smi topo -m
// and NCCL name it (LinkPIX … LinkSYS), from their PCIe paths and NUMA
// nodes (-1 unknown). It returns "" when the two cannot be placed: no path
// and no NUMA node for one of them, or different host bridges on a host
// whose NUMA nodes are unknown.
//
// The rules follow NCCL's topology (src/graph/topo.cc, paths.cc): functions
// under one PCIe switch (each at most two hops below their deepest common
// bridge: the switch's downstream port and the function) are PIX; deeper
// trees under a common bridge are PXB; functions meeting only at the host
// bridge (different root ports) are PHB; different host bridges of one NUMA
// node are NODE, of two nodes SYS.
func PCIDistance(a PCIPath, aNUMA int, b PCIPath, bNUMA int) string {
	if len(a) == 0 || len(b) == 0 || a[0] != b[0] {
		switch {
		case aNUMA < 0 || bNUMA < 0:
			return ""
		case aNUMA == bNUMA:
			return LinkNODE
		}
		return LinkSYS
	}
	common := 0
	for common+1 < len(a) && common+1 < len(b) && a[common+1] == b[common+1] {
		common++
	}
	if common == 0 {
		return LinkPHB
	}
	below := max(len(a), len(b)) - 1 - common
	if below <= 2 {
		return LinkPIX
	}
	return LinkPXB
}

// PCIDistanceRank orders distances, nearest first (PIX 0 … SYS 4); unknown
// ("") sorts last.
func PCIDistanceRank(d string) int {
	switch d {
	case LinkPIX:
		return 0
	case LinkPXB:
		return 1
	case LinkPHB:
		return 2
	case LinkNODE:
		return 3
	case LinkSYS:
		return 4
	}
	return 5
}

// String joins the path with '/', as sysfs shows it.
func (p PCIPath) String() string { return strings.Join(p, "/") }

// size is what a path adds to its holder's estimate: the slice header is
// counted with the holder.
func (p PCIPath) size() int {
	n := 0
	for _, s := range p {
		n += 16 + len(s)
	}
	return n
}
