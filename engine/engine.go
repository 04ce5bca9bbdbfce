package engine

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"sort"
	"sync"
	"sync/atomic"
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
	// QuietInterval is how often collectors sample while the node is quiet
	// (SetQuiet): no GPU has work, so no verdict needs a reading a second.
	// A collector whose own interval is longer keeps it, and a Sentinel
	// (the GPUs, whose samples end the spell) keeps its clock. Zero keeps
	// every clock as it is.
	QuietInterval time.Duration
	// Drops counts the series the export boundary drops (a collector's
	// Metrics that panicked or made a series client_golang refuses) and
	// is exported with the engine's self-metrics. Nil: the engine makes
	// its own (Drops returns it, for the registry collectors beside it).
	Drops *Drops
}

// Engine runs collectors on their own clocks and serves their latest samples.
type Engine struct {
	opts   Options
	states []*state
	wg     sync.WaitGroup

	hookMu        sync.Mutex
	lastHookPanic string // the last OnSample panic logged, to log each kind once

	// quiet is set while the node is quiet (SetQuiet); wake is closed when
	// the spell ends, so that every collector it slowed samples at once.
	quietMu sync.Mutex
	quiet   bool
	wake    chan struct{}
}

type state struct {
	c        Collector
	interval time.Duration
	timeout  time.Duration
	// sentinel keeps the collector's clock while the node is quiet.
	sentinel bool
	// pace is the wait before the next sample as last set: the interval,
	// or QuietInterval while the node is quiet (nanoseconds; 0 before the
	// first sample).
	pace atomic.Int64
	// log names the collector: made once, not per sample (a real core's
	// With copies its encoder).
	log *zap.Logger

	mu           sync.Mutex
	latest       any    // the last successful sample
	seq          uint64 // counts successful samples: which one latest is
	lastSuccess  time.Time
	lastAttempt  time.Time
	lastDuration time.Duration
	lastErr      error
	failures     uint64
	attempted    bool

	calls hung.Guard[result] // holds a sample that outlived its deadline

	// The metric families of sample builtSeq, made by the first scrape
	// that wants them (see familiesOf); buildMu serialises scrapes.
	buildMu    sync.Mutex
	built      []*dto.MetricFamily
	builtSeq   uint64
	metricsErr error // the families of sample builtSeq could not be made
	labels     labelPairs
}

type result struct {
	sample any
	err    error
	end    time.Time
	stack  []byte // where the collector panicked, when it did
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
	if opts.Drops == nil {
		opts.Drops = NewDrops(opts.Logger)
	}
	return &Engine{opts: opts}
}

// Drops is the engine's count of what the export boundary dropped: the
// registry collectors exported beside the engine (diagnose's, the
// recorder's) count into it through Drops.Guard, and the engine exports it.
func (e *Engine) Drops() *Drops { return e.opts.Drops }

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
	sentinel, _ := c.(Sentinel)
	e.states = append(e.states, &state{c: c, interval: interval, timeout: timeout,
		sentinel: sentinel != nil && sentinel.WatchesForWork(),
		log:      e.opts.Logger.With(zap.String("collector", c.Name()))})
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
	// The next sample is due at the collector's pace after this one
	// started, or sooner: when a Pacer asks, its prompt fires or a quiet
	// spell that slowed it ends. One timer, re-armed after each sample.
	pacer, _ := st.c.(Pacer)
	var prompt <-chan struct{}
	if p, ok := st.c.(Prompter); ok {
		prompt = p.Prompt()
	}
	t := time.NewTimer(st.interval)
	defer t.Stop()
	for {
		start := time.Now()
		e.sampleOnce(ctx, st)
		next, wake := e.pace(st)
		if pacer != nil {
			if d := pacer.NextSample(); d > 0 && d < next {
				next = d
			}
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
		case <-wake:
		}
	}
}

// SetQuiet says whether the node is quiet: no GPU has work. While it is,
// every collector but a Sentinel samples at most every QuietInterval; when
// the spell ends, the collectors it slowed sample at once.
func (e *Engine) SetQuiet(quiet bool) {
	e.quietMu.Lock()
	defer e.quietMu.Unlock()
	switch {
	case quiet && !e.quiet:
		e.wake = make(chan struct{})
	case !quiet && e.quiet:
		close(e.wake)
	}
	e.quiet = quiet
}

// sentinelFailed ends a quiet spell when a sentinel could not sample: with
// the GPUs unread, the node may have work, and its collectors keep their
// clocks until a GPU sample says otherwise.
func (e *Engine) sentinelFailed(st *state) {
	if st.sentinel {
		e.SetQuiet(false)
	}
}

