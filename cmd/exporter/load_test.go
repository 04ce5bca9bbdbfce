package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"runtime"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Load settings: the daemon's own defaults for the /diagnose limit, 90
// clients scraping /metrics and 10 asking /diagnose.
const (
	loadClients       = 100
	loadDiagnoseEvery = 10 // one client in this many asks /diagnose
	loadDiagnoseRate  = 2
	loadDiagnoseBurst = 5
	// loadSpan is how long the clients keep going; each makes at least
	// loadMinRequests requests whatever the time, so a machine too loaded to
	// start them all within the span still sends every one some.
	loadSpan        = 3 * time.Second
	loadMinRequests = 3
	// loadRequestTimeout only stops a daemon that hangs, in the benchmark;
	// the test waits for as long as its binary may run (requestWait): it
	// judges behaviour, not speed, and a loaded CI machine answers 100
	// concurrent clients slowly but correctly (under -race beside CPU hogs
	// one client's three requests took 37 s, near the 60 s this was).
	loadRequestTimeout = 60 * time.Second
)

// requestWait is how long a request of the load test may take: until
// shortly before the test binary's -timeout would end the run, so that
// only a daemon that never answers fails a request, and the failure names
// it; loadRequestTimeout for a benchmark, or where there is no timeout.
func requestWait(tb testing.TB) time.Duration {
	t, ok := tb.(interface{ Deadline() (time.Time, bool) })
	if !ok {
		return loadRequestTimeout
	}
	d, ok := t.Deadline()
	if !ok {
		return loadRequestTimeout
	}
	left := time.Until(d)
	return left - min(left/10, 30*time.Second)
}

