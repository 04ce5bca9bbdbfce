package diagnose

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/gpudiag/gpudiag/analyzers"
	"github.com/gpudiag/gpudiag/engine"
	"github.com/gpudiag/gpudiag/sample"
)

var t0 = time.Unix(1_800_000_000, 0)

// gpuSample is one reading of one GPU with the given SM activity and PCIe
// receive rate over a one-second interval.
func gpuSample(sm, pcieRx float64) *sample.GPUs {
	v := sample.NewValues()
	v.Set(sample.SMActive, sm)
	v.Set(sample.TensorActive, 0)
	v.Set(sample.DRAMActive, 0.01)
	v.Set(sample.Utilization, 1)
	v.Set(sample.PCIeRxBytesPerSecond, pcieRx)
	v.Set(sample.PCIeTxBytesPerSecond, pcieRx/17)
	v.Set(sample.ComputeProcesses, 1)
	return &sample.GPUs{Backend: "nvml", Devices: []sample.GPU{{Index: 0, UUID: "GPU-0", Up: true,
		ActivitySource: sample.SourceGPM, IntervalSeconds: 1, Values: v}}}
}

// runnerWith feeds n one-second samples into a window through the hook the
// engine calls, and returns the runner.
func runnerWith(n int, s func(i int) *sample.GPUs) (*Runner, time.Time) {
	w := engine.NewWindow(10*time.Minute, 1<<20)
	w.Register("gpu")
	r := NewRunner(w, analyzers.DefaultThresholds)
	now := t0
	for i := 0; i < n; i++ {
		now = t0.Add(time.Duration(i) * time.Second)
		x := s(i)
		put(w, sample.GPUKey, now, x)
		r.OnSample("gpu", now, x)
	}
	return r, now
}

func serve(t *testing.T, h http.Handler, url, accept string) (int, string) {
	t.Helper()
	req := httptest.NewRequest("GET", url, nil)
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req)
	return w.Code, w.Body.String()
}

func TestDiagnoseFormats(t *testing.T) {
	r, now := runnerWith(20, func(int) *sample.GPUs { return gpuSample(0, 59e9) })
	h := r.Handler(HandlerOptions{MaxSpan: 10 * time.Minute, Now: func() time.Time { return now }})

	code, body := serve(t, h, "/diagnose", "")
	if code != 200 || !strings.Contains(body, "NODE: io/h2d_copy") || !strings.Contains(body, "PCIe, received by the GPU = 59.00 GB/s") {
		t.Fatalf("text: %d\n%s", code, body)
	}
	code, body = serve(t, h, "/diagnose", "application/json")
	var d analyzers.Diagnosis
	if err := json.Unmarshal([]byte(body), &d); err != nil || code != 200 {
		t.Fatalf("json: %d %v\n%s", code, err, body)
	}
	if d.SchemaVersion != analyzers.SchemaVersion || d.Node.Class != analyzers.ClassIO || d.GPUs[0].SubKind != analyzers.SubH2DCopy {
		t.Fatalf("json diagnosis %+v", d)
	}
	code, body = serve(t, h, "/diagnose", "text/html,application/xhtml+xml")
	if code != 200 || !strings.Contains(body, `<h1 id="verdict">Node: io / h2d_copy</h1>`) {
		t.Fatalf("html: %d\n%s", code, body)
	}
	if _, body = serve(t, h, "/diagnose?format=json", "text/html"); !strings.HasPrefix(body, "{") {
		t.Fatalf("?format=json ignored")
	}
}

// ?window= analyzes another span of the kept samples: here the last 5 s
// (a copy loop) versus the whole minute (mostly compute).
func TestDiagnoseWindowParameter(t *testing.T) {
	r, now := runnerWith(60, func(i int) *sample.GPUs {
		if i >= 55 {
			return gpuSample(0, 59e9)
		}
		return gpuSample(0.9, 0)
	})
	h := r.Handler(HandlerOptions{MaxSpan: 10 * time.Minute, Now: func() time.Time { return now }})
	_, short := serve(t, h, "/diagnose?window=5s", "")
	_, long := serve(t, h, "/diagnose?window=60s", "")
	if !strings.Contains(short, "NODE: io/h2d_copy") || !strings.Contains(long, "NODE: compute") {
		t.Fatalf("short:\n%s\nlong:\n%s", short, long)
	}
	for _, bad := range []string{"/diagnose?window=abc", "/diagnose?window=10ms", "/diagnose?window=1h"} {
		if code, body := serve(t, h, bad, ""); code != 400 || !strings.Contains(body, "window=") {
			t.Errorf("%s: %d %s", bad, code, body)
		}
	}
}

