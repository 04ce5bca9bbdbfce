package hostfs

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/prometheus/procfs/blockdevice"

	"github.com/gpudiag/gpudiag/internal/hosttest"
)

// ParseDiskstats replaced procfs's parser: on the fixture (5.5+ lines,
// 20 fields) and on lines of 4.18 (18) and older kernels (14), both read the
// same.
func TestParseDiskstatsMatchesProcfs(t *testing.T) {
	fixture, err := os.ReadFile(filepath.Join("..", hosttest.HostTree, "proc/diskstats"))
	if err != nil {
		t.Fatal(err)
	}
	raw := string(fixture) + "   8       0 sda 1 2 3 4 5 6 7 8 9 10 11\n   8      16 sdb 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15\n"
	proc := t.TempDir()
	hosttest.WriteFile(t, filepath.Join(proc, "diskstats"), raw)
	got, err := ParseDiskstats("diskstats", []byte(raw))
	if err != nil {
		t.Fatal(err)
	}
	fs, err := blockdevice.NewFS(proc, filepath.Join("..", hosttest.HostTree, "sys"))
	if err != nil {
		t.Fatal(err)
	}
	want, err := fs.ProcDiskstats()
	if err != nil || len(want) != 9 {
		t.Fatalf("procfs: %d devices, %v; want 9", len(want), err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("parsed\n%+v\nprocfs\n%+v", got, want)
	}
}
