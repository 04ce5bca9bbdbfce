package hostfs

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpudiag/gpudiag/internal/hosttest"
)

func TestParseCgroupMemoryStat(t *testing.T) {
	for _, tc := range []struct {
		name, text string
		want       CgroupMemory
		errHas     string
	}{
		{name: "5.9+", text: "anon 100\nfile 4096\nworkingset_refault_anon 3\nworkingset_refault_file 77\n",
			want: CgroupMemory{FileBytes: 4096, RefaultsFile: 77}},
		{name: "before 5.9", text: "file 1\nworkingset_refault 9\n", want: CgroupMemory{FileBytes: 1, RefaultsFile: 9}},
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
	want := CgroupMemory{Path: "/kubepods.slice/pod1", LimitBytes: 16 << 30, CurrentBytes: 17179000000, FileBytes: 15000000000, RefaultsFile: 123}
	if err != nil || *got != want {
		t.Fatalf("got %+v, %v; want %+v", got, err, want)
	}
	// A path that climbs out stays under /sys/fs/cgroup.
	if _, err := NewSysFS(sys).CgroupMemory("/../../../etc"); err == nil {
		t.Fatal("a path out of the cgroup tree was read")
	}
}

func FuzzParseCgroupMemoryStat(f *testing.F) {
	f.Add([]byte("anon 1\nfile 4096\nworkingset_refault_anon 0\nworkingset_refault_file 7\n"))
	f.Add([]byte("file 1\nworkingset_refault 2\nworkingset_refault_file 3\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		var got CgroupMemory
		var err error
		hosttest.WithinHangLimit(t, func() { got, err = ParseCgroupMemoryStat("memory.stat", data) })
		if err != nil {
			hosttest.CheckError(t, err, "memory.stat: ")
			return
		}
		// What was read renders as a memory.stat that reads the same.
		again, err := ParseCgroupMemoryStat("memory.stat", fmt.Appendf(nil, "file %d\nworkingset_refault_file %d\n", got.FileBytes, got.RefaultsFile))
		if err != nil || again != got {
			t.Fatalf("%+v rendered reads back as %+v, %v", got, again, err)
		}
	})
}
