package hostfs

import (
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

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
	return readParsed(f, f.pidPath(pid, "task", tid, "children"), procChildrenBytes, ParseChildren)
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
	byParent, _, _, err := f.scanParents(f.NewTaskStatReader(), nil, nil)
	return byParent, err
}

// scanParents is ScanParents that also gives each process's thread count
// and how many processes were listed, reading through r; pids, if not nil,
// is the listing of /proc already made. With an index, only the processes
// it does not hold (born since its last scan) are read, unless it is due
// for its refresh (ParentIndex).
func (f FS) scanParents(r *TaskStatReader, pids []int, ix *ParentIndex) (byParent map[int][]int, threads map[int]int, listed int, err error) {
	byParent, threads = map[int][]int{}, map[int]int{}
	dir, err := hostfile.OpenDirFd(f.proc)
	if err != nil {
		return byParent, threads, 0, err
	}
	defer dir.Close()
	if pids == nil {
		pids, r.dirBuf, err = dir.ListNumeric(r.dirBuf, nil, maxProcsListed)
		if err != nil {
			return byParent, threads, 0, err
		}
	}
	ix.begin()
	for _, pid := range pids {
		e, ok := ix.get(pid)
		if !ok {
			st, err := r.ProcessIn(dir, pid)
			if err != nil {
				continue
			}
			e = parentEntry{ppid: st.PPID, threads: st.NumThreads}
		}
		ix.keep(pid, e)
		byParent[e.ppid] = append(byParent[e.ppid], pid)
		threads[pid] = e.threads
	}
	ix.end()
	for _, kids := range byParent {
		sort.Ints(kids)
	}
	return byParent, threads, len(pids), nil
}

// ParentIndexRefresh is how long a ParentIndex trusts what it holds: then
// its next scan reads every process again, unless a scan of every process
// made since by another reader is given to it (Seed). A PID freed by an
// exit and taken by a new process between two scans keeps the old
// process's parent until then: the kernel gives the next free PID after the
// last one it gave, so a freed PID returns only when the counter comes
// round to it, but on a host whose counter has wrapped that can be within
// seconds. A walk's reader checks what it is given (gpuprocess reads each
// child's stat and drops one whose parent is another); a child missed under
// a reused PID is found at the refresh.
const ParentIndexRefresh = 30 * time.Second

// ParentIndex carries every process's parent from one parent scan to the
// next: a process keeps its parent for life (a reparenting after its
// parent's exit aside, when the old parent is no longer walked), so a scan
// reads the stat files of the PIDs it has not met, the processes born
// since, and not of every process on the host; those no longer listed are
// forgotten. Every ParentIndexRefresh it reads them all again, or takes
// them from a newer scan of another reader's (Seed). It keeps the listing
// of /proc too, listed again only when a task was born or went since
// (taskStamp), or at a refresh. Held by one collector across its cycles;
// not safe for concurrent use.
type ParentIndex struct {
	now       func() time.Time
	byPID     map[int]parentEntry
	next      map[int]parentEntry
	refreshed time.Time
	full      bool // this scan reads every process

	// The last listing of /proc and the stamp read before it (stamped:
	// one was read); stampOf reads the stamp (a taskStamper's, set at
	// the first listing; tests give their own).
	pids     []int
	stamp    taskStamp
	stamped  bool
	stampOf  func() (taskStamp, bool)
	listings int // how many times /proc was listed
	seeds    int // how many refreshes were seeded (Seed)
}

type parentEntry struct{ ppid, threads int }

// NewParentIndex returns an empty index on the clock now.
func NewParentIndex(now func() time.Time) *ParentIndex {
	return &ParentIndex{now: now}
}

// Seed gives the index every process's parent from a scan another reader
// made at time at (stats by PID, not changed afterwards), in place of the
// refresh it is due for: the index holds them as if its own scan had read
// them then, and its next scan reads only the processes born since. A seed
// no newer than the index's last refresh, or itself due for one, is
// ignored, as is one while the index is warm: a node's scans of every
// process are done once for the collectors that need them.
func (ix *ParentIndex) Seed(at time.Time, stats map[int]TaskStat) {
	if ix == nil || ix.warm() || !at.After(ix.refreshed) || ix.now().Sub(at) >= ParentIndexRefresh {
		return
	}
	ix.byPID = make(map[int]parentEntry, len(stats))
	for pid, st := range stats {
		ix.byPID[pid] = parentEntry{ppid: st.PPID, threads: st.NumThreads}
	}
	ix.refreshed = at
	ix.stamped = false // a refresh lists /proc afresh, seeded or not
	ix.seeds++
}

// Len is how many processes the index holds.
func (ix *ParentIndex) Len() int {
	if ix == nil {
		return 0
	}
	return len(ix.byPID)
}

