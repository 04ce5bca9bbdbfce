// Package replay drives the engine from a recorded trace (package record) in
// place of the live collectors: each recorded collector is stood in for by
// what the collectors' registry gives for its name (its Metrics and a zero
// sample to decode into), and the trace's samples are fed to the engine in
// their recorded time, or, with Loop, over and over as if live.
package replay

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/gpudiag/gpudiag/engine"
	"github.com/gpudiag/gpudiag/record"
)

// Clock is the daemon's clock while a trace is replayed: the time of the
// newest replayed sample, so freshness and /diagnose spans are judged in the
// trace's time.
type Clock struct{ ns atomic.Int64 }

// Now is the time of the newest replayed sample.
func (c *Clock) Now() time.Time { return time.Unix(0, c.ns.Load()) }

// Set moves the clock to t.
func (c *Clock) Set(t time.Time) { c.ns.Store(t.UnixNano()) }

// Scan lists the collectors a trace holds, each with the interval it
// was sampled at (the median gap between its samples, so a replayed collector
// on a slow clock is not taken for stale between samples), and the trace's
// first sample time. It reads the file once; a torn tail is tolerated,
// corruption is an error.
func Scan(path string) ([]string, map[string]time.Duration, time.Time, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, time.Time{}, err
	}
	defer f.Close()
	r, err := record.NewReader(f)
	if err != nil {
		return nil, nil, time.Time{}, fmt.Errorf("replay %s: %w", path, err)
	}
	last := map[string]time.Time{}
	gaps := map[string][]time.Duration{}
	var first time.Time
	for {
		fr, err := r.Next()
		if err == io.EOF || errors.Is(err, record.ErrTruncated) {
			break
		}
		if err != nil {
			return nil, nil, time.Time{}, fmt.Errorf("replay %s: %w", path, err)
		}
		t := fr.Time()
		if first.IsZero() {
			first = t
		}
		if prev, ok := last[fr.Collector]; ok && t.After(prev) {
			gaps[fr.Collector] = append(gaps[fr.Collector], t.Sub(prev))
		}
		last[fr.Collector] = t
	}
	if len(last) == 0 {
		return nil, nil, time.Time{}, fmt.Errorf("replay %s: no samples", path)
	}
	names := make([]string, 0, len(last))
	intervals := map[string]time.Duration{}
	for n := range last {
		names = append(names, n)
		if g := gaps[n]; len(g) > 0 {
			sort.Slice(g, func(i, j int) bool { return g[i] < g[j] })
			intervals[n] = g[len(g)/2]
		}
	}
	sort.Strings(names)
	return names, intervals, first, nil
}

// Recorded is what replaying one recorded collector needs: its Metrics (which
// must not depend on a live collector's state), a zero sample of its type to
// decode into, whether its sample is everything it has read since it
// started rather than a reading of the moment, and its bound: Bound cuts a
// decoded sample, in place, to what the live collector could have
// returned, says what it cut, and refuses (an error) a sample it cannot
// hold to them.
type Recorded interface {
	engine.Collector
	NewSample() any
	Cumulative() bool
	Bound(sample any) ([]string, error)
}

// Lookup finds a recorded collector by the name its samples carry in the
// trace; the collectors' registry provides it.
type Lookup func(name string) (Recorded, error)

// Collectors builds the stand-ins for the collectors a trace holds, and the
// decoder of each collector's samples, by name. With loop each is wrapped
// in a Loop, returned by name as well, so that its series carry on across
// passes.
func Collectors(names []string, intervals map[string]time.Duration, loop bool, lookup Lookup) ([]engine.Collector, map[string]func() any, map[string]*Loop, error) {
	var cs []engine.Collector
	decoders := map[string]func() any{}
	var loops map[string]*Loop
	if loop {
		loops = map[string]*Loop{}
	}
	for _, n := range names {
		rc, err := lookup(n)
		if err != nil {
			return nil, nil, nil, err
		}
		ic := intervalCollector{rc, intervals[n]}
		decoders[n] = rc.NewSample
		if loop {
			lc := newLoop(ic, rc.Cumulative())
			loops[n] = lc
			cs = append(cs, lc)
			continue
		}
		cs = append(cs, ic)
	}
	return cs, decoders, loops, nil
}

// intervalCollector gives a replayed collector the interval it was recorded
// at (engine.Intervaler); zero leaves the engine's.
type intervalCollector struct {
	engine.Collector
	interval time.Duration
}

func (c intervalCollector) Interval() time.Duration { return c.interval }

// Replayer feeds a recorded trace to the engine in place of the live
// collectors.
type Replayer struct {
	Path  string
	Speed float64       // multiple of real time; 0 = as fast as possible
	Loop  bool          // start over at the end
	Gap   time.Duration // between the end of one pass and the start of the next

	// With Loop: the trace's first sample time, and the wall time it is
	// shifted to (the daemon's start; zero: when Run starts).
	First time.Time
	Start time.Time
	Loops map[string]*Loop // the loop's stand-ins by collector name

	Engine *engine.Engine
	// Window is the engine's window: no replayed sample is larger than a
	// collector's share of it (nil: the engine keeps none).
	Window *engine.Window
	// Lookup finds the recorded collectors (the collectors' registry):
	// each frame is decoded and held to its live bounds by what it gives.
	Lookup Lookup
	Clock  *Clock
	Log    *zap.Logger

	tornLogged bool // the torn tail is said once, not on every pass
	admission
}

