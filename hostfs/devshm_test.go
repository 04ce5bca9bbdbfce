package hostfs

import (
	"github.com/gpudiag/gpudiag/internal/hosttest"

	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func TestShmUsageOf(t *testing.T) {
	for _, tc := range []struct {
		name string
		st   unix.Statfs_t
		want ShmUsage
	}{
		{"docker default", unix.Statfs_t{Type: unix.TMPFS_MAGIC, Bsize: 4096, Blocks: 16384, Bfree: 16000},
			ShmUsage{Tmpfs: true, SizeBytes: 64 << 20, UsedBytes: 384 * 4096}},
		{"not tmpfs", unix.Statfs_t{Type: 0x794c7630, Bsize: 4096, Blocks: 100, Bfree: 100}, ShmUsage{SizeBytes: 409600}},
		{"free above blocks", unix.Statfs_t{Type: unix.TMPFS_MAGIC, Bsize: 4096, Blocks: 10, Bfree: 20}, ShmUsage{Tmpfs: true, SizeBytes: 40960}},
	} {
		if got := ShmUsageOf(tc.st); got != tc.want {
			t.Errorf("%s: got %+v; want %+v", tc.name, got, tc.want)
		}
	}
}

// A /dev/shm is looked up inside the root: a symlink pointing out of it
// is resolved inside, and a missing one is an error naming it.
func TestDevShmInRoot(t *testing.T) {
	proc := t.TempDir()
	root := filepath.Join(proc, "77", "root")
	if err := os.MkdirAll(filepath.Join(root, "dev"), 0o755); err != nil {
		t.Fatal(err)
	}
	f, err := NewFS(proc, "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.DevShm(77, 0); err == nil || !strings.Contains(err.Error(), "dev/shm") {
		t.Fatalf("missing /dev/shm: error %v", err)
	}
	if err := os.Mkdir(filepath.Join(root, "dev", "shm"), 0o755); err != nil {
		t.Fatal(err)
	}
	u, err := f.DevShm(77, 0)
	if err != nil || u.SizeBytes == 0 {
		t.Fatalf("got %+v, %v", u, err)
	}
}

// Real kernel: a child in a mount namespace of its own mounts an 8 MiB
// tmpfs on its /dev/shm; read through /proc/<child>/root, the size is
// 8 MiB and not the host's /dev/shm.
func TestDevShmLive(t *testing.T) {
	child := hosttest.PrivateDevShm(t)
	f, err := NewFS("/proc", "/sys")
	if err != nil {
		t.Fatal(err)
	}
	u, err := f.DevShm(child, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("child %d /dev/shm: %+v", child, u)
	if !u.Tmpfs || u.SizeBytes != 8<<20 || u.UsedBytes != 2<<20 {
		t.Errorf("got %+v; want an 8 MiB tmpfs with 2 MiB used", u)
	}
	if own, err := f.DevShm(os.Getpid(), 0); err == nil && own.SizeBytes == 8<<20 {
		t.Errorf("the test's own /dev/shm reads 8 MiB too: the child's mount leaked")
	}
}

func TestStatfsPendingRefused(t *testing.T) {
	key := "/r\x00/x"
	statfsInFlight.Store(key, struct{}{})
	defer statfsInFlight.Delete(key)
	if _, err := statfsInRoot("/r", "/x", time.Second); !errors.Is(err, ErrStatfsPending) {
		t.Fatalf("error %v; want ErrStatfsPending", err)
	}
}
