package hostfs

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpudiag/gpudiag/internal/hosttest"
)

func FuzzParseChildren(f *testing.F) {
	f.Add(hosttest.Seed(f, "proc/4343/task/4343/children"))
	f.Add([]byte("4344 4345 \n"))
	f.Add([]byte("0"))
	f.Fuzz(func(t *testing.T, data []byte) {
		var pids []int
		var err error
		hosttest.WithinHangLimit(t, func() { pids, err = ParseChildren("children", data) })
		if err != nil {
			hosttest.CheckError(t, err, "children: ")
			return
		}
		if len(pids) > (len(data)+1)/2 {
			t.Fatalf("%d PIDs from %d bytes", len(pids), len(data))
		}
		var rendered []string
		for _, p := range pids {
			if p <= 0 {
				t.Fatalf("PID %d", p)
			}
			rendered = append(rendered, strconv.Itoa(p))
		}
		if again, err := ParseChildren("children", []byte(strings.Join(rendered, " ")+" ")); err != nil || !slices.Equal(again, pids) {
			t.Fatalf("%v renders and reads back as %v, %v", pids, again, err)
		}
	})
}

// A ProcTree reads the threads' children files where the kernel has them,
// and scans every process's parent once where it has not.
func TestProcTree(t *testing.T) {
	root := t.TempDir()
	write := func(path, data string) {
		t.Helper()
		p := filepath.Join(root, path)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	stat := func(pid, ppid int) string {
		return fmt.Sprintf("%d (python) S %d %d %d 0 -1 4194560 100 0 0 0 10 5 0 0 20 0 4 0 12345 1000000 100 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 0 0 0 0 0 0\n", pid, ppid, pid, pid)
	}
	// A kernel with children files: two threads of 100 forked workers.
	write("with/100/task/100/children", "200 201 ")
	write("with/100/task/101/children", "202")
	write("with/100/stat", stat(100, 1))
	for _, pid := range []int{200, 201, 202} {
		write(fmt.Sprintf("with/%d/stat", pid), stat(pid, 100))
	}
	fs, err := NewFS(filepath.Join(root, "with"), root)
	if err != nil {
		t.Fatal(err)
	}
	tree := fs.NewProcTree()
	if kids, errs := tree.ChildrenOf(100); !slices.Equal(kids, []int{200, 201, 202}) || len(errs) > 0 || tree.Source() != ChildrenFile {
		t.Errorf("with children files: %v %v from %q", kids, errs, tree.Source())
	}
	if kids, _ := tree.ChildrenOf(999); kids != nil {
		t.Errorf("a vanished process has children %v", kids)
	}
	// A kernel without them: the thread is there, its children file is not.
	write("without/300/task/300/stat", stat(300, 1))
	write("without/300/stat", stat(300, 1))
	write("without/400/stat", stat(400, 300))
	write("without/401/stat", stat(401, 300))
	write("without/500/stat", stat(500, 400))
	fs, err = NewFS(filepath.Join(root, "without"), root)
	if err != nil {
		t.Fatal(err)
	}
	tree = fs.NewProcTree()
	if kids, errs := tree.ChildrenOf(300); !slices.Equal(kids, []int{400, 401}) || len(errs) > 0 || tree.Source() != ParentScan {
		t.Errorf("without children files: %v %v from %q", kids, errs, tree.Source())
	}
	if kids, _ := tree.Children(400, []string{"400"}); !slices.Equal(kids, []int{500}) {
		t.Errorf("from the same scan: %v; want [500]", kids)
	}
}

// procFileWriter writes files under root, a /proc of a test.
func procFileWriter(t *testing.T, root string) func(path, data string) {
	return func(path, data string) {
		t.Helper()
		hosttest.WriteFile(t, filepath.Join(root, path), data)
	}
}

// pythonStat is the stat line of a process named python with its parent and
// thread count.
func pythonStat(pid, ppid, threads int) string {
	return fmt.Sprintf("%d (python) S %d %d %d 0 -1 4194560 100 0 0 0 10 5 0 0 20 0 %d 0 12345 1000000 100 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 0 0 0 0 0 0\n", pid, ppid, pid, pid, threads)
}

// Told to expect more threads than the host has processes, a walk scans
// the parents instead of reading children files, and finds the children
// of every thread; told fewer, it reads children files.
func TestProcTreeWeighsTheCost(t *testing.T) {
	root := t.TempDir()
	write := procFileWriter(t, root)
	stat := pythonStat
	// Three threads of 100, of which the walk is shown two; the third
	// forked 203.
	write("100/stat", stat(100, 1, 3))
	write("100/task/100/children", "200 201 ")
	write("100/task/101/children", "202")
	write("100/task/102/children", "203")
	for _, pid := range []int{200, 201, 202, 203} {
		write(fmt.Sprintf("%d/stat", pid), stat(pid, 100, 1))
	}
	write("300/stat", stat(300, 200, 1))
	fs, err := NewFS(root, root)
	if err != nil {
		t.Fatal(err)
	}
	tree := fs.NewProcTree()
	tree.ExpectThreads(10, nil) // 6 processes: the scan is cheaper
	if kids, errs := tree.Children(100, []string{"100", "101"}); !slices.Equal(kids, []int{200, 201, 202, 203}) || len(errs) > 0 || tree.Source() != ParentScan {
		t.Errorf("expecting 10 threads: %v %v from %q", kids, errs, tree.Source())
	}
	if kids, _ := tree.ChildrenOf(200); !slices.Equal(kids, []int{300}) {
		t.Errorf("from the same scan: %v; want [300]", kids)
	}
	if got := tree.ThreadsSeen(); got != 3 {
		t.Errorf("threads seen %d; want 2 asked for and 1 of 200's", got)
	}
	tree = fs.NewProcTree()
	tree.ExpectThreads(6, nil) // as many as processes: children files
	if kids, errs := tree.ChildrenOfThreads(100, []int{100, 101}); !slices.Equal(kids, []int{200, 201, 202}) || len(errs) > 0 || tree.Source() != ChildrenFile {
		t.Errorf("expecting 6 threads: %v %v from %q", kids, errs, tree.Source())
	}
	if got := tree.ThreadsSeen(); got != 2 {
		t.Errorf("threads seen %d; want 2", got)
	}
	// Not told: children files until they would outnumber twice the
	// processes, then the scan, which finds 200's child too.
	tree = fs.NewProcTree()
	if kids, _ := tree.ChildrenOfThreads(100, []int{100, 101, 102}); !slices.Equal(kids, []int{200, 201, 202, 203}) || tree.Source() != ChildrenFile {
		t.Errorf("3 threads of 6 processes: %v from %q", kids, tree.Source())
	}
	if kids, _ := tree.ChildrenOfThreads(200, []int{200, 201, 202, 203, 204, 205, 206, 207, 208, 209}); !slices.Equal(kids, []int{300}) || tree.Source() != ParentScan {
		t.Errorf("13 threads of 6 processes: %v from %q; want [300] from a scan", kids, tree.Source())
	}
}

// A walk given a ParentIndex reads the stat files of the processes it has
// not met: a new child is found, an exited process is forgotten, and what
// it holds is trusted (a PID's stat rewritten under it is not read) until
// ParentIndexRefresh has passed, when every process is read again. Warm,
// it weighs the scan at the unknown processes only.
func TestProcTreeKeepsParents(t *testing.T) {
	root := t.TempDir()
	write := procFileWriter(t, root)
	stat := pythonStat
	write("100/stat", stat(100, 1, 40))
	write("100/task/100/children", "200")
	write("200/stat", stat(200, 100, 1))
	write("300/stat", stat(300, 1, 1))
	fs, err := NewFS(root, root)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1000, 0)
	ix := NewParentIndex(func() time.Time { return now })
	walk := func(expect int) ([]int, string) {
		t.Helper()
		tree := fs.NewProcTree()
		tree.ExpectThreads(expect, nil)
		tree.KeepParents(ix)
		kids, errs := tree.ChildrenOf(100)
		if len(errs) > 0 {
			t.Fatal(errs)
		}
		return kids, tree.Source()
	}
	if kids, src := walk(40); !slices.Equal(kids, []int{200}) || src != ParentScan || ix.Len() != 3 {
		t.Fatalf("first walk: %v from %q, index of %d", kids, src, ix.Len())
	}
	// 300 exits and its PID is reused at once by a child of 100; 201 is
	// born; 200 exits.
	write("300/stat", stat(300, 100, 1))
	write("201/stat", stat(201, 100, 1))
	if err := os.RemoveAll(filepath.Join(root, "200")); err != nil {
		t.Fatal(err)
	}
	now = now.Add(5 * time.Second)
	// Warm: one unknown process against 2 expected threads, so a scan.
	if kids, src := walk(2); !slices.Equal(kids, []int{201}) || src != ParentScan || ix.Len() != 3 {
		t.Fatalf("warm walk: %v from %q, index of %d; want [201] (300 not read again, 200 gone)", kids, src, ix.Len())
	}
	now = now.Add(ParentIndexRefresh)
	// Due for its refresh: 3 processes to read against 2 threads, so
	// children files; then a scan refreshes it.
	if _, src := walk(2); src != ChildrenFile {
		t.Fatalf("refresh due, 2 threads expected: a walk from %q; want children files", src)
	}
	if kids, src := walk(40); !slices.Equal(kids, []int{201, 300}) || src != ParentScan {
		t.Fatalf("refreshed walk: %v from %q; want [201 300]", kids, src)
	}
}

