package diagnose

import (
	"flag"
	"net/http/httptest"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpudiag/gpudiag/analyzers"
	"github.com/gpudiag/gpudiag/engine"
	"github.com/gpudiag/gpudiag/sample"
	"github.com/gpudiag/gpudiag/server"
)

var pageOut = flag.String("page-out", "", "write the rendered test page here")

// gpusSample is n GPUs: the first half computing, the rest copying from
// the host, or all computing when allCompute.
func gpusSample(n int, copying bool) *sample.GPUs {
	s := &sample.GPUs{Backend: "nvml"}
	for i := 0; i < n; i++ {
		v := sample.NewValues()
		sm, rx := 0.95, 0.0
		if copying && i >= n/2 {
			sm, rx = 0, 59e9
		}
		v.Set(sample.SMActive, sm)
		v.Set(sample.TensorActive, sm*0.8)
		v.Set(sample.DRAMActive, 0.01)
		v.Set(sample.Utilization, 1)
		v.Set(sample.PCIeRxBytesPerSecond, rx)
		v.Set(sample.PCIeTxBytesPerSecond, rx/17)
		v.Set(sample.NVLinkRxBytesPerSecond, 1e9)
		v.Set(sample.NVLinkTxBytesPerSecond, 1e9)
		v.Set(sample.ComputeProcesses, 1)
		s.Devices = append(s.Devices, sample.GPU{Index: i, UUID: "GPU-" + string(rune('a'+i)), Model: "NVIDIA H100 80GB HBM3", Up: true,
			ActivitySource: sample.SourceGPM, IntervalSeconds: 1, Values: v,
			Processes: []sample.Process{{PID: uint32(1000 + i), UsedMemoryBytes: 40 << 30}}})
	}
	return s
}

// switchingRunner feeds n GPUs for `seconds` one-second samples: all
// computing, then from switchAt half of them copying.
func switchingRunner(gpus, seconds, switchAt int) (*Runner, time.Time) {
	w := engine.NewWindow(10*time.Minute, 64<<20)
	w.Register("gpu")
	r := NewRunner(w, analyzers.DefaultThresholds)
	now := t0
	for i := 0; i < seconds; i++ {
		now = t0.Add(time.Duration(i) * time.Second)
		x := gpusSample(gpus, i >= switchAt)
		put(w, sample.GPUKey, now, x)
		r.OnSample("gpu", now, x)
	}
	return r, now
}

// The page names the node, says how long the verdict has held, groups the
// GPUs by verdict with the fix once, and draws the class changes where the
// history has them.
func TestDiagnosePage(t *testing.T) {
	r, now := switchingRunner(8, 300, 200)
	h := r.Handler(HandlerOptions{Now: func() time.Time { return now }, Hostname: "gpu-node-07",
		GrafanaURL: "https://grafana.example/"})
	req := httptest.NewRequest("GET", "http://10.0.0.7:10910/diagnose?format=html", nil)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	body := rec.Body.String()
	if *pageOut != "" {
		_ = os.WriteFile(*pageOut, []byte(body), 0o644)
	}
	d := r.Latest()
	for _, want := range []string{
		"<title>io/h2d_copy · gpu-node-07 (10.0.0.7:10910) · gpudiag</title>",
		`<b id="host">gpu-node-07</b>`, "8 × NVIDIA H100 80GB HBM3",
		`<meta http-equiv="refresh" content="15">`, `href="?format=html&amp;refresh=0"`,
		`href="https://grafana.example/d/gpudiag-node/gpudiag-node?var-instance=10.0.0.7%3A10910"`,
		"GPUs 0–3", "GPUs 4–7", `href="?format=json"`, `href="/metrics"`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("page lacks %q", want)
		}
	}
	if !strings.HasSuffix(body, "</html>\n") {
		t.Errorf("page cut short")
	}
	wantAge := age(now, d.Node.Since)
	if !strings.Contains(body, `<span id="age" title="since `+d.Node.Since.UTC().Format(time.RFC3339)+`">`+wantAge+"</span>") {
		t.Errorf("page lacks the node verdict's age %q", wantAge)
	}
	var fix string
	for _, g := range d.GPUs {
		if g.Class == analyzers.ClassIO {
			fix = g.Fix
		}
	}
	if fix == "" || strings.Count(body, template_escape(fix)) != 1 {
		t.Errorf("the io fix appears %d times; want once", strings.Count(body, template_escape(fix)))
	}
	// GPU 4's band: compute, then io from the time its verdict changed.
	re := regexp.MustCompile(`data-class="(\w+)" data-from="([^"]+)"`)
	gpu4 := body[strings.Index(body, `<div class="muted">GPU 4</div>`):]
	gpu4 = gpu4[:strings.Index(gpu4, "</svg>")]
	segs := re.FindAllStringSubmatch(gpu4, -1)
	if len(segs) != 2 || segs[0][1] != "compute" || segs[1][1] != "io" || segs[1][2] != d.GPUs[4].Since.UTC().Format(time.RFC3339) {
		t.Errorf("GPU 4 timeline %v; want compute then io from %s", segs, d.GPUs[4].Since.UTC().Format(time.RFC3339))
	}

	// ?refresh=0 stops the reload; no Grafana flag, no link.
	h = r.Handler(HandlerOptions{Now: func() time.Time { return now }, Hostname: "n"})
	_, body = serve(t, h, "/diagnose?format=html&refresh=0", "")
	if strings.Contains(body, `http-equiv="refresh"`) || strings.Contains(body, "Grafana") {
		t.Errorf("?refresh=0 page still reloads, or links Grafana without the flag")
	}
}

