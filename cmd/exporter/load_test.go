package main

import (
	"context"
	"io"
	"net/http"
	"sort"
	"sync"
	"testing"
	"time"
)

// 100 concurrent clients scrape /metrics and hit /diagnose for a bounded
// time: every scrape succeeds, /diagnose answers 200 or 429 only, and the
// rate limit holds (no more 200s than rate × duration + burst).
func TestLoadConcurrentClients(t *testing.T) {
	if testing.Short() {
		t.Skip("load test")
	}
	addr := freeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := run(ctx, []string{"--web.listen-address=" + addr, "--collector.gpu.backend=none",
			"--sample.interval=200ms", "--web.max-requests=0", "--web.diagnose-rate=2", "--web.diagnose-burst=5"},
			io.Discard, io.Discard, nil)
		done <- err
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	base := "http://" + addr
	for deadline := time.Now().Add(10 * time.Second); ; {
		if r, err := http.Get(base + "/metrics"); err == nil {
			r.Body.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("daemon did not come up")
		}
		time.Sleep(50 * time.Millisecond)
	}

	const clients = 100
	const span = 3 * time.Second
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: clients}}
	defer client.CloseIdleConnections()
	var mu sync.Mutex
	var latencies []time.Duration
	codes := map[string]map[int]int{"/metrics": {}, "/diagnose": {}}
	var errs []error
	start := time.Now()
	var wg sync.WaitGroup
	for i := 0; i < clients; i++ {
		path := "/metrics"
		if i%10 == 0 {
			path = "/diagnose"
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Since(start) < span {
				t0 := time.Now()
				r, err := client.Get(base + path)
				if err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
					continue
				}
				io.Copy(io.Discard, r.Body)
				r.Body.Close()
				mu.Lock()
				codes[path][r.StatusCode]++
				if path == "/metrics" {
					latencies = append(latencies, time.Since(t0))
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	if len(errs) > 0 {
		t.Fatalf("%d request errors, first: %v", len(errs), errs[0])
	}
	for code, n := range codes["/metrics"] {
		if code != http.StatusOK {
			t.Errorf("/metrics answered %d %d times", code, n)
		}
	}
	for code, n := range codes["/diagnose"] {
		if code != http.StatusOK && code != http.StatusTooManyRequests {
			t.Errorf("/diagnose answered %d %d times", code, n)
		}
	}
	if ok, limit := codes["/diagnose"][http.StatusOK], int(2*elapsed.Seconds())+5+1; ok > limit {
		t.Errorf("/diagnose served %d requests in %v; the limit allows %d", ok, elapsed, limit)
	}
	if codes["/diagnose"][http.StatusTooManyRequests] == 0 {
		t.Error("the rate limit never engaged")
	}
	sort.Slice(latencies, func(i, j int) bool { return latencies[i] < latencies[j] })
	p := func(q float64) time.Duration { return latencies[int(q*float64(len(latencies)-1))] }
	t.Logf("%d scrapes by %d clients in %v: p50 %v, p99 %v, max %v; /diagnose %v",
		len(latencies), clients, elapsed.Round(time.Millisecond), p(0.5), p(0.99), latencies[len(latencies)-1], codes["/diagnose"])
}
