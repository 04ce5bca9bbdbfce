package collectors

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"go.uber.org/goleak"
	"go.uber.org/zap"

	"github.com/gpudiag/gpudiag/analyzers"
	"github.com/gpudiag/gpudiag/diagnose"
	"github.com/gpudiag/gpudiag/engine"
	"github.com/gpudiag/gpudiag/gpu"
	"github.com/gpudiag/gpudiag/gpu/nvmlgpu"
	"github.com/gpudiag/gpudiag/gpu/nvmlgpu/nvmlfake"
	"github.com/gpudiag/gpudiag/sample"
)

// standInDCGM stands in for dcgmgpu (whose fake client is internal to its
// package): it reads the fake GPUs through nvmlgpu, names itself dcgm, and
// fails every sample while its hostengine is down.
type standInDCGM struct {
	gpu.Backend
	down *atomic.Bool
}

func (s standInDCGM) Name() string { return "dcgm" }

func (s standInDCGM) Sample(ctx context.Context) (*sample.GPUs, error) {
	if s.down.Load() {
		return nil, errors.New("no GPU answered (8 known): DCGM read: Host engine connection invalid/disconnected")
	}
	r, err := s.Backend.Sample(ctx)
	if r != nil {
		r.Backend, r.Topology = "dcgm", nil
	}
	return r, err
}

// The daemon's auto mode with the DCGM hostengine dying mid-run: the GPU
// collector rides out a few failed samples, then serves the same GPUs
// through NVML (gpudiag_gpu_up 1, backend_info nvml, one switch counted) with
// their counters carried on, the diagnosis says it fell back and why, and it
// returns to DCGM when the hostengine is back.
func TestHostengineDiesCollectorServesNVML(t *testing.T) {
	defer goleak.VerifyNone(t)
	clk := newLockedClock()
	gpus := nvmlfake.HGX()
	for _, g := range gpus {
		g.GPM[nvml.GPM_METRIC_SM_UTIL] = 80
	}
	var down atomic.Bool
	openNVML := func() (gpu.Backend, error) {
		return nvmlgpu.Open(nvmlfake.New(gpus...), nvmlgpu.Options{Now: clk.now})
	}
	openDCGM := func() (gpu.Backend, error) {
		if down.Load() {
			return nil, errors.New("DCGM: cannot connect to hostengine at localhost:5555: connection refused")
		}
		b, err := openNVML()
		if err != nil {
			return nil, err
		}
		return standInDCGM{b, &down}, nil
	}
	b, why := gpu.Open("auto", gpu.Options{OpenDCGM: openDCGM, OpenNVML: openNVML, Now: clk.now})
	if b == nil || b.Name() != "dcgm" {
		t.Fatalf("auto mode opened %v (%s); want dcgm", b, why)
	}
	c := newGPUCollector(b, why, zap.NewNop())
	defer c.Close()
	window := engine.NewWindow(time.Minute, 1<<20)
	runner := diagnose.NewRunner(window, analyzers.DefaultThresholds)
	e := engine.New(engine.Options{Interval: testEngineInterval, Now: clk.now,
		Window: window, OnSample: runner.OnSample})
	e.Add(asEngine(c), 0)
	step := func() engine.Status {
		clk.advance(time.Second)
		e.SampleOnce(context.Background())
		return e.Statuses()[0]
	}
	fallbackFinding := func() *analyzers.Finding {
		for _, f := range runner.Latest().Findings {
			if f.Check == "gpu_backend_fallback" {
				return &f
			}
		}
		return nil
	}
	step()
	if st := step(); !st.Success {
		t.Fatal(st.LastError)
	}
	m := gatherMap(t, e)
	m.want(t, 1, "gpudiag_gpu_backend_info", "backend", "dcgm")
	smBefore := m.value(t, "gpudiag_gpu_sm_active_seconds_total", "gpu", "3")

	down.Store(true)
	for range gpu.DefaultFailures {
		if st := step(); st.Success {
			t.Fatal("a dead hostengine gave a good sample")
		}
	}
	waitUntil(t, "the collector to read through NVML", func() bool { return c.backend.Name() == "nvml" })
	if st := step(); !st.Success {
		t.Fatalf("NVML fallback failed: %s", st.LastError)
	}
	m = gatherMap(t, e)
	m.want(t, 1, "gpudiag_gpu_backend_info", "backend", "nvml")
	m.want(t, 1, "gpudiag_gpu_backend_switches_total", "from", "dcgm", "to", "nvml")
	for i := range gpus {
		m.want(t, 1, "gpudiag_gpu_up", "gpu", strconv.Itoa(i))
	}
	if sm := m.value(t, "gpudiag_gpu_sm_active_seconds_total", "gpu", "3"); sm < smBefore {
		t.Fatalf("sm_active_seconds_total went back from %v to %v across the switch", smBefore, sm)
	}
	in := runner.Latest().Inputs
	if f := fallbackFinding(); f == nil || f.Kind != "dcgm" || !strings.Contains(f.Summary, "Host engine connection invalid") ||
		in.GPUBackend != "nvml" || in.GPUBackendFallback == nil {
		t.Fatalf("diagnosis on the fallback: finding %+v, inputs %+v; want gpu_backend_fallback naming DCGM's error", f, in)
	}

	down.Store(false)
	clk.advance(gpu.DefaultRetryMin)
	// Sampling goes on; one of these samples finds the reconnect due and
	// starts it in the background.
	waitUntil(t, "the collector to read through DCGM again", func() bool { step(); return c.backend.Name() == "dcgm" })
	if st := step(); !st.Success {
		t.Fatal(st.LastError)
	}
	m = gatherMap(t, e)
	m.want(t, 1, "gpudiag_gpu_backend_info", "backend", "dcgm")
	m.want(t, 1, "gpudiag_gpu_backend_switches_total", "from", "nvml", "to", "dcgm")
	m.want(t, 1, "gpudiag_gpu_up", "gpu", "7")
	if f := fallbackFinding(); f != nil || runner.Latest().Inputs.GPUBackend != "dcgm" {
		t.Fatalf("back on DCGM, yet the diagnosis says %+v", f)
	}
}

