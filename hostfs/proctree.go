package hostfs

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// The process tree, walked down from a process: by the kernel's
// task/<tid>/children files (CONFIG_PROC_CHILDREN), else by every
// process's parent in /proc/<pid>/stat.

// procChildrenBytes bounds a children file: 100,000 children take 700 KB.
const procChildrenBytes = 4 << 20

// Children reads /proc/<pid>/task/<tid>/children: the children that thread
// forked. A kernel without CONFIG_PROC_CHILDREN has no such file
// (fs.ErrNotExist while the thread exists).
func (f FS) Children(pid int, tid string) ([]int, error) {
	return readParsed(f.pidPath(pid, "task", tid, "children"), procChildrenBytes, ParseChildren)
}

// ParseChildren parses a children file: space-separated PIDs.
func ParseChildren(path string, b []byte) ([]int, error) {
	var out []int
	for _, f := range strings.Fields(string(b)) {
		pid, err := strconv.Atoi(f)
		if err != nil || pid <= 0 {
			return nil, fmt.Errorf("%s: bad PID %s", path, Quote(f))
		}
		out = append(out, pid)
	}
	return out, nil
}

// ScanParents maps each process to its children, sorted, from every
// /proc/<pid>/stat: the walk for kernels without children files. A
// process whose stat cannot be read (it exited) is left out.
func (f FS) ScanParents() (map[int][]int, error) {
	out := map[int][]int{}
	procs, err := f.pfs.AllProcs()
	if err != nil {
		return out, err
	}
	for _, p := range procs {
		if st, err := p.Stat(); err == nil {
			out[st.PPID] = append(out[st.PPID], p.PID)
		}
	}
	for _, kids := range out {
		sort.Ints(kids)
	}
	return out, nil
}

// ProcID tells a process from a later one that reuses its PID: the PID
// and its start time in clock ticks since boot (stat's starttime).
type ProcID struct {
	PID        int
	StartTicks uint64
}
