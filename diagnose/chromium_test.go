package diagnose

import (
	"bytes"
	"context"
	"image/png"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpudiag/gpudiag/sample"
)

// chromium finds Debian's headless-capable browser.
func chromium(t *testing.T) string {
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("CI") != "" {
		t.Fatal("chromium not installed; CI must install Debian's chromium package")
	}
	t.Skip("chromium not installed")
	return ""
}

// The /diagnose page renders in a real browser: the verdict is in the DOM
// and a screenshot is taken (kept under $GPUDIAG_SCREENSHOT_DIR when set).
// Under the page's Content-Security-Policy the browser reports no
// violation on its console, and the stylesheet applies: the header has the
// verdict's colour.
func TestDiagnosePageInChromium(t *testing.T) {
	browser := chromium(t)
	r, now := runnerWith(20, func(int) *sample.GPUs { return gpuSample(0, 59e9) })
	srv := httptest.NewServer(r.Handler(HandlerOptions{Now: func() time.Time { return now }}))
	defer srv.Close()
	url := srv.URL + "/diagnose?format=html"

	dir := t.TempDir()
	base := []string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--user-data-dir=" + filepath.Join(dir, "profile"),
		"--enable-logging=stderr", "--v=0"} // the console, CSP violations included, on stderr
	// Only a chromium that never ends is stopped, shortly before the test
	// binary's -timeout: a loaded machine starts a browser slowly.
	wait := 24 * time.Hour
	if d, ok := t.Deadline(); ok {
		left := time.Until(d)
		wait = left - min(left/10, 30*time.Second)
	}
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()

	var console strings.Builder
	dump := exec.CommandContext(ctx, browser, append(base, "--dump-dom", url)...)
	dump.Stderr = &console
	dom, err := dump.Output()
	if err != nil {
		t.Fatalf("chromium --dump-dom: %v\n%s", err, console.String())
	}
	if v := cspViolations(console.String()); v != nil {
		t.Errorf("the page violates its Content-Security-Policy:\n%s", strings.Join(v, "\n"))
	}
	for _, want := range []string{`<h1 id="verdict">Node: io / h2d_copy</h1>`, "PCIe receives 59.0 GB/s", "What to do:"} {
		if !strings.Contains(string(dom), want) {
			t.Errorf("rendered page lacks %q", want)
		}
	}

	shotDir := os.Getenv("GPUDIAG_SCREENSHOT_DIR")
	if shotDir == "" {
		shotDir = dir
	}
	shot := filepath.Join(shotDir, "diagnose.png")
	cmd := exec.CommandContext(ctx, browser, append(base, "--window-size=1200,900", "--screenshot="+shot, url)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("chromium --screenshot: %v\n%s", err, out)
	}
	if v := cspViolations(string(out)); v != nil {
		t.Errorf("the page violates its Content-Security-Policy:\n%s", strings.Join(v, "\n"))
	}
	data, err := os.ReadFile(shot)
	if err != nil || len(data) < 10_000 || string(data[1:4]) != "PNG" {
		t.Fatalf("screenshot %s: %d bytes, err %v", shot, len(data), err)
	}
	img, err := png.Decode(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	// The io header's background (page.css: header.io), which the page
	// has only if its stylesheet was allowed.
	if r, g, b, _ := img.At(5, 5).RGBA(); r>>8 != 0xb7 || g>>8 != 0x79 || b>>8 != 0x1f {
		t.Errorf("the header is #%02x%02x%02x, not the io colour #b7791f: the stylesheet did not apply", r>>8, g>>8, b>>8)
	}
}

// cspViolations are the console lines in which Chromium reports that the
// page broke its Content-Security-Policy.
func cspViolations(console string) []string {
	var v []string
	for _, line := range strings.Split(console, "\n") {
		if strings.Contains(line, "Content Security Policy") {
			v = append(v, line)
		}
	}
	return v
}
