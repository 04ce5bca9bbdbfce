package sockdiag

import (
	"errors"
	"io/fs"
	"os"
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

func TestProcessSocketInodes(t *testing.T) {
	root := procWithFDs(t, 7, 600) // more than one Readdirnames batch
	got, truncated, err := ProcessSocketInodes(root, 7, 0)
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

	got, truncated, err = ProcessSocketInodes(root, 7, 100)
	if err != nil || !truncated || len(got) > 100 {
		t.Fatalf("limit 100: %d sockets, truncated %v, %v", len(got), truncated, err)
	}
	got, truncated, err = ProcessSocketInodes(root, 7, 600)
	if err != nil || truncated || len(got) != 300 {
		t.Fatalf("limit equal to the table: %d sockets, truncated %v, %v", len(got), truncated, err)
	}

	if _, _, err := ProcessSocketInodes(root, 8, 0); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("vanished process: %v", err)
	}
}
