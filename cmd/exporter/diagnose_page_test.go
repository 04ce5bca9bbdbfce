package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/gpudiag/gpudiag/analyzers"
	"github.com/gpudiag/gpudiag/diagnose"
	"github.com/gpudiag/gpudiag/engine"
	"github.com/gpudiag/gpudiag/record"
	"github.com/gpudiag/gpudiag/record/replay"
	"github.com/gpudiag/gpudiag/server"
)

var updateScreenshot = flag.Bool("update-screenshot", false, "write docs/images/diagnose.png from a replayed trace (TestDiagnosePageREADMEScreenshot)")

// pageHost is the node name the page tests give the handler.
const pageHost = "gpu-node-07"

// replayTraces feeds recorded traces back to back (each shifted to start a
// second after the last ended) through an engine into a runner, and
// returns the /diagnose handler at the end of the last.
func replayTraces(t *testing.T, traces ...string) (http.Handler, *diagnose.Runner) {
	t.Helper()
	var all [][]record.Frame
	names := map[string]bool{}
	for _, tr := range traces {
		fs := readFrames(t, filepath.Join(tracesDir, tr+".gdrec"))
		all = append(all, fs)
		for _, f := range fs {
			names[f.Collector] = true
		}
	}
	var list []string
	for n := range names {
		list = append(list, n)
	}
	cs, decoders, _, err := replay.Collectors(list, nil, false, recordedCollector)
	if err != nil {
		t.Fatal(err)
	}
	clock := &replay.Clock{}
	window := engine.NewWindow(10*time.Minute, 16<<20)
	runner := diagnose.NewRunner(window, analyzers.DefaultThresholds)
	eng := engine.New(engine.Options{Interval: time.Second, Window: window, Now: clock.Now, OnSample: runner.OnSample})
	for _, c := range cs {
		eng.Add(c, 0)
	}
	var offset time.Duration
	var last time.Time
	for i, fs := range all {
		if i > 0 {
			offset = last.Add(time.Second).Sub(fs[0].Time())
		}
		for _, fr := range fs {
			s := decoders[fr.Collector]()
			if err := json.Unmarshal(fr.Sample, s); err != nil {
				t.Fatal(err)
			}
			ts := fr.Time().Add(offset)
			clock.Set(ts)
			if err := eng.Ingest(fr.Collector, ts, s); err != nil {
				t.Fatal(err)
			}
			last = ts
		}
	}
	h := runner.Handler(diagnose.HandlerOptions{MaxSpan: 10 * time.Minute, Now: clock.Now, Hostname: pageHost,
		GrafanaURL: "https://grafana.example.com"})
	return h, runner
}

// browser runs headless Chromium with JavaScript off (the profile's
// content setting, as a user or an admin policy sets it; the
// --blink-settings=scriptEnabled=false switch also stops the DevTools
// evaluation --dump-dom and --screenshot rely on): the page must not need
// it.
type browser struct {
	t    *testing.T
	path string
	dir  string
}

func newBrowser(t *testing.T) *browser {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			b := &browser{t: t, path: p, dir: t.TempDir()}
			prefs := filepath.Join(b.dir, "profile", "Default", "Preferences")
			if err := os.MkdirAll(filepath.Dir(prefs), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(prefs, []byte(`{"profile":{"default_content_setting_values":{"javascript":2}}}`), 0o644); err != nil {
				t.Fatal(err)
			}
			// Prove it: a script that would rewrite the page does not run.
			probe := filepath.Join(b.dir, "probe.html")
			if err := os.WriteFile(probe, []byte(`<p id="p">static</p><script>document.getElementById("p").textContent="script ran"</script>`), 0o644); err != nil {
				t.Fatal(err)
			}
			if dom := b.dom("file://" + probe); !strings.Contains(dom, `<p id="p">static</p>`) {
				t.Fatalf("JavaScript is not off in the test profile:\n%s", dom)
			}
			return b
		}
	}
	if os.Getenv("CI") != "" {
		t.Fatal("chromium not installed; CI must install Debian's chromium package")
	}
	t.Skip("chromium not installed")
	return nil
}

