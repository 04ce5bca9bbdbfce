package server

import (
	"context"
	"fmt"
	stdlog "log"
	"log/slog"
	"strings"
	"sync"
	"time"
)

// boundedLog logs at most one line per interval and counts the lines it
// held back, so that a flood of one kind of error cannot flood the log.
type boundedLog struct {
	log   *slog.Logger
	level slog.Level
	msg   string
	every time.Duration
	now   func() time.Time

	mu         sync.Mutex
	lastLogged time.Time
	suppressed int
}

func (l *boundedLog) emit(text string) {
	l.mu.Lock()
	now := l.now()
	if !l.lastLogged.IsZero() && now.Sub(l.lastLogged) < l.every {
		l.suppressed++
		l.mu.Unlock()
		return
	}
	suppressed := l.suppressed
	l.lastLogged, l.suppressed = now, 0
	l.mu.Unlock()
	l.log.Log(context.Background(), l.level, l.msg, "error", text, "similar_errors_not_logged", suppressed)
}

// scrapeErrorLog is promhttp's error log, bounded: a client that drops a
// scrape (a Prometheus timeout) makes promhttp report a broken pipe for
// every family still to send, hundreds of lines per abandoned scrape. One
// line per interval says it happened and how often.
type scrapeErrorLog struct{ *boundedLog }

func newScrapeErrorLog(log *slog.Logger, every time.Duration) scrapeErrorLog {
	return scrapeErrorLog{&boundedLog{log: log, level: slog.LevelError, msg: "serving metrics", every: every, now: time.Now}}
}

// Println implements promhttp.Logger.
func (l scrapeErrorLog) Println(v ...interface{}) { l.emit(fmt.Sprint(v...)) }

// httpErrorLog takes what net/http's server logs (TLS handshake failures,
// accept errors, handler panics) into the daemon's structured logger. Left
// unset, http.Server writes those lines to stderr through the standard log
// package, unstructured, bypassing --log.format and --log.level, and a
// client or scanner failing handshakes writes one per connection.
//
// TLS handshake failures are the clients' doing and come in floods (a
// port scan, a probe without TLS); they are bounded on their own so that
// they cannot hide the server's own errors, which are bounded apart.
type httpErrorLog struct {
	handshake, other *boundedLog
}

// NewHTTPErrorLog returns an http.Server ErrorLog writing to log, each kind
// of line at most once per interval with a count of those held back.
func NewHTTPErrorLog(log *slog.Logger, every time.Duration) *stdlog.Logger {
	return stdlog.New(newHTTPErrorLog(log, every), "", 0)
}

func newHTTPErrorLog(log *slog.Logger, every time.Duration) *httpErrorLog {
	return &httpErrorLog{
		handshake: &boundedLog{log: log, level: slog.LevelWarn, msg: "HTTP client failed the TLS handshake", every: every, now: time.Now},
		other:     &boundedLog{log: log, level: slog.LevelError, msg: "HTTP server", every: every, now: time.Now},
	}
}

// Write takes one line of the standard logger (it writes each line whole).
func (l *httpErrorLog) Write(p []byte) (int, error) {
	line := strings.TrimSuffix(string(p), "\n")
	if strings.HasPrefix(line, "http: TLS handshake error") {
		l.handshake.emit(line)
	} else {
		l.other.emit(line)
	}
	return len(p), nil
}
