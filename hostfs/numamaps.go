package hostfs

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"math/bits"
	"strconv"
	"strings"
)

// procNUMAMapsBytes bounds /proc/<pid>/numa_maps: a line per mapping, up
// to vm.max_map_count (65530 by default) of a few hundred bytes each.
const procNUMAMapsBytes = 64 << 20

// NUMAMaps sums a process's resident memory per node from
// /proc/<pid>/numa_maps.
func (f FS) NUMAMaps(pid int) (map[int]uint64, error) {
	return streamParsed(f.pidPath(pid, "numa_maps"), procNUMAMapsBytes, ParseNUMAMaps)
}

// ParseNUMAMaps sums N<node>=<pages> × kernelpagesize_kB over the mappings
// of a numa_maps file, as numastat -p does. The kernel escapes spaces and '='
// in file names, so every key=value token is the kernel's own. Pages shared
// with other processes count in each of them.
func ParseNUMAMaps(rd io.Reader, name string) (map[int]uint64, error) {
	out := map[int]uint64{}
	sc := bufio.NewScanner(rd)
	sc.Buffer(make([]byte, 0, 64*1024), 1<<20)
	line := 0
	type nodePages struct {
		node  int
		pages uint64
	}
	var pages []nodePages
	for sc.Scan() {
		line++
		fields := strings.Fields(sc.Text())
		if len(fields) == 0 {
			continue
		}
		if _, err := strconv.ParseUint(fields[0], 16, 64); err != nil {
			return nil, fmt.Errorf("%s:%d: bad mapping address %s", name, line, Quote(fields[0]))
		}
		pages = pages[:0]
		var pageKB uint64
		for _, f := range fields[1:] {
			k, v, ok := strings.Cut(f, "=")
			if !ok {
				continue
			}
			if k == "kernelpagesize_kB" {
				n, err := strconv.ParseUint(v, 10, 64)
				if err != nil || n == 0 {
					return nil, fmt.Errorf("%s:%d: bad kernelpagesize_kB %s", name, line, Quote(v))
				}
				pageKB = n
				continue
			}
			if len(k) < 2 || k[0] != 'N' {
				continue
			}
			node, err := strconv.Atoi(k[1:])
			if err != nil || node < 0 {
				continue // not a node count: some other N-key
			}
			if node >= MaxListID {
				return nil, fmt.Errorf("%s:%d: node number out of range in %s", name, line, Quote(f))
			}
			n, err := strconv.ParseUint(v, 10, 64)
			if err != nil {
				return nil, fmt.Errorf("%s:%d: bad page count %s", name, line, Quote(f))
			}
			pages = append(pages, nodePages{node, n})
		}
		if len(pages) > 0 && pageKB == 0 {
			return nil, fmt.Errorf("%s:%d: node page counts without kernelpagesize_kB (truncated line?)", name, line)
		}
		for _, np := range pages {
			sum, ok := addPageBytes(out[np.node], np.pages, pageKB)
			if !ok {
				return nil, fmt.Errorf("%s:%d: N%d=%d pages of %d kB overflow a 64-bit byte count", name, line, np.node, np.pages, pageKB)
			}
			out[np.node] = sum
		}
	}
	if err := sc.Err(); err != nil {
		return nil, WithPath(name, err)
	}
	return out, nil
}

// addPageBytes adds pages × pageKB KiB to total; ok is false when the sum
// does not fit in 64 bits, which only a corrupt file can make happen.
func addPageBytes(total, pages, pageKB uint64) (sum uint64, ok bool) {
	hi, kb := bits.Mul64(pages, pageKB)
	if hi != 0 || kb > math.MaxUint64/1024 {
		return 0, false
	}
	sum, carry := bits.Add64(total, kb*1024, 0)
	return sum, carry == 0
}
