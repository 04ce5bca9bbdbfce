package e2e

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// What one Prometheus pays per gpudiag series, measured, for docs/fleet.md:
// a Prometheus scrapes the fake 8-GPU node as GPUDIAG_FLEET_NODES distinct
// targets (one daemon, a host label per target) every 10 s, and its heap and
// resident memory are read against an idle baseline. Opt-in, it takes about
// six minutes:
//
//	GPUDIAG_FLEET_NODES=200 go test ./e2e -run TestPrometheusCostPerSeries -v -timeout 20m
func TestPrometheusCostPerSeries(t *testing.T) {
	nodes, _ := strconv.Atoi(os.Getenv("GPUDIAG_FLEET_NODES"))
	if nodes <= 0 {
		t.Skip("set GPUDIAG_FLEET_NODES to measure")
	}
	prometheus := binary(t, "prometheus")
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	dir := t.TempDir()
	daemon := filepath.Join(dir, "gpudiag")
	if out, err := exec.CommandContext(ctx, "go", "build", "-o", daemon, "../cmd/exporter").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	gemm := readTrace(t, filepath.Join(tracesDir, "bf16_gemm.gdrec"))
	trace := filepath.Join(dir, "fake8.gdrec")
	writeTrace(t, trace, gemm, time.Since(gemm[0].Time()), fakeEightGPUNode(t, gemm))
	addr := freeAddr(t)
	d := start(t, dir, "gpudiag", daemon, "--web.listen-address="+addr, "--replay="+trace, "--replay.speed=1",
		"--sample.interval=30s")
	waitHTTP(ctx, t, d, "http://"+addr+"/healthz")

	// An idle Prometheus first, for the baseline; then the same with targets.
	measure := func(name string, targets int, settle time.Duration) (series, heap, rss float64) {
		var cfg strings.Builder
		cfg.WriteString("global:\n  scrape_interval: 10s\n  scrape_timeout: 10s\nscrape_configs:\n  - job_name: gpudiag\n    static_configs:\n")
		for i := 0; i < targets; i++ {
			fmt.Fprintf(&cfg, "      - targets: [%q]\n        labels: {host: node-%05d}\n", addr, i)
		}
		cfgPath := filepath.Join(dir, name+".yml")
		writeFile(t, cfgPath, cfg.String())
		promAddr := freeAddr(t)
		p := start(t, dir, name, prometheus, "--config.file="+cfgPath,
			"--storage.tsdb.path="+filepath.Join(dir, name+"-data"), "--web.listen-address="+promAddr)
		waitHTTP(ctx, t, p, "http://"+promAddr+"/-/ready")
		select {
		case <-time.After(settle):
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		}
		self := scrapeText(ctx, t, "http://"+promAddr+"/metrics")
		_ = p.cmd.Process.Kill()
		<-p.done
		return self["prometheus_tsdb_head_series"], self["go_memstats_heap_inuse_bytes"], self["process_resident_memory_bytes"]
	}
	_, baseHeap, baseRSS := measure("idle", 0, 30*time.Second)
	series, heap, rss := measure("loaded", nodes, 5*time.Minute)
	perSeriesHeap := (heap - baseHeap) / series
	perSeriesRSS := (rss - baseRSS) / series
	t.Logf("%d targets, %.0f head series (%.0f per target) after 5 min at 10 s: heap %.0f MiB (idle %.0f), RSS %.0f MiB (idle %.0f)",
		nodes, series, series/float64(nodes), heap/(1<<20), baseHeap/(1<<20), rss/(1<<20), baseRSS/(1<<20))
	t.Logf("per series: %.0f bytes of heap in use, %.0f bytes resident", perSeriesHeap, perSeriesRSS)
}

// scrapeText fetches a Prometheus text exposition and returns its unlabelled
// samples by name.
func scrapeText(ctx context.Context, t *testing.T, url string) map[string]float64 {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	m := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) != 2 || strings.HasPrefix(f[0], "#") || strings.Contains(f[0], "{") {
			continue
		}
		if v, err := strconv.ParseFloat(f[1], 64); err == nil {
			m[f[0]] = v
		}
	}
	return m
}
