package server

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/gpudiag/gpudiag/internal/promtest"
)

// A burst of scrape errors (a dropped scrape: one per family left) logs one
// line; the next line, an interval later, counts what was held back.
func TestScrapeErrorLogBounded(t *testing.T) {
	var out bytes.Buffer
	l := newScrapeErrorLog(slog.New(slog.NewTextHandler(&out, nil)), time.Minute)
	now := time.Unix(1_800_000_000, 0)
	l.now = func() time.Time { return now }
	for range 400 {
		l.Println("error encoding and sending metric family: write: broken pipe")
	}
	now = now.Add(time.Minute)
	l.Println("error encoding and sending metric family: write: broken pipe")
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 2 || !strings.Contains(lines[0], "similar_errors_not_logged=0") || !strings.Contains(lines[1], "similar_errors_not_logged=399") {
		t.Fatalf("logged:\n%s", out.String())
	}
}

// net/http's own lines go through the structured logger, bounded per kind:
// a flood of failed TLS handshakes logs one warning a minute with a count,
// and cannot hide the server's other errors, bounded apart.
func TestHTTPErrorLogBoundedPerKind(t *testing.T) {
	var out bytes.Buffer
	l := newHTTPErrorLog(slog.New(slog.NewJSONHandler(&out, nil)), time.Minute)
	now := time.Unix(1_800_000_000, 0)
	l.handshake.now = func() time.Time { return now }
	l.other.now = func() time.Time { return now }
	for i := range 500 {
		fmt.Fprintf(l, "http: TLS handshake error from 192.0.2.%d:4711: EOF\n", i%250)
	}
	fmt.Fprintf(l, "http: Accept error: accept tcp [::]:10910: accept4: too many open files; retrying in 1s\n")
	now = now.Add(time.Minute)
	fmt.Fprintf(l, "http: TLS handshake error from 192.0.2.1:4711: tls: first record does not look like a TLS handshake\n")

	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 3 {
		t.Fatalf("%d lines; want 3:\n%s", len(lines), out.String())
	}
	var got []map[string]any
	for _, line := range lines {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("not structured: %q", line)
		}
		got = append(got, m)
	}
	if got[0]["level"] != "WARN" || got[0]["msg"] != "HTTP client failed the TLS handshake" || got[0]["similar_errors_not_logged"] != 0.0 ||
		!strings.HasPrefix(got[0]["error"].(string), "http: TLS handshake error from 192.0.2.0:4711") {
		t.Errorf("first handshake line %v", got[0])
	}
	if got[1]["level"] != "ERROR" || !strings.Contains(got[1]["error"].(string), "too many open files") || strings.HasSuffix(got[1]["error"].(string), "\n") {
		t.Errorf("the accept error was held back or mangled: %v", got[1])
	}
	if got[2]["similar_errors_not_logged"] != 499.0 {
		t.Errorf("the next handshake line counts %v held back; want 499", got[2]["similar_errors_not_logged"])
	}
}

// A real TLS server built by NewHTTPServer logs a client's failed handshake
// to the structured logger it was given, not to stderr.
func TestTLSHandshakeErrorReachesLogger(t *testing.T) {
	var out syncBuffer
	srv := httptest.NewUnstartedServer(Health())
	srv.Config = NewHTTPServer(Health(), HTTPOptions{Logger: slog.New(slog.NewTextHandler(&out, nil))})
	srv.StartTLS()
	defer srv.Close()
	// Plain HTTP to the TLS port: the handshake fails.
	resp, err := http.Get(strings.Replace(srv.URL, "https://", "http://", 1) + "/healthz")
	if err == nil {
		resp.Body.Close()
	}
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(out.String(), `msg="HTTP client failed the TLS handshake"`) {
		if time.Now().After(deadline) {
			t.Fatalf("the failed handshake was not logged through the logger; logged:\n%s", out.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// syncBuffer is what the daemon under test logs to.
type syncBuffer = promtest.SyncBuffer
