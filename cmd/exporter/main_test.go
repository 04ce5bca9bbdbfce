package main

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// The daemon starts on a host without GPUs, serves its endpoints, says why
// the GPU backend is off, and leaves no goroutine behind after shutdown.
func TestDaemonServesAndShutsDownCleanly(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	addr := freeAddr(t)
	var logs syncBuffer
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"--web.listen-address=" + addr, "--sample.interval=100ms",
			"--collector.gpu.backend=none", "--path.procfs=/proc", "--path.sysfs=/sys"}, &logs, nil)
	}()

	base := "http://" + addr
	deadline := time.Now().Add(10 * time.Second)
	var body string
	for {
		if resp, err := http.Get(base + "/metrics"); err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			body = string(b)
			if strings.Contains(body, `gpudiag_gpu_backend_info{backend="none"`) {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("daemon did not serve GPU backend info in time; last body:\n%s\nlogs:\n%s", body, logs.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	for _, want := range []string{"gpudiag_build_info{", `gpudiag_collector_success{collector="gpu"} 1`, "go_goroutines", "process_resident_memory_bytes"} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	if code, b := get(t, base+"/healthz"); code != 200 || b != "ok\n" {
		t.Errorf("/healthz: %d %q", code, b)
	}
	if code, b := get(t, base+"/"); code != 200 || !strings.Contains(b, "gpudiag") || !strings.Contains(b, "/metrics") {
		t.Errorf("landing page: %d", code)
	}
	if !strings.Contains(logs.String(), "no GPU backend") {
		t.Errorf("no clear 'no GPU backend' log line:\n%s", logs.String())
	}

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("daemon did not stop")
	}
	http.DefaultClient.CloseIdleConnections()
}

func TestFlagErrors(t *testing.T) {
	for _, args := range [][]string{
		{"--sample.interval=10ms"},
		{"--collector.gpu.backend=cuda"},
		{"--log.level=loud"},
	} {
		if err := run(context.Background(), args, io.Discard, nil); err == nil {
			t.Errorf("%v: no error", args)
		}
	}
}