// The limit refills in wall time (RateClock) even when the samples' clock
// stands still, as a replayed trace's does once it has ended.
func TestDiagnoseRateLimit(t *testing.T) {
	r, now := runnerWith(3, func(int) *sample.GPUs { return gpuSample(0.9, 0) })
	clock := now
	h := r.Handler(HandlerOptions{RatePerSecond: 2, Burst: 3, Now: func() time.Time { return now },
		RateClock: func() time.Time { return clock }})
	codes := []int{}
	for i := 0; i < 5; i++ {
		c, _ := serve(t, h, "/diagnose", "")
		codes = append(codes, c)
	}
	if codes[2] != 200 || codes[3] != 429 || codes[4] != 429 {
		t.Fatalf("codes %v; want 3 allowed then 429", codes)
	}
	clock = clock.Add(time.Second) // two tokens back
	if c, _ := serve(t, h, "/diagnose", ""); c != 200 {
		t.Fatalf("not refilled: %d", c)
	}
}

// The verdict follows a change of workload within the span plus the
// hysteresis count: a compute loop, then a copy loop from t=30 s.
func TestVerdictFollowsWorkloadChange(t *testing.T) {
	var switchedAt time.Time
	r, _ := runnerWith(60, func(i int) *sample.GPUs {
		if i >= 30 {
			return gpuSample(0, 59e9)
		}
		return gpuSample(0.95, 0)
	})
	d := r.Latest()
	if d.Node.Class != analyzers.ClassIO {
		t.Fatalf("final class %s", d.Node.Class)
	}
	switchedAt = d.GPUs[0].Since
	lag := switchedAt.Sub(t0.Add(30 * time.Second))
	span := time.Duration(analyzers.DefaultThresholds.SpanSeconds) * time.Second
	if lag <= 0 || lag > span+time.Duration(analyzers.DefaultThresholds.Hysteresis)*time.Second {
		t.Fatalf("switched %s after the change; want within span %s + %d intervals", lag, span, analyzers.DefaultThresholds.Hysteresis)
	}
}

func TestDiagnosisMetrics(t *testing.T) {
	r, _ := runnerWith(15, func(int) *sample.GPUs { return gpuSample(0, 59e9) })
	want := `
# HELP gpudiag_gpu_bottleneck What bounds the GPU, one-hot over class (compute, communication, io, host, idle, unknown).
# TYPE gpudiag_gpu_bottleneck gauge
gpudiag_gpu_bottleneck{class="communication",gpu="0"} 0
gpudiag_gpu_bottleneck{class="compute",gpu="0"} 0
gpudiag_gpu_bottleneck{class="host",gpu="0"} 0
gpudiag_gpu_bottleneck{class="idle",gpu="0"} 0
gpudiag_gpu_bottleneck{class="io",gpu="0"} 1
gpudiag_gpu_bottleneck{class="unknown",gpu="0"} 0
# HELP gpudiag_gpu_bottleneck_info The GPU verdict's class and sub-kind.
# TYPE gpudiag_gpu_bottleneck_info gauge
gpudiag_gpu_bottleneck_info{class="io",gpu="0",sub_kind="h2d_copy"} 1
`
	if err := testutil.CollectAndCompare(r.Metrics(), strings.NewReader(want), "gpudiag_gpu_bottleneck", "gpudiag_gpu_bottleneck_info"); err != nil {
		t.Fatal(err)
	}
}

