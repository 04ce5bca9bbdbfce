package hostfs

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

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
