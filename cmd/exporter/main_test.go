package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/gpudiag/gpudiag/analyzers"
	"github.com/gpudiag/gpudiag/internal/promtest"
	"github.com/gpudiag/gpudiag/record"
)

func freeAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
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
		_, err := run(ctx, []string{"--web.listen-address=" + addr, "--sample.interval=100ms",
			"--collector.gpu.backend=none", "--path.procfs=/proc", "--path.sysfs=/sys"}, io.Discard, &logs, nil)
		done <- err
	}()

	base := "http://" + addr
	// The deadlines stop a daemon that never comes up or never stops,
	// shortly before the test binary's -timeout; a loaded machine takes
	// its time over the first samples of /proc.
	deadline := time.Now().Add(requestWait(t))
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
	if code, _ := get(t, base+"/debug/pprof/"); code != http.StatusNotFound {
		t.Errorf("/debug/pprof/ without --web.enable-pprof: %d; want 404", code)
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
	case <-time.After(requestWait(t)):
		t.Fatal("daemon did not stop")
	}
	http.DefaultClient.CloseIdleConnections()
}

func TestFlagErrors(t *testing.T) {
	for _, args := range [][]string{
		{"--sample.interval=10ms"},
		{"--collector.gpu.backend=cuda"},
		{"--log.level=loud"},
		{"--replay.loop"}, // nothing to loop over
		{"diagnose", "--replay=" + filepath.Join(tracesDir, "idle.gdrec"), "--replay.loop"}, // would never end
	} {
		if code, err := run(context.Background(), args, io.Discard, io.Discard, nil); err == nil || code != exitError {
			t.Errorf("%v: no error", args)
		}
	}
}

// The one-shot command samples, prints a diagnosis and exits with a code that
// summarises it; without a GPU backend there is nothing to classify: 5, never
// the healthy 0.
func TestDiagnoseCommand(t *testing.T) {
	var out, logs syncBuffer
	code, err := run(context.Background(), []string{"diagnose", "--for=1500ms", "--sample.interval=200ms",
		"--collector.gpu.backend=none", "--format=json"}, &out, &logs, nil)
	if err != nil {
		t.Fatalf("%v\n%s", err, logs.String())
	}
	var d struct {
		SchemaVersion int `json:"schema_version"`
		Node          struct {
			Class string `json:"class"`
		} `json:"node"`
		Inputs struct {
			GPUSamples int `json:"gpu_samples"`
		} `json:"inputs"`
	}
	if err := json.Unmarshal([]byte(out.String()), &d); err != nil {
		t.Fatalf("output is not JSON: %v\n%s", err, out.String())
	}
	if d.SchemaVersion != 1 || d.Node.Class != "unknown" {
		t.Fatalf("diagnosis %+v", d)
	}
	if code != exitNoGPU {
		t.Fatalf("exit code %d on a host without GPUs; want %d", code, exitNoGPU)
	}
}

func TestExitCodes(t *testing.T) {
	crit := analyzers.Finding{Severity: analyzers.SeverityCritical}
	info := analyzers.Finding{Severity: analyzers.SeverityInfo}
	for _, tc := range []struct {
		class    analyzers.Class
		gpus     int
		findings []analyzers.Finding
		want     int
		subKind  string
	}{
		{analyzers.ClassCompute, 8, nil, exitOK, ""},
		{analyzers.ClassCompute, 8, []analyzers.Finding{info}, exitOK, ""},
		{analyzers.ClassIdle, 8, []analyzers.Finding{crit}, exitFindings, ""},
		{analyzers.ClassCommunication, 8, []analyzers.Finding{crit}, exitBottleneck, ""},
		{analyzers.ClassHost, 8, nil, exitBottleneck, ""},
		{analyzers.ClassUnknown, 8, nil, exitUnknown, ""},
		{analyzers.ClassUnknown, 0, nil, exitNoGPU, ""},
		{analyzers.ClassUnknown, 0, []analyzers.Finding{crit}, exitNoGPU, ""},
		{analyzers.ClassUnknown, 8, []analyzers.Finding{crit}, exitUnknown, ""},
		{analyzers.ClassIO, 8, []analyzers.Finding{crit}, exitBottleneck, ""},
		// A GPU lost leads the node as unknown/gpu_down with its critical
		// gpu_lost finding: a known fault, not "none could be classified".
		{analyzers.ClassUnknown, 8, []analyzers.Finding{crit}, exitFindings, analyzers.SubGPUDown},
	} {
		d := &analyzers.Diagnosis{Node: analyzers.Verdict{Class: tc.class, SubKind: tc.subKind}, GPUs: make([]analyzers.GPUVerdict, tc.gpus), Findings: tc.findings}
		if got := exitCode(d); got != tc.want {
			t.Errorf("%s with %d GPUs and %d findings: exit %d; want %d", tc.class, tc.gpus, len(tc.findings), got, tc.want)
		}
	}
}