// pace is how long the collector waits for its next sample, and the channel
// closed when a quiet spell that sets that wait ends (nil otherwise).
func (e *Engine) pace(st *state) (time.Duration, <-chan struct{}) {
	next := st.interval
	var wake <-chan struct{}
	if !st.sentinel && e.opts.QuietInterval > next {
		e.quietMu.Lock()
		if e.quiet {
			next, wake = e.opts.QuietInterval, e.wake
		}
		e.quietMu.Unlock()
	}
	st.pace.Store(int64(next))
	return next, wake
}

// currentPace is the collector's interval as it samples now.
func (st *state) currentPace() time.Duration {
	return max(st.interval, time.Duration(st.pace.Load()))
}

// drain waits a last timeout for a sample that is still running at shutdown,
// and ends the collector's worker.
func (e *Engine) drain(st *state) {
	if !st.calls.Wait(st.timeout) {
		st.log.Warn("collector still running at shutdown; leaving it")
	}
	st.calls.Close()
}

// SampleOnce runs one sample of every collector, one after another. Used by
// one-shot commands and tests; Run is the normal path. It leaves no worker
// waiting for a next sample: none may come.
func (e *Engine) SampleOnce(ctx context.Context) {
	for _, st := range e.states {
		e.sampleOnce(ctx, st)
		st.calls.Close()
	}
}