func template_escape(s string) string {
	return strings.NewReplacer("'", "&#39;", `"`, "&#34;", "<", "&lt;", ">", "&gt;", "&", "&amp;").Replace(s)
}

func TestHistoryBounded(t *testing.T) {
	h := history{maxAge: time.Minute}
	for i := 0; i < 10_000; i++ {
		c := analyzers.ClassCompute
		if i%2 == 1 {
			c = analyzers.ClassIO
		}
		h.add(&analyzers.Diagnosis{Time: t0.Add(time.Duration(i) * time.Second), Node: analyzers.Verdict{Class: c}})
	}
	if n := len(h.entries); n > 62 {
		t.Fatalf("%d entries kept for a minute of one-second flapping", n)
	}
	h = history{maxAge: 24 * time.Hour}
	for i := 0; i < 10_000; i++ {
		c := analyzers.ClassCompute
		if i%2 == 1 {
			c = analyzers.ClassIO
		}
		h.add(&analyzers.Diagnosis{Time: t0.Add(time.Duration(i) * time.Second), Node: analyzers.Verdict{Class: c}})
	}
	if n := len(h.entries); n != maxHistory {
		t.Fatalf("%d entries; want the count bound %d", n, maxHistory)
	}
}

// The text form groups the GPUs by verdict with the fix once, and draws a
// timeline line per GPU.
func TestDiagnoseTextGrouped(t *testing.T) {
	r, now := switchingRunner(8, 300, 200)
	h := r.Handler(HandlerOptions{Now: func() time.Time { return now }})
	_, body := serve(t, h, "/diagnose?format=text", "")
	if *pageOut != "" {
		_ = os.WriteFile(*pageOut+".txt", []byte(body), 0o644)
	}
	d := r.Latest()
	for _, want := range []string{"GPUs 0–3 (4): compute/tensor", "GPUs 4–7 (4): io/h2d_copy", "  fix: the node's, above",
		"  GPU 5: io/h2d_copy (confidence 1.00) for 1 min, since ", "NODE: io/h2d_copy"} {
		if !strings.Contains(body, want) {
			t.Errorf("text lacks %q", want)
		}
	}
	var computeFix string
	for _, g := range d.GPUs {
		if g.Class == analyzers.ClassCompute {
			computeFix = g.Fix
		}
	}
	if n := strings.Count(body, computeFix); n != 1 {
		t.Errorf("the compute fix appears %d times; want once", n)
	}
	// 300 s of history in 60 slots of 5 s: GPU 0 computes throughout, GPU
	// 4 switches at its verdict's Since.
	gpu0 := regexp.MustCompile(`(?m)^  GPU 0   ([CMIH.?]+)$`).FindStringSubmatch(body)
	gpu4 := regexp.MustCompile(`(?m)^  GPU 4   ([CMIH.?]+)$`).FindStringSubmatch(body)
	if gpu0 == nil || gpu4 == nil {
		t.Fatalf("no timeline lines:\n%s", body)
	}
	if gpu0[1] != strings.Repeat("C", len(gpu0[1])) {
		t.Errorf("GPU 0 timeline %s", gpu0[1])
	}
	switchSlot := int(d.GPUs[4].Since.Sub(t0) / (5 * time.Second))
	if want := strings.Repeat("C", switchSlot) + strings.Repeat("I", len(gpu4[1])-switchSlot); gpu4[1] != want {
		t.Errorf("GPU 4 timeline\n%s; want\n%s", gpu4[1], want)
	}
}

