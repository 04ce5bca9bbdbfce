//go:build linux

package sockdiag

import (
	"os"
	"runtime"
	"slices"
	"testing"
	"time"

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

// A thread blocked in accept holds a descriptor number reserved: counted by
// the size of the fd directory, not listed until the connection comes.
// The socket accepted then leaves the count as it was, so a listing that
// did not match its count must not stand for it.
func TestSocketTableCountWithAReservedDescriptor(t *testing.T) {
	tab := NewSocketTable("/proc", os.Getpid())
	defer tab.Close()
	ln, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(ln)
	if err := unix.Bind(ln, &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	if err := unix.Listen(ln, 1); err != nil {
		t.Fatal(err)
	}
	addr, err := unix.Getsockname(ln)
	if err != nil {
		t.Fatal(err)
	}
	client, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(client)
	if _, _, err := tab.Inodes(0, false, nil); err != nil {
		t.Fatal(err)
	}
	before, known, err := tab.fdDir.DescriptorCount()
	if err != nil || !known {
		t.Skipf("this kernel does not report descriptor counts (%v)", err)
	}
	accepted := make(chan int, 1)
	go func() {
		runtime.LockOSThread() // the blocking accept keeps its own thread
		fd, _, err := unix.Accept4(ln, unix.SOCK_CLOEXEC)
		if err != nil {
			fd = -1
		}
		accepted <- fd
	}()
	// Wait for the reservation: the count one above the listing's.
	reserved := false
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline) && !reserved; time.Sleep(10 * time.Millisecond) {
		n, _, _ := tab.fdDir.DescriptorCount()
		reserved = n > before
	}
	if !reserved {
		t.Skip("accept reserved no descriptor number visible in the count")
	}
	if _, _, err := tab.Inodes(0, false, nil); err != nil { // lists: the count moved
		t.Fatal(err)
	}
	if err := unix.Connect(client, addr); err != nil {
		t.Fatal(err)
	}
	fd := <-accepted
	if fd < 0 {
		t.Fatal("accept failed")
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		t.Fatal(err)
	}
	if got, _, err := tab.Inodes(0, false, nil); err != nil || !slices.Contains(got, uint32(st.Ino)) {
		t.Fatalf("the accepted socket %d is not among %v (%v)", st.Ino, got, err)
	}
}