func (e *Engine) sampleOnce(ctx context.Context, st *state) {
	name := st.c.Name()
	log := st.log

	if since, running := st.calls.Running(); running {
		err := fmt.Errorf("previous sample still running since %s", since.Format(time.RFC3339))
		st.mu.Lock()
		st.lastErr = err
		st.lastAttempt = e.opts.Now()
		st.failures++
		st.mu.Unlock()
		log.Debug("skipping sample", zap.Error(err))
		e.sentinelFailed(st)
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
		st.latest = r.sample
		st.seq++
		st.lastSuccess = r.end
	}
	st.mu.Unlock()

	if r.err != nil {
		e.sentinelFailed(st)
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
// metrics are made at once and served, the window and OnSample see it. The
// engine is not Run in that mode; Now should follow the replayed time.
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
	st.mu.Lock()
	// A gap well past the interval is a recorded quiet spell (or a hole):
	// the sample stays served for as long as that pace says, as it was live.
	pace := time.Duration(0)
	if gap := t.Sub(st.lastSuccess); !st.lastSuccess.IsZero() && 2*gap > 3*st.interval {
		pace = gap
	}
	st.pace.Store(int64(pace))
	st.attempted, st.lastAttempt = true, t
	st.lastErr, st.latest, st.lastSuccess = nil, s, t
	st.seq++
	seq := st.seq
	st.mu.Unlock()
	// A replayed sample's families are made now, in order: a looped
	// replay's Metrics carries counters from one sample to the next
	// (record/replay.Loop), and replay is not the live daemon's hot path.
	e.familiesOf(st, s, seq)
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
	return result{sample: s, end: e.opts.Now()}
}

// familiesOf returns the metric families of the collector's sample number
// seq, making them if no scrape has since it was taken. They are made for
// a scrape, not for every sample: a collector sampled every second and
// scraped every 15 s would otherwise build 14 sets of families nobody
// reads (for 8 GPUs, two fifths of the bytes the daemon allocated). Metrics is a
// pure function of the sample, so it runs here, on the scrape's goroutine,
// while the collector takes its next sample. A metric that does not fit
// (two types, a series twice) or a panic fails this collector's families
// until its next sample, counted once as a failure and once in Drops
// (which logs each distinct error once), and never the scrape.
func (e *Engine) familiesOf(st *state, s any, seq uint64) []*dto.MetricFamily {
	st.buildMu.Lock()
	defer st.buildMu.Unlock()
	// A scrape that read sample seq may get here after a newer sample's
	// families were built (a replay builds each as it is ingested): it
	// serves those rather than build the older sample's, which would
	// export counters going back and, in a looped replay, move the loop's
	// carried values back too.
	if st.builtSeq >= seq {
		return st.built
	}
	var fams []*dto.MetricFamily
	var stack []byte
	err := func() (err error) {
		defer func() {
			if p := recover(); p != nil {
				err, stack = fmt.Errorf("panic: %v", p), debug.Stack()
			}
		}()
		var ms []prometheus.Metric
		st.c.Metrics(s, func(m prometheus.Metric) { ms = append(ms, m) })
		fams, err = families(ms, &st.labels)
		return err
	}()
	st.built, st.builtSeq, st.metricsErr = fams, seq, nil
	if err != nil {
		st.built, st.metricsErr = nil, fmt.Errorf("metrics: %w", err)
		st.mu.Lock()
		st.failures++
		st.mu.Unlock()
		reason := DropInvalid
		if stack != nil {
			reason = DropPanic
		}
		e.opts.Drops.Count(st.c.Name(), reason, st.metricsErr, stack)
	}
	return st.built
}

// metricsError is the error of the families last made, nil when they
// were made or none were asked for.
func (st *state) metricsError() error {
	st.buildMu.Lock()
	defer st.buildMu.Unlock()
	return st.metricsErr
}

// Status is what the engine knows of one collector.
type Status struct {
	Name string
	// Interval is how often the collector samples now: its own interval, or
	// the quiet interval while the node is quiet.
	Interval     time.Duration
	Success      bool
	LastSuccess  time.Time
	LastAttempt  time.Time
	LastDuration time.Duration
	LastError    string
	Failures     uint64
	// Unmeasured names what the latest successful sample could not read
	// (Partial); the collector succeeds without it.
	Unmeasured []string
}

// Statuses reports every collector, sorted by name.
func (e *Engine) Statuses() []Status {
	out := make([]Status, 0, len(e.states))
	for _, st := range e.states {
		metricsErr := st.metricsError()
		st.mu.Lock()
		s := Status{
			Name: st.c.Name(), Interval: st.currentPace(), Success: st.attempted && st.lastErr == nil,
			LastSuccess: st.lastSuccess, LastAttempt: st.lastAttempt, LastDuration: st.lastDuration,
			Failures: st.failures,
		}
		switch {
		case st.lastErr != nil:
			s.LastError = st.lastErr.Error()
		case metricsErr != nil:
			s.Success, s.LastError = false, metricsErr.Error()
		}
		if p, ok := st.latest.(Partial); ok {
			s.Unmeasured = p.UnmeasuredFields()
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
	intervalDesc = prometheus.NewDesc(Namespace+"_collector_interval_seconds",
		"How often the collector samples now: its own interval, or --sample.quiet-interval while no GPU of the node has work.", []string{"collector"}, nil)
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

// Gather implements prometheus.Gatherer: the self-metrics, built now, and
// the families of each collector's latest sample while it is fresh, made
// once per sample by the first scrape that wants them (familiesOf). It takes
// each collector's lock only to copy the sample's reference and never waits
// on a sample.
func (e *Engine) Gather() ([]*dto.MetricFamily, error) {
	now := e.opts.Now()
	var self metricList
	var out []*dto.MetricFamily
	for _, st := range e.states {
		name := st.c.Name()
		st.mu.Lock()
		latest, seq, lastSuccess := st.latest, st.seq, st.lastSuccess
		st.mu.Unlock()
		// Serve the last good sample while it is fresh, so one failed
		// cycle does not punch a hole in every series; drop it once stale.
		fresh := !lastSuccess.IsZero() && now.Sub(lastSuccess) <= 2*st.currentPace()+st.timeout
		var fams []*dto.MetricFamily
		if fresh {
			fams = e.familiesOf(st, latest, seq)
		}
		metricsErr := st.metricsError()
		st.mu.Lock()
		dur, failures := st.lastDuration, st.failures
		ok := st.attempted && st.lastErr == nil && metricsErr == nil
		st.mu.Unlock()

		self = append(self,
			prometheus.MustNewConstMetric(durationDesc, prometheus.GaugeValue, dur.Seconds(), name),
			prometheus.MustNewConstMetric(successDesc, prometheus.GaugeValue, boolFloat(ok), name),
			prometheus.MustNewConstMetric(failuresDesc, prometheus.CounterValue, float64(failures), name),
			prometheus.MustNewConstMetric(intervalDesc, prometheus.GaugeValue, st.currentPace().Seconds(), name))
		if !lastSuccess.IsZero() {
			self = append(self, prometheus.MustNewConstMetric(lastSuccessDesc, prometheus.GaugeValue,
				float64(lastSuccess.UnixNano())/1e9, name))
		}
		out = append(out, fams...)
	}
	if e.opts.Window != nil {
		for name, s := range e.opts.Window.Stats() {
			self = append(self,
				prometheus.MustNewConstMetric(windowSamplesDesc, prometheus.GaugeValue, float64(s.Samples), name),
				prometheus.MustNewConstMetric(windowSpanDesc, prometheus.GaugeValue, s.Span.Seconds(), name),
				prometheus.MustNewConstMetric(windowBytesDesc, prometheus.GaugeValue, float64(s.Bytes), name))
		}
	}
	self = append(self, e.opts.Drops.metrics()...)
	selfFams, err := families(self, nil)
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
