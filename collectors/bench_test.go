package collectors

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap"

	"github.com/gpudiag/gpudiag/analyzers"
	"github.com/gpudiag/gpudiag/diagnose"
	"github.com/gpudiag/gpudiag/engine"
	"github.com/gpudiag/gpudiag/gpu/nvmlgpu"
	"github.com/gpudiag/gpudiag/gpu/nvmlgpu/nvmlfake"
	"github.com/gpudiag/gpudiag/server"
)

// benchGPUs returns n fake H100s with every GPM metric and 18 NVLinks, the
// largest series count a GPU produces.
func benchGPUs(n int) []*nvmlfake.GPU {
	gpus := make([]*nvmlfake.GPU, n)
	for i := range gpus {
		g := nvmlfake.Hopper(i)
		g.Bus = uint32(i)
		for id := nvml.GPM_METRIC_GRAPHICS_UTIL; id <= nvml.GPM_METRIC_NVLINK_L17_TX_PER_SEC; id++ {
			g.GPM[id] = 42
		}
		gpus[i] = g
	}
	return gpus
}

func benchCollector(b *testing.B, n int) (*gpuCollector, *fakeClock) {
	clk := &fakeClock{t: time.Unix(1_700_000_000, 0)}
	be, err := nvmlgpu.Open(nvmlfake.New(benchGPUs(n)...), nvmlgpu.Options{Now: clk.now})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { be.Close() })
	return newGPUCollector(be, "", zap.NewNop()), clk
}

// One sampling cycle of the GPU collector as the engine runs it: backend
// reads (against fakes, so this is our code's cost, not the driver's), counter
// integration, and the metric families prepared for scrapes.
func BenchmarkGPUSampleCycle(b *testing.B) {
	for _, n := range []int{8, 64} {
		b.Run(fmt.Sprintf("gpus=%d", n), func(b *testing.B) {
			c, clk := benchCollector(b, n)
			e := engine.New(engine.Options{Interval: time.Second, Now: func() time.Time { return clk.t }})
			e.Add(asEngine(c), 0)
			b.ReportAllocs()
			for b.Loop() {
				clk.t = clk.t.Add(time.Second)
				e.SampleOnce(context.Background())
			}
			if !e.Statuses()[0].Success {
				b.Fatal(e.Statuses()[0].LastError)
			}
			n, _ := testutil.GatherAndCount(e)
			b.ReportMetric(float64(n), "series")
		})
	}
}

// One analysis of the span on a window holding 10 minutes of GPU samples:
// what each GPU sample drives when the GPU collector is the only one (the
// GPU path's share besides NVML's calls).
func BenchmarkGPUPathAnalysis(b *testing.B) {
	for _, n := range []int{1, 8} {
		b.Run(fmt.Sprintf("gpus=%d", n), func(b *testing.B) {
			c, clk := benchCollector(b, n)
			window := engine.NewWindow(10*time.Minute, 16<<20)
			runner := diagnose.NewRunner(window, analyzers.DefaultThresholds)
			e := engine.New(engine.Options{Interval: time.Second, Now: func() time.Time { return clk.t }, Window: window})
			e.Add(asEngine(c), 0)
			for range 600 {
				clk.t = clk.t.Add(time.Second)
				e.SampleOnce(context.Background())
			}
			b.ReportAllocs()
			for b.Loop() {
				d := runner.Analyze(clk.t)
				if len(d.GPUs) != n {
					b.Fatalf("%d GPUs analysed; want %d", len(d.GPUs), n)
				}
			}
		})
	}
}

// One scrape of /metrics through promhttp, as Prometheus sees it.
func BenchmarkScrape(b *testing.B) {
	for _, bc := range []struct {
		n    int
		gzip bool
	}{{8, false}, {8, true}, {64, false}, {64, true}} {
		n, gzip := bc.n, bc.gzip
		b.Run(fmt.Sprintf("gpus=%d/gzip=%v", n, gzip), func(b *testing.B) {
			c, clk := benchCollector(b, n)
			e := engine.New(engine.Options{Interval: time.Second, Now: func() time.Time { return clk.t }})
			e.Add(asEngine(c), 0)
			clk.t = clk.t.Add(time.Second)
			e.SampleOnce(context.Background())
			// The daemon's own /metrics handler (server.New), compression included.
			h, err := server.New(server.Options{TelemetryPath: "/metrics", Gatherer: e, Logger: slog.Default()})
			if err != nil {
				b.Fatal(err)
			}
			req := httptest.NewRequest("GET", "/metrics", nil)
			if gzip {
				req.Header.Set("Accept-Encoding", "gzip")
			}
			var size int
			b.ReportAllocs()
			for b.Loop() {
				w := httptest.NewRecorder()
				h.ServeHTTP(w, req)
				size = w.Body.Len()
				io.Copy(io.Discard, w.Body)
			}
			b.ReportMetric(float64(size), "bytes/scrape")
		})
	}
}
