// Package diagnose runs the analyzers after each GPU sample and serves the
// result: as metrics (one-hot verdicts, confidence, findings) and on
// /diagnose as JSON, plain text and HTML.
package diagnose

import (
	"sync"
	"time"

	"github.com/gpudiag/gpudiag/analyzers"
	"github.com/gpudiag/gpudiag/engine"
)

// TriggerCollector is the collector whose samples trigger an analysis: the
// GPU clock drives the verdicts.
const TriggerCollector = "gpu"

// Runner holds the latest diagnosis.
type Runner struct {
	window     *engine.Window
	thresholds analyzers.Thresholds

	mu   sync.RWMutex
	last *analyzers.Diagnosis
}

// NewRunner returns a runner over the window.
func NewRunner(w *engine.Window, t analyzers.Thresholds) *Runner {
	return &Runner{window: w, thresholds: t}
}

// OnSample is the engine hook: after each GPU sample, analyze the span that
// ends now, carrying the previous diagnosis for hysteresis.
func (r *Runner) OnSample(collector string, t time.Time, _ any) {
	if collector != TriggerCollector {
		return
	}
	r.Analyze(t)
}

// Analyze runs the analyzers for the span ending at now and keeps the result.
func (r *Runner) Analyze(now time.Time) analyzers.Diagnosis {
	in := analyzers.FromWindow(r.window, now, r.span())
	r.mu.Lock()
	defer r.mu.Unlock()
	d := analyzers.Analyze(in, r.last, r.thresholds)
	r.last = &d
	return d
}

// Latest returns the newest diagnosis, or nil before the first.
func (r *Runner) Latest() *analyzers.Diagnosis {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.last
}

// Over analyzes an arbitrary span of the window without touching the kept
// state (no hysteresis): what /diagnose?window= shows.
func (r *Runner) Over(now time.Time, span time.Duration) analyzers.Diagnosis {
	return analyzers.Analyze(analyzers.FromWindow(r.window, now, span), nil, r.thresholds)
}

func (r *Runner) span() time.Duration {
	return time.Duration(r.thresholds.SpanSeconds * float64(time.Second))
}