func (b *browser) run(args ...string) []byte {
	b.t.Helper()
	// Only a chromium that never ends is stopped, shortly before the test
	// binary's -timeout: a loaded machine starts a browser slowly.
	ctx, cancel := context.WithTimeout(context.Background(), requestWait(b.t))
	defer cancel()
	base := []string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync", "--hide-scrollbars",
		"--user-data-dir=" + filepath.Join(b.dir, "profile"),
		"--enable-logging=stderr", "--v=0"} // the console, CSP violations included, on stderr
	cmd := exec.CommandContext(ctx, b.path, append(base, args...)...)
	var console strings.Builder
	cmd.Stderr = &console
	out, err := cmd.Output()
	if err != nil {
		b.t.Fatalf("chromium %v: %v", args, err)
	}
	// The page's Content-Security-Policy allows its stylesheet and nothing
	// else; the page must need nothing else.
	for _, line := range strings.Split(console.String(), "\n") {
		if strings.Contains(line, "Content Security Policy") {
			b.t.Errorf("chromium %v: the page violates its Content-Security-Policy: %s", args, line)
		}
	}
	return out
}

func (b *browser) dom(url string) string { return string(b.run("--dump-dom", url)) }

// screenshot writes a PNG of the page at the given width.
func (b *browser) screenshot(url, path string, width, height int) {
	b.t.Helper()
	b.run(fmt.Sprintf("--window-size=%d,%d", width, height), "--screenshot="+path, url)
	png, err := os.ReadFile(path)
	if err != nil || len(png) < 10_000 || string(png[1:4]) != "PNG" {
		b.t.Fatalf("screenshot %s: %d bytes, err %v", path, len(png), err)
	}
}

// ageText is how the page says a verdict's age.
func ageText(now, since time.Time) string {
	d := now.Sub(since)
	if d < time.Minute {
		return fmt.Sprintf("for %d s", int(d.Seconds()))
	}
	return fmt.Sprintf("for %d min", int(d.Minutes()))
}

func reportOf(t *testing.T, h http.Handler) diagnose.Report {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/diagnose?format=json", nil))
	var r diagnose.Report
	if err := json.Unmarshal(rec.Body.Bytes(), &r); err != nil {
		t.Fatal(err)
	}
	return r
}

var (
	domAge  = regexp.MustCompile(`<span id="age" title="since ([^"]+)">([^<]+)</span>`)
	domSeg  = regexp.MustCompile(`data-class="(\w+)" data-from="([^"]+)"`)
	domHost = regexp.MustCompile(`<b id="host">([^<]+)</b>`)
)

// timelineRow returns the classes and start times of a row's bands.
func timelineRow(dom, label string) [][2]string {
	i := strings.Index(dom, `<div class="muted">`+label+`</div>`)
	if i < 0 {
		return nil
	}
	row := dom[i:]
	row = row[:strings.Index(row, "</svg>")]
	var out [][2]string
	for _, m := range domSeg.FindAllStringSubmatch(row, -1) {
		out = append(out, [2]string{m[1], m[2]})
	}
	return out
}

