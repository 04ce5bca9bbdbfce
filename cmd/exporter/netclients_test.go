package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"

	dto "github.com/prometheus/client_model/go"
)

// Clients that misbehave on purpose (issue 15): what each can hold of the
// daemon, and that real scrapes go on. Every deadline here only guards
// against a hang; no test asserts how fast anything is.

// protobufMetrics asks /metrics for the protobuf exposition: the padded
// responses of padMetrics cost a copy to write and read in it, where
// the text form escapes and parses them byte by byte.
var protobufMetrics = string(expfmt.NewFormat(expfmt.TypeProtoDelim))

// scrapeInFlight gets /metrics once, as protobuf: the status, and when
// 200 the value of promhttp's in-flight gauge (the scrape itself counted).
func scrapeInFlight(t *testing.T, client *http.Client, base string) (int, float64) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, base+"/metrics", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Accept", protobufMetrics)
	resp, err := client.Do(req)
	if err != nil {
		return 0, 0
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		_, _ = io.Copy(io.Discard, resp.Body)
		return resp.StatusCode, 0
	}
	dec := expfmt.NewDecoder(resp.Body, expfmt.NewFormat(expfmt.TypeProtoDelim))
	for {
		var mf dto.MetricFamily
		if err := dec.Decode(&mf); err != nil {
			t.Fatalf("/metrics does not decode or lacks promhttp_metric_handler_requests_in_flight: %v", err)
		}
		if mf.GetName() == "promhttp_metric_handler_requests_in_flight" && len(mf.GetMetric()) == 1 {
			return resp.StatusCode, mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
}

// newScrapeClient is a client for scrapeInFlight: uncompressed, since
// the padded response would cost its compression.
func newScrapeClient() *http.Client {
	return &http.Client{Timeout: time.Minute, Transport: &http.Transport{DisableCompression: true}}
}

// stalledReader connects with a receive buffer as small as the kernel
// allows, asks for /metrics and reads only its first byte: the daemon has
// rendered the response then (limitRendering renders it whole before it
// writes a byte) and is writing it. With a response larger than the
// kernel buffers toward a client (padMetrics), the write cannot end
// until the client reads or goes, or the write timeout passes: the
// handler stays in flight, and stays so whatever the machine's speed.
// The error is the first byte's: EOF or a reset when the write timeout
// passed before the daemon wrote anything.
func stalledReader(t *testing.T, addr string) (net.Conn, error) {
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
	if _, err := c.Write([]byte("GET /metrics HTTP/1.1\r\nHost: gpudiag\r\nAccept: " + protobufMetrics + "\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(2 * time.Minute)) // a hang guard
	_, err = io.ReadFull(c, make([]byte, 1))
	_ = c.SetReadDeadline(time.Time{})
	return c, err
}

// withInFlightGauge turns the exporter's own metrics on for promhttp's
// in-flight gauge.
func withInFlightGauge(d *daemon) { d.o.disableExpMets = false }

// padMetrics makes every /metrics response larger than the kernel can
// buffer toward a client that does not read: twice the largest TCP send
// buffer it grows (net.ipv4.tcp_wmem), the client's receive buffer being
// a few KB. One gauge's help text carries the padding; it is added once
// the daemon serves, so that startDaemon's own text scrapes stay small.
func padMetrics(td *testDaemon) {
	size := 8 << 20 // twice Linux's default tcp_wmem maximum, 4 MiB
	if b, err := os.ReadFile("/proc/sys/net/ipv4/tcp_wmem"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 3 {
			if max, err := strconv.Atoi(f[2]); err == nil && 2*max > size {
				size = 2 * max
			}
		}
	}
	td.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "test_padding", Help: strings.Repeat("x", size)},
		func() float64 { return 1 }))
}

// Clients that stop reading take no scrape slot: a real scrape succeeds
// while more of them than --web.max-requests are stuck in a write, and
// counts them in flight. Before, promhttp held a --web.max-requests slot
// until the last byte was written: 45 such clients held 39 of 40 slots
// and real scrapes got 503 for as long as the clients stayed.
//
// The count judges the state the clients are in, never how fast they got
// there. Each client is stuck in a handler before the next comes
// (stalledReader returns once its response is rendered, and the response
// outgrows the kernel's buffers), so at most one of them renders beside
// the test's scrape and none is answered 503. No write timeout: the stuck
// handlers stay until their clients go. Before, each client pipelined
// 1,000 scrapes; on a loaded machine one of them could be answered 503
// while another client still rendered, and the client then stalled on
// that small answer outside any handler, where the in-flight gauge does
// not count it ("no scrape counted them in flight"); and a 40 s write
// timeout released the first client if the last came later than that.
func TestStalledReadersDoNotTakeScrapeSlots(t *testing.T) {
	const maxRequests, attackers = 2, 4 // twice the slots
	td := startDaemon(t, withInFlightGauge, "--web.max-requests="+strconv.Itoa(maxRequests), "--web.write-timeout=0")
	padMetrics(td)
	addr := strings.TrimPrefix(td.base, "http://")
	client := newScrapeClient()
	defer client.CloseIdleConnections()

	inFlightWhenScraped := func(what string, want func(float64) bool) {
		t.Helper()
		refused := 0
		for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(20 * time.Millisecond) {
			code, inFlight := scrapeInFlight(t, client, td.base)
			if code == http.StatusServiceUnavailable {
				refused++
			}
			if code == http.StatusOK && want(inFlight) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s (--web.max-requests=%d): no scrape succeeded with that many in flight; %d got 503; logs:\n%s",
					what, maxRequests, refused, td.logs.String())
			}
		}
	}
	var stalled []net.Conn
	for k := 1; k <= attackers; k++ {
		c, err := stalledReader(t, addr)
		if err != nil {
			t.Fatalf("stalled client %d: no byte of its response: %v", k, err)
		}
		stalled = append(stalled, c)
		inFlightWhenScraped(fmt.Sprintf("with %d stalled clients", k), func(n float64) bool { return n == float64(k+1) })
	}
	// Gone, the clients release their handlers.
	for _, c := range stalled {
		c.Close()
	}
	inFlightWhenScraped("after the stalled clients closed", func(n float64) bool { return n == 1 })
}

// The write timeout ends the handler of a client that stopped reading and
// closes its connection.
func TestWriteTimeoutClosesStalledReaders(t *testing.T) {
	td := startDaemon(t, withInFlightGauge, "--web.write-timeout=2s")
	padMetrics(td)
	addr := strings.TrimPrefix(td.base, "http://")
	client := newScrapeClient()
	defer client.CloseIdleConnections()
	c, err := stalledReader(t, addr)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatal("the stalled client got neither a byte nor a close")
	}
	// With or without a byte written first, the handler ends only when
	// its write fails: the client never reads.
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(100 * time.Millisecond) {
		if code, inFlight := scrapeInFlight(t, client, td.base); code == http.StatusOK && inFlight == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the stalled client's handler was never released; logs:\n%s", td.logs.String())
		}
	}
	if err := readUntilClosed(c, 30*time.Second); err != nil {
		t.Errorf("stalled client: %v", err)
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
