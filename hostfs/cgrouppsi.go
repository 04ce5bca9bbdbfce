package hostfs

import (
	"os"
	"path/filepath"
	"sort"
)

// CgroupPSI reads a cgroup v2 group's <resource>.pressure (memory, io,
// cpu) under /sys/fs/cgroup; path is the group's path as
// /proc/<pid>/cgroup names it. The kernel keeps one per group when PSI is
// on: the stall its own tasks feel, whatever causes it.
func (f FS) CgroupPSI(path, resource string) (PSI, error) {
	return readParsed(f, filepath.Join(f.SysPath("fs", "cgroup", filepath.Clean("/"+path)), resource+".pressure"), psiFileBytes, ParsePSI)
}

// CgroupChildren lists the child groups of a cgroup v2 group, as paths
// in /proc/<pid>/cgroup's form, sorted; at most limit of them (a node's
// pod slice holds a few hundred at most; more is not a tree to walk).
func (f FS) CgroupChildren(path string, limit int) ([]string, error) {
	path = filepath.Clean("/" + path)
	entries, err := os.ReadDir(f.SysPath("fs", "cgroup", path))
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range entries {
		if e.IsDir() {
			out = append(out, filepath.Join(path, e.Name()))
		}
	}
	sort.Strings(out)
	if len(out) > limit {
		out = out[:limit]
	}
	return out, nil
}
