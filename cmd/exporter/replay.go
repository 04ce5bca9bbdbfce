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
func replayCollectors(names []string, intervals map[string]time.Duration) ([]engine.Collector, map[string]func() any, error) {
	var cs []engine.Collector
	decoders := map[string]func() any{}
	for _, n := range names {
		rc, err := gdcollectors.ReplayCollector(n)
		if err != nil {
			return nil, nil, err
		}
		cs = append(cs, intervalCollector{rc, intervals[n]})
		decoders[n] = rc.NewSample
	}
	return cs, decoders, nil
}

// intervalCollector gives a replayed collector the interval it was recorded
// at (engine.Intervaler); zero leaves the engine's.
type intervalCollector struct {
	engine.Collector
	interval time.Duration
}

func (c intervalCollector) Interval() time.Duration { return c.interval }

// replay feeds the trace's samples to the engine at speed× real time (0: as
// fast as possible) until the end of the file or ctx. A torn or corrupt frame
// stops the replay with an error naming its offset; what came before stays
// served.
func replay(ctx context.Context, path string, speed float64, eng *engine.Engine, decoders map[string]func() any,
	clock *replayClock, log *zap.Logger) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	r, err := record.NewReader(f)
	if err != nil {
		return fmt.Errorf("replay %s: %w", path, err)
	}
	var traceStart time.Time
	wallStart := time.Now()
	frames := 0
	for {
		fr, err := r.Next()
		if err == io.EOF {
			log.Info("replay finished", zap.String("file", path), zap.Int("samples", frames))
			return nil
		}
		if err != nil {
			return fmt.Errorf("replay %s stopped after %d samples: %w", path, frames, err)
		}
		t := fr.Time()
		if traceStart.IsZero() {
			traceStart = t
		}
		if speed > 0 {
			due := wallStart.Add(time.Duration(float64(t.Sub(traceStart)) / speed))
			if wait := time.Until(due); wait > 0 {
				select {
				case <-ctx.Done():
					return nil
				case <-time.After(wait):
				}
			}
		} else if ctx.Err() != nil {
			return nil
		}
		s := decoders[fr.Collector]()
		if err := json.Unmarshal(fr.Sample, s); err != nil {
			return fmt.Errorf("replay %s: %s sample at offset %d: %w", path, fr.Collector, r.Offset(), err)
		}
		clock.set(t)
		if err := eng.Ingest(fr.Collector, t, s); err != nil {
			log.Warn("replayed sample rejected", zap.String("collector", fr.Collector), zap.Error(err))
		}
		frames++
	}
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
