package hostfs

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

func TestCgroupPSIAndChildren(t *testing.T) {
	sys := t.TempDir()
	slice := filepath.Join(sys, "fs/cgroup/kubepods.slice")
	for _, d := range []string{"pod-a.slice/ctr.scope", "pod-b.slice", "pod-c.slice"} {
		if err := os.MkdirAll(filepath.Join(slice, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(slice, "cgroup.procs"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	io := "some avg10=35.50 avg60=20.00 avg300=5.00 total=123456\nfull avg10=30.00 avg60=18.00 avg300=4.00 total=100000\n"
	if err := os.WriteFile(filepath.Join(slice, "pod-b.slice/io.pressure"), []byte(io), 0o644); err != nil {
		t.Fatal(err)
	}
	f := NewSysFS(sys)
	p, err := f.CgroupPSI("/kubepods.slice/pod-b.slice", "io")
	if err != nil || !p.HasSome || p.Some.Avg10 != 35.5 || p.Full.Avg10 != 30 {
		t.Fatalf("io.pressure %+v, %v", p, err)
	}
	if _, err := f.CgroupPSI("/kubepods.slice/pod-c.slice", "io"); !os.IsNotExist(err) {
		t.Errorf("a group without io.pressure: %v; want not exist", err)
	}
	kids, err := f.CgroupChildren("/kubepods.slice", 2)
	if want := []string{"/kubepods.slice/pod-a.slice", "/kubepods.slice/pod-b.slice"}; err != nil || !reflect.DeepEqual(kids, want) {
		t.Fatalf("children %v, %v; want %v (files are no groups, the limit holds)", kids, err, want)
	}
}