// The /diagnose page of three recorded traces, rendered by Chromium with
// JavaScript off at a desktop and a phone width: the node is named, the
// verdict's age is said, GPUs with one verdict share one fix, and the
// screenshots are kept under $GPUDIAG_SCREENSHOT_DIR when set.
func TestDiagnosePageTracesInChromium(t *testing.T) {
	b := newBrowser(t)
	shots := os.Getenv("GPUDIAG_SCREENSHOT_DIR")
	if shots == "" {
		shots = t.TempDir()
	}
	for _, tc := range []struct {
		trace, verdict string
		findings       []string
	}{
		{"bf16_gemm", "Node: compute / tensor", []string{"clocks_throttled"}},
		{"allreduce_sockets_nccl_log", "Node: communication / network", []string{"nccl_fallback", "nccl_env_override"}},
		{"python_input_pipeline", "Node: host / cpu", nil},
	} {
		t.Run(tc.trace, func(t *testing.T) {
			h, _ := replayTraces(t, tc.trace)
			srv := httptest.NewServer(h)
			defer srv.Close()
			rep := reportOf(t, h)
			url := srv.URL + "/diagnose?format=html&refresh=0"
			dom := b.dom(url)
			if !strings.HasSuffix(strings.TrimSpace(dom), "</html>") || !strings.Contains(dom, `<h1 id="verdict">`+tc.verdict+"</h1>") {
				t.Fatalf("page with JavaScript off lacks %q or is cut short:\n%s", tc.verdict, dom)
			}
			if m := domHost.FindStringSubmatch(dom); m == nil || m[1] != pageHost {
				t.Errorf("host shown %v; want %s", m, pageHost)
			}
			if !strings.Contains(dom, "<title>"+strings.TrimPrefix(strings.ReplaceAll(tc.verdict, " / ", "/"), "Node: ")+" · "+pageHost+" (") {
				t.Errorf("title does not name the verdict and the node")
			}
			m := domAge.FindStringSubmatch(dom)
			if want := ageText(rep.Time, rep.Node.Since); m == nil || m[2] != want || m[1] != rep.Node.Since.UTC().Format(time.RFC3339) {
				t.Errorf("age %v; want %q with since %s in the title", m, want, rep.Node.Since.UTC().Format(time.RFC3339))
			}
			for _, g := range rep.GPUs {
				if g.Fix != "" && strings.Count(dom, escapeHTML(g.Fix)) != 1 {
					t.Errorf("GPU %d's fix appears %d times; want once", g.GPU, strings.Count(dom, escapeHTML(g.Fix)))
				}
			}
			if len(rep.GPUs) > 1 && !strings.Contains(dom, fmt.Sprintf("(%d GPUs)", len(rep.GPUs))) {
				t.Errorf("the %d GPUs sharing a verdict are not grouped", len(rep.GPUs))
			}
			for _, f := range tc.findings {
				if !strings.Contains(dom, "<td>"+f+"</td>") {
					t.Errorf("finding %s not shown", f)
				}
			}
			if tc.trace == "allreduce_sockets_nccl_log" && !strings.Contains(dom, "NET/Socket") {
				t.Errorf("NCCL transport not shown")
			}
			if len(timelineRow(dom, "GPU 0")) == 0 || len(timelineRow(dom, "node")) == 0 {
				t.Errorf("no timeline bands")
			}
			for _, w := range []struct{ width, height int }{{1280, 1400}, {390, 1800}} {
				b.screenshot(url, filepath.Join(shots, fmt.Sprintf("diagnose_%s_%d.png", tc.trace, w.width)), w.width, w.height)
			}
		})
	}
}

// A GEMM, then a host→device copy loop: GPU 0's band on the page turns from
// compute to io at the time the verdict changed, and stays io.
func TestDiagnosePageTimelineSwitch(t *testing.T) {
	b := newBrowser(t)
	h, runner := replayTraces(t, "bf16_gemm", "pinned_h2d_copy")
	srv := httptest.NewServer(h)
	defer srv.Close()
	rep := reportOf(t, h)
	if rep.GPUs[0].Class != analyzers.ClassIO {
		t.Fatalf("ended on %s", rep.GPUs[0].Class)
	}
	dom := b.dom(srv.URL + "/diagnose?format=html&refresh=0")
	segs := timelineRow(dom, "GPU 0")
	since := rep.GPUs[0].Since.UTC().Format(time.RFC3339)
	n := len(segs)
	if n < 2 || segs[n-1] != [2]string{"io", since} || segs[n-2][0] != "compute" {
		t.Fatalf("GPU 0 bands %v; want compute, then io from %s", segs, since)
	}
	// The change is where the history has it, and the history agrees with
	// the verdicts' Since.
	hist := runner.History()
	var change time.Time
	for i := 1; i < len(hist); i++ {
		if hist[i].Class(0) == analyzers.ClassIO && hist[i-1].Class(0) == analyzers.ClassCompute {
			change = hist[i].Start
		}
	}
	if !change.Equal(rep.GPUs[0].Since) {
		t.Fatalf("history changes to io at %v; the verdict says since %v", change, rep.GPUs[0].Since)
	}
	// The text form draws the same change.
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/diagnose?format=text", nil))
	line := regexp.MustCompile(`(?m)^  GPU 0   ([CMIH.?]+)$`).FindStringSubmatch(rec.Body.String())
	if line == nil || !regexp.MustCompile(`^[?.]*C+I+$`).MatchString(line[1]) {
		t.Fatalf("text timeline %v; want compute then io\n%s", line, rec.Body.String())
	}
}

