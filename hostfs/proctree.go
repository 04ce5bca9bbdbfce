package hostfs

import (
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"

	"github.com/gpudiag/gpudiag/hostfile"
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

// Where a ProcTree found children: the kernel's children files, or one scan
// of every process's parent (sample.GPUProcesses.DescendantSource).
const (
	ChildrenFile = "children_file"
	ParentScan   = "ppid_scan"
)

// maxThreadsListed bounds the task directory read for one process.
const maxThreadsListed = 65536

// ProcTree says which processes each process forked, for one sampling
// cycle. It reads the kernel's task/<tid>/children files; on a kernel
// built without them (CONFIG_PROC_CHILDREN) it scans every process's parent
// once and answers from that scan for the rest of the cycle. The collectors
// that walk down from a GPU process (gpuprocess, ebpf) share this one
// decision instead of each making it.
type ProcTree struct {
	fs       FS
	source   string
	byParent map[int][]int
}

// NewProcTree starts a cycle's walk.
func (f FS) NewProcTree() *ProcTree { return &ProcTree{fs: f} }

// Source is ChildrenFile or ParentScan once a walk has decided, else "".
func (t *ProcTree) Source() string { return t.source }

// Children returns the processes that the threads tids of pid forked. A
// thread that exited is skipped; errs are the files that could not be
// read otherwise (for a debug log: a missing child is found next cycle).
func (t *ProcTree) Children(pid int, tids []string) (kids []int, errs []error) {
	if t.source == ParentScan {
		return t.byParent[pid], nil
	}
	for _, tid := range tids {
		got, err := t.fs.Children(pid, tid)
		switch {
		case err == nil:
			t.source = ChildrenFile
			kids = append(kids, got...)
		case Vanished(err) && t.source == "" && t.threadExists(pid, tid):
			// The thread is there and its children file is not: a
			// kernel without children files.
			t.source = ParentScan
			var serr error
			if t.byParent, serr = t.fs.ScanParents(); serr != nil {
				errs = append(errs, serr)
			}
			return t.byParent[pid], errs
		case !Vanished(err):
			errs = append(errs, err)
		}
	}
	return kids, errs
}

// ChildrenOf is Children over every thread of pid, listed from its task
// directory.
func (t *ProcTree) ChildrenOf(pid int) ([]int, []error) {
	if t.source == ParentScan {
		return t.byParent[pid], nil
	}
	d, err := hostfile.OpenDir(t.fs.pidPath(pid, "task"))
	if err != nil {
		if Vanished(err) {
			return nil, nil
		}
		return nil, []error{err}
	}
	tids, err := d.Readdirnames(maxThreadsListed)
	d.Close()
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, []error{err}
	}
	// The main thread first: it decides the source while it surely
	// exists, and it is the one that forks DataLoader workers.
	main := strconv.Itoa(pid)
	sort.Slice(tids, func(i, j int) bool { return tids[i] == main || tids[j] != main && tids[i] < tids[j] })
	return t.Children(pid, tids)
}

func (t *ProcTree) threadExists(pid int, tid string) bool {
	_, err := os.Lstat(t.fs.pidPath(pid, "task", tid))
	return err == nil
}
