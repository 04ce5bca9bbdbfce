package main

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Clients that misbehave on purpose (issue 15): what each can hold of the
// daemon, and that real scrapes go on. Every deadline here only guards
// against a hang; no test asserts how fast anything is.

// tryScrape gets /metrics once: the status, and the parsed families when 200.
func tryScrape(t *testing.T, client *http.Client, base string) (int, metrics) {
	t.Helper()
	resp, err := client.Get(base + "/metrics")
	if err != nil {
		return 0, nil
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		_, _ = io.Copy(io.Discard, resp.Body)
		return resp.StatusCode, nil
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("/metrics does not parse: %v", err)
	}
	return resp.StatusCode, fams
}

// stalledClient connects with a receive buffer as small as the kernel
// allows, pipelines n scrapes and never reads: the daemon's writes fill its
// send buffer and the client's window, then block.
func stalledClient(t *testing.T, addr string, n int) net.Conn {
	t.Helper()
	d := net.Dialer{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		if err := c.Control(func(fd uintptr) {
			serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 1)
		}); err != nil {
			return err
		}
		return serr
	}}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	req := "GET /metrics HTTP/1.1\r\nHost: gpudiag\r\n\r\n"
	if _, err := c.Write([]byte(strings.Repeat(req, n))); err != nil {
		t.Fatal(err)
	}
	return c
}

// Clients that pipeline scrapes and never read take no scrape slot: a real
// scrape succeeds while they are stuck, and the write timeout closes them.
// Before, promhttp held a --web.max-requests slot until the last byte was
// written: 45 such clients held 39 of 40 slots and real scrapes got 503 for
// as long as the clients stayed.
func TestStalledReadersDoNotTakeScrapeSlots(t *testing.T) {
	const maxRequests, attackers = 2, 4 // twice the slots
	// With the exporter's own metrics: promhttp's in-flight gauge.
	td := startDaemon(t, func(d *daemon) { d.o.disableExpMets = false },
		// The write timeout ends a stalled handler: long enough that the
		// first client is still stuck when the last one arrives on a loaded
		// machine (-race, CI), short enough for the release check below.
		"--web.max-requests="+strconv.Itoa(maxRequests), "--web.write-timeout=40s")
	addr := strings.TrimPrefix(td.base, "http://")
	client := &http.Client{Timeout: 10 * time.Second}
	defer client.CloseIdleConnections()

	// The stalled clients come one at a time, each stuck before the next
	// (as clients arriving over time are): after each, a real scrape
	// succeeds and counts the stuck handlers in flight, itself included.
	// A scrape may get 503 while a client's pipelined scrapes are still
	// being rendered (the slots bound rendering); once stuck, the clients
	// hold none, so with more of them than slots scrapes still succeed.
	var stalled []net.Conn
	for k := 1; k <= attackers; k++ {
		// 1,000 pipelined scrapes of tens of KB each: far more than the
		// kernel buffers between daemon and client hold.
		stalled = append(stalled, stalledClient(t, addr, 1000))
		refused := 0
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			code, m := tryScrape(t, client, td.base)
			if code == http.StatusServiceUnavailable {
				refused++
			}
			if inFlight, _ := m.value("promhttp_metric_handler_requests_in_flight"); code == http.StatusOK && inFlight >= float64(k+1) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("with %d stalled clients (--web.max-requests=%d) no scrape counted them in flight; %d scrapes got 503; logs:\n%s",
					k, maxRequests, refused, td.logs.String())
			}
		}
	}

	// The write timeout ends the stalled handlers and closes their
	// connections.
	for deadline := time.Now().Add(120 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		code, m := tryScrape(t, client, td.base)
		if inFlight, _ := m.value("promhttp_metric_handler_requests_in_flight"); code == http.StatusOK && inFlight == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the stalled clients' handlers were never released; logs:\n%s", td.logs.String())
		}
	}
	deadline := time.Now().Add(30 * time.Second)
	for i, c := range stalled {
		if err := readUntilClosed(c, time.Until(deadline)); err != nil {
			t.Errorf("stalled client %d: %v", i, err)
		}
	}
}