// The README's picture: the page of the socket-fallback all-reduce trace.
// go test ./cmd/exporter -run TestDiagnosePageREADMEScreenshot -update-screenshot
func TestDiagnosePageREADMEScreenshot(t *testing.T) {
	if !*updateScreenshot {
		t.Skip("writes docs/images/diagnose.png with -update-screenshot")
	}
	b := newBrowser(t)
	h, _ := replayTraces(t, "allreduce_sockets_nccl_log")
	// The address a reader would use, not the test server's random port.
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.Host = pageHost + ":" + DefaultPort
		h.ServeHTTP(w, r)
	}))
	defer srv.Close()
	path := "../../docs/images/diagnose.png"
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	b.screenshot(srv.URL+"/diagnose?format=html&refresh=0", path, 1280, 1500)
	if fi, err := os.Stat(path); err != nil || fi.Size() > 300<<10 {
		t.Fatalf("%s: %v, %d bytes; want under 300 KB", path, err, fi.Size())
	}
}

// escapeHTML escapes text as Chromium serializes a text node.
func escapeHTML(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;").Replace(s)
}

// --web.grafana-url takes an http(s) URL only: the page puts it in a link.
func TestDiagnoseGrafanaURLFlag(t *testing.T) {
	for _, bad := range []string{"grafana.example.com", "javascript:alert(1)", "ftp://g/", "https://"} {
		if _, err := parseFlags([]string{"--web.grafana-url=" + bad}); err == nil {
			t.Errorf("--web.grafana-url=%s accepted", bad)
		}
	}
	o, err := parseFlags([]string{"--web.grafana-url=https://grafana.example.com/sub/"})
	if err != nil || o.grafanaURL != "https://grafana.example.com/sub/" {
		t.Fatalf("%v %+v", err, o)
	}
}

// The daemon's every page, /diagnose among them, is served with the
// security headers and a policy under which its inline stylesheet, and
// nothing else, applies; the other answers with a policy that allows
// nothing. Before, none of these headers was sent.
func TestDaemonResponsesCarrySecurityHeaders(t *testing.T) {
	td := startDaemon(t, nil, "--web.enable-pprof")
	for _, tc := range []struct {
		path string
		page bool
	}{{"/", true}, {"/diagnose?format=html", true}, {"/debug/pprof/", true},
		{"/diagnose?format=text", false}, {"/diagnose?format=json", false}, {"/diagnose?window=x", false},
		{"/metrics", false}, {"/healthz", false}, {"/nothing-here", false}} {
		resp, err := http.Get(td.base + tc.path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		h := resp.Header
		for name, want := range map[string]string{"X-Content-Type-Options": "nosniff", "X-Frame-Options": "DENY", "Referrer-Policy": "no-referrer"} {
			if got := h.Get(name); got != want {
				t.Errorf("%s: %s %q, want %q", tc.path, name, got, want)
			}
		}
		csp := h.Get("Content-Security-Policy")
		if !strings.HasPrefix(csp, "default-src 'none'") || !strings.Contains(csp, "frame-ancestors 'none'") || strings.Contains(csp, "unsafe") {
			t.Errorf("%s: Content-Security-Policy %q", tc.path, csp)
		}
		styles := server.InlineStyles(body)
		if !tc.page {
			if csp != server.DefaultContentSecurityPolicy {
				t.Errorf("%s: Content-Security-Policy %q, want the default", tc.path, csp)
			}
			continue
		}
		if len(styles) == 0 || strings.Contains(string(body), "<script") {
			t.Errorf("%s: %d inline styles, script: %v", tc.path, len(styles), strings.Contains(string(body), "<script"))
		}
		if want := server.StylePolicy(styles...); csp != want {
			t.Errorf("%s: Content-Security-Policy %q, want %q (its styles' hashes)", tc.path, csp, want)
		}
	}
}
