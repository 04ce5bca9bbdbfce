// Package diagnose runs the analyzers after each GPU sample and serves the
// result: as metrics (one-hot verdicts, confidence, findings) and on
// /diagnose as JSON, plain text and HTML.
package diagnose

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/gpudiag/gpudiag/analyzers"
	"github.com/gpudiag/gpudiag/engine"
	"github.com/gpudiag/gpudiag/sample"
)

// TriggerCollector is the collector whose samples trigger an analysis: the
// GPU clock drives the verdicts.
var TriggerCollector = sample.GPUKey.Name()

// Runner holds the latest diagnosis.
type Runner struct {
	window     *engine.Window
	thresholds analyzers.Thresholds

	mu   sync.RWMutex
	last *analyzers.Diagnosis
	// hist is the verdicts of the analyses over the window (History).
	hist history

	// statuses reports the collectors' state; nil until ReportCollectors.
	statuses func() []engine.Status
	// triggerSeen is the time of the GPU collector's latest sample (nil
	// before the first), kept whole so that its monotonic reading is
	// compared, as the collector's state is: while it is within a span,
	// the other collectors' samples need not ask every collector's state.
	triggerSeen atomic.Pointer[time.Time]
	// acct accounts each GPU's time by verdict (accounting.go).
	acct *Accounting
}

// NewRunner returns a runner over the window.
func NewRunner(w *engine.Window, t analyzers.Thresholds) *Runner {
	r := &Runner{window: w, thresholds: t, hist: history{maxAge: w.MaxAge()}}
	r.acct = NewAccounting(r.span())
	return r
}

// ReportCollectors gives the runner the collectors' state (the engine's
// Statuses). /diagnose then lists it, and while the GPU collector has failed
// for a whole span the other collectors' samples trigger the analyses, at
// the GPU collector's interval: the verdicts, and their metrics, turn
// unknown instead of repeating what the GPUs were when last read. Call it
// before the engine runs.
func (r *Runner) ReportCollectors(statuses func() []engine.Status) { r.statuses = statuses }

// OnSample is the engine hook: after each GPU sample, analyze the span that
// ends now, carrying the previous diagnosis for hysteresis.
func (r *Runner) OnSample(collector string, t time.Time, _ any) {
	if collector == TriggerCollector {
		r.triggerSeen.Store(&t)
		r.Analyze(t)
		return
	}
	// The engine calls OnSample for successful samples only: a GPU sample
	// within a span of t is a success the GPU collector's state would
	// show, so it has not failed for a whole span.
	if seen := r.triggerSeen.Load(); seen != nil && t.Sub(*seen) <= r.span() {
		return
	}
	if r.triggerStale(t) {
		r.Analyze(t)
	}
}

// triggerStale reports whether the GPU collector has failed for a whole span
// and the latest analysis is at least one of its intervals old.
func (r *Runner) triggerStale(now time.Time) bool {
	statuses := r.collectorStatuses()
	if !triggerFailedForSpan(statuses, now, r.span()) {
		return false
	}
	last := r.Latest()
	for _, st := range statuses {
		if st.Name == TriggerCollector {
			return last == nil || now.Sub(last.Time) >= st.Interval
		}
	}
	return false
}

// triggerFailedForSpan reports whether the GPU collector, whose samples
// trigger the analyses, is failing and has not succeeded within span: the
// latest verdicts then describe GPUs as they were, not as they are.
func triggerFailedForSpan(statuses []engine.Status, now time.Time, span time.Duration) bool {
	for _, st := range statuses {
		if st.Name == TriggerCollector {
			return !st.Success && st.LastAttempt.After(st.LastSuccess) && now.Sub(st.LastSuccess) > span
		}
	}
	return false
}

func (r *Runner) collectorStatuses() []engine.Status {
	if r.statuses == nil {
		return nil
	}
	return r.statuses()
}

// Analyze runs the analyzers for the span ending at now and keeps the result.
func (r *Runner) Analyze(now time.Time) analyzers.Diagnosis {
	in := FromWindow(r.window, now, r.span())
	r.mu.Lock()
	defer r.mu.Unlock()
	d := analyzers.Analyze(in, r.last, r.thresholds)
	r.last = &d
	r.hist.add(&d)
	r.acct.Add(now, &d)
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
	return analyzers.Analyze(FromWindow(r.window, now, span), nil, r.thresholds)
}

func (r *Runner) span() time.Duration {
	return time.Duration(r.thresholds.SpanSeconds * float64(time.Second))
}