// readUntilClosed reads c until the daemon's close shows (EOF or a reset);
// it fails if c is still open at the deadline.
func readUntilClosed(c net.Conn, within time.Duration) error {
	_ = c.SetReadDeadline(time.Now().Add(within))
	_, err := io.Copy(io.Discard, c)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return errors.New("still open at the deadline")
	}
	return nil // EOF (io.Copy's nil) or a reset: closed by the daemon
}

// keepAliveConn opens a connection and completes one request on it, which
// leaves it idle in keep-alive.
func keepAliveConn(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if code := roundTrip(t, c, 30*time.Second); code != http.StatusOK {
		t.Fatalf("/healthz: %d", code)
	}
	return c
}

// roundTrip sends GET /healthz on c and reads the response.
func roundTrip(t *testing.T, c net.Conn, within time.Duration) int {
	t.Helper()
	if _, err := c.Write([]byte("GET /healthz HTTP/1.1\r\nHost: gpudiag\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	return readResponse(t, c, within)
}

func readResponse(t *testing.T, c net.Conn, within time.Duration) int {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(within))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("reading the response: %v", err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	_ = c.SetReadDeadline(time.Time{})
	return resp.StatusCode
}

// Idle keep-alive connections are closed after --web.idle-timeout. Before,
// they stayed open for good: 5,000 of them cost 34 MB and, past the
// descriptor limit, accept4 failed.
func TestIdleConnectionsClosed(t *testing.T) {
	td := startDaemon(t, nil, "--web.idle-timeout=1s")
	addr := strings.TrimPrefix(td.base, "http://")
	var conns []net.Conn
	for range 5 {
		conns = append(conns, keepAliveConn(t, addr))
	}
	deadline := time.Now().Add(30 * time.Second)
	for i, c := range conns {
		if err := readUntilClosed(c, time.Until(deadline)); err != nil {
			t.Errorf("idle connection %d: %v", i, err)
		}
	}
}

// --web.max-connections caps the connections the daemon holds: the rest wait
// in the kernel's queue, not in the daemon's descriptors, and are served
// once a connection closes; the collectors go on sampling.
func TestConnectionCap(t *testing.T) {
	const capConns, waiting = 4, 6
	// The collectors on slower clocks sample every second here, so that one
	// whose sample timed out on a loaded machine (at start, say) is sampled
	// again while the test waits, instead of 30 s later.
	td := startDaemon(t, nil, "--web.max-connections="+strconv.Itoa(capConns), "--web.idle-timeout=10m",
		"--sample.timeout=1s", "--collector.tuning.interval=1s", "--collector.dataset.interval=1s",
		"--collector.ncclproc.interval=1s", "--collector.gpuprocess.interval=1s")
	addr := strings.TrimPrefix(td.base, "http://")
	_, portStr, _ := net.SplitHostPort(addr)
	port, _ := strconv.Atoi(portStr)
	http.DefaultClient.CloseIdleConnections() // startDaemon's scrapes

	var held []net.Conn
	for range capConns {
		held = append(held, keepAliveConn(t, addr))
	}
	// More clients connect (the kernel completes their handshakes) and ask.
	var queued []net.Conn
	for range waiting {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		if _, err := c.Write([]byte("GET /healthz HTTP/1.1\r\nHost: gpudiag\r\n\r\n")); err != nil {
			t.Fatal(err)
		}
		queued = append(queued, c)
	}
	if n := acceptedConns(t, port); n > capConns {
		t.Fatalf("the daemon holds %d connections; the cap is %d", n, capConns)
	}

	// A held connection closes: a queued client is accepted and served.
	held[0].Close()
	held = held[1:]
	served := make(chan int, waiting)
	for _, c := range queued {
		go func() {
			_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				served <- 0
				return
			}
			resp.Body.Close()
			served <- resp.StatusCode
		}()
	}
	if code := <-served; code != http.StatusOK {
		t.Fatalf("a queued client was not served once a slot freed: %d", code)
	}
	if n := acceptedConns(t, port); n > capConns {
		t.Fatalf("the daemon holds %d connections; the cap is %d", n, capConns)
	}

	for _, c := range append(held, queued...) {
		c.Close()
	}
	for range waiting - 1 {
		<-served
	}
	// Every collector still samples: each one's last sample succeeds. The
	// wait allows for a sample that timed out because the machine is loaded;
	// a collector the flood broke never succeeds again, and waitFor fails
	// with the daemon's log of why.
	td.waitFor(t, "every collector to succeed after the clients left", func(m metrics) bool {
		for _, s := range m["gpudiag_collector_success"].GetMetric() {
			if s.GetGauge().GetValue() != 1 {
				return false
			}
		}
		return len(m["gpudiag_collector_success"].GetMetric()) > 0
	})
}

// acceptedConns counts this process's accepted TCP connections on port: the
// established sockets with that local port that have a file descriptor
// (inode not 0). A connection still in the kernel's accept queue has none.
func acceptedConns(t *testing.T, port int) int {
	t.Helper()
	inodes := map[string]bool{}
	for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n")[1:] {
			fields := strings.Fields(line)
			if len(fields) < 10 {
				continue
			}
			_, local, _ := strings.Cut(fields[1], ":")
			p, err := strconv.ParseInt(local, 16, 32)
			if err != nil || int(p) != port || fields[3] != "01" || fields[9] == "0" {
				continue
			}
			inodes[fields[9]] = true
		}
	}
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, fd := range fds {
		target, err := os.Readlink("/proc/self/fd/" + fd.Name())
		if err != nil {
			continue
		}
		if ino, ok := strings.CutPrefix(target, "socket:["); ok && inodes[strings.TrimSuffix(ino, "]")] {
			n++
		}
	}
	if n == 0 {
		t.Fatalf("no accepted connection found on port %d", port)
	}
	return n
}

