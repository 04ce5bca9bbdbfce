package diagnose

import (
	"context"
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
func TestDiagnosePageInChromium(t *testing.T) {
	browser := chromium(t)
	r, now := runnerWith(20, func(int) *sample.GPUs { return gpuSample(0, 59e9) })
	srv := httptest.NewServer(r.Handler(HandlerOptions{Now: func() time.Time { return now }}))
	defer srv.Close()
	url := srv.URL + "/diagnose?format=html"

	dir := t.TempDir()
	base := []string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--user-data-dir=" + filepath.Join(dir, "profile")}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	dom, err := exec.CommandContext(ctx, browser, append(base, "--dump-dom", url)...).Output()
	if err != nil {
		t.Fatalf("chromium --dump-dom: %v", err)
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
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("chromium --screenshot: %v\n%s", err, out)
	}
	png, err := os.ReadFile(shot)
	if err != nil || len(png) < 10_000 || string(png[1:4]) != "PNG" {
		t.Fatalf("screenshot %s: %d bytes, err %v", shot, len(png), err)
	}
}