// The daemon records its samples; a second daemon replays them and reaches the
// same state: every recorded collector reported, and a diagnosis.
func TestRecordThenReplay(t *testing.T) {
	dir := t.TempDir()
	trace := filepath.Join(dir, "trace.gdrec")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var logs syncBuffer
	addr := freeAddr(t)
	ran := make(chan error, 1)
	go func() {
		_, err := run(ctx, []string{"--web.listen-address=" + addr, "--sample.interval=100ms",
			"--collector.gpu.backend=none", "--record=" + trace}, io.Discard, &logs, nil)
		ran <- err
	}()
	// Recorded for at least 1.5 s and until the recorder says it wrote
	// 1000 bytes: a daemon stopped after 1.5 s of wall time had, on a
	// loaded machine, recorded next to nothing. Only the test binary's
	// timeout stops a daemon that never records.
	recorded := regexp.MustCompile(`(?m)^gpudiag_record_written_bytes_total (\S+)$`)
	for start := time.Now(); ; time.Sleep(50 * time.Millisecond) {
		select {
		case err := <-ran:
			t.Fatalf("the recording daemon ended early: %v\n%s", err, logs.String())
		default:
		}
		if time.Since(start) < 1500*time.Millisecond {
			continue
		}
		resp, err := http.Get("http://" + addr + "/metrics")
		if err != nil {
			continue // not serving yet
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if m := recorded.FindSubmatch(b); m != nil {
			if n, _ := strconv.ParseFloat(string(m[1]), 64); n >= 1000 {
				break
			}
		}
	}
	cancel()
	if err := <-ran; err != nil {
		t.Fatalf("%v\n%s", err, logs.String())
	}
	http.DefaultClient.CloseIdleConnections()
	st, err := os.Stat(trace)
	if err != nil || st.Size() < 1000 {
		t.Fatalf("trace: %v, %d bytes", err, st.Size())
	}

	var out syncBuffer
	code, err := run(context.Background(), []string{"diagnose", "--replay=" + trace, "--for=1s", "--format=json"}, &out, &logs, nil)
	if err != nil || code == exitError {
		t.Fatalf("replay: code %d, %v\n%s", code, err, logs.String())
	}
	if !strings.Contains(out.String(), `"schema_version": 1`) {
		t.Fatalf("replayed diagnosis:\n%s", out.String())
	}
	if !strings.Contains(logs.String(), "replay finished") {
		t.Fatalf("replay did not reach the end:\n%s", logs.String())
	}

	// A corrupt trace gives an error naming the offset, not a panic. The
	// byte flipped is in the payload of the frame that holds the middle of
	// the file: one in a frame's length could claim more bytes than the file
	// has left, which reads as the torn tail a crash leaves and is cut.
	b, _ := os.ReadFile(trace)
	frames, err := record.NewReader(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	for frames.Offset() < int64(len(b)/2) {
		if _, err := frames.Next(); err != nil {
			t.Fatal(err)
		}
	}
	b[frames.Offset()+8] ^= 0xff
	bad := filepath.Join(dir, "bad.gdrec")
	os.WriteFile(bad, b, 0o644)
	code, err = run(context.Background(), []string{"diagnose", "--replay=" + bad, "--for=1s"}, io.Discard, io.Discard, nil)
	if code != exitError || err == nil || !strings.Contains(err.Error(), "offset") {
		t.Fatalf("corrupt trace: code %d, err %v", code, err)
	}
}

// syncBuffer is what the daemon under test logs to.
type syncBuffer = promtest.SyncBuffer
