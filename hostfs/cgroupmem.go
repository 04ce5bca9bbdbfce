package hostfs

import (
	"bytes"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
)

// cgroupMemoryStatBytes bounds memory.stat: some 60 lines.
const cgroupMemoryStatBytes = 64 << 10

// CgroupMemory is a memory cgroup's limit, usage and page-cache refaults.
type CgroupMemory struct {
	Path string
	// LimitBytes is 0 when memory.max is "max" (no limit).
	LimitBytes   uint64
	CurrentBytes uint64
	FileBytes    uint64
	// RefaultsFile counts file pages read back in soon after eviction
	// (workingset_refault_file).
	RefaultsFile uint64
}

// CgroupMemory reads a cgroup v2 group's memory.max, memory.current and
// memory.stat under /sys/fs/cgroup; path is the group's path as
// /proc/<pid>/cgroup names it ("/kubepods.slice/…").
func (f FS) CgroupMemory(path string) (*CgroupMemory, error) {
	dir := f.SysPath("fs", "cgroup", filepath.Clean("/"+path))
	out := &CgroupMemory{Path: path}
	limit, err := readParsed(f, filepath.Join(dir, "memory.max"), 64, ParseCgroupMemoryMax)
	if err != nil {
		return nil, err
	}
	out.LimitBytes = limit
	cur, err := readParsed(f, filepath.Join(dir, "memory.current"), 64, func(p string, b []byte) (uint64, error) {
		n, err := strconv.ParseUint(string(bytes.TrimSpace(b)), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("%s: not a byte count: %s", p, Quote(string(b)))
		}
		return n, nil
	})
	if err != nil {
		return nil, err
	}
	out.CurrentBytes = cur
	stat, err := readParsed(f, filepath.Join(dir, "memory.stat"), cgroupMemoryStatBytes, ParseCgroupMemoryStat)
	if err != nil {
		return nil, err
	}
	out.FileBytes, out.RefaultsFile = stat.FileBytes, stat.RefaultsFile
	return out, nil
}

// ParseCgroupMemoryMax reads memory.max: a byte count, or "max" (0, no limit).
func ParseCgroupMemoryMax(path string, b []byte) (uint64, error) {
	s := string(bytes.TrimSpace(b))
	if s == "max" {
		return 0, nil
	}
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%s: want a byte count or max, got %s", path, Quote(s))
	}
	return n, nil
}

// ParseCgroupMemoryStat reads the "file" and "workingset_refault_file"
// lines of a cgroup v2 memory.stat (kernels before 5.9 name the refault
// counter workingset_refault).
func ParseCgroupMemoryStat(path string, b []byte) (CgroupMemory, error) {
	var out CgroupMemory
	var refaultFile, refaultAll *uint64
	for i, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		if len(f) != 2 {
			return out, fmt.Errorf("%s: line %d: want \"name value\", got %s", path, i+1, Quote(line))
		}
		switch f[0] {
		case "file", "workingset_refault_file", "workingset_refault":
		default:
			continue
		}
		n, err := strconv.ParseUint(f[1], 10, 64)
		if err != nil {
			return out, fmt.Errorf("%s: line %d: %s is not a counter: %s", path, i+1, f[0], Quote(f[1]))
		}
		switch f[0] {
		case "file":
			out.FileBytes = n
		case "workingset_refault_file":
			refaultFile = &n
		case "workingset_refault":
			refaultAll = &n
		}
	}
	switch {
	case refaultFile != nil:
		out.RefaultsFile = *refaultFile
	case refaultAll != nil:
		out.RefaultsFile = *refaultAll
	default:
		return out, fmt.Errorf("%s: no workingset_refault_file line", path)
	}
	return out, nil
}