// The collectors section says which collectors fail and why, in every
// format, with each error bounded; it is added per request and never
// written into the runner's kept diagnosis.
func TestDiagnoseCollectorsSection(t *testing.T) {
	r, now := runnerWith(3, func(int) *sample.GPUs { return gpuSample(0.9, 0) })
	longErr := "panic: " + strings.Repeat("é<b>", 200) // multi-byte and HTML-special
	statuses := []engine.Status{
		{Name: "cpu", Success: true, LastAttempt: now, LastSuccess: now},
		{Name: "numa", LastAttempt: now, LastSuccess: now.Add(-time.Minute), LastError: longErr, Failures: 7},
		{Name: "tcp"}, // not sampled yet
	}
	r.ReportCollectors(func() []engine.Status { return statuses })
	h := r.Handler(HandlerOptions{Now: func() time.Time { return now }})

	_, body := serve(t, h, "/diagnose?format=json", "")
	var d Report
	if err := json.Unmarshal([]byte(body), &d); err != nil {
		t.Fatal(err)
	}
	if len(d.Collectors) != 3 {
		t.Fatalf("collectors %+v", d.Collectors)
	}
	cpu, numa, tcp := d.Collectors[0], d.Collectors[1], d.Collectors[2]
	if !cpu.OK || cpu.LastError != "" || cpu.LastSuccess == nil || !cpu.LastSuccess.Equal(now) {
		t.Errorf("cpu %+v", cpu)
	}
	if numa.OK || numa.Failures != 7 || !strings.HasPrefix(numa.LastError, "panic: é<b>") ||
		len(numa.LastError) > maxErrorBytes || !utf8.ValidString(numa.LastError) {
		t.Errorf("numa %+v (%d bytes)", numa, len(numa.LastError))
	}
	if tcp.OK || tcp.LastError != "not sampled yet" || tcp.LastSuccess != nil {
		t.Errorf("tcp %+v", tcp)
	}

	_, text := serve(t, h, "/diagnose?format=text", "")
	if !strings.Contains(text, "collectors: 2 of 3 failing") || !strings.Contains(text, "  numa: panic: é<b>") ||
		!strings.Contains(text, "(7 failures, last success "+now.Add(-time.Minute).UTC().Format(time.RFC3339)+")") ||
		!strings.Contains(text, "  tcp: not sampled yet (0 failures, last success never)") || strings.Contains(text, "  cpu:") {
		t.Errorf("text:\n%s", text)
	}
	_, html := serve(t, h, "/diagnose?format=html", "")
	if !strings.Contains(html, `<section id="collectors">`) || !strings.Contains(html, "<td>numa</td><td>panic: é&lt;b&gt;") || strings.Contains(html, "<td>cpu</td>") {
		t.Errorf("html collectors section wrong:\n%s", html)
	}
	// The runner's kept diagnosis cannot carry the collectors section: it is
	// an analyzers.Diagnosis, and the section lives in the served Report.

	statuses = statuses[:1]
	if _, text := serve(t, h, "/diagnose?format=text", ""); !strings.Contains(text, "collectors: all 1 ok") {
		t.Errorf("healthy text:\n%s", text)
	}
	if _, html := serve(t, h, "/diagnose?format=html", ""); !strings.Contains(html, "All 1 collectors sampling.") {
		t.Errorf("healthy html lacks the all-ok line")
	}
}

func TestTruncateUTF8(t *testing.T) {
	for _, tc := range []struct {
		in   string
		n    int
		want string
	}{
		{"short", 10, "short"},
		{"exactly10!", 10, "exactly10!"},
		{"abcdefghijkl", 10, "abcdefg…"},
		{"ééééé", 6, "é…"}, // é is 2 bytes, … is 3: cut before a split é
	} {
		if got := truncateUTF8(tc.in, tc.n); got != tc.want || len(got) > tc.n {
			t.Errorf("truncateUTF8(%q, %d) = %q; want %q", tc.in, tc.n, got, tc.want)
		}
	}
}