// Run feeds the trace's samples at speed until the end of the file or ctx.
// Without loop the samples keep their recorded times: a replayed incident
// reads in its own time, so /diagnose spans and timestamps line up with the
// node's logs of it. With loop the replay is to look live (a demo, a soak):
// the first pass is shifted so that the trace's first sample falls at the
// daemon's start, and at the end the trace starts over, each pass shifted to
// begin gap after the previous one ended, so time keeps moving forward as in
// a live run (at --replay.speed=1 the samples' times follow the wall clock)
// and the window evicts by age; the Loops carry the counters and
// the NCCL facts across the seams. A torn tail (a crash mid-write) ends the
// trace with a warning; a corrupt frame stops the replay with an error
// naming its offset, and what came before stays served. A whole frame whose
// sample does not decode, or holds what no live collector returns, is
// refused with a warning naming it and the replay goes on with the next
// (admit): a bad frame loses only itself.
func (r *Replayer) Run(ctx context.Context) error {
	start := time.Now()
	if r.Loop && !r.Start.IsZero() {
		start = r.Start
	}
	p := &replayPacer{speed: r.Speed, wallStart: start}
	var shift time.Duration
	if r.Loop && !r.First.IsZero() {
		shift = start.Sub(r.First)
	}
	frames := 0
	for pass := 1; ; pass++ {
		if pass > 1 {
			for _, lc := range r.Loops {
				lc.startPass()
			}
		}
		span, n, err := r.pass(ctx, shift, p)
		frames += n
		if err != nil {
			return fmt.Errorf("replay %s stopped after %d samples: %w", r.Path, frames, err)
		}
		if ctx.Err() != nil {
			return nil
		}
		if pass == 1 {
			r.sayRefused()
		}
		if !r.Loop {
			r.Log.Info("replay finished", zap.String("file", r.Path), zap.Int("samples", frames),
				zap.Int("refused", r.refused), zap.Int("cut", r.cut))
			return nil
		}
		if n == 0 {
			return fmt.Errorf("replay %s: no samples to loop over", r.Path)
		}
		r.Log.Debug("replay pass finished", zap.Int("pass", pass), zap.Int("samples", frames))
		shift += span + r.Gap
	}
}

// replayPacer holds the replay to speed× real time from its first sample.
type replayPacer struct {
	speed      float64
	wallStart  time.Time
	traceStart time.Time
}

// wait returns once the sample at trace time t is due, false if ctx ended
// first.
func (p *replayPacer) wait(ctx context.Context, t time.Time) bool {
	if p.traceStart.IsZero() {
		p.traceStart = t
	}
	if p.speed <= 0 {
		return ctx.Err() == nil
	}
	due := p.wallStart.Add(time.Duration(float64(t.Sub(p.traceStart)) / p.speed))
	if wait := time.Until(due); wait > 0 {
		select {
		case <-ctx.Done():
			return false
		case <-time.After(wait):
		}
	}
	return ctx.Err() == nil
}

// pass feeds the file once, every sample's time moved by shift. It returns
// the span from the earliest to the latest recorded time (a next pass
// shifted by more than that cannot overlap this one) and the number of
// samples fed.
func (r *Replayer) pass(ctx context.Context, shift time.Duration, p *replayPacer) (time.Duration, int, error) {
	f, err := os.Open(r.Path)
	if err != nil {
		return 0, 0, err
	}
	defer f.Close()
	rd, err := record.NewReader(f)
	if err != nil {
		return 0, 0, err
	}
	var earliest, latest time.Time
	frames := 0
	for n := 1; ; n++ {
		offset := rd.Offset()
		fr, err := rd.Next()
		if errors.Is(err, record.ErrTruncated) {
			// What a crash mid-write leaves: the whole frames before
			// the tear are the trace (docs/record.md).
			if !r.tornLogged {
				r.Log.Warn("the trace ends in a torn frame, as a crash mid-write leaves it; the samples before it are replayed",
					zap.String("file", r.Path), zap.Int("samples", frames), zap.Error(err))
				r.tornLogged = true
			}
			err = io.EOF
		}
		if err == io.EOF {
			return latest.Sub(earliest), frames, nil
		}
		if err != nil {
			return 0, frames, err
		}
		recorded := fr.Time()
		if earliest.IsZero() || recorded.Before(earliest) {
			earliest = recorded
		}
		if recorded.After(latest) {
			latest = recorded
		}
		t := recorded.Add(shift)
		if !p.wait(ctx, t) {
			return 0, frames, nil
		}
		s, ok := r.admit(frameName(n, offset, fr.Collector), fr)
		if !ok {
			continue
		}
		if lc := r.Loops[fr.Collector]; lc != nil {
			s = lc.next(s)
		}
		r.Clock.Set(t)
		if err := r.Engine.Ingest(fr.Collector, t, s); err != nil {
			r.Log.Warn("replayed sample rejected", zap.String("collector", fr.Collector), zap.Error(err))
		}
		frames++
	}
}

// LoopGap is the pause between two passes of a looped trace: its fastest
// collector's interval, so the seam looks like one more sampling cycle
// (fallback when no collector has two samples).
func LoopGap(intervals map[string]time.Duration, fallback time.Duration) time.Duration {
	gap := time.Duration(0)
	for _, iv := range intervals {
		if iv > 0 && (gap == 0 || iv < gap) {
			gap = iv
		}
	}
	if gap == 0 {
		return fallback
	}
	return gap
}
