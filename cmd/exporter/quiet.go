package main

import (
	"time"

	"github.com/gpudiag/gpudiag/engine"
	"github.com/gpudiag/gpudiag/sample"
)

// quietClock puts the engine on its quiet clock while the GPU samples say no
// GPU of the node has work, and analyses a quiet node at the quiet interval
// instead of at every GPU sample: its verdicts stay idle until a GPU sample
// shows work, and that sample is analysed at once.
type quietClock struct {
	eng *engine.Engine // set before the engine runs
	// interval is how often a quiet node is analysed: the quiet interval,
	// or the diagnosis span where that is shorter.
	interval time.Duration
	analyse  func(collector string, t time.Time, s any)

	// Touched by the GPU collector's samples alone, on its goroutine.
	quiet        bool
	lastAnalysis time.Time
}

// OnSample is the engine's hook.
func (q *quietClock) OnSample(collector string, t time.Time, s any) {
	g, ok := s.(*sample.GPUs)
	if !ok || collector != sample.GPUKey.Name() {
		q.analyse(collector, t, s)
		return
	}
	was := q.quiet
	q.quiet = g.NoWork()
	// The clock is set before the analysis, which may panic.
	q.eng.SetQuiet(q.quiet)
	if was && q.quiet && t.Sub(q.lastAnalysis) < q.interval {
		return
	}
	q.lastAnalysis = t
	q.analyse(collector, t, s)
}
