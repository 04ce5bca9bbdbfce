package hostfs

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/gpudiag/gpudiag/internal/hosttest"
)

// A node's allocation counters come from whole lines of node<N>/vmstat, or
// of numastat on kernels before 4.14 or where vmstat is not there; a file
// cut short is an error naming it, never counters that fell to zero. With
// neither file the error says so (fs.ErrNotExist): the collector then
// names the counters unmeasured.
func TestNUMAAllocations(t *testing.T) {
	const vmstat = "nr_free_pages 1\nnuma_hit 100\nnuma_miss 2\nnuma_foreign 3\nnuma_interleave 4\nnuma_local 90\nnuma_other 10\nnr_dirtied 5\n"
	const numastat = "numa_hit 100\nnuma_miss 2\nnuma_foreign 3\ninterleave_hit 4\nlocal_node 90\nother_node 10\n"
	want := NUMAAllocations{Hit: 100, Miss: 2, Foreign: 3, InterleaveHit: 4, LocalNode: 90, OtherNode: 10}
	unmeasured := map[string]bool{"no counters, no numastat": true, "neither file": true}
	for _, tc := range []struct {
		name    string
		files   map[string]string
		wantErr string // a substring; empty when it must succeed
	}{
		{"vmstat", map[string]string{"vmstat": vmstat}, ""},
		{"numastat before 4.14", map[string]string{"vmstat": "nr_free_pages 1\n", "numastat": numastat}, ""},
		{"vmstat cut inside a number", map[string]string{"vmstat": vmstat[:strings.Index(vmstat, "numa_local")+13]}, "vmstat: no numa_local line"},
		{"vmstat without its last newline", map[string]string{"vmstat": strings.TrimSuffix(vmstat[:strings.Index(vmstat, "nr_dirtied")], "\n")}, "vmstat: no numa_other line"},
		{"numastat cut", map[string]string{"vmstat": "", "numastat": numastat[:20]}, "numastat: no numa_miss line"},
		{"no counters, no numastat", map[string]string{"vmstat": "nr_free_pages 1\n"}, "vmstat: no numa_hit line (truncated?), and open"},
		// node_exporter's fixture: numastat alone.
		{"numastat, no vmstat", map[string]string{"numastat": numastat}, ""},
		{"neither file", map[string]string{"cpulist": "0\n"}, "numastat: no such file"},
		{"no counters in either", map[string]string{"vmstat": "nr_free_pages 1\n", "numastat": "nr_free_pages 1\n"}, "vmstat: no numa_hit line"},
		{"not a number", map[string]string{"vmstat": strings.Replace(vmstat, "numa_miss 2", "numa_miss two", 1)}, "vmstat: numa_miss"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sys := t.TempDir()
			dir := filepath.Join(sys, NUMANodesDir, "node3")
			for name, text := range tc.files {
				hosttest.WriteFile(t, filepath.Join(dir, name), text)
			}
			host, err := NewFS(t.TempDir(), sys)
			if err != nil {
				t.Fatal(err)
			}
			got, err := host.NUMAAllocations(3)
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatal(err)
			case tc.wantErr == "" && got != want:
				t.Fatalf("got %+v; want %+v", got, want)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr) || !strings.Contains(err.Error(), dir)):
				t.Fatalf("error %v; want one naming the file and %q", err, tc.wantErr)
			case tc.wantErr != "" && errors.Is(err, fs.ErrNotExist) != unmeasured[tc.name]:
				t.Fatalf("error %v: wraps fs.ErrNotExist %v; want it exactly when no file holds counters and numastat is not there",
					err, errors.Is(err, fs.ErrNotExist))
			}
		})
	}
}

func FuzzParseNUMADistances(f *testing.F) {
	f.Add(hosttest.Seed(f, "sys/devices/system/node/node0/distance"), uint8(2))
	f.Add([]byte("10 21 21 21 21 21 21 21\n"), uint8(8))
	f.Add([]byte("10 -1\n"), uint8(2))
	f.Fuzz(func(t *testing.T, data []byte, nodes uint8) {
		// Online nodes need not be contiguous: 0, 2, 4...
		online := make([]int, nodes)
		for i := range online {
			online[i] = 2 * i
		}
		var got []NUMADistance
		var err error
		hosttest.WithinHangLimit(t, func() { got, err = ParseNUMADistances("distance", data, online) })
		if err != nil {
			hosttest.CheckError(t, err, "distance: ")
			return
		}
		if len(got) != len(online) {
			t.Fatalf("%d distances for %d nodes", len(got), len(online))
		}
		var rendered []string
		for i, d := range got {
			if d.PeerNode != online[i] || d.Distance < 0 {
				t.Fatalf("distance %d: %+v", i, d)
			}
			rendered = append(rendered, strconv.Itoa(d.Distance))
		}
		if again, err := ParseNUMADistances("distance", []byte(strings.Join(rendered, " ")+"\n"), online); err != nil || !slices.Equal(again, got) {
			t.Fatalf("%+v renders and reads back as %+v, %v", got, again, err)
		}
	})
}

// FuzzParseNUMACounters checks the node<N>/vmstat reader: all six counters
// or none, values that render back to themselves, and, what it is for, a
// file cut anywhere never reads as other counters than the whole file.
func FuzzParseNUMACounters(f *testing.F) {
	f.Add(hosttest.Seed(f, "sys/devices/system/node/node0/vmstat"), uint16(200))
	f.Add([]byte("numa_hit 31877120455\nnuma_miss 0\nnuma_foreign 0\nnuma_interleave 1\nnuma_local 2\nnuma_other 3\n"), uint16(14))
	f.Add([]byte("numa_hit 1\nnuma_hit x\nnuma_miss 2"), uint16(5))
	names := NUMACounterNames["vmstat"]
	f.Fuzz(func(t *testing.T, data []byte, cut uint16) {
		var v [6]uint64
		var found int
		var err error
		hosttest.WithinHangLimit(t, func() { v, found, err = ParseNUMACounters("vmstat", data, names) })
		if err != nil {
			hosttest.CheckError(t, err, "vmstat: ")
			return
		}
		if found != 0 && found != len(names) || found == 0 && v != [6]uint64{} {
			t.Fatalf("%d counters found: %v", found, v)
		}
		if found == 0 {
			return
		}
		var b strings.Builder
		for i, name := range names {
			fmt.Fprintf(&b, "%s %d\n", name, v[i])
		}
		if again, n, err := ParseNUMACounters("vmstat", []byte(b.String()), names); err != nil || n != found || again != v {
			t.Fatalf("%v renders and reads back as %v (%d), %v", v, again, n, err)
		}
		partial, n, err := ParseNUMACounters("vmstat", data[:min(int(cut), len(data))], names)
		if err == nil && n == len(names) && partial != v {
			t.Fatalf("cut at %d: %v; the whole file says %v", cut, partial, v)
		}
	})
}
