package server

import (
	"fmt"
	"log/slog"
	"sync"
	"time"
)

// scrapeErrorLog is promhttp's error log, bounded: a client that drops a
// scrape (a Prometheus timeout) makes promhttp report a broken pipe for
// every family still to send, hundreds of lines per abandoned scrape. One
// line per interval says it happened and how often.
type scrapeErrorLog struct {
	log   *slog.Logger
	every time.Duration
	now   func() time.Time

	mu         sync.Mutex
	lastLogged time.Time
	suppressed int
}

func newScrapeErrorLog(log *slog.Logger, every time.Duration) *scrapeErrorLog {
	return &scrapeErrorLog{log: log, every: every, now: time.Now}
}

// Println implements promhttp.Logger.
func (l *scrapeErrorLog) Println(v ...interface{}) {
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
	l.log.Error("serving metrics", "error", fmt.Sprint(v...), "similar_errors_not_logged", suppressed)
}