func TestDiagnoseShowsFailingCollectors(t *testing.T) {
	r, last := runnerWith(20, func(int) *sample.GPUs { return gpuSample(0.9, 0) })
	now := last
	failure := "no GPU answered (8 known): memory info: ERROR_UNKNOWN"
	r.ReportCollectors(func() []engine.Status {
		return []engine.Status{
			{Name: "cpu", Interval: time.Second, Success: true, LastSuccess: now, LastAttempt: now},
			{Name: "gpu", Interval: time.Second, LastError: failure, LastSuccess: last, LastAttempt: now, Failures: 3},
		}
	})
	h := r.Handler(HandlerOptions{MaxSpan: 10 * time.Minute, Now: func() time.Time { return now }})
	diagnosis := func() Report {
		t.Helper()
		_, body := serve(t, h, "/diagnose?format=json", "")
		var d Report
		if err := json.Unmarshal([]byte(body), &d); err != nil {
			t.Fatalf("%v\n%s", err, body)
		}
		return d
	}

	now = last.Add(time.Second)
	r.OnSample("cpu", now, nil)
	d := diagnosis()
	if d.Node.Class != analyzers.ClassCompute || len(d.Collectors) != 2 || nodeClass(t, r) != analyzers.ClassCompute {
		t.Fatalf("one failed sample: node %s, collectors %+v; want the last verdicts and both collectors", d.Node.Class, d.Collectors)
	}
	gpu := d.Collectors[1]
	if gpu.Collector != "gpu" || gpu.OK || gpu.LastError != failure || gpu.Failures != 3 || gpu.LastSuccess == nil || !gpu.LastSuccess.Equal(last) {
		t.Fatalf("gpu collector %+v", gpu)
	}
	if _, text := serve(t, h, "/diagnose", ""); !strings.Contains(text, "collectors: 1 of 2 failing") || !strings.Contains(text, "gpu: "+failure) {
		t.Fatalf("text does not name the failing collector:\n%s", text)
	}
	// The page must render whole: a template error would cut it short.
	if _, page := serve(t, h, "/diagnose", "text/html"); !strings.Contains(page, "<td>gpu</td>") || !strings.Contains(page, failure) ||
		!strings.HasSuffix(page, "</html>\n") {
		t.Fatalf("HTML does not name the failing collector, or is cut short:\n%s", page)
	}

	now = last.Add(11 * time.Second) // past the 10 s span
	if d := diagnosis(); d.Node.Class != analyzers.ClassUnknown || len(d.GPUs) != 0 || len(d.Collectors) != 2 {
		t.Fatalf("GPU collector failing for a whole span: node %s, %d GPU verdicts; want unknown from no samples", d.Node.Class, len(d.GPUs))
	}
	if c := nodeClass(t, r); c != analyzers.ClassCompute {
		t.Fatalf("the verdict metrics say %s before any sample triggered an analysis", c)
	}
	r.OnSample("cpu", now, nil)
	if c := nodeClass(t, r); c != analyzers.ClassUnknown {
		t.Fatalf("a host sample after a span of GPU failures left the verdict metrics at %s", c)
	}
}

// nodeClass returns the class gpudiag_node_bottleneck marks 1.
func nodeClass(t *testing.T, r *Runner) analyzers.Class {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(r.Metrics())
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "gpudiag_node_bottleneck" {
			continue
		}
		for _, m := range mf.GetMetric() {
			if m.GetGauge().GetValue() == 1 {
				return analyzers.Class(m.GetLabel()[0].GetValue())
			}
		}
	}
	t.Fatal("no gpudiag_node_bottleneck class is 1")
	return ""
}

// A host sample within a span of the GPU collector's latest sample cannot
// find it failed for a whole span: the runner does not ask every
// collector's state for it (10 a second on a node), and still turns the
// verdicts unknown once a span has passed without a GPU sample.
func TestHostSampleAsksStateOnlyPastASpan(t *testing.T) {
	r, last := runnerWith(3, func(int) *sample.GPUs { return gpuSample(0.9, 0) })
	asked := 0
	r.ReportCollectors(func() []engine.Status {
		asked++
		return []engine.Status{{Name: "gpu", Interval: time.Second, LastError: "lost", LastSuccess: last, LastAttempt: last.Add(11 * time.Second)}}
	})
	for s := 1; s <= 10; s++ {
		r.OnSample("cpu", last.Add(time.Duration(s)*time.Second), nil)
	}
	if asked != 0 || nodeClass(t, r) != analyzers.ClassCompute {
		t.Fatalf("within the span: state asked %d times, node %s; want 0 and compute", asked, nodeClass(t, r))
	}
	r.OnSample("cpu", last.Add(11*time.Second), nil)
	if asked == 0 || nodeClass(t, r) != analyzers.ClassUnknown {
		t.Fatalf("past the span: state asked %d times, node %s; want asked and unknown", asked, nodeClass(t, r))
	}
}
