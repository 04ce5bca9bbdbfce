package e2e

import (
	"bytes"
	"context"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// binary finds a tool the test drives. CI must have it (Debian's prometheus
// and prometheus-alertmanager packages); elsewhere the test skips without it.
func binary(t *testing.T, names ...string) string {
	t.Helper()
	for _, n := range names {
		if p, err := exec.LookPath(n); err == nil {
			return p
		}
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("%s not installed; CI must install it (scripts/test.sh)", names[0])
	}
	t.Skipf("%s not installed", names[0])
	return ""
}

// freeAddr returns a loopback address with a port nobody listens on now,
// below the kernel's ephemeral range. A port that bind(":0") hands out is in
// that range, where any outgoing connection (a scrape, a readiness probe) may
// take it as its own before the server the test starts binds it: Prometheus
// once failed to start so ("address already in use").
func freeAddr(t *testing.T) string {
	t.Helper()
	if low := ephemeralLow(); low > minTestPort+1000 {
		for range 100 {
			l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(minTestPort+rand.IntN(low-minTestPort))))
			if err == nil {
				defer l.Close()
				return l.Addr().String()
			}
		}
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// minTestPort is the lowest port freeAddr picks: above the well-known and
// most registered services' ports.
const minTestPort = 20000

// ephemeralLow is the first port of the kernel's ephemeral range (Linux's
// default 32768 when the file cannot be read).
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 32768
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return 32768
	}
	low, err := strconv.Atoi(f[0])
	if err != nil {
		return 32768
	}
	return low
}

// process is a child the test started; its output goes to a log file that
// is printed when the test fails.
type process struct {
	name string
	cmd  *exec.Cmd
	log  string
	done chan struct{}
}

// start runs bin and registers its end: SIGTERM, then SIGKILL after 5 s,
// and a wait, so no process outlives the test. Pdeathsig kills it as well
// if the test binary dies first.
func start(t *testing.T, dir, name, bin string, args ...string) *process {
	t.Helper()
	logPath := filepath.Join(dir, name+".log")
	logf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logf.Close()
		t.Fatalf("start %s: %v", name, err)
	}
	p := &process{name: name, cmd: cmd, log: logPath, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		logf.Close()
		close(p.done)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(5 * time.Second):
			_ = cmd.Process.Kill()
			<-p.done
		}
		if t.Failed() {
			b, _ := os.ReadFile(logPath)
			if len(b) > 4000 {
				b = b[len(b)-4000:]
			}
			t.Logf("--- %s log (tail) ---\n%s", name, b)
		}
	})
	return p
}

// startPrometheus runs Prometheus on addr with config as its
// prometheus.yml and its data under dir, waits until it is ready and
// returns its API.
func startPrometheus(ctx context.Context, t *testing.T, bin, dir, addr, config string) *promAPI {
	t.Helper()
	path := filepath.Join(dir, "prometheus.yml")
	writeFile(t, path, config)
	p := start(t, dir, "prometheus", bin, "--config.file="+path,
		"--storage.tsdb.path="+filepath.Join(dir, "prom-data"), "--web.listen-address="+addr)
	waitHTTP(ctx, t, p, "http://"+addr+"/-/ready")
	return &promAPI{t: t, ctx: ctx, base: "http://" + addr}
}

// exited reports whether the process has ended.
func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// waitHTTP polls url until it answers 200, the process dies or ctx ends.
func waitHTTP(ctx context.Context, t *testing.T, p *process, url string) {
	t.Helper()
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		if p.exited() {
			b, _ := os.ReadFile(p.log)
			t.Fatalf("%s exited before serving %s:\n%s", p.name, url, tail(b, 4000))
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s did not serve %s: %v", p.name, url, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func tail(b []byte, n int) []byte {
	b = bytes.TrimSpace(b)
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}
