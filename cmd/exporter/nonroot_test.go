package main

import (
	"context"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The daemon runs without privileges: as nobody (uid 65534) the host
// collectors that read world-readable /proc and /sys work, the eBPF
// collector says in one log line why it cannot load and is left out, and
// the daemon serves. README's privilege table is what this checks.
func TestRunsAsNobody(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to start a process as another user")
	}
	if testing.Short() {
		t.Skip("builds the daemon")
	}
	dir := t.TempDir()
	for _, d := range []string{filepath.Dir(dir), dir} { // nobody must reach the binary
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	bin := filepath.Join(dir, "gpudiag")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	addr := freeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "--web.listen-address="+addr, "--collector.gpu.backend=none",
		"--collector.ebpf", "--sample.interval=200ms")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	logs := &syncBuffer{} // written by exec's copying goroutine while the test reads it
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		cancel()
		cmd.Wait()
	}()

	var body string
	want := []string{"cpu", "pressure", "diskstats", "netdev", "tcp"}
	// Only a collector that never succeeds runs into the deadline, shortly
	// before the test binary's -timeout.
	for deadline := time.Now().Add(requestWait(t)); ; time.Sleep(100 * time.Millisecond) {
		body = scrapeBody("http://" + addr + "/metrics")
		ok := true
		for _, c := range want {
			ok = ok && strings.Contains(body, `gpudiag_collector_success{collector="`+c+`"} 1`)
		}
		if ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("as nobody, not every host collector succeeded (%v):\n%s\nlogs:\n%s", want, grepLines(body, "gpudiag_collector_success"), logs.String())
		}
	}
	if strings.Contains(body, `collector="ebpf"`) {
		t.Error("the ebpf collector runs as nobody")
	}
	if !strings.Contains(logs.String(), `"collector": "ebpf"`) || !strings.Contains(logs.String(), "collector not available") {
		t.Errorf("no log line says why the ebpf collector is left out:\n%s", logs.String())
	}
	if r, err := http.Get("http://" + addr + "/diagnose?format=json"); err != nil || r.StatusCode != http.StatusOK {
		t.Errorf("/diagnose as nobody: %v %v", r, err)
	} else {
		r.Body.Close()
	}
}

func scrapeBody(url string) string {
	r, err := http.Get(url)
	if err != nil {
		return ""
	}
	defer r.Body.Close()
	b, _ := io.ReadAll(r.Body)
	return string(b)
}

func grepLines(s, substr string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, substr) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
