package replay

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"testing"

	"github.com/gpudiag/gpudiag/record"
	"github.com/gpudiag/gpudiag/sample"
)

// allocated is what json.Unmarshal allocates decoding data into a new
// value of newSample's type, in bytes.
func allocated(t *testing.T, data []byte, newSample func() any) uint64 {
	t.Helper()
	s := newSample()
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	if err := json.Unmarshal(data, s); err != nil {
		t.Fatal(err)
	}
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(s)
	return after.TotalAlloc - before.TotalAlloc
}

// list repeats item n times as a JSON list.
func list(item string, n int) string {
	return "[" + strings.Repeat(item+",", n-1) + item + "]"
}

// The estimate of what decoding a frame allocates is not below what it
// does allocate, whatever the shape of the JSON: lists of empty objects
// (each a struct of hundreds of bytes), of strings, a custom decoder's map
// (a GPU's values), and the frames of a recorded trace.
func TestDecodedBytesBoundsTheDecode(t *testing.T) {
	type payload struct {
		name      string
		data      string
		newSample func() any
	}
	cases := []payload{
		{"empty processes", `{"processes":` + list("{}", 20_000) + `}`, func() any { return &sample.NCCLHostProcesses{} }},
		{"empty GPUs", `{"devices":` + list("{}", 5_000) + `}`, func() any { return &sample.GPUs{} }},
		{"strings", `{"log_files":` + list(`"`+strings.Repeat("x", 100)+`"`, 20_000) + `}`, func() any { return &sample.NCCLHostProcesses{} }},
		{"GPU values", `{"devices":[{"values":{` + strings.TrimSuffix(strings.Repeat(`"sm_active":0.5,"x":1,`, 10_000), ",") + `}}]}`,
			func() any { return &sample.GPUs{} }},
		{"nested lists", `{"files":` + list(`{"processes":`+list(`{"peers":`+list("{}", 50)+`}`, 20)+`}`, 20) + `}`, func() any { return &sample.NCCL{} }},
	}
	for _, path := range []string{"allreduce_sockets_nccl_log.gdrec", "bf16_gemm.gdrec"} {
		f, err := os.Open(filepath.Join("../../testdata/traces", path))
		if err != nil {
			t.Fatal(err)
		}
		r, err := record.NewReader(f)
		if err != nil {
			t.Fatal(err)
		}
		seen := map[string]bool{}
		for {
			fr, err := r.Next()
			if err != nil {
				break
			}
			if seen[fr.Collector] {
				continue
			}
			seen[fr.Collector] = true
			rc := map[string]func() any{"gpu": func() any { return &sample.GPUs{} }, "nccl": func() any { return &sample.NCCL{} },
				"gpuprocess": func() any { return &sample.GPUProcesses{} }, "tcp": func() any { return &sample.TCP{} }}[fr.Collector]
			if rc != nil {
				cases = append(cases, payload{path + " " + fr.Collector, string(fr.Sample), rc})
			}
		}
		f.Close()
	}
	for _, tc := range cases {
		real := allocated(t, []byte(tc.data), tc.newSample)
		est := decodedBytes([]byte(tc.data), reflect.TypeOf(tc.newSample()), math.MaxInt)
		t.Logf("%s: %d bytes of JSON, %d allocated, %d estimated", tc.name, len(tc.data), real, est)
		// json.Unmarshal's own scratch (its decode state, the reflect
		// caches on first use) is not the sample's: a small frame may
		// allocate some kilobytes more than estimated.
		if float64(est) < 0.5*float64(real)-32<<10 {
			t.Errorf("%s: %d bytes estimated, %d allocated", tc.name, est, real)
		}
	}
}

// The estimate gives up past its limit: a bomb is not scanned to its end.
func TestDecodedBytesStopsAtTheLimit(t *testing.T) {
	data := []byte(`{"processes":` + list("{}", 1_000_000) + `}`)
	if est := decodedBytes(data, reflect.TypeOf(&sample.NCCLHostProcesses{}), 1<<20); est <= 1<<20 || est > 2<<20 {
		t.Errorf("estimate %d; want just past the 1 MiB limit", est)
	}
	if est := decodedBytes([]byte(fmt.Sprintf(`{"processes":[],"maps_read":%d}`, 3)), reflect.TypeOf(&sample.NCCLHostProcesses{}), 1<<20); est > 1<<10 {
		t.Errorf("an empty scan estimated at %d bytes", est)
	}
}

// Whatever the bytes, the estimate returns (every step moves on) and never
// panics.
func FuzzDecodedBytes(f *testing.F) {
	f.Add([]byte(`{"processes":[{},{"pid":1,"env":[{"name":"A","value":"b"}]}],"log_files":["x"]}`))
	f.Add([]byte(`{"devices":[{"values":{"sm_active":0.5},"links":[{"tx_bps":null}]}]}`))
	f.Add([]byte(`[}]{:"`))
	f.Fuzz(func(t *testing.T, data []byte) {
		est := decodedBytes(data, reflect.TypeOf(&sample.GPUs{}), 1<<20)
		if est < 0 {
			t.Fatalf("estimate %d", est)
		}
		decodedBytes(data, reflect.TypeOf(&sample.NCCLHostProcesses{}), 1<<20)
	})
}
