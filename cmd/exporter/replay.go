package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	gdcollectors "github.com/gpudiag/gpudiag/collectors"
	"github.com/gpudiag/gpudiag/engine"
	"github.com/gpudiag/gpudiag/record"
)

// replayClock is the daemon's clock while a trace is replayed: the time of
// the newest replayed sample, so freshness and /diagnose spans are judged in
// the trace's time.
type replayClock struct{ ns atomic.Int64 }

func (c *replayClock) Now() time.Time  { return time.Unix(0, c.ns.Load()) }
func (c *replayClock) set(t time.Time) { c.ns.Store(t.UnixNano()) }

// scanRecord lists the collectors a trace holds, each with the interval it
// was sampled at (the median gap between its samples, so a replayed collector
// on a slow clock is not taken for stale between samples), and the trace's
// first sample time. It reads the file once; a torn tail is tolerated,
// corruption is an error.
func scanRecord(path string) ([]string, map[string]time.Duration, time.Time, error) {
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

// replayCollectors builds the stand-ins for the collectors a trace holds.
// With loop each is wrapped in a loopCollector, returned by name as well, so
// that its series carry on across passes.
func replayCollectors(names []string, intervals map[string]time.Duration, loop bool) ([]engine.Collector, map[string]func() any, map[string]*loopCollector, error) {
	var cs []engine.Collector
	decoders := map[string]func() any{}
	var loops map[string]*loopCollector
	if loop {
		loops = map[string]*loopCollector{}
	}
	for _, n := range names {
		rc, err := gdcollectors.ReplayCollector(n)
		if err != nil {
			return nil, nil, nil, err
		}
		ic := intervalCollector{rc, intervals[n]}
		decoders[n] = rc.NewSample
		if loop {
			lc := newLoopCollector(ic, rc.Cumulative())
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

// replayer feeds a recorded trace to the engine in place of the live
// collectors.
type replayer struct {
	path  string
	speed float64       // multiple of real time; 0 = as fast as possible
	loop  bool          // start over at the end
	gap   time.Duration // between the end of one pass and the start of the next

	// With loop: the trace's first sample time, and the wall time it is
	// shifted to (the daemon's start; zero: when run starts).
	first time.Time
	start time.Time
	loops map[string]*loopCollector // the loop's stand-ins by collector name

	eng      *engine.Engine
	decoders map[string]func() any
	clock    *replayClock
	log      *zap.Logger

	tornLogged bool // the torn tail is said once, not on every pass
}

// run feeds the trace's samples at speed until the end of the file or ctx.
// Without loop the samples keep their recorded times: a replayed incident
// reads in its own time, so /diagnose spans and timestamps line up with the
// node's logs of it. With loop the replay is to look live (a demo, a soak):
// the first pass is shifted so that the trace's first sample falls at the
// daemon's start, and at the end the trace starts over, each pass shifted to
// begin gap after the previous one ended, so time keeps moving forward as in
// a live run (at --replay.speed=1 the samples' times follow the wall clock)
// and the window evicts by age; the loopCollectors carry the counters and
// the NCCL facts across the seams. A torn tail (a crash mid-write) ends the
// trace with a warning; a corrupt frame stops the replay with an error
// naming its offset, and what came before stays served.
func (r *replayer) run(ctx context.Context) error {
	start := time.Now()
	if r.loop && !r.start.IsZero() {
		start = r.start
	}
	p := &replayPacer{speed: r.speed, wallStart: start}
	var shift time.Duration
	if r.loop && !r.first.IsZero() {
		shift = start.Sub(r.first)
	}
	frames := 0
	for pass := 1; ; pass++ {
		if pass > 1 {
			for _, lc := range r.loops {
				lc.startPass()
			}
		}
		span, n, err := r.pass(ctx, shift, p)
		frames += n
		if err != nil {
			return fmt.Errorf("replay %s stopped after %d samples: %w", r.path, frames, err)
		}
		if ctx.Err() != nil {
			return nil
		}
		if !r.loop {
			r.log.Info("replay finished", zap.String("file", r.path), zap.Int("samples", frames))
			return nil
		}
		if n == 0 {
			return fmt.Errorf("replay %s: no samples to loop over", r.path)
		}
		r.log.Debug("replay pass finished", zap.Int("pass", pass), zap.Int("samples", frames))
		shift += span + r.gap
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
func (r *replayer) pass(ctx context.Context, shift time.Duration, p *replayPacer) (time.Duration, int, error) {
	f, err := os.Open(r.path)
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
	for {
		fr, err := rd.Next()
		if errors.Is(err, record.ErrTruncated) {
			// What a crash mid-write leaves: the whole frames before
			// the tear are the trace (docs/record.md).
			if !r.tornLogged {
				r.log.Warn("the trace ends in a torn frame, as a crash mid-write leaves it; the samples before it are replayed",
					zap.String("file", r.path), zap.Int("samples", frames), zap.Error(err))
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
		var s any = r.decoders[fr.Collector]()
		if err := json.Unmarshal(fr.Sample, s); err != nil {
			return 0, frames, fmt.Errorf("%s sample at offset %d: %w", fr.Collector, rd.Offset(), err)
		}
		if lc := r.loops[fr.Collector]; lc != nil {
			s = lc.next(s)
		}
		r.clock.set(t)
		if err := r.eng.Ingest(fr.Collector, t, s); err != nil {
			r.log.Warn("replayed sample rejected", zap.String("collector", fr.Collector), zap.Error(err))
		}
		frames++
	}
}

// loopGap is the pause between two passes of a looped trace: its fastest
// collector's interval, so the seam looks like one more sampling cycle
// (fallback when no collector has two samples).
func loopGap(intervals map[string]time.Duration, fallback time.Duration) time.Duration {
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

// recorder appends every successful sample to a record file. A write that
// fails (a full disk) is counted and the sample dropped; the daemon keeps
// serving and every later sample tries again, so recording resumes by itself
// when space comes back. The failure is logged when it starts, once per
// recordLogEvery while it lasts, and when it ends.
type recorder struct {
	mu  sync.Mutex
	w   *record.Writer
	log *zap.Logger
	// write is w.Write; tests put a full disk in front of it.
	write func(collector string, t time.Time, s any) error
	now   func() time.Time

	errors   uint64
	failing  bool
	lost     uint64    // samples dropped in the current failure
	loggedAt time.Time // when the current failure was last logged
}

// recordLogEvery bounds the log lines of a lasting record failure.
const recordLogEvery = time.Minute

func newRecorder(w *record.Writer, log *zap.Logger) *recorder {
	return &recorder{w: w, log: log, write: w.Write, now: time.Now}
}

func (r *recorder) OnSample(collector string, t time.Time, s any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	err := r.write(collector, t, s)
	if err == nil {
		if r.failing {
			r.log.Info("recording resumed", zap.Uint64("samples_lost", r.lost))
			r.failing = false
		}
		return
	}
	r.errors++
	now := r.now()
	switch {
	case !r.failing:
		r.failing, r.lost, r.loggedAt = true, 1, now
		r.log.Warn("recording failed; the daemon keeps serving and retries with every sample", zap.Error(err))
	case now.Sub(r.loggedAt) >= recordLogEvery:
		r.lost++
		r.loggedAt = now
		r.log.Warn("recording still failing", zap.Error(err), zap.Uint64("samples_lost", r.lost))
	default:
		r.lost++
	}
}

func (r *recorder) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.w.Close()
}

var (
	recordBytesDesc  = prometheus.NewDesc("gpudiag_record_written_bytes_total", "Bytes appended to the --record file.", nil, nil)
	recordFramesDesc = prometheus.NewDesc("gpudiag_record_samples_total", "Samples appended to the --record file.", nil, nil)
	recordErrorsDesc = prometheus.NewDesc("gpudiag_record_errors_total", "Samples that could not be appended to the --record file (e.g. disk full).", nil, nil)
	recordOKDesc     = prometheus.NewDesc("gpudiag_record_success", "Whether the last sample was appended to the --record file (1) or could not be (0).", nil, nil)
)

func (r *recorder) Describe(ch chan<- *prometheus.Desc) {
	ch <- recordBytesDesc
	ch <- recordFramesDesc
	ch <- recordErrorsDesc
	ch <- recordOKDesc
}

func (r *recorder) Collect(ch chan<- prometheus.Metric) {
	r.mu.Lock()
	defer r.mu.Unlock()
	ch <- prometheus.MustNewConstMetric(recordBytesDesc, prometheus.CounterValue, float64(r.w.Bytes))
	ch <- prometheus.MustNewConstMetric(recordFramesDesc, prometheus.CounterValue, float64(r.w.Frames))
	ch <- prometheus.MustNewConstMetric(recordErrorsDesc, prometheus.CounterValue, float64(r.errors))
	ch <- prometheus.MustNewConstMetric(recordOKDesc, prometheus.GaugeValue, boolFloat(!r.failing))
}

func boolFloat(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