// warm reports whether the next scan reads only the processes born since.
func (ix *ParentIndex) warm() bool {
	return ix != nil && ix.byPID != nil && ix.now().Sub(ix.refreshed) < ParentIndexRefresh
}

func (ix *ParentIndex) begin() {
	if ix == nil {
		return
	}
	ix.full = !ix.warm()
	ix.next = make(map[int]parentEntry, len(ix.byPID))
}

func (ix *ParentIndex) get(pid int) (parentEntry, bool) {
	if ix == nil || ix.full {
		return parentEntry{}, false
	}
	e, ok := ix.byPID[pid]
	return e, ok
}

func (ix *ParentIndex) keep(pid int, e parentEntry) {
	if ix != nil {
		ix.next[pid] = e
	}
}

func (ix *ParentIndex) end() {
	if ix == nil {
		return
	}
	if ix.full {
		ix.refreshed = ix.now()
	}
	ix.byPID, ix.next = ix.next, nil
}

// unknown counts the PIDs of a listing the index does not hold: what a
// scan through it reads (all of them when it is due for its refresh).
func (ix *ParentIndex) unknown(pids []int) int {
	if !ix.warm() {
		return len(pids)
	}
	n := 0
	for _, pid := range pids {
		if _, ok := ix.byPID[pid]; !ok {
			n++
		}
	}
	return n
}

// listing lists /proc through r, or gives the last listing when the task
// stamp has not moved since it was made and the index is not due for its
// refresh (which then lists afresh too).
func (ix *ParentIndex) listing(r *TaskStatReader) ([]int, error) {
	if ix == nil {
		return r.listProcs()
	}
	if ix.stampOf == nil {
		s := &taskStamper{fs: r.fs}
		ix.stampOf = s.stamp
	}
	stamp, ok := ix.stampOf()
	if ok && ix.stamped && stamp == ix.stamp && ix.warm() {
		return ix.pids, nil
	}
	ix.listings++
	pids, err := r.listProcs()
	if err != nil {
		ix.stamped = false
		return pids, err
	}
	// A task born or reaped after the stamp was read moves the next one.
	// But the kernel gives a new task its PID before /proc shows it and
	// before it counts it: a fork under way at the stamp is in neither the
	// stamp's count nor the listing, and completing it moves no stamp. So
	// the listing stands for the stamp only if the last PID given is done:
	// listed, or found by name as a thread (a thread's directory is found
	// though not listed). One /proc does not know is a process being made,
	// or one gone already, and the next call lists again.
	ix.pids, ix.stamp = pids, stamp
	ix.stamped = ok && r.fs.taskShown(pids, stamp.lastPID)
	return pids, nil
}

// maxProcsListed bounds the listing of /proc for a parent scan.
const maxProcsListed = 1 << 22

