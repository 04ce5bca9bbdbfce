package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpudiag/gpudiag/engine"
	"github.com/gpudiag/gpudiag/sample"
)

// stubGPUs stands in for the GPU collector: one GPU, idle without a process
// or running one process's kernels.
type stubGPUs struct{ work atomic.Bool }

func (s *stubGPUs) Name() string { return sample.GPUKey.Name() }

func (s *stubGPUs) Sample(context.Context) (any, error) {
	g := sample.GPU{Up: true, UUID: "GPU-stub", Values: sample.NewValues()}
	g.Values.Set(sample.Utilization, 0)
	g.Values.Set(sample.ComputeProcesses, 0)
	if s.work.Load() {
		g.Values.Set(sample.Utilization, 0.9)
		g.Values.Set(sample.ComputeProcesses, 1)
		g.Processes = []sample.Process{{PID: 4242}}
	}
	return &sample.GPUs{Backend: "nvml", Devices: []sample.GPU{g}}, nil
}

func (s *stubGPUs) Metrics(any, func(prometheus.Metric)) {}

func (s *stubGPUs) WatchesForWork() bool { return true }

// While no GPU has work the host collectors sample, and the node is
// analysed, at the quiet interval, the GPUs at theirs; the first sample with
// work brings every collector back to the sampling interval, and they
// sample again at once.
func TestQuietNodeSlowsHostCollectors(t *testing.T) {
	gpus := &stubGPUs{}
	td := startDaemon(t, func(d *daemon) { d.eng.Add(gpus, 0) }, "--no-collector.gpu", "--sample.quiet-interval=1h")
	interval := func(m metrics, collector string) float64 {
		v, _ := m.value("gpudiag_collector_interval_seconds", "collector", collector)
		return v
	}
	samples := func(m metrics, collector string) float64 {
		v, _ := m.value("gpudiag_window_samples", "collector", collector)
		return v
	}
	quiet := func(m metrics) bool {
		return interval(m, "gpu") == 0.1 && interval(m, "cpu") == 3600 && interval(m, "pressure") == 3600
	}
	m := td.waitFor(t, "the host collectors to go quiet", quiet)
	before := samples(m, "cpu")
	// Quiet, the node is analysed when the spell starts and then once a
	// quiet interval (an hour here): GPU samples come, analyses do not.
	analysed := td.runner.Latest().Time
	gpuSamples := samples(m, "gpu")
	td.waitFor(t, "three more GPU samples", func(m metrics) bool { return samples(m, "gpu") >= gpuSamples+3 })
	if got := td.runner.Latest().Time; !got.Equal(analysed) {
		t.Fatalf("a quiet node was analysed again at %v, %v after the spell's first analysis", got, got.Sub(analysed))
	}

	gpus.work.Store(true)
	td.waitFor(t, "the host collectors back at the sampling interval, sampling", func(m metrics) bool {
		return interval(m, "cpu") == 0.1 && interval(m, "pressure") == 0.1 && samples(m, "cpu") >= before+3
	})
	if got := td.runner.Latest().Time; !got.After(analysed) {
		t.Fatalf("the GPU's work was not analysed: latest analysis at %v", got)
	}

	gpus.work.Store(false)
	td.waitFor(t, "the host collectors quiet again", quiet)
}

// The quiet clock analyses a quiet node once an interval, every GPU sample
// that shows work, the sample that ends or starts a spell, and passes every
// other collector's sample through.
func TestQuietClockAnalyses(t *testing.T) {
	var analysed []string
	q := &quietClock{eng: engine.New(engine.Options{}), interval: 5 * time.Second,
		analyse: func(c string, at time.Time, _ any) {
			analysed = append(analysed, fmt.Sprintf("%s@%v", c, at.Unix()-1000))
		}}
	idle, busy := &stubGPUs{}, &stubGPUs{}
	busy.work.Store(true)
	t0 := time.Unix(1000, 0)
	for i, g := range []*stubGPUs{idle, idle, idle, idle, idle, idle, idle, busy, busy, idle, idle} {
		s, _ := g.Sample(context.Background())
		q.OnSample(sample.GPUKey.Name(), t0.Add(time.Duration(i)*time.Second), s)
		q.OnSample("cpu", t0.Add(time.Duration(i)*time.Second), nil)
	}
	var gpu []string
	for _, a := range analysed {
		if strings.HasPrefix(a, "gpu@") {
			gpu = append(gpu, a)
		}
	}
	want := []string{"gpu@0", "gpu@5", "gpu@7", "gpu@8", "gpu@9"}
	if !slices.Equal(gpu, want) || len(analysed)-len(gpu) != 11 {
		t.Fatalf("analysed %v; want GPU samples %v and the 11 cpu samples", analysed, want)
	}
}
