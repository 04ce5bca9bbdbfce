package hostfs

import (
	"fmt"
	"math/bits"
	"strconv"
	"strings"
)

// MaxListID bounds the members of a kernel list and how many one list may
// name. Kernels have at most 8192 CPUs (NR_CPUS) and 1024 NUMA nodes; the
// bound keeps a corrupt list from costing the daemon: "0-65535" repeated
// thousands of times in one status line took seconds of CPU, and a range
// ending at the largest int never ended.
const MaxListID = 1 << 16

// CPUList reads a kernel list file under /sys (node online lists,
// node<N>/cpulist); see readCPUList.
func (f FS) CPUList(elem ...string) ([]int, string, error) {
	return f.readCPUList(f.SysPath(elem...))
}

// readCPUList reads a kernel list file (cpulist, local_cpulist, online)
// and returns the members and the text as the kernel printed it.
func (f FS) readCPUList(path string) ([]int, string, error) {
	b, err := f.readAttr(path)
	if err != nil {
		return nil, "", err
	}
	text := strings.TrimSpace(string(b))
	ids, err := ParseCPUList(text)
	if err != nil {
		return nil, "", fmt.Errorf("%s: %w", path, err)
	}
	return ids, text, nil
}

// ParseCPUList parses the kernel's list format ("0-31,64-95", "5", "")
// into sorted, distinct members. procfs has the same parser unexported
// (sysfs.parseCPURange), and its status parser drops malformed entries
// silently; a wrong CPU set here would become a wrong placement verdict.
func ParseCPUList(s string) ([]int, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return nil, nil
	}
	var members [MaxListID / 64]uint64
	named := 0
	for part := range strings.SplitSeq(s, ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		a, ok := listID(lo)
		if !ok {
			return nil, fmt.Errorf("bad list entry %s", Quote(part))
		}
		b := a
		if isRange {
			if b, ok = listID(hi); !ok || b < a {
				return nil, fmt.Errorf("bad list range %s", Quote(part))
			}
		}
		if named += b - a + 1; named > MaxListID {
			return nil, fmt.Errorf("list names more than %d members", MaxListID)
		}
		for i := a; i <= b; i++ {
			members[i/64] |= 1 << (i % 64)
		}
	}
	var out []int
	for w, word := range members {
		for ; word != 0; word &= word - 1 {
			out = append(out, w*64+bits.TrailingZeros64(word))
		}
	}
	return out, nil
}

// listID parses one member of a kernel list.
func listID(s string) (int, bool) {
	n, err := strconv.Atoi(s)
	return n, err == nil && n >= 0 && n < MaxListID
}
