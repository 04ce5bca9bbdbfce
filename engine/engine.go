package engine

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"sort"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"go.uber.org/zap"

	"github.com/gpudiag/gpudiag/hung"
)

// Namespace prefixes every metric the daemon exports.
const Namespace = "gpudiag"

// Options configure an Engine.
type Options struct {
	// Interval is how often each collector samples unless it was added with
	// an interval of its own.
	Interval time.Duration
	// Timeout is how long the engine waits for one Sample before it reports
	// the collector failed. Zero means Interval.
	Timeout time.Duration
	// Window receives every successful sample. Nil keeps none.
	Window *Window
	// OnSample, when set, is called on the sampling goroutine after each
	// successful sample (the recorder and the analyzers hook in here).
	OnSample func(collector string, t time.Time, sample any)
	Logger   *zap.Logger
	// Now is the clock; tests replace it.
	Now func() time.Time
}

// Engine runs collectors on their own clocks and serves their latest samples.
type Engine struct {
	opts   Options
	states []*state
	wg     sync.WaitGroup

	hookMu        sync.Mutex
	lastHookPanic string // the last OnSample panic logged, to log each kind once
}

type state struct {
	c        Collector
	interval time.Duration
	timeout  time.Duration

	mu           sync.Mutex
	families     []*dto.MetricFamily // from the last successful sample, sorted and checked
	lastSuccess  time.Time
	lastAttempt  time.Time
	lastDuration time.Duration
	lastErr      error
	failures     uint64
	attempted    bool

	calls hung.Guard[result] // holds a sample that outlived its deadline
}

type result struct {
	sample   any
	families []*dto.MetricFamily
	err      error
	end      time.Time
	stack    []byte // where the collector panicked, when it did
}

