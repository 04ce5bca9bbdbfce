package hostfs

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpudiag/gpudiag/internal/hosttest"
	"github.com/gpudiag/gpudiag/sample"
)

func TestParseCgroupMemoryStat(t *testing.T) {
	for _, tc := range []struct {
		name, text string
		want       sample.CgroupMemory
		errHas     string
	}{
		{name: "5.9+", text: "anon 100\nfile 4096\nworkingset_refault_anon 3\nworkingset_refault_file 77\n",
			want: sample.CgroupMemory{FileBytes: 4096, RefaultsFile: 77}},
		{name: "before 5.9", text: "file 1\nworkingset_refault 9\n", want: sample.CgroupMemory{FileBytes: 1, RefaultsFile: 9}},
		{name: "no refaults", text: "file 1\n", errHas: "workingset_refault_file"},
		{name: "bad line", text: "file 1 2\n", errHas: "line 1"},
		{name: "bad counter", text: "workingset_refault_file x\n", errHas: "not a counter"},
	} {
		got, err := ParseCgroupMemoryStat("memory.stat", []byte(tc.text))
		if tc.errHas != "" {
			if err == nil || !strings.Contains(err.Error(), tc.errHas) {
				t.Errorf("%s: error %v; want %q", tc.name, err, tc.errHas)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%s: got %+v, %v; want %+v", tc.name, got, err, tc.want)
		}
	}
	if n, err := ParseCgroupMemoryMax("memory.max", []byte("max\n")); n != 0 || err != nil {
		t.Errorf("max: %d, %v", n, err)
	}
	if n, err := ParseCgroupMemoryMax("memory.max", []byte("8589934592\n")); n != 8<<30 || err != nil {
		t.Errorf("8 GiB: %d, %v", n, err)
	}
}

func TestCgroupMemory(t *testing.T) {
	sys := t.TempDir()
	dir := filepath.Join(sys, "fs/cgroup/kubepods.slice/pod1")
	hosttest.WriteFile(t, filepath.Join(dir, "memory.max"), "17179869184\n")
	hosttest.WriteFile(t, filepath.Join(dir, "memory.current"), "17179000000\n")
	hosttest.WriteFile(t, filepath.Join(dir, "memory.stat"), "file 15000000000\nworkingset_refault_file 123\n")
	got, err := NewSysFS(sys).CgroupMemory("/kubepods.slice/pod1")
	want := sample.CgroupMemory{Path: "/kubepods.slice/pod1", LimitBytes: 16 << 30, CurrentBytes: 17179000000, FileBytes: 15000000000, RefaultsFile: 123}
	if err != nil || *got != want {
		t.Fatalf("got %+v, %v; want %+v", got, err, want)
	}
	// A path that climbs out stays under /sys/fs/cgroup.
	if _, err := NewSysFS(sys).CgroupMemory("/../../../etc"); err == nil {
		t.Fatal("a path out of the cgroup tree was read")
	}
}

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
