package sockdiag

import (
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
)

func TestParseSocketLink(t *testing.T) {
	for _, tc := range []struct {
		target string
		inode  uint32
		ok     bool
	}{
		{"socket:[61001]", 61001, true},
		{"socket:[4294967295]", 4294967295, true},
		{"socket:[4294967296]", 0, false}, // wider than idiag_inode
		{"socket:[0]", 0, false},
		{"socket:[]", 0, false},
		{"socket:[12", 0, false},
		{"socket:[-1]", 0, false},
		{"pipe:[61001]", 0, false},
		{"anon_inode:[eventfd]", 0, false},
		{"/dev/nvidia0", 0, false},
		{"/tmp/socket:[1]", 0, false},
	} {
		ino, ok := parseSocketLink(tc.target)
		if ino != tc.inode || ok != tc.ok {
			t.Errorf("%q: %d %v; want %d %v", tc.target, ino, ok, tc.inode, tc.ok)
		}
	}
}

// procWithFDs writes /proc/<pid>/fd with n links, every other one a socket.
func procWithFDs(t *testing.T, pid, n int) string {
	t.Helper()
	root := t.TempDir()
	dir := filepath.Join(root, strconv.Itoa(pid), "fd")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for fd := range n {
		target := "/dev/null"
		if fd%2 == 1 {
			target = "socket:[" + strconv.Itoa(1000+fd) + "]"
		}
		if err := os.Symlink(target, filepath.Join(dir, strconv.Itoa(fd))); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

func TestSocketTableReadsBatches(t *testing.T) {
	root := procWithFDs(t, 7, 600) // more than one Readdirnames batch
	got, truncated, err := NewSocketTable(root, 7).Inodes(0, false, nil)
	if err != nil || truncated {
		t.Fatalf("%v truncated=%v", err, truncated)
	}
	if len(got) != 300 {
		t.Fatalf("%d sockets; want 300", len(got))
	}
	slices.Sort(got)
	for i, ino := range got {
		if want := uint32(1001 + 2*i); ino != want {
			t.Fatalf("socket %d: inode %d; want %d", i, ino, want)
		}
	}

	got, truncated, err = NewSocketTable(root, 7).Inodes(100, false, nil)
	if err != nil || !truncated || len(got) > 100 {
		t.Fatalf("limit 100: %d sockets, truncated %v, %v", len(got), truncated, err)
	}
	got, truncated, err = NewSocketTable(root, 7).Inodes(600, false, nil)
	if err != nil || truncated || len(got) != 300 {
		t.Fatalf("limit equal to the table: %d sockets, truncated %v, %v", len(got), truncated, err)
	}

	if _, _, err := NewSocketTable(root, 8).Inodes(0, false, nil); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("vanished process: %v", err)
	}
}

// The table reads a link once: a descriptor whose link changed under the
// same number keeps its old reading until Forget or a full re-read, and a
// new descriptor is read at once.
func TestSocketTable(t *testing.T) {
	root := procWithFDs(t, 7, 6) // sockets 1001, 1003, 1005
	tab := NewSocketTable(root, 7)
	read := func(full bool) []uint32 {
		t.Helper()
		got, truncated, err := tab.Inodes(0, full, nil)
		if err != nil || truncated {
			t.Fatalf("%v %v", err, truncated)
		}
		slices.Sort(got)
		return got
	}
	if got := read(false); !slices.Equal(got, []uint32{1001, 1003, 1005}) {
		t.Fatalf("first read %v", got)
	}
	relink := func(fd int, target string) {
		path := filepath.Join(root, "7", "fd", strconv.Itoa(fd))
		if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			t.Fatal(err)
		}
		if target != "" {
			if err := os.Symlink(target, path); err != nil {
				t.Fatal(err)
			}
		}
	}
	relink(3, "socket:[2003]")         // number reused by another socket
	relink(2, "socket:[2002]")         // a file's number reused by a socket
	relink(5, "")                      // closed
	relink(9, "socket:[2009]")         // new descriptor
	want := []uint32{1001, 1003, 2009} // 3 and 2 unchanged until told
	if got := read(false); !slices.Equal(got, want) {
		t.Errorf("cached read %v; want %v", got, want)
	}
	tab.Forget(1003)
	if got, want := read(false), []uint32{1001, 2003, 2009}; !slices.Equal(got, want) {
		t.Errorf("after Forget(1003): %v; want %v", got, want)
	}
	if got, want := read(true), []uint32{1001, 2002, 2003, 2009}; !slices.Equal(got, want) {
		t.Errorf("full read %v; want %v", got, want)
	}
	if got, truncated, err := tab.Inodes(2, false, nil); err != nil || !truncated || len(got) > 2 {
		t.Errorf("limit 2: %v %v %v", got, truncated, err)
	}
	if _, _, err := NewSocketTable(root, 8).Inodes(0, false, nil); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("gone process: %v", err)
	}
}

// A table holds its process's descriptor directory open between listings;
// once the process is reaped, the listing says it is gone and the
// directory is closed.
func TestSocketTableOfAReapedProcess(t *testing.T) {
	child := exec.Command("sleep", "600")
	if err := child.Start(); err != nil {
		t.Skip(err)
	}
	defer func() { _ = child.Process.Kill(); _ = child.Wait() }()
	tab := NewSocketTable("/proc", child.Process.Pid)
	for range 2 {
		if _, _, err := tab.Inodes(0, false, nil); err != nil {
			t.Fatal(err)
		}
	}
	if tab.fdDir == nil {
		t.Fatal("the descriptor directory is not held")
	}
	_ = child.Process.Kill()
	_ = child.Wait()
	if _, _, err := tab.Inodes(0, false, nil); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("listing a reaped process: %v; want ErrNotExist", err)
	}
	if tab.fdDir != nil {
		t.Error("the directory of a reaped process is still held")
	}
}
