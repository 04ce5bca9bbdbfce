package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The daemon runs its Go code on --runtime.gomaxprocs CPUs (1 by default)
// under a Go memory limit of --runtime.memory-limit (128 MiB by default),
// GOMAXPROCS and GOMEMLIMIT in its environment taking precedence, as the
// Go runtime's own gauge on /metrics and the start line say; a negative
// count is refused.
func TestGOMAXPROCS(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the daemon")
	}
	bin := filepath.Join(t.TempDir(), "gpudiag")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	// wantLimit is the Go memory limit the start line reports: the default
	// 128 MiB, the flag's, or GOMEMLIMIT's over both.
	for _, tc := range []struct {
		flag, env, want, wantLimit string
	}{
		{"", "", "1", "134217728"},
		{"--runtime.gomaxprocs=3", "", "3", "134217728"},
		{"--runtime.gomaxprocs=3", "GOMAXPROCS=1", "1", "134217728"},
		{"--runtime.memory-limit=64MiB", "", "1", "67108864"},
		{"--runtime.memory-limit=64MiB", "GOMEMLIMIT=100MiB", "1", "104857600"},
	} {
		addr := freeAddr(t)
		ctx, cancel := context.WithCancel(context.Background())
		args := []string{"--web.listen-address=" + addr, "--collector.gpu.backend=none"}
		if tc.flag != "" {
			args = append(args, tc.flag)
		}
		cmd := exec.CommandContext(ctx, bin, args...)
		cmd.Env = os.Environ()
		if tc.env != "" {
			cmd.Env = append(cmd.Env, tc.env)
		}
		logs := &syncBuffer{}
		cmd.Stdout, cmd.Stderr = logs, logs
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		got := ""
		// Only a daemon that never serves meets the deadline, shortly
		// before the test binary's -timeout.
		for deadline := time.Now().Add(requestWait(t)); got == "" && time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
			for _, line := range strings.Split(scrapeBody("http://"+addr+"/metrics"), "\n") {
				if v, ok := strings.CutPrefix(line, "go_sched_gomaxprocs_threads "); ok {
					got = v
				}
			}
		}
		cancel()
		cmd.Wait()
		if got != tc.want {
			t.Errorf("%s %s: GOMAXPROCS %q; want %s\nlogs:\n%s", tc.flag, tc.env, got, tc.want, logs.String())
		}
		if !strings.Contains(logs.String(), `"go_memory_limit_bytes": `+tc.wantLimit) {
			t.Errorf("%s %s: the start line does not say go_memory_limit_bytes %s:\n%s", tc.flag, tc.env, tc.wantLimit, logs.String())
		}
		if !strings.Contains(logs.String(), `"gomaxprocs": `+tc.want) {
			t.Errorf("%s %s: the start line does not say gomaxprocs %s:\n%s", tc.flag, tc.env, tc.want, logs.String())
		}
	}
	if _, err := parseFlags([]string{"--runtime.gomaxprocs=-1"}); err == nil || !strings.Contains(err.Error(), "negative") {
		t.Errorf("--runtime.gomaxprocs=-1: %v", err)
	}
}