// A scan made by another reader seeds the refresh an index is due for: the
// processes it holds are not read again, those born since are; a seed no
// newer than the last refresh, itself too old, or given to a warm index
// changes nothing.
func TestParentIndexSeed(t *testing.T) {
	root := t.TempDir()
	write := procFileWriter(t, root)
	write("100/stat", pythonStat(100, 1, 40))
	write("200/stat", pythonStat(200, 100, 1))
	write("300/stat", pythonStat(300, 1, 1))
	fs, err := NewFS(root, root)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1000, 0)
	ix := NewParentIndex(func() time.Time { return now })
	stamp := taskStamp{threads: 50, lastPID: 400}
	ix.stampOf = func() (taskStamp, bool) { return stamp, true }
	walk := func() []int {
		t.Helper()
		return childrenOf100(t, fs, ix)
	}
	// The seed says 300 is 100's child; its stat file says otherwise, so
	// a walk that finds 300 under 100 took it from the seed.
	seed := map[int]TaskStat{100: {PID: 100, PPID: 1, NumThreads: 40}, 200: {PID: 200, PPID: 100, NumThreads: 1},
		300: {PID: 300, PPID: 100, NumThreads: 1}}
	ix.Seed(now.Add(-ParentIndexRefresh), seed)
	if ix.seeds != 0 {
		t.Fatal("a seed as old as the refresh interval was taken")
	}
	ix.Seed(now.Add(-time.Second), seed)
	write("400/stat", pythonStat(400, 100, 1)) // born after the seed's scan
	if kids := walk(); !slices.Equal(kids, []int{200, 300, 400}) || ix.seeds != 1 {
		t.Fatalf("seeded walk: %v after %d seeds; want [200 300 400] (300 from the seed, 400 read)", kids, ix.seeds)
	}
	now = now.Add(5 * time.Second)
	ix.Seed(now, map[int]TaskStat{})
	if kids := walk(); !slices.Equal(kids, []int{200, 300, 400}) || ix.seeds != 1 {
		t.Fatalf("a warm index took a seed: %v after %d seeds", kids, ix.seeds)
	}
	// Due: a fresh seed refreshes it, and /proc is listed afresh though
	// the task stamp did not move (a refresh's listing is the stamp's
	// backstop).
	listed := ix.listings
	now = now.Add(ParentIndexRefresh)
	ix.Seed(now.Add(-time.Second), seed)
	if kids := walk(); !slices.Equal(kids, []int{200, 300, 400}) || ix.seeds != 2 || ix.listings != listed+1 {
		t.Fatalf("seeded refresh: %v after %d seeds, %d listings (was %d); want [200 300 400], 2 seeds, one more listing",
			kids, ix.seeds, ix.listings, listed)
	}
	// Due again: without a seed it reads every process, and 300's file
	// stands.
	now = now.Add(ParentIndexRefresh)
	ix.Seed(now.Add(-ParentIndexRefresh-time.Second), seed)
	if kids := walk(); !slices.Equal(kids, []int{200, 400}) || ix.seeds != 2 {
		t.Fatalf("refresh without a fresh seed: %v after %d seeds; want [200 400]", kids, ix.seeds)
	}
}

