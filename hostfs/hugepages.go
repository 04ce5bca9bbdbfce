package hostfs

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// Explicit hugepage pools, per page size under
// /sys/kernel/mm/hugepages/hugepages-<size>kB/{nr,free}_hugepages: the
// same numbers as /proc/meminfo's HugePages_* lines, which give only the
// default size.

// HugepagePool is one page size's pool.
type HugepagePool struct {
	PageBytes   uint64
	Total, Free uint64
}

// Hugepages reads every pool, smallest page first; a kernel without
// hugetlbfs gives nil, nil.
func (f FS) Hugepages() ([]HugepagePool, error) {
	dirs, err := filepath.Glob(f.SysPath("kernel/mm/hugepages/hugepages-*kB"))
	if err != nil {
		return nil, err
	}
	var out []HugepagePool
	for _, d := range dirs {
		kb, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimPrefix(filepath.Base(d), "hugepages-"), "kB"), 10, 32)
		if err != nil || kb == 0 {
			return nil, fmt.Errorf("%s: not a hugepage size", d)
		}
		p := HugepagePool{PageBytes: kb * 1024}
		if p.Total, err = readUintAttr(filepath.Join(d, "nr_hugepages")); err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				continue
			}
			return nil, err
		}
		if p.Free, err = readUintAttr(filepath.Join(d, "free_hugepages")); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, err
		}
		out = append(out, p)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].PageBytes < out[j].PageBytes })
	return out, nil
}