// startLoadDaemon runs the daemon the load test and benchmark hit: host
// collectors, no GPU backend, no limit on parallel scrapes, the default
// /diagnose limit. It returns the base URL; the daemon stops with the test.
func startLoadDaemon(tb testing.TB) string {
	tb.Helper()
	addr := freeAddr(tb)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := run(ctx, []string{"--web.listen-address=" + addr, "--collector.gpu.backend=none",
			"--sample.interval=200ms", "--web.max-requests=0",
			fmt.Sprintf("--web.diagnose-rate=%d", loadDiagnoseRate), fmt.Sprintf("--web.diagnose-burst=%d", loadDiagnoseBurst)},
			io.Discard, io.Discard, nil)
		done <- err
	}()
	tb.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			tb.Error(err)
		}
	})
	base := "http://" + addr
	for deadline := time.Now().Add(requestWait(tb)); ; {
		if r, err := http.Get(base + "/metrics"); err == nil {
			r.Body.Close()
			if r.StatusCode == http.StatusOK {
				return base
			}
		}
		if time.Now().After(deadline) {
			tb.Fatal("daemon did not come up")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// 100 concurrent clients scrape /metrics and ask /diagnose: every request is
// answered, every scrape is whole (it parses and lists every collector the
// first one did), /diagnose answers 200 with a whole JSON diagnosis or 429
// only, and its limit holds exactly: the burst is served, and no more than
// burst + rate × the time the clients ran. Nothing here depends on how fast
// the machine is; BenchmarkLoadConcurrentClients measures that.
func TestLoadConcurrentClients(t *testing.T) {
	if testing.Short() {
		t.Skip("load test")
	}
	base := startLoadDaemon(t)
	collectors := scrapeCollectors(t, &http.Client{Timeout: requestWait(t)}, base)
	if len(collectors) == 0 {
		t.Fatal("the first scrape lists no collector")
	}

	client := &http.Client{Timeout: requestWait(t), Transport: &http.Transport{MaxIdleConnsPerHost: loadClients}}
	defer client.CloseIdleConnections()
	var mu sync.Mutex
	var errs []error
	scrapes := 0
	codes := map[int]int{} // of /diagnose
	fail := func(err error) {
		mu.Lock()
		errs = append(errs, err)
		mu.Unlock()
	}
	start := time.Now()
	var wg sync.WaitGroup
	for i := 0; i < loadClients; i++ {
		diagnose := i%loadDiagnoseEvery == 0
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; n < loadMinRequests || time.Since(start) < loadSpan; n++ {
				if diagnose {
					code, err := diagnoseOnce(client, base)
					if err != nil {
						fail(err)
						continue
					}
					mu.Lock()
					codes[code]++
					mu.Unlock()
					continue
				}
				if err := scrapeWhole(client, base, collectors); err != nil {
					fail(err)
					continue
				}
				mu.Lock()
				scrapes++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)

	if len(errs) > 0 {
		t.Fatalf("%d of the requests failed, first: %v", len(errs), errs[0])
	}
	if want := (loadClients - loadClients/loadDiagnoseEvery) * loadMinRequests; scrapes < want {
		t.Errorf("%d scrapes; every /metrics client makes at least %d, %d in all", scrapes, loadMinRequests, want)
	}
	requests := 0
	for code, n := range codes {
		requests += n
		if code != http.StatusOK && code != http.StatusTooManyRequests {
			t.Errorf("/diagnose answered %d %d times", code, n)
		}
	}
	// The bucket starts full and refills at the rate from the first request,
	// which came after start; the last answer came before elapsed.
	served, refused := codes[http.StatusOK], codes[http.StatusTooManyRequests]
	limit := loadDiagnoseBurst + int(math.Floor(loadDiagnoseRate*elapsed.Seconds()))
	if served > limit {
		t.Errorf("/diagnose served %d requests in %v; the limit (burst %d, %d a second) allows %d", served, elapsed, loadDiagnoseBurst, loadDiagnoseRate, limit)
	}
	if want := min(loadDiagnoseBurst, requests); served < want {
		t.Errorf("/diagnose served %d of %d requests; the burst alone allows %d", served, requests, want)
	}
	t.Logf("%d clients for %v: %d whole scrapes; /diagnose served %d, refused %d (limit %d)",
		loadClients, elapsed.Round(time.Millisecond), scrapes, served, refused, limit)
}

// scrapeCollectors reads /metrics once and returns the collectors it lists.
func scrapeCollectors(t *testing.T, client *http.Client, base string) map[string]bool {
	t.Helper()
	fams, ok := scrapeFamilies(t, client, base+"/metrics")
	if !ok {
		t.Fatal("first scrape failed")
	}
	out := map[string]bool{}
	for _, m := range fams["gpudiag_collector_success"].GetMetric() {
		out[labelValue(m, "collector")] = true
	}
	return out
}

// scrapeWhole reads /metrics and checks the body is whole: 200, it parses,
// and it lists every collector the first scrape did (a cut body would
// parse up to the cut and miss the families after it).
func scrapeWhole(client *http.Client, base string, collectors map[string]bool) error {
	resp, err := client.Get(base + "/metrics")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("/metrics answered %s", resp.Status)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		return fmt.Errorf("/metrics body does not parse: %w", err)
	}
	listed := map[string]bool{}
	for _, m := range fams["gpudiag_collector_success"].GetMetric() {
		listed[labelValue(m, "collector")] = true
	}
	for c := range collectors {
		if !listed[c] {
			return fmt.Errorf("/metrics lacks collector %s (%d families): a cut body?", c, len(fams))
		}
	}
	if _, ok := fams["gpudiag_build_info"]; !ok {
		return fmt.Errorf("/metrics lacks gpudiag_build_info (%d families)", len(fams))
	}
	return nil
}

// diagnoseOnce asks /diagnose for JSON; a 200 must carry a whole diagnosis.
func diagnoseOnce(client *http.Client, base string) (int, error) {
	resp, err := client.Get(base + "/diagnose?format=json")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, err
	}
	if resp.StatusCode == http.StatusOK {
		var d struct {
			Node *struct {
				Class string `json:"class"`
			} `json:"node"`
		}
		if err := json.Unmarshal(body, &d); err != nil || d.Node == nil {
			return 0, fmt.Errorf("/diagnose 200 with a body that is no diagnosis (%v): %.200s", err, body)
		}
	}
	return resp.StatusCode, nil
}

// BenchmarkLoadConcurrentClients measures what TestLoadConcurrentClients
// only checks: 100 goroutines scrape /metrics as fast as the daemon answers
// while 10 more ask /diagnose, and it reports scrapes a second and their
// latency (docs/performance.md, "Load"):
//
//	go test -run '^$' -bench BenchmarkLoadConcurrentClients -benchtime 3s ./cmd/exporter
func BenchmarkLoadConcurrentClients(b *testing.B) {
	base := startLoadDaemon(b)
	client := &http.Client{Timeout: loadRequestTimeout, Transport: &http.Transport{MaxIdleConnsPerHost: loadClients}}
	defer client.CloseIdleConnections()

	stop := make(chan struct{})
	var diagnosers sync.WaitGroup
	for i := 0; i < loadClients/loadDiagnoseEvery; i++ {
		diagnosers.Add(1)
		go func() {
			defer diagnosers.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				if _, err := diagnoseOnce(client, base); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}

	var mu sync.Mutex
	var latencies []time.Duration
	var failed atomic.Int64
	scrapers := loadClients - loadClients/loadDiagnoseEvery
	procs := runtime.GOMAXPROCS(0)
	b.SetParallelism((scrapers + procs - 1) / procs) // RunParallel starts parallelism × GOMAXPROCS goroutines
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		var mine []time.Duration
		for pb.Next() {
			t0 := time.Now()
			resp, err := client.Get(base + "/metrics")
			if err != nil {
				failed.Add(1)
				continue
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			mine = append(mine, time.Since(t0))
		}
		mu.Lock()
		latencies = append(latencies, mine...)
		mu.Unlock()
	})
	b.StopTimer()
	close(stop)
	diagnosers.Wait()
	if n := failed.Load(); n > 0 {
		b.Errorf("%d scrapes failed", n)
	}
	if len(latencies) == 0 {
		return
	}
	sort.Slice(latencies, func(i, j int) bool { return latencies[i] < latencies[j] })
	q := func(p float64) float64 {
		return float64(latencies[int(p*float64(len(latencies)-1))]) / float64(time.Millisecond)
	}
	b.ReportMetric(float64(len(latencies))/b.Elapsed().Seconds(), "scrapes/s")
	b.ReportMetric(q(0.5), "p50-ms")
	b.ReportMetric(q(0.99), "p99-ms")
}