// The index lists /proc again only when the task stamp moved (a task born
// or gone) or its refresh is due; with the stamp unknown it lists every
// time.
func TestParentIndexListsWhenTasksChange(t *testing.T) {
	root := t.TempDir()
	write := procFileWriter(t, root)
	write("100/stat", pythonStat(100, 1, 40))
	write("200/stat", pythonStat(200, 100, 1))
	fs, err := NewFS(root, root)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1000, 0)
	ix := NewParentIndex(func() time.Time { return now })
	stamp, known := taskStamp{threads: 50, lastPID: 200}, true
	ix.stampOf = func() (taskStamp, bool) { return stamp, known }
	walk := func() []int {
		t.Helper()
		return childrenOf100(t, fs, ix)
	}
	if kids := walk(); !slices.Equal(kids, []int{200}) || ix.listings != 1 {
		t.Fatalf("first walk: %v after %d listings", kids, ix.listings)
	}
	write("201/stat", pythonStat(201, 100, 1))
	now = now.Add(5 * time.Second)
	if kids := walk(); !slices.Equal(kids, []int{200}) || ix.listings != 1 {
		t.Fatalf("stamp unchanged: %v after %d listings; want the last listing", kids, ix.listings)
	}
	stamp.lastPID = 201 // 201 was born
	if kids := walk(); !slices.Equal(kids, []int{200, 201}) || ix.listings != 2 {
		t.Fatalf("stamp moved: %v after %d listings; want [200 201] after 2", kids, ix.listings)
	}
	now = now.Add(ParentIndexRefresh)
	if walk(); ix.listings != 3 {
		t.Fatalf("refresh due: %d listings; want 3", ix.listings)
	}
	known = false
	walk()
	walk()
	if ix.listings != 5 {
		t.Fatalf("stamp unknown: %d listings; want 5", ix.listings)
	}
	// A last PID that /proc neither lists nor finds is a process being
	// made (or gone): the listing does not stand for the stamp.
	known, stamp.lastPID = true, 999
	walk()
	walk()
	if ix.listings != 7 {
		t.Fatalf("last PID not shown: %d listings; want 7", ix.listings)
	}
	stamp.lastPID = 200
	walk()
	walk()
	if ix.listings != 8 {
		t.Fatalf("last PID shown again: %d listings; want 8", ix.listings)
	}
}

