//go:build linux

package sockdiag

import (
	"os"
	"slices"
	"testing"

	"golang.org/x/sys/unix"
)

// On a kernel that reports a process's descriptor count (Linux 6.2+), the
// table lists the directory again only when the count moved, a socket was
// forgotten or a full re-read is asked; a socket opened in place of a
// closed file, which leaves the count as it was, waits for the full
// re-read.
func TestSocketTableListsWhenTheCountMoves(t *testing.T) {
	tab := NewSocketTable("/proc", os.Getpid())
	defer tab.Close()
	read := func(full bool) []uint32 {
		t.Helper()
		got, truncated, err := tab.Inodes(0, full, nil)
		if err != nil || truncated {
			t.Fatalf("%v truncated=%v", err, truncated)
		}
		return got
	}
	socket := func() (fd int, ino uint32) {
		t.Helper()
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			t.Fatal(err)
		}
		return fd, uint32(st.Ino)
	}
	read(false)
	if _, known, err := tab.fdDir.DescriptorCount(); err != nil || !known {
		t.Skipf("this kernel does not report descriptor counts (%v)", err)
	}
	if read(false); tab.listings != 1 {
		t.Fatalf("count unchanged: %d listings; want 1", tab.listings)
	}

	fd, ino := socket()
	defer unix.Close(fd)
	if got := read(false); !slices.Contains(got, ino) || tab.listings != 2 {
		t.Fatalf("new socket %d: got %v after %d listings; want it, after 2", ino, got, tab.listings)
	}
	if got := read(false); !slices.Contains(got, ino) || tab.listings != 2 {
		t.Fatalf("unchanged again: %v after %d listings", got, tab.listings)
	}
	tab.Forget(ino)
	if read(false); tab.listings != 3 {
		t.Fatalf("after Forget: %d listings; want 3", tab.listings)
	}

	// A file closed and a socket opened under its number.
	file, err := unix.Open("/dev/null", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	read(false)
	if err := unix.Close(file); err != nil {
		t.Fatal(err)
	}
	fd2, ino2 := socket()
	defer unix.Close(fd2)
	if fd2 != file {
		t.Skipf("descriptor %d not reused (got %d): another descriptor moved meanwhile", file, fd2)
	}
	listed := tab.listings
	if got := read(false); slices.Contains(got, ino2) || tab.listings != listed {
		t.Fatalf("same count: %v after %d listings; want no new listing", got, tab.listings)
	}
	if got := read(true); !slices.Contains(got, ino2) {
		t.Fatalf("full re-read: %v; want socket %d", got, ino2)
	}
}