// listProcs lists the PIDs in /proc.
func (r *TaskStatReader) listProcs() ([]int, error) {
	out, buf, err := hostfile.ListNumeric(r.fs.proc, r.dirBuf, nil, maxProcsListed)
	r.dirBuf = buf
	return out, err
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
// cycle, by the cheaper of two reads. The kernel's task/<tid>/children
// files cost one read per thread of the walked tree; a scan of every
// process's parent in /proc/<pid>/stat costs one read per process on the
// host. A busy training node has thousands of threads in its GPU
// processes and a few hundred processes: there the scan is the cheaper by
// far, and it finds the children of every thread, not only of the threads
// read. A walk lists /proc at its first question; told how many threads
// it will meet (ExpectThreads, the count of the previous cycle's walk), it
// scans at once when the host has fewer processes than that. Otherwise it
// reads children files until they would add up to two scans, and then
// scans once for the rest of the walk, which so never costs more than
// three times the cheaper way; on a kernel built without children
// files (CONFIG_PROC_CHILDREN) it scans as soon as it finds them missing. The
// collectors that walk down from a GPU process (gpuprocess, dataset, ebpf)
// share this one decision instead of each making it.
type ProcTree struct {
	fs       FS
	source   string
	byParent map[int][]int
	threads  map[int]int // by process, from the scan
	expect   int
	decided  bool // the cost was weighed
	procs    int  // processes listed in /proc when it was
	seen     int
	// filesRead counts the children files read (or tried).
	filesRead int
	stats     *TaskStatReader
	parents   *ParentIndex
}

// NewProcTree starts a cycle's walk.
func (f FS) NewProcTree() *ProcTree { return &ProcTree{fs: f} }

// ExpectThreads tells the walk how many threads it will meet, from the
// previous cycle's ThreadsSeen: more than the host has processes makes it
// scan every process's parent instead of reading children files.
// stats, if not nil, is the reader the scan reads through.
func (t *ProcTree) ExpectThreads(n int, stats *TaskStatReader) {
	t.expect, t.stats = n, stats
}

// KeepParents gives the walk an index of every process's parent kept
// across cycles: its scan then reads only the processes born since the
// last, and it weighs the scan at that many reads.
func (t *ProcTree) KeepParents(ix *ParentIndex) { t.parents = ix }

// ThreadsSeen is how many threads the walk met: those whose children it
// was asked for, or, where it answered from a scan without being given
// the threads, the processes' thread counts the scan read.
func (t *ProcTree) ThreadsSeen() int { return t.seen }

// Source is ChildrenFile or ParentScan once a walk has decided, else "".
func (t *ProcTree) Source() string { return t.source }

// decide chooses the scan when it reads fewer files than the expected
// threads' children files would.
func (t *ProcTree) decide() (errs []error) {
	if t.decided || t.source == ParentScan {
		return nil
	}
	t.decided = true
	if t.stats == nil {
		t.stats = t.fs.NewTaskStatReader()
	}
	pids, err := t.parents.listing(t.stats)
	if err != nil {
		return nil
	}
	t.procs = len(pids)
	if t.parents.unknown(pids) >= t.expect {
		return nil
	}
	return t.scan(pids)
}

func (t *ProcTree) scan(pids []int) (errs []error) {
	t.source = ParentScan
	if t.stats == nil {
		t.stats = t.fs.NewTaskStatReader()
	}
	var err error
	if t.byParent, t.threads, _, err = t.fs.scanParents(t.stats, pids, t.parents); err != nil {
		errs = append(errs, err)
	}
	return errs
}

// Children returns the processes that the threads tids of pid forked. A
// thread that exited is skipped; errs are the files that could not be
// read otherwise (for a debug log: a missing child is found next cycle).
// From a scan, the children of every thread of pid are returned.
func (t *ProcTree) Children(pid int, tids []string) (kids []int, errs []error) {
	return t.children(pid, len(tids), func(i int) string { return tids[i] })
}

// ChildrenOfThreads is Children with the threads as numbers, formatted
// only where children files are read.
func (t *ProcTree) ChildrenOfThreads(pid int, tids []int) (kids []int, errs []error) {
	return t.children(pid, len(tids), func(i int) string { return strconv.Itoa(tids[i]) })
}

func (t *ProcTree) children(pid, n int, tidAt func(int) string) (kids []int, errs []error) {
	errs = t.decide()
	t.seen += n
	if t.source != ParentScan && t.procs > 0 && t.filesRead+n > 2*t.procs {
		// The children files read so far and this process's add up
		// to two scans: scan, for this process and the rest of the
		// walk (the margin keeps a walk near the balance on the
		// files, which the next cycle's ExpectThreads then weighs).
		errs = append(errs, t.scan(nil)...)
	}
	if t.source == ParentScan {
		return t.byParent[pid], errs
	}
	t.filesRead += n
	for i := range n {
		tid := tidAt(i)
		got, err := t.fs.Children(pid, tid)
		switch {
		case err == nil:
			t.source = ChildrenFile
			kids = append(kids, got...)
		case Vanished(err) && t.source == "" && t.threadExists(pid, tid):
			// The thread is there and its children file is not: a
			// kernel without children files.
			errs = append(errs, t.scan(nil)...)
			return t.byParent[pid], errs
		case !Vanished(err):
			errs = append(errs, err)
		}
	}
	return kids, errs
}

// ChildrenOf is Children over every thread of pid, listed from its task
// directory (from a scan, not listed).
func (t *ProcTree) ChildrenOf(pid int) ([]int, []error) {
	errs := t.decide()
	if t.source == ParentScan {
		t.seen += t.threads[pid]
		return t.byParent[pid], errs
	}
	d, err := hostfile.OpenDir(t.fs.pidPath(pid, "task"))
	if err != nil {
		if Vanished(err) {
			return nil, errs
		}
		return nil, append(errs, err)
	}
	tids, err := d.Readdirnames(maxThreadsListed)
	d.Close()
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, append(errs, err)
	}
	// The main thread first: it decides the source while it surely
	// exists, and it is the one that forks DataLoader workers.
	main := strconv.Itoa(pid)
	sort.Slice(tids, func(i, j int) bool { return tids[i] == main || tids[j] != main && tids[i] < tids[j] })
	kids, cerrs := t.Children(pid, tids)
	return kids, append(errs, cerrs...)
}

func (t *ProcTree) threadExists(pid int, tid string) bool {
	_, err := os.Lstat(t.fs.pidPath(pid, "task", tid))
	return err == nil
}