// Forced --collector.gpu.backend=dcgm has no fallback: the collector fails
// while the hostengine is gone and reconnects when it returns.
func TestForcedDCGMReconnects(t *testing.T) {
	defer goleak.VerifyNone(t)
	clk := newLockedClock()
	gpus := nvmlfake.HGX()
	var down atomic.Bool
	var nvmlOpens atomic.Int32
	openNVML := func() (gpu.Backend, error) {
		nvmlOpens.Add(1)
		return nvmlgpu.Open(nvmlfake.New(gpus...), nvmlgpu.Options{Now: clk.now})
	}
	openDCGM := func() (gpu.Backend, error) {
		if down.Load() {
			return nil, errors.New("DCGM: cannot connect to hostengine at localhost:5555: connection refused")
		}
		b, err := nvmlgpu.Open(nvmlfake.New(gpus...), nvmlgpu.Options{Now: clk.now})
		if err != nil {
			return nil, err
		}
		return standInDCGM{b, &down}, nil
	}
	b, why := gpu.Open("dcgm", gpu.Options{OpenDCGM: openDCGM, OpenNVML: openNVML, Now: clk.now})
	c := newGPUCollector(b, why, zap.NewNop())
	defer c.Close()
	e := engine.New(engine.Options{Interval: testEngineInterval, Now: clk.now})
	e.Add(asEngine(c), 0)
	step := func() engine.Status {
		clk.advance(time.Second)
		e.SampleOnce(context.Background())
		return e.Statuses()[0]
	}
	down.Store(true)
	for range gpu.DefaultFailures {
		step()
	}
	waitUntil(t, "DCGM to be given up", func() bool { return c.backend.Name() == "none" })
	if st := step(); st.Success || st.LastError == "" {
		t.Fatalf("status %+v; want a failure that says why", st)
	}
	down.Store(false)
	clk.advance(gpu.DefaultRetryMin)
	waitUntil(t, "DCGM to reconnect", func() bool { step(); return c.backend.Name() == "dcgm" })
	if st := step(); !st.Success {
		t.Fatal(st.LastError)
	}
	m := gatherMap(t, e)
	m.want(t, 1, "gpudiag_gpu_backend_switches_total", "from", "dcgm", "to", "none")
	m.want(t, 1, "gpudiag_gpu_backend_switches_total", "from", "none", "to", "dcgm")
	if n := nvmlOpens.Load(); n != 0 {
		t.Fatalf("forced DCGM opened NVML %d times", n)
	}
}

// newLockedClock is the clock of the DCGM reconnect schedule, driven by
// the test.
func newLockedClock() *lockedClock {
	return &lockedClock{t: time.Unix(1_700_000_000, 0)}
}
