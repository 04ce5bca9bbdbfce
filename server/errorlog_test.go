package server

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"
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
