package main

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

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

// While no GPU has work the host collectors sample at the quiet interval,
// the GPUs at theirs; the first sample with work brings every collector
// back to the sampling interval, and they sample again at once.
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

	gpus.work.Store(true)
	td.waitFor(t, "the host collectors back at the sampling interval, sampling", func(m metrics) bool {
		return interval(m, "cpu") == 0.1 && interval(m, "pressure") == 0.1 && samples(m, "cpu") >= before+3
	})

	gpus.work.Store(false)
	td.waitFor(t, "the host collectors quiet again", quiet)
}
