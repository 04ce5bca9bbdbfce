package hostfs

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/gpudiag/gpudiag/internal/hosttest"
)

// FuzzParseMeminfo: any input gives the seven fields, with the lines it
// lacks named unmeasured, or an error naming the file, never a panic
// (procfs's parser indexed the second field of every line unchecked); what
// was read renders as a meminfo that reads the same.
func FuzzParseMeminfo(f *testing.F) {
	f.Add(hosttest.Seed(f, "proc/meminfo"))
	f.Add([]byte("MemTotal:\n"))
	f.Add([]byte("MemTotal: 1 kB extra\n"))
	f.Add([]byte("MemTotal: 18446744073709551615 kB\n"))
	f.Add([]byte("MemTotal: 1 MB\n"))
	f.Add([]byte("HugePages_Total:       0\nMemTotal: 1 kB\nMemAvailable: 2 kB\nCached: 3 kB\nDirty: 4 kB\nWriteback: 5 kB\nSwapTotal: 0 kB\nSwapFree: 0 kB\nMemTotal: 7 kB\n"))
	f.Add([]byte("MemTotal: 1 kB\nMemFree: 2 kB\nCached: 3 kB\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		var m Meminfo
		var err error
		hosttest.WithinHangLimit(t, func() { m, err = ParseMeminfo("meminfo", data) })
		if err != nil {
			hosttest.CheckError(t, err, "meminfo: ")
			return
		}
		var text strings.Builder
		for _, f := range []struct {
			name  string
			value uint64
		}{{"MemTotal", m.TotalBytes}, {"MemAvailable", m.AvailableBytes}, {"Cached", m.CachedBytes}, {"Dirty", m.DirtyBytes},
			{"Writeback", m.WritebackBytes}, {"SwapTotal", m.SwapTotalBytes}, {"SwapFree", m.SwapFreeBytes}} {
			if !slices.Contains(m.Unmeasured, f.name) {
				fmt.Fprintf(&text, "%s: %d\n", f.name, f.value)
			} else if f.value != 0 {
				t.Fatalf("%s unmeasured but %d", f.name, f.value)
			}
		}
		if again, err := ParseMeminfo("meminfo", []byte(text.String())); err != nil || !reflect.DeepEqual(again, m) {
			t.Fatalf("%+v rendered reads back as %+v, %v", m, again, err)
		}
	})
}

// A kernel before 3.14 has no MemAvailable line: the other fields are
// read, MemAvailable is named unmeasured. Before, the file failed whole
// and with it the cpu collector.
func TestParseMeminfoWithoutMemAvailable(t *testing.T) {
	m, err := ParseMeminfo("meminfo", []byte("MemTotal: 3742148 kB\nMemFree: 225472 kB\nCached: 930888 kB\nDirty: 1052 kB\nWriteback: 0 kB\nSwapTotal: 4194300 kB\nSwapFree: 3155360 kB\n"))
	want := Meminfo{TotalBytes: 3742148 << 10, CachedBytes: 930888 << 10, DirtyBytes: 1052 << 10,
		SwapTotalBytes: 4194300 << 10, SwapFreeBytes: 3155360 << 10, Unmeasured: []string{"MemAvailable"}}
	if err != nil || !reflect.DeepEqual(m, want) {
		t.Fatalf("got %+v, %v; want %+v", m, err, want)
	}
}

// A /proc without meminfo (a container's partial one) leaves every field
// unmeasured rather than failing.
func TestMeminfoFileMissing(t *testing.T) {
	f, err := NewFS(t.TempDir(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	m, err := f.Meminfo()
	if err != nil || !slices.Equal(m.Unmeasured, MeminfoFields) || m.TotalBytes != 0 {
		t.Fatalf("got %+v, %v", m, err)
	}
}