// BenchmarkDiagnosePage renders the page of 8 GPUs over a full 10-minute
// window of one-second samples, with a verdict change in the history.
// go test ./diagnose -run '^$' -bench DiagnosePage -benchtime 200x
func BenchmarkDiagnosePage(b *testing.B) {
	r, now := switchingRunner(8, 600, 400)
	h := r.Handler(HandlerOptions{Now: func() time.Time { return now }, Hostname: "gpu-node-07"})
	req := httptest.NewRequest("GET", "/diagnose?format=html", nil)
	var size int
	b.ReportAllocs()
	for b.Loop() {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		size = rec.Body.Len()
	}
	b.ReportMetric(float64(size), "body_bytes")
}

// Before any sample the page renders whole: no GPU, no history, no
// sparkline.
func TestDiagnosePageEmpty(t *testing.T) {
	w := engine.NewWindow(10*time.Minute, 1<<20)
	w.Register("gpu")
	r := NewRunner(w, analyzers.DefaultThresholds)
	h := r.Handler(HandlerOptions{Now: func() time.Time { return t0 }, Hostname: "empty<node>"})
	code, body := serve(t, h, "/diagnose?format=html&refresh=abc", "")
	if code != 200 || !strings.HasSuffix(body, "</html>\n") || !strings.Contains(body, "empty&lt;node&gt;") ||
		!strings.Contains(body, "No GPU seen.") || !strings.Contains(body, `content="15"`) {
		t.Fatalf("%d\n%s", code, body)
	}
	if _, text := serve(t, h, "/diagnose?format=text", ""); !strings.Contains(text, "NODE: unknown") || strings.Contains(text, "TIMELINE") {
		t.Fatalf("text:\n%s", text)
	}
}

func TestGroupFindings(t *testing.T) {
	gpu := func(i int) *int { return &i }
	fs := []analyzers.Finding{
		{Check: "nccl_env_override", Severity: analyzers.SeverityInfo, GPU: gpu(0), Summary: "a", Fix: "f1"},
		{Check: "nccl_fallback", Severity: analyzers.SeverityWarning, GPU: gpu(0), Summary: "b", Fix: "f2"},
		{Check: "nccl_fallback", Severity: analyzers.SeverityWarning, GPU: gpu(1), Summary: "b1", Fix: "f2"},
		{Check: "nccl_fallback", Severity: analyzers.SeverityWarning, GPU: gpu(2), Summary: "b2", Fix: "f2"},
		{Check: "ib_port_errors", Severity: analyzers.SeverityWarning, Device: "mlx5_0/1", Summary: "c", Fix: "f3"},
		{Check: "xid", Severity: analyzers.SeverityCritical, GPU: gpu(5), Summary: "d", Fix: "f4"},
	}
	got := groupFindings(fs)
	var order []string
	for _, g := range got {
		order = append(order, g.Check+"/"+strconv.Itoa(g.Count)+"/"+g.Where)
	}
	want := []string{"xid/1/GPU 5", "nccl_fallback/3/GPUs 0–2", "ib_port_errors/1/mlx5_0/1", "nccl_env_override/1/GPU 0"}
	if !slices.Equal(order, want) {
		t.Fatalf("groups %v; want %v", order, want)
	}
	if got[1].Summary != "b (first of 3)" || got[1].Fix != "f2" {
		t.Fatalf("group %+v", got[1])
	}
	if s := gpuList([]int{7, 0, 1, 2, 4, 5}); s != "0–2, 4, 5, 7" {
		t.Fatalf("gpuList %q", s)
	}
}

// The page's Content-Security-Policy allows exactly its stylesheet (by
// hash) and nothing else, and the page needs nothing else: no script, no
// style attribute. Before, no policy was sent.
func TestDiagnosePagePolicy(t *testing.T) {
	r, now := switchingRunner(8, 300, 200)
	h := r.Handler(HandlerOptions{Now: func() time.Time { return now }, Hostname: "gpu-node-07"})
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/diagnose?format=html", nil))
	body, csp := rec.Body.String(), rec.Header().Get("Content-Security-Policy")
	styles := server.InlineStyles([]byte(body))
	if len(styles) != 1 || styles[0] != pageStyle {
		t.Fatalf("the page's <style> is not page.css as it is: %d styles", len(styles))
	}
	if want := server.StylePolicy(pageStyle); csp != want {
		t.Errorf("Content-Security-Policy %q, want %q", csp, want)
	}
	if strings.Contains(csp, "unsafe") || strings.Contains(body, "<script") || strings.Contains(body, " style=") {
		t.Errorf("the page needs more than its stylesheet: policy %q", csp)
	}
	// The JSON and text forms are no pages: the server's default policy,
	// which allows nothing, stands.
	for _, format := range []string{"json", "text"} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", "/diagnose?format="+format, nil))
		if got := rec.Header().Get("Content-Security-Policy"); got != "" {
			t.Errorf("?format=%s sets a policy of its own: %q", format, got)
		}
	}
}
