package hostfs

import (
	"bytes"
	"math/big"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/gpudiag/gpudiag/internal/hosttest"
)

func TestParseNUMAMaps(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     map[int]uint64
		errHas   string
	}{
		{"file and anon", "55d0c4a00000 default file=/usr/bin/python3.10 mapped=10 mapmax=3 N0=10 kernelpagesize_kB=4\n" +
			"7f2a00000000 default anon=6 dirty=6 active=0 N0=2 N1=4 kernelpagesize_kB=4\n",
			map[int]uint64{0: 12 * 4096, 1: 4 * 4096}, ""},
		{"hugetlb counts huge pages", "7f2c00000000 default file=/anon_hugepage\\040(deleted) huge anon=3 dirty=3 N1=3 kernelpagesize_kB=2048\n",
			map[int]uint64{1: 3 << 21}, ""},
		{"policies with spaces and colons", "7f0000000000 prefer (many):0-1 anon=2 N2=2 kernelpagesize_kB=4\n" +
			"7f0000100000 weighted interleave:0-1 anon=2 N0=1 N1=1 kernelpagesize_kB=4\n" +
			"7f0000200000 bind:1 anon=1 N1=1 kernelpagesize_kB=4\n",
			map[int]uint64{0: 4096, 1: 2 * 4096, 2: 2 * 4096}, ""},
		{"driver mappings: pinned host memory counts, device BARs have no pages",
			"200600000 default file=/dev/nvidia0\n" +
				"200800000 default file=/dev/nvidiactl dirty=1040 mapped=14336 mapmax=4 active=0 N0=14336 kernelpagesize_kB=4\n" +
				"204a00000 local file=/dev/nvidia-uvm dirty=4 mapped=512 active=0 N1=512 kernelpagesize_kB=4\n",
			map[int]uint64{0: 14336 * 4096, 1: 512 * 4096}, ""},
		{"mappings without resident pages", "7f3500000000 default file=/usr/lib/libc.so.6\n7ffc123fe000 default\n\n",
			map[int]uint64{}, ""},
		{"file name with escaped equals sign", "7f0000000000 default file=/data/N0\\075x mapped=1 N0=1 kernelpagesize_kB=4\n",
			map[int]uint64{0: 4096}, ""},
		{"truncated line", "7f0000000000 default anon=2 N0=2 kernel", nil, "t:1: node page counts without kernelpagesize_kB"},
		{"bad page count", "7f0000000000 default N0=x kernelpagesize_kB=4\n", nil, "t:1: bad page count"},
		{"bad page size", "7f0000000000 default N0=1 kernelpagesize_kB=\n", nil, "t:1: bad kernelpagesize_kB"},
		{"bad address", "7f0000000000 default N0=1 kernelpagesize_kB=4\nzz default\n", nil, "t:2: bad mapping address"},
	} {
		got, err := ParseNUMAMaps(strings.NewReader(tc.in), "t")
		if tc.errHas != "" {
			if err == nil || !strings.Contains(err.Error(), tc.errHas) {
				t.Errorf("%s: error %v; want %q", tc.name, err, tc.errHas)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: got %v, %v; want %v", tc.name, got, err, tc.want)
		}
	}
}

// numaMapsReference sums N<node>=<pages> × kernelpagesize_kB KiB per node
// with unbounded integers: what ParseNUMAMaps must return, or refuse.
func numaMapsReference(data []byte) map[int]*big.Int {
	out := map[int]*big.Int{}
	for line := range bytes.SplitSeq(data, []byte("\n")) {
		pageBytes := new(big.Int)
		type count struct {
			node  int
			pages *big.Int
		}
		var counts []count
		for _, f := range strings.Fields(string(line)) {
			k, v, ok := strings.Cut(f, "=")
			if !ok {
				continue
			}
			if k == "kernelpagesize_kB" {
				pageBytes.SetString(v, 10)
				pageBytes.Mul(pageBytes, big.NewInt(1024))
			} else if node, err := strconv.Atoi(strings.TrimPrefix(k, "N")); err == nil && strings.HasPrefix(k, "N") && node >= 0 {
				n, _ := new(big.Int).SetString(v, 10)
				counts = append(counts, count{node, n})
			}
		}
		for _, c := range counts {
			if out[c.node] == nil {
				out[c.node] = new(big.Int)
			}
			out[c.node].Add(out[c.node], new(big.Int).Mul(c.pages, pageBytes))
		}
	}
	return out
}

func FuzzParseNUMAMaps(f *testing.F) {
	f.Add(hosttest.Seed(f, "proc/4242/numa_maps"))
	f.Add(hosttest.Seed(f, "proc/4343/numa_maps"))
	f.Add([]byte("7f2a00000000 default anon=1 N0=1 N1=2 kernelpagesize_kB=2048\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		var got map[int]uint64
		var err error
		hosttest.WithinHangLimit(t, func() { got, err = ParseNUMAMaps(bytes.NewReader(data), "numa_maps") })
		if err != nil {
			hosttest.CheckError(t, err, "numa_maps")
			return
		}
		if len(got) > bytes.Count(data, []byte("=")) {
			t.Fatalf("%d nodes from %d key=value tokens", len(got), bytes.Count(data, []byte("=")))
		}
		want := numaMapsReference(data)
		for node, b := range got {
			if w := want[node]; node >= MaxListID || w == nil && b != 0 || w != nil && (!w.IsUint64() || w.Uint64() != b) {
				t.Fatalf("node %d: %d bytes; the exact sum is %v", node, b, w)
			}
		}
		for node, w := range want {
			if _, ok := got[node]; !ok && w.Sign() != 0 {
				t.Fatalf("node %d (%v bytes) missing", node, w)
			}
		}
	})
}
