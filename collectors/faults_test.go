package collectors

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"

	"github.com/gpudiag/gpudiag/analyzers"
	"github.com/gpudiag/gpudiag/diagnose"
	"github.com/gpudiag/gpudiag/engine"
	"github.com/gpudiag/gpudiag/gpu"
	"github.com/gpudiag/gpudiag/gpu/nvmlgpu"
	"github.com/gpudiag/gpudiag/gpu/nvmlgpu/nvmlfake"
	"github.com/gpudiag/gpudiag/server"
)

// faultRig is the daemon's stack as cmd/exporter builds it (every default
// collector over the fixture host, the engine, the window, the analyzers'
// runner and the HTTP handler), with the GPUs of an 8-GPU HGX board served
// by nvmlfake and a clock the test advances.
type faultRig struct {
	t        *testing.T
	clk      *lockedClock
	interval time.Duration
	gpus     []*nvmlfake.GPU
	cs       []engine.Collector
	eng      *engine.Engine
	h        http.Handler
}

func newFaultRig(t *testing.T) *faultRig {
	t.Helper()
	r := &faultRig{t: t, clk: &lockedClock{t: time.Unix(1_700_000_000, 0)}, gpus: nvmlfake.HGX(),
		// The engine's deadline is the interval: a generous one, so that
		// only the injected hang ever reaches it on a loaded machine.
		interval: 3 * time.Second}
	for _, g := range r.gpus {
		g.Util = nvml.Utilization{Gpu: 95, Memory: 30}
		g.GPM[nvml.GPM_METRIC_SM_UTIL] = 80
		g.GPM[nvml.GPM_METRIC_ANY_TENSOR_UTIL] = 60
		g.GPM[nvml.GPM_METRIC_DRAM_BW_UTIL] = 20
		g.GPM[nvml.GPM_METRIC_PCIE_TX_PER_SEC] = 100
	}
	cs, err := Build(Config{ProcPath: filepath.Join(fixtureRoot, "proc"), SysPath: filepath.Join(fixtureRoot, "sys"),
		Interval: r.interval, GPU: gpu.Options{
			OpenDCGM: func() (gpu.Backend, error) { return nil, errNoDCGM },
			OpenNVML: func() (gpu.Backend, error) {
				return nvmlgpu.Open(nvmlfake.New(r.gpus...), nvmlgpu.Options{Now: r.clk.now})
			},
		}})
	if err != nil {
		t.Fatal(err)
	}
	r.cs = cs
	window := engine.NewWindow(10*time.Minute, 16<<20)
	runner := diagnose.NewRunner(window, analyzers.DefaultThresholds)
	r.eng = engine.New(engine.Options{Interval: r.interval, Window: window, OnSample: runner.OnSample, Now: r.clk.now})
	for _, c := range cs {
		r.eng.Add(c, r.interval)
	}
	runner.ReportCollectors(r.eng.Statuses)
	reg := prometheus.NewRegistry()
	reg.MustRegister(runner.Metrics())
	r.h, err = server.New(server.Options{TelemetryPath: "/metrics", Gatherer: server.Merge(r.eng, reg),
		Logger:   slog.New(slog.DiscardHandler),
		Diagnose: runner.Handler(diagnose.HandlerOptions{MaxSpan: 10 * time.Minute, Now: r.clk.now})})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

var errNoDCGM = errors.New("DCGM: libdcgm.so.4 not found (DCGM 4 is not installed)")

func (r *faultRig) close() {
	for _, c := range r.cs {
		if cl, ok := c.(io.Closer); ok {
			cl.Close()
		}
	}
}

// step advances the clock one interval and samples every collector once.
func (r *faultRig) step(n int) {
	for range n {
		r.clk.advance(r.interval)
		r.eng.SampleOnce(context.Background())
	}
}

// get serves one request; the guard, at the test binary's timeout, stops
// a handler that blocks behind a driver call (which never returns until
// the fault clears), it measures nothing.
func (r *faultRig) get(url string) (int, string) {
	r.t.Helper()
	type reply struct {
		code int
		body string
	}
	done := make(chan reply, 1)
	go func() {
		w := httptest.NewRecorder()
		r.h.ServeHTTP(w, httptest.NewRequest("GET", url, nil))
		done <- reply{w.Code, w.Body.String()}
	}()
	select {
	case rep := <-done:
		return rep.code, rep.body
	case <-hangGuard(r.t):
		r.t.Fatalf("GET %s blocked", url)
		return 0, ""
	}
}

// scrape fetches /metrics, which must answer 200 whatever the fault.
func (r *faultRig) scrape() metrics {
	r.t.Helper()
	code, body := r.get("/metrics")
	if code != http.StatusOK {
		r.t.Fatalf("/metrics answered %d:\n%s", code, body)
	}
	return parseExposition(r.t, strings.NewReader(body))
}

func (r *faultRig) diagnosis() diagnose.Report {
	r.t.Helper()
	code, body := r.get("/diagnose?format=json")
	var d diagnose.Report
	if err := json.Unmarshal([]byte(body), &d); err != nil || code != http.StatusOK {
		r.t.Fatalf("/diagnose: %d %v\n%s", code, err, body)
	}
	return d
}

func (r *faultRig) setGPUs(which []int, f func(*nvmlfake.GPU)) {
	for _, i := range which {
		g := r.gpus[i]
		g.Lock()
		f(g)
		g.Unlock()
	}
}

// hostCollectorsSucceed checks that every collector but gpu reports success.
func hostCollectorsSucceed(t *testing.T, m metrics) {
	t.Helper()
	n := 0
	for _, s := range m["gpudiag_collector_success"].GetMetric() {
		name := s.GetLabel()[0].GetValue()
		if name == "gpu" {
			continue
		}
		n++
		if s.GetGauge().GetValue() != 1 {
			t.Errorf("host collector %s failed during a GPU fault", name)
		}
	}
	if n < 5 {
		t.Fatalf("only %d host collectors reported; the check proves little", n)
	}
}

func collectorHealth(t *testing.T, d diagnose.Report, name string) diagnose.CollectorHealth {
	t.Helper()
	for _, c := range d.Collectors {
		if c.Collector == name {
			return c
		}
	}
	t.Fatalf("/diagnose does not list collector %s: %+v", name, d.Collectors)
	return diagnose.CollectorHealth{}
}

func gpuVerdict(t *testing.T, d diagnose.Report, i int) analyzers.GPUVerdict {
	t.Helper()
	for _, g := range d.GPUs {
		if g.GPU == i {
			return g
		}
	}
	t.Fatalf("/diagnose has no verdict for GPU %d", i)
	return analyzers.GPUVerdict{}
}

// hungCalls counts goroutines stuck in the fake driver's hanging call.
func hungCalls() int {
	buf := make([]byte, 1<<20)
	n := runtime.Stack(buf, true)
	return strings.Count(string(buf[:n]), "nvmlfake.(*device).GetUtilizationRates")
}

// GPU faults injected into a running daemon stack: the daemon keeps serving
// every endpoint, reports exactly what failed in /metrics and /diagnose, the
// host collectors go on, and everything recovers when the fault clears, the
// GPU counters carrying on from where they were.
func TestGPUFaultsThroughTheDaemon(t *testing.T) {
	all := []int{0, 1, 2, 3, 4, 5, 6, 7}
	driverFails := func(ret nvml.Return) func(*faultRig) func() {
		return func(r *faultRig) func() {
			r.setGPUs(all, func(g *nvmlfake.GPU) { g.Fail = ret })
			return func() { r.setGPUs(all, func(g *nvmlfake.GPU) { g.Fail = nvml.SUCCESS }) }
		}
	}
	for _, tc := range []struct {
		name string
		// inject starts the fault and returns what clears it.
		inject func(r *faultRig) func()
		// during checks /metrics and /diagnose while the fault lasts.
		during func(t *testing.T, r *faultRig)
	}{
		{
			name: "GPU 3 falls off the bus",
			inject: func(r *faultRig) func() {
				r.setGPUs([]int{3}, func(g *nvmlfake.GPU) { g.Lost = true })
				return func() { r.setGPUs([]int{3}, func(g *nvmlfake.GPU) { g.Lost = false }) }
			},
			during: func(t *testing.T, r *faultRig) {
				r.step(1)
				m := r.scrape()
				m.want(t, 1, "gpudiag_collector_success", "collector", "gpu")
				for _, i := range all {
					want := 1.0
					if i == 3 {
						want = 0
					}
					m.want(t, want, "gpudiag_gpu_up", "gpu", strconv.Itoa(i))
				}
				if _, ok := m.lookup("gpudiag_gpu_sm_active_ratio", "gpu", "3"); ok {
					t.Error("the lost GPU still exports readings")
				}
				m.value(t, "gpudiag_gpu_info", "gpu", "3") // identity stays, to join the up series on
				m.want(t, 1, "gpudiag_finding", "check", "gpu_lost", "gpu", "3", "severity", "critical")
				d := r.diagnosis()
				v := gpuVerdict(t, d, 3)
				if v.Class != analyzers.ClassUnknown || v.SubKind != analyzers.SubGPUDown ||
					!strings.Contains(v.Summary, "GPU_IS_LOST") || len(v.Evidence) == 0 {
					t.Errorf("lost GPU's verdict %+v; want unknown/gpu_down with the driver's error and evidence", v.Verdict)
				}
				if v := gpuVerdict(t, d, 2); v.Class != analyzers.ClassCompute {
					t.Errorf("GPU 2 (healthy) is %s", v.Class)
				}
				found := false
				for _, f := range d.Findings {
					found = found || (f.Check == "gpu_lost" && f.GPU != nil && *f.GPU == 3 && strings.Contains(f.Summary, "GPU_IS_LOST"))
				}
				if !found {
					t.Errorf("no gpu_lost finding naming GPU 3: %+v", d.Findings)
				}
			},
		},
		{
			// Read with the slow fields (every 10 s): the findings come
			// once the cache is refreshed.
			name: "the fabric manager stops under GPU 6, GPU 2 loses two NVLinks",
			inject: func(r *faultRig) func() {
				r.setGPUs([]int{6}, func(g *nvmlfake.GPU) { g.FabricState = nvml.GPU_FABRIC_STATE_NOT_STARTED })
				r.setGPUs([]int{2}, func(g *nvmlfake.GPU) { g.LinksDown = map[int]bool{0: true, 1: true} })
				return func() {
					r.setGPUs([]int{6}, func(g *nvmlfake.GPU) { g.FabricState = nvml.GPU_FABRIC_STATE_COMPLETED })
					r.setGPUs([]int{2}, func(g *nvmlfake.GPU) { g.LinksDown = nil })
				}
			},
			during: func(t *testing.T, r *faultRig) {
				r.step(4)
				m := r.scrape()
				m.want(t, 1, "gpudiag_gpu_fabric_state", "gpu", "6")
				m.want(t, 3, "gpudiag_gpu_fabric_state", "gpu", "5")
				m.want(t, 13000, "gpudiag_gpu_driver_cuda_version")
				m.want(t, 1, "gpudiag_finding", "check", "fabric_manager_not_ready", "gpu", "6", "severity", "critical")
				m.want(t, 1, "gpudiag_finding", "check", "nvlink_links_down", "gpu", "2", "severity", "warning")
				if _, ok := m.lookup("gpudiag_finding", "check", "nvlink_links_down", "gpu", "3"); ok {
					t.Error("nvlink_links_down on GPU 3, whose links are all up")
				}
			},
		},
		{
			name:   "every NVML call fails with ERROR_UNKNOWN",
			inject: driverFails(nvml.ERROR_UNKNOWN),
			during: func(t *testing.T, r *faultRig) { wholeGPUFailure(t, r, "ERROR_UNKNOWN") },
		},
		{
			name:   "every NVML call fails with ERROR_DRIVER_NOT_LOADED",
			inject: driverFails(nvml.ERROR_DRIVER_NOT_LOADED),
			during: func(t *testing.T, r *faultRig) { wholeGPUFailure(t, r, "ERROR_DRIVER_NOT_LOADED") },
		},
		{
			name: "an NVML call hangs",
			inject: func(r *faultRig) func() {
				hang := make(chan struct{})
				r.setGPUs([]int{5}, func(g *nvmlfake.GPU) { g.Hang = hang })
				return func() {
					r.setGPUs([]int{5}, func(g *nvmlfake.GPU) { g.Hang = nil })
					close(hang)
				}
			},
			during: func(t *testing.T, r *faultRig) {
				failures := r.scrape().value(t, "gpudiag_collector_failures_total", "collector", "gpu")
				r.step(1) // waits out the deadline once
				before := runtime.NumGoroutine()
				r.step(6) // each skipped at once: the hung call still runs
				if n := hungCalls(); n != 1 {
					t.Fatalf("%d calls stuck in the driver; want the one hung sample, not one per interval", n)
				}
				if grown := runtime.NumGoroutine() - before; grown > 2 {
					t.Errorf("%d more goroutines after 6 intervals of a hung call", grown)
				}
				m := r.scrape()
				m.want(t, 0, "gpudiag_collector_success", "collector", "gpu")
				m.want(t, failures+7, "gpudiag_collector_failures_total", "collector", "gpu")
				hostCollectorsSucceed(t, m)
				verdictMetricsUnknown(t, m) // 21 s without a GPU sample
				if h := collectorHealth(t, r.diagnosis(), "gpu"); h.OK || !strings.Contains(h.LastError, "still running") {
					t.Errorf("/diagnose says of the hung GPU collector: %+v", h)
				}
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
			r := newFaultRig(t)
			defer r.close()
			r.step(3)
			base := r.scrape()
			base.want(t, 1, "gpudiag_collector_success", "collector", "gpu")
			baseCounters := base.gpuCounters()
			if len(baseCounters) < 8*5 {
				t.Fatalf("only %d GPU counter series before the fault", len(baseCounters))
			}

			clear := tc.inject(r)
			tc.during(t, r)
			clear()
			waitUntil(t, "the hung call to return", func() bool { return hungCalls() == 0 })

			r.step(2)
			m := r.scrape()
			m.want(t, 1, "gpudiag_collector_success", "collector", "gpu")
			for _, i := range all {
				m.want(t, 1, "gpudiag_gpu_up", "gpu", strconv.Itoa(i))
			}
			hostCollectorsSucceed(t, m)
			after := m.gpuCounters()
			for k, v := range baseCounters {
				got, ok := after[k]
				switch {
				case !ok:
					t.Errorf("counter %s vanished after recovery", k)
				case got < v:
					t.Errorf("counter %s went back from %v to %v across the fault", k, v, got)
				}
			}
			k := `gpudiag_gpu_sm_active_seconds_total{gpu=3}`
			if after[k] <= baseCounters[k] {
				t.Errorf("%s did not advance after recovery: %v then %v", k, baseCounters[k], after[k])
			}
			d := r.diagnosis()
			for _, i := range all {
				if v := gpuVerdict(t, d, i); v.Class != analyzers.ClassCompute {
					t.Errorf("GPU %d after recovery: %s (%s)", i, v.Class, v.Summary)
				}
			}
			if h := collectorHealth(t, d, "gpu"); !h.OK {
				t.Errorf("/diagnose still lists the GPU collector as failing: %+v", h)
			}
			m.want(t, 1, "gpudiag_node_bottleneck", "class", "compute")
		})
	}
}

// wholeGPUFailure checks a fault that leaves no GPU readable: the GPU
// collector fails and says why, the scrape still answers with the host
// collectors' metrics, the GPU series go stale rather than lie, and
// /diagnose names the failing collector, then stops repeating the old
// verdicts once a whole span has passed.
func wholeGPUFailure(t *testing.T, r *faultRig, code string) {
	t.Helper()
	failures := r.scrape().value(t, "gpudiag_collector_failures_total", "collector", "gpu")
	r.step(1)
	m := r.scrape()
	m.want(t, 0, "gpudiag_collector_success", "collector", "gpu")
	m.want(t, failures+1, "gpudiag_collector_failures_total", "collector", "gpu")
	hostCollectorsSucceed(t, m)
	h := collectorHealth(t, r.diagnosis(), "gpu")
	if h.OK || !strings.Contains(h.LastError, "no GPU answered") || !strings.Contains(h.LastError, code) {
		t.Errorf("/diagnose says of the GPU collector: %+v; want it failing with %s", h, code)
	}

	r.step(4) // past the 10 s span and the engine's freshness bound
	m = r.scrape()
	m.want(t, failures+5, "gpudiag_collector_failures_total", "collector", "gpu")
	if up, ok := m.lookup("gpudiag_gpu_up"); ok {
		t.Errorf("gpudiag_gpu_up still served (%v) from a sample 12 s old", up)
	}
	d := r.diagnosis()
	if d.Node.Class != analyzers.ClassUnknown || len(d.GPUs) != 0 {
		t.Errorf("after a span without GPU samples /diagnose says node %s with %d GPU verdicts; want unknown, none",
			d.Node.Class, len(d.GPUs))
	}
	verdictMetricsUnknown(t, m)
}

// verdictMetricsUnknown checks that the verdict metrics no longer repeat
// what the GPUs were before the GPU collector failed.
func verdictMetricsUnknown(t *testing.T, m metrics) {
	t.Helper()
	m.want(t, 1, "gpudiag_node_bottleneck", "class", "unknown")
	if _, ok := m.lookup("gpudiag_gpu_bottleneck", "class", "compute"); ok {
		t.Error("per-GPU verdict metrics still served for GPUs that cannot be read")
	}
}
