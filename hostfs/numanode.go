package hostfs

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// The NUMA nodes of /sys/devices/system/node: which are there and online,
// their distances and their allocation counters.

// NUMANodesDir is where sysfs lists the NUMA nodes, under /sys.
const NUMANodesDir = "devices/system/node"

// NUMANodeIDs lists the node<N> directories, in numeric order.
func (f FS) NUMANodeIDs() ([]int, error) {
	entries, err := os.ReadDir(f.SysPath(NUMANodesDir))
	if err != nil {
		return nil, err
	}
	var ids []int
	for _, e := range entries {
		rest, ok := strings.CutPrefix(e.Name(), "node")
		if !ok {
			continue
		}
		if id, err := strconv.Atoi(rest); err == nil && id >= 0 {
			ids = append(ids, id)
		}
	}
	sort.Ints(ids)
	return ids, nil
}

// NUMANodeExists is whether node<N>'s directory is there: a node whose
// files are not there has gone offline when it is not.
func (f FS) NUMANodeExists(node int) bool {
	_, err := os.Stat(f.numaNodePath(node))
	return err == nil
}

// numaNodePath is /sys/devices/system/node/node<N>/<elem...>.
func (f FS) numaNodePath(node int, elem ...string) string {
	return f.SysPath(append([]string{NUMANodesDir, "node" + strconv.Itoa(node)}, elem...)...)
}

// OnlineNUMANodes reads the online node list, which orders the columns of
// every node<N>/distance file. Kernels without the file have only online
// nodes registered, so the directory list stands in.
func (f FS) OnlineNUMANodes(fallback []int) ([]int, error) {
	ids, _, err := f.CPUList(NUMANodesDir, "online")
	if errors.Is(err, fs.ErrNotExist) {
		return fallback, nil
	}
	return ids, err
}

// NUMANodeCPUs reads node<N>/cpulist: the node's CPUs and the list as the
// kernel printed it.
func (f FS) NUMANodeCPUs(node int) ([]int, string, error) {
	return f.readCPUList(f.numaNodePath(node, "cpulist"))
}

// NUMADistance is the distance from a node to PeerNode.
type NUMADistance struct {
	PeerNode int
	Distance int
}

// NUMADistances parses node<N>/distance: one distance per online node,
// in the order of the online list.
func (f FS) NUMADistances(node int, online []int) ([]NUMADistance, error) {
	path := f.numaNodePath(node, "distance")
	b, err := f.readAttr(path)
	if err != nil {
		return nil, err
	}
	return ParseNUMADistances(path, b, online)
}

func ParseNUMADistances(path string, b []byte, online []int) ([]NUMADistance, error) {
	fields := strings.Fields(string(b))
	if len(fields) != len(online) {
		return nil, fmt.Errorf("%s: %d distances for %d online nodes", path, len(fields), len(online))
	}
	out := make([]NUMADistance, len(fields))
	for i, f := range fields {
		d, err := strconv.Atoi(f)
		if err != nil || d < 0 {
			return nil, fmt.Errorf("%s: bad distance %s", path, Quote(f))
		}
		out[i] = NUMADistance{PeerNode: online[i], Distance: d}
	}
	return out, nil
}

// NUMAAllocations are the page allocator's per-node NUMA counters, those
// that node<N>/numastat prints (and the numa_* lines of node<N>/vmstat).
// The kernel counts one per allocation whatever its order.
type NUMAAllocations struct {
	// Hit: the allocation wanted this node and got it.
	Hit uint64
	// Miss: the allocation wanted another node but got this one.
	Miss uint64
	// Foreign: the allocation wanted this node but got another one.
	Foreign uint64
	// InterleaveHit: an interleave policy wanted this node and got it.
	InterleaveHit uint64
	// LocalNode: a task running on this node got memory from this node.
	LocalNode uint64
	// OtherNode: a task running on another node got memory from this node.
	OtherNode uint64
}

// NUMACounterNames are the allocation counters in NUMAAllocations
// order: as node<N>/vmstat names them (4.14 and later), and as
// node<N>/numastat does (the only place before 4.14).
var NUMACounterNames = map[string][6]string{
	"vmstat":   {"numa_hit", "numa_miss", "numa_foreign", "numa_interleave", "numa_local", "numa_other"},
	"numastat": {"numa_hit", "numa_miss", "numa_foreign", "interleave_hit", "local_node", "other_node"},
}

// NUMAAllocations reads a node's allocation counters, from node<N>/vmstat
// or, when it has none or is not there, numastat. All six must be there
// on whole lines: a file cut short (a node going offline mid-read) must
// fail the sample, not export counters that fell to zero. When neither
// file holds them and numastat is not there, the error wraps
// fs.ErrNotExist: the counters are not measured on this node, or the node
// is gone.
func (f FS) NUMAAllocations(node int) (NUMAAllocations, error) {
	vmstat := f.numaNodePath(node, "vmstat")
	v, found, err := f.readNUMACounters(vmstat, NUMACounterNames["vmstat"])
	if errors.Is(err, fs.ErrNotExist) || err == nil && found == 0 {
		var numastatErr error
		v, found, numastatErr = f.readNUMACounters(f.numaNodePath(node, "numastat"), NUMACounterNames["numastat"])
		switch {
		case errors.Is(numastatErr, fs.ErrNotExist) && err == nil:
			err = fmt.Errorf("%s: no numa_hit line (truncated?), and %w", vmstat, numastatErr)
		case numastatErr == nil && found == 0:
			err = fmt.Errorf("%s: no numa_hit line (truncated?), and no counters in numastat", vmstat)
		default:
			err = numastatErr
		}
	}
	if err != nil {
		return NUMAAllocations{}, err
	}
	return NUMAAllocations{Hit: v[0], Miss: v[1], Foreign: v[2], InterleaveHit: v[3], LocalNode: v[4], OtherNode: v[5]}, nil
}

// readNUMACounters reads the named "key value" lines of path. found counts
// the names seen; seeing some but not all is an error. A last line without
// its newline is ignored: it may be cut inside its number.
func (f FS) readNUMACounters(path string, names [6]string) (v [6]uint64, found int, err error) {
	b, err := f.readAttr(path)
	if err != nil {
		return v, 0, err
	}
	return ParseNUMACounters(path, b, names)
}

func ParseNUMACounters(path string, b []byte, names [6]string) (v [6]uint64, found int, err error) {
	whole := b[:bytes.LastIndexByte(b, '\n')+1]
	var seen [6]bool
	for _, line := range strings.Split(string(whole), "\n") {
		key, value, ok := strings.Cut(line, " ")
		i := slices.Index(names[:], key)
		if !ok || i < 0 || seen[i] {
			continue
		}
		value = strings.TrimSpace(value)
		if v[i], err = strconv.ParseUint(value, 10, 64); err != nil {
			return v, 0, fmt.Errorf("%s: %s: not a counter: %s", path, key, Quote(value))
		}
		seen[i] = true
		found++
	}
	if found > 0 && found < len(names) {
		for i, ok := range seen {
			if !ok {
				return v, found, fmt.Errorf("%s: no %s line (truncated?)", path, names[i])
			}
		}
	}
	return v, found, nil
}

// NUMAStatSwitch reads vm.numa_stat; nil when the kernel predates it or
// the file cannot be read.
func (f FS) NUMAStatSwitch() *bool {
	b, err := f.readAttr(f.ProcPath("sys/vm/numa_stat"))
	if err != nil {
		return nil
	}
	on := strings.TrimSpace(string(b)) != "0"
	return &on
}