// Settings that would not do what they say are refused at start.
func TestHTTPFlagErrors(t *testing.T) {
	for _, args := range [][]string{
		{"--web.write-timeout=-1s"},
		{"--web.read-timeout=-1s"},
		{"--web.idle-timeout=-1s"},
		{"--web.max-connections=-1"},
		{"--web.diagnose-burst=0"}, // with the default rate: every request refused
		{"--web.diagnose-global-burst=0"},
		{"--web.diagnose-trusted-proxy=10.0.0.0/33"},
		{"--web.diagnose-trusted-proxy=proxy.example"},
		{"--web.health-address=10911"}, // no host:port
	} {
		if _, err := parseFlags(args); err == nil {
			t.Errorf("%v accepted", args)
		}
	}
	for _, args := range [][]string{
		{"--web.diagnose-rate=0", "--web.diagnose-burst=0"}, // no limit: the burst is moot
		{"--web.diagnose-trusted-proxy=10.0.0.0/8", "--web.diagnose-trusted-proxy=192.0.2.7"},
		{"--web.health-address=127.0.0.1:10911", "--web.max-connections=0", "--web.write-timeout=0"},
	} {
		if _, err := parseFlags(args); err != nil {
			t.Errorf("%v refused: %v", args, err)
		}
	}
}

// A client that announces a body and dribbles it loses the connection
// after --web.read-timeout. Before, the daemon, discarding the unread body
// after answering, waited for the rest for good.
func TestDribblingBodyClosed(t *testing.T) {
	td := startDaemon(t, nil, "--web.read-timeout=1s")
	c, err := net.Dial("tcp", strings.TrimPrefix(td.base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte("POST /healthz HTTP/1.1\r\nHost: gpudiag\r\nContent-Length: 1000\r\n\r\n0123456789")); err != nil {
		t.Fatal(err)
	}
	if err := readUntilClosed(c, 30*time.Second); err != nil {
		t.Fatalf("a connection with 990 bytes of body never sent: %v", err)
	}
}