// On the real /proc the stamp is read and moves when a process is born;
// a copy of /proc (a test tree without self) gives none.
func TestTaskStampLive(t *testing.T) {
	fs, err := NewFS("/proc", "/sys")
	if err != nil {
		t.Fatal(err)
	}
	s := &taskStamper{fs: fs}
	before, ok := s.stamp()
	if !ok || before.threads <= 0 {
		t.Fatalf("stamp of /proc: %+v, %v", before, ok)
	}
	child := exec.Command("true")
	if err := child.Run(); err != nil {
		t.Skip(err)
	}
	if after, ok := s.stamp(); !ok || after == before {
		t.Fatalf("a process was born and went: stamp %+v then %+v (%v)", before, after, ok)
	}
	tree, err := NewFS(t.TempDir(), "")
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := (&taskStamper{fs: tree}).stamp(); ok {
		t.Error("a tree without self gave a stamp")
	}
}

func TestParseLoadavgTasks(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want taskStamp
		ok   bool
	}{
		{"0.23 0.33 0.28 1/77 18080\n", taskStamp{77, 18080}, true},
		{"12.00 11.50 10.25 17/3456 4194303", taskStamp{3456, 4194303}, true},
		{"0.23 0.33 0.28 1/77\n", taskStamp{}, false},
		{"0.23 0.33 0.28 77 18080\n", taskStamp{}, false},
		{"0.23 0.33 0.28 1/x 18080\n", taskStamp{}, false},
		{"0.23 0.33 0.28 1/0 18080\n", taskStamp{}, false},
		{"", taskStamp{}, false},
	} {
		got, ok := parseLoadavgTasks([]byte(tc.in))
		if got != tc.want || ok != tc.ok {
			t.Errorf("%q: %+v %v; want %+v %v", tc.in, got, ok, tc.want, tc.ok)
		}
	}
}

// Any loadavg line parses to a stamp of a positive task count or to none.
func FuzzParseLoadavgTasks(f *testing.F) {
	f.Add([]byte("0.23 0.33 0.28 1/77 18080\n"))
	f.Add([]byte("0.00 0.00 0.00 0/1 0"))
	f.Fuzz(func(t *testing.T, b []byte) {
		s, ok := parseLoadavgTasks(b)
		if ok && (s.threads <= 0 || s.lastPID < 0) {
			t.Fatalf("%q: %+v", b, s)
		}
		if !ok && s != (taskStamp{}) {
			t.Fatalf("%q: no stamp but %+v", b, s)
		}
	})
}

// childrenOf100 walks down from process 100 through the index, expecting 40
// threads (more than the fixtures' processes: a parent scan).
func childrenOf100(t *testing.T, fs FS, ix *ParentIndex) []int {
	t.Helper()
	tree := fs.NewProcTree()
	tree.ExpectThreads(40, nil)
	tree.KeepParents(ix)
	kids, errs := tree.ChildrenOf(100)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	return kids
}