// New returns an engine with no collectors.
func New(opts Options) *Engine {
	if opts.Interval <= 0 {
		opts.Interval = time.Second
	}
	if opts.Timeout <= 0 {
		opts.Timeout = opts.Interval
	}
	if opts.Logger == nil {
		opts.Logger = zap.NewNop()
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	return &Engine{opts: opts}
}

// Add schedules a collector. interval 0 uses the collector's own (see
// Intervaler) or else the engine's. Add must be called before Run.
func (e *Engine) Add(c Collector, interval time.Duration) {
	if iv, ok := c.(Intervaler); ok && interval <= 0 {
		interval = iv.Interval()
	}
	if interval <= 0 {
		interval = e.opts.Interval
	}
	timeout := e.opts.Timeout
	if timeout > interval {
		timeout = interval
	}
	e.states = append(e.states, &state{c: c, interval: interval, timeout: timeout})
	if e.opts.Window != nil {
		e.opts.Window.Register(c.Name())
	}
}

// Run samples every collector until ctx is done, then waits for in-flight
// samples to return (at most one timeout more) so no goroutine is left behind.
func (e *Engine) Run(ctx context.Context) {
	for _, st := range e.states {
		e.wg.Add(1)
		go func() {
			defer e.wg.Done()
			e.loop(ctx, st)
		}()
	}
	e.wg.Wait()
}

func (e *Engine) loop(ctx context.Context, st *state) {
	pacer, paced := st.c.(Pacer)
	if !paced {
		t := time.NewTicker(st.interval)
		defer t.Stop()
		for {
			e.sampleOnce(ctx, st)
			select {
			case <-ctx.Done():
				e.drain(st)
				return
			case <-t.C:
			}
		}
	}
	// A pacer's next sample is due at the interval's tick or sooner, when it
	// asks or its prompt fires: one timer, re-armed after each sample from
	// when it started.
	var prompt <-chan struct{}
	if p, ok := st.c.(Prompter); ok {
		prompt = p.Prompt()
	}
	t := time.NewTimer(st.interval)
	defer t.Stop()
	for {
		start := time.Now()
		e.sampleOnce(ctx, st)
		next := st.interval
		if d := pacer.NextSample(); d > 0 && d < next {
			next = d
		}
		t.Reset(max(0, next-time.Since(start)))
		select {
		case <-ctx.Done():
			e.drain(st)
			return
		case <-t.C:
		case <-prompt:
			// Reset re-arms the timer after the sample; since Go 1.23 no
			// stale tick is left in its channel.
		}
	}
}

// drain waits a last timeout for a sample that is still running at shutdown.
func (e *Engine) drain(st *state) {
	if !st.calls.Wait(st.timeout) {
		e.opts.Logger.Warn("collector still running at shutdown; leaving it",
			zap.String("collector", st.c.Name()))
	}
}

// SampleOnce runs one sample of every collector, one after another. Used by
// one-shot commands and tests; Run is the normal path.
func (e *Engine) SampleOnce(ctx context.Context) {
	for _, st := range e.states {
		e.sampleOnce(ctx, st)
	}
}

func (e *Engine) sampleOnce(ctx context.Context, st *state) {
	name := st.c.Name()
	log := e.opts.Logger.With(zap.String("collector", name))

	if since, running := st.calls.Running(); running {
		err := fmt.Errorf("previous sample still running since %s", since.Format(time.RFC3339))
		st.mu.Lock()
		st.lastErr = err
		st.lastAttempt = e.opts.Now()
		st.failures++
		st.mu.Unlock()
		log.Debug("skipping sample", zap.Error(err))
		return
	}

	start := e.opts.Now()
	sctx, cancel := context.WithTimeout(ctx, st.timeout)
	defer cancel()
	r, ok := st.calls.Call(sctx, start, func() result { return e.run(sctx, st.c) })
	if !ok {
		if ctx.Err() != nil {
			return // shutting down: drain waits for the sample
		}
		r = result{err: fmt.Errorf("timed out after %s", st.timeout), end: e.opts.Now()}
	}

	st.mu.Lock()
	st.attempted = true
	st.lastAttempt = start
	st.lastDuration = r.end.Sub(start)
	prevErr := st.lastErr
	st.lastErr = r.err
	if r.err != nil {
		st.failures++
	} else {
		st.families = r.families
		st.lastSuccess = r.end
	}
	st.mu.Unlock()

	if r.err != nil {
		// Log a failure when it starts or changes, not every interval: a
		// collector that panics every second must not flood the log with
		// stacks.
		if prevErr == nil || prevErr.Error() != r.err.Error() {
			if r.stack != nil {
				log.Error("collector panicked", zap.Error(r.err), zap.ByteString("stack", r.stack))
			} else {
				log.Warn("collector failed", zap.Error(r.err))
			}
		}
		return
	}
	if prevErr != nil {
		log.Info("collector recovered")
	}
	if e.opts.Window != nil {
		e.opts.Window.Add(name, r.end, r.sample)
	}
	e.notify(name, r.end, r.sample)
}

// notify calls OnSample (the analyzers, the recorder). A panic there is
// logged and survived: the sample is already in the window and its metrics
// are served, and the next sample tries again.
func (e *Engine) notify(collector string, t time.Time, s any) {
	if e.opts.OnSample == nil {
		return
	}
	defer func() {
		p := recover()
		if p == nil {
			return
		}
		msg := fmt.Sprint(p)
		e.hookMu.Lock()
		first := msg != e.lastHookPanic
		e.lastHookPanic = msg
		e.hookMu.Unlock()
		if first {
			e.opts.Logger.Error("processing a sample panicked; the daemon keeps serving",
				zap.String("collector", collector), zap.String("panic", msg), zap.ByteString("stack", debug.Stack()))
		}
	}()
	e.opts.OnSample(collector, t, s)
}

// Ingest accepts a sample produced elsewhere (a recorded trace being
// replayed) as if the named collector had just returned it at time t: its
// metrics are prepared, the window and OnSample see it. The engine is not Run
// in that mode; Now should follow the replayed time.
func (e *Engine) Ingest(collector string, t time.Time, s any) error {
	var st *state
	for _, x := range e.states {
		if x.c.Name() == collector {
			st = x
			break
		}
	}
	if st == nil {
		return fmt.Errorf("no collector %q", collector)
	}
	var ms []prometheus.Metric
	var fams []*dto.MetricFamily
	err := func() (err error) {
		defer func() {
			if p := recover(); p != nil {
				err = fmt.Errorf("panic: %v", p)
			}
		}()
		st.c.Metrics(s, func(m prometheus.Metric) { ms = append(ms, m) })
		fams, err = families(ms)
		return err
	}()
	st.mu.Lock()
	st.attempted, st.lastAttempt = true, t
	if err != nil {
		st.lastErr = fmt.Errorf("metrics: %w", err)
		st.failures++
		st.mu.Unlock()
		return st.lastErr
	}
	st.lastErr, st.families, st.lastSuccess = nil, fams, t
	st.mu.Unlock()
	if e.opts.Window != nil {
		e.opts.Window.Add(collector, t, s)
	}
	e.notify(collector, t, s)
	return nil
}

// run calls the collector, turning a panic into an error.
func (e *Engine) run(ctx context.Context, c Collector) (r result) {
	defer func() {
		if p := recover(); p != nil {
			r = result{err: fmt.Errorf("panic: %v", p), end: e.opts.Now(), stack: debug.Stack()}
		}
	}()
	s, err := c.Sample(ctx)
	if err != nil {
		return result{err: err, end: e.opts.Now()}
	}
	if s == nil {
		return result{err: errors.New("collector returned no sample"), end: e.opts.Now()}
	}
	var ms []prometheus.Metric
	c.Metrics(s, func(m prometheus.Metric) { ms = append(ms, m) })
	// Encode, sort and check the metrics here, on the sampling goroutine,
	// so a scrape only concatenates finished families and an inconsistent
	// metric fails this collector's sample instead of the scrape.
	fams, err := families(ms)
	if err != nil {
		return result{err: fmt.Errorf("metrics: %w", err), end: e.opts.Now()}
	}
	return result{sample: s, families: fams, end: e.opts.Now()}
}

// Status is what the engine knows of one collector.
type Status struct {
	Name         string
	Interval     time.Duration
	Success      bool
	LastSuccess  time.Time
	LastAttempt  time.Time
	LastDuration time.Duration
	LastError    string
	Failures     uint64
}

// Statuses reports every collector, sorted by name.
func (e *Engine) Statuses() []Status {
	out := make([]Status, 0, len(e.states))
	for _, st := range e.states {
		st.mu.Lock()
		s := Status{
			Name: st.c.Name(), Interval: st.interval, Success: st.attempted && st.lastErr == nil,
			LastSuccess: st.lastSuccess, LastAttempt: st.lastAttempt, LastDuration: st.lastDuration,
			Failures: st.failures,
		}
		if st.lastErr != nil {
			s.LastError = st.lastErr.Error()
		}
		st.mu.Unlock()
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

var (
	durationDesc = prometheus.NewDesc(Namespace+"_collector_duration_seconds",
		"Time the collector's last sample took.", []string{"collector"}, nil)
	successDesc = prometheus.NewDesc(Namespace+"_collector_success",
		"Whether the collector's last sample succeeded (1) or failed, timed out or is still running (0).", []string{"collector"}, nil)
	lastSuccessDesc = prometheus.NewDesc(Namespace+"_collector_last_success_timestamp_seconds",
		"Unix time of the collector's last successful sample.", []string{"collector"}, nil)
	failuresDesc = prometheus.NewDesc(Namespace+"_collector_failures_total",
		"Samples that failed, timed out or were skipped because the previous one still ran.", []string{"collector"}, nil)
	windowSamplesDesc = prometheus.NewDesc(Namespace+"_window_samples",
		"Samples of the collector held in the analysis window.", []string{"collector"}, nil)
	windowSpanDesc = prometheus.NewDesc(Namespace+"_window_span_seconds",
		"Time between the oldest and the newest sample of the collector in the analysis window.", []string{"collector"}, nil)
	windowBytesDesc = prometheus.NewDesc(Namespace+"_window_bytes",
		"Approximate memory held by the collector's samples in the analysis window.", []string{"collector"}, nil)
)

// metricList is a list of prepared metrics.
type metricList []prometheus.Metric

// Gather implements prometheus.Gatherer: the self-metrics, built now, and each
// collector's prepared families while they are fresh. It takes each
// collector's lock only to copy a slice header and never waits on a sample.
func (e *Engine) Gather() ([]*dto.MetricFamily, error) {
	now := e.opts.Now()
	var self metricList
	var out []*dto.MetricFamily
	for _, st := range e.states {
		name := st.c.Name()
		st.mu.Lock()
		fams := st.families
		lastSuccess, dur, failures := st.lastSuccess, st.lastDuration, st.failures
		ok := st.attempted && st.lastErr == nil
		// Serve the last good sample while it is fresh, so one failed
		// cycle does not punch a hole in every series; drop it once stale.
		fresh := !lastSuccess.IsZero() && now.Sub(lastSuccess) <= 2*st.interval+st.timeout
		st.mu.Unlock()

		self = append(self,
			prometheus.MustNewConstMetric(durationDesc, prometheus.GaugeValue, dur.Seconds(), name),
			prometheus.MustNewConstMetric(successDesc, prometheus.GaugeValue, boolFloat(ok), name),
			prometheus.MustNewConstMetric(failuresDesc, prometheus.CounterValue, float64(failures), name))
		if !lastSuccess.IsZero() {
			self = append(self, prometheus.MustNewConstMetric(lastSuccessDesc, prometheus.GaugeValue,
				float64(lastSuccess.UnixNano())/1e9, name))
		}
		if fresh {
			out = append(out, fams...)
		}
	}
	if e.opts.Window != nil {
		for name, s := range e.opts.Window.Stats() {
			self = append(self,
				prometheus.MustNewConstMetric(windowSamplesDesc, prometheus.GaugeValue, float64(s.Samples), name),
				prometheus.MustNewConstMetric(windowSpanDesc, prometheus.GaugeValue, s.Span.Seconds(), name),
				prometheus.MustNewConstMetric(windowBytesDesc, prometheus.GaugeValue, float64(s.Bytes), name))
		}
	}
	selfFams, err := families(self)
	if err != nil {
		return nil, err
	}
	out = append(out, selfFams...)
	sort.Slice(out, func(i, j int) bool { return out[i].GetName() < out[j].GetName() })
	return out, nil
}

func boolFloat(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
