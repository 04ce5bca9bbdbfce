package hostfs

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpudiag/gpudiag/internal/hosttest"
)

func TestOpenFiles(t *testing.T) {
	proc := t.TempDir()
	fd := filepath.Join(proc, "77", "fd")
	for n, target := range map[string]string{"0": "/dev/null", "1": "pipe:[1]", "3": "/data/train/shard-0001.tar",
		"4": "socket:[9]", "5": "/memfd:x (deleted)", "6": "/scratch/old (deleted)", "7": "/data/train/shard-0002.tar"} {
		symlink(t, target, filepath.Join(fd, n))
	}
	hosttest.WriteFile(t, filepath.Join(proc, "77", "fdinfo", "3"), "pos:\t0\nflags:\t0100000\nmnt_id:\t412\nino:\t99\n")
	f, err := NewFS(proc, "")
	if err != nil {
		t.Fatal(err)
	}
	got, truncated, err := f.OpenFiles(77, 100, farFuture)
	want := []OpenFile{{Path: "/data/train/shard-0001.tar", MountID: 412, HasMountID: true}, {Path: "/data/train/shard-0002.tar"}}
	if err != nil || truncated || !equalOpenFiles(got, want) {
		t.Fatalf("got %+v, %v, %v; want %+v", got, truncated, err, want)
	}
	if got, truncated, _ := f.OpenFiles(77, 2, farFuture); !truncated || len(got) > 2 {
		t.Errorf("bounded to 2 descriptors: %+v, truncated %v", got, truncated)
	}
	if got, _, err := f.OpenFiles(78, 10, farFuture); got != nil || err != nil {
		t.Errorf("an exited process: %+v, %v", got, err)
	}
}

var farFuture = time.Now().Add(time.Hour)

func symlink(t *testing.T, target, path string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, path); err != nil {
		t.Fatal(err)
	}
}

// equalOpenFiles compares in path order: a directory lists in its own.
func equalOpenFiles(got, want []OpenFile) bool {
	slices.SortFunc(got, func(a, b OpenFile) int { return strings.Compare(a.Path, b.Path) })
	return slices.Equal(got, want)
}

func TestParseFDInfoMountID(t *testing.T) {
	for _, tc := range []struct {
		text string
		id   int
		ok   bool
	}{
		{"pos:\t0\nflags:\t0100000\nmnt_id:\t412\nino:\t99\n", 412, true},
		{"pos:\t0\nflags:\t02\n", 0, false}, // before 3.15
		{"mnt_id:\tx\n", 0, false},
		{"mnt_id:\t-1\n", 0, false},
	} {
		if id, ok := ParseFDInfoMountID([]byte(tc.text)); id != tc.id || ok != tc.ok {
			t.Errorf("%q: %d, %v; want %d, %v", tc.text, id, ok, tc.id, tc.ok)
		}
	}
}

func FuzzParseFDInfoMountID(f *testing.F) {
	f.Add([]byte("pos:\t0\nflags:\t0100000\nmnt_id:\t412\nino:\t99\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		var id int
		var ok bool
		hosttest.WithinHangLimit(t, func() { id, ok = ParseFDInfoMountID(data) })
		if ok && id < 0 {
			t.Fatalf("negative mount ID %d accepted", id)
		}
		if !ok && id != 0 {
			t.Fatalf("mount ID %d returned with ok false", id)
		}
	})
}

// The real /proc: a file this test holds open is listed with the mount it
// was opened through, and a closed one is not.
func TestOpenFilesLive(t *testing.T) {
	path := filepath.Join(t.TempDir(), "shard-0001.tar")
	hosttest.WriteFile(t, path, "data")
	held, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	f, err := NewFS("/proc", "/sys")
	if err != nil {
		t.Fatal(err)
	}
	find := func() *OpenFile {
		files, truncated, err := f.OpenFiles(os.Getpid(), 1<<16, farFuture)
		if err != nil || truncated {
			t.Fatalf("OpenFiles(self): %v, truncated %v", err, truncated)
		}
		for i := range files {
			if files[i].Path == path {
				return &files[i]
			}
		}
		return nil
	}
	of := find()
	if of == nil || !of.HasMountID || of.MountID <= 0 {
		t.Fatalf("the held file %s: %+v; want it listed with its mount ID", path, of)
	}
	held.Close()
	if of := find(); of != nil {
		t.Errorf("the closed file is still listed: %+v", of)
	}
}

// A reader kept across processes gives what a fresh one gives, and reuses
// its buffers: reading a process again allocates less than a fresh read.
func TestOpenFileReaderReused(t *testing.T) {
	f, err := NewFS("/proc", "/sys")
	if err != nil {
		t.Fatal(err)
	}
	r := f.NewOpenFileReader()
	self := os.Getpid()
	for range 2 {
		got, _, err := r.OpenFiles(self, 1<<16, farFuture)
		want, _, _ := f.OpenFiles(self, 1<<16, farFuture)
		if err != nil || !equalOpenFiles(got, want) {
			t.Fatalf("reused reader: %+v, %v; a fresh one: %+v", got, err, want)
		}
	}
	if got, _, err := r.OpenFiles(1<<30, 10, farFuture); got != nil || err != nil {
		t.Errorf("a process that does not exist: %+v, %v", got, err)
	}
	reused := testing.AllocsPerRun(20, func() { _, _, _ = r.OpenFiles(self, 1<<16, farFuture) })
	fresh := testing.AllocsPerRun(20, func() { _, _, _ = f.OpenFiles(self, 1<<16, farFuture) })
	if reused >= fresh {
		t.Errorf("allocations per read: %.0f reused, %.0f fresh; want fewer reused", reused, fresh)
	}
}
