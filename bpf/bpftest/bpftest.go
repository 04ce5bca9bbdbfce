// Package bpftest holds what the tests that load gpudiag's eBPF programs
// share: the check that they can load here, and block I/O a test can
// predict.
package bpftest

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// Require skips a test that loads the programs where they cannot load,
// except in CI, which runs as root on a kernel with BTF and must prove that
// they do.
func Require(t testing.TB) {
	t.Helper()
	var why string
	switch {
	case os.Geteuid() != 0:
		why = "not root: loading the eBPF programs needs CAP_BPF and CAP_PERFMON"
	default:
		if _, err := os.Stat("/sys/kernel/btf/vmlinux"); err != nil {
			why = "the kernel has no BTF (/sys/kernel/btf/vmlinux): " + err.Error()
		}
	}
	if why == "" {
		return
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("CI must load the eBPF programs: %s", why)
	}
	t.Skip(why)
}

// Disk is a whole disk the block programs see.
type Disk struct {
	Name string // as in /sys/block
	Dev  uint32 // the kernel's encoding: major << 20 | minor
}

// DiskDir finds a directory on a disk the block programs see (a
// request-based whole disk or a partition of one; not tmpfs, overlay or
// device-mapper) and names the disk.
func DiskDir(t testing.TB) (string, Disk) {
	t.Helper()
	wd, _ := os.Getwd()
	for _, d := range []string{os.TempDir(), "/var/tmp", wd} {
		var st unix.Stat_t
		if err := unix.Stat(d, &st); err != nil {
			continue
		}
		sysDev := fmt.Sprintf("/sys/dev/block/%d:%d", unix.Major(st.Dev), unix.Minor(st.Dev))
		target, err := filepath.EvalSymlinks(sysDev)
		if err != nil {
			continue
		}
		if _, err := os.Stat(filepath.Join(target, "partition")); err == nil {
			target = filepath.Dir(target)
		}
		name := filepath.Base(target)
		if _, err := os.Stat(filepath.Join(target, "queue", "scheduler")); err != nil || strings.HasPrefix(name, "dm-") || strings.HasPrefix(name, "md") {
			continue
		}
		var major, minor uint32
		dev, err := os.ReadFile(filepath.Join(target, "dev"))
		if err != nil {
			continue
		}
		if _, err := fmt.Sscanf(string(dev), "%d:%d", &major, &minor); err != nil {
			continue
		}
		return d, Disk{Name: name, Dev: major<<20 | minor}
	}
	t.Skip("no directory here lives on a request-based disk (tmpfs, overlay or device-mapper everywhere)")
	return "", Disk{}
}

// DirectIO writes then reads back size bytes with O_DIRECT, in writes and
// reads of chunk bytes (size when 0), so that every byte goes to the disk as
// a request of this process, and returns the path.
func DirectIO(t testing.TB, dir string, size, chunk int) string {
	t.Helper()
	if chunk == 0 {
		chunk = size
	}
	f, err := os.CreateTemp(dir, "gpudiag-ebpf-*")
	if err != nil {
		t.Fatal(err)
	}
	path := f.Name()
	f.Close()
	t.Cleanup(func() { os.Remove(path) })
	// O_DIRECT needs an aligned buffer: anonymous memory is page aligned.
	buf, err := unix.Mmap(-1, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(buf)
	for i := range buf {
		buf[i] = byte(i)
	}
	fd, err := unix.Open(path, unix.O_WRONLY|unix.O_DIRECT, 0)
	if err != nil {
		t.Skipf("O_DIRECT refused on %s: %v", dir, err)
	}
	// Blocks allocated up front: a direct write that must allocate as it
	// extends the file may fall back to the page cache for part of it
	// (ext4 does), and a flusher thread, not this process, may then write
	// those pages.
	if err := unix.Fallocate(fd, 0, 0, int64(size)); err != nil && !errors.Is(err, unix.EOPNOTSUPP) {
		t.Fatalf("fallocate %s: %v", path, err)
	}
	for off := 0; off < size; off += chunk {
		if n, err := unix.Write(fd, buf[off:off+chunk]); err != nil || n != chunk {
			t.Fatalf("direct write: %d bytes, %v", n, err)
		}
	}
	if err := unix.Fsync(fd); err != nil {
		t.Fatal(err)
	}
	unix.Close(fd)
	fd, err = unix.Open(path, unix.O_RDONLY|unix.O_DIRECT, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	for off := 0; off < size; off += chunk {
		if n, err := unix.Read(fd, buf[off:off+chunk]); err != nil || n != chunk {
			t.Fatalf("direct read: %d bytes, %v", n, err)
		}
	}
	return path
}
