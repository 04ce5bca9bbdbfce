package gpu

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/gpudiag/gpudiag/hung"
	"github.com/gpudiag/gpudiag/sample"
)

// Opener opens a backend. It may block for seconds (DCGM connects to a
// hostengine and waits for the first field update, NVML enumerates the GPUs),
// so Failover calls it only on a goroutine of its own, never while sampling.
type Opener func() (Backend, error)

// Defaults of FailoverOptions.
const (
	// DefaultFailures is how many samples in a row the primary must fail
	// before it is given up. One failed read is a hiccup (a hostengine busy
	// with a dcgmi command, a field update that came late); three at the 1 s
	// default interval is a hostengine that is gone, and NVML readings then
	// resume within about three intervals plus the time NVML takes to open.
	// Giving DCGM up on a single failure would tear down its watches and
	// restart its profiling averages for every hiccup.
	DefaultFailures = 3
	// DefaultRetryMin is the first wait before the primary is reopened: a
	// hostengine restarted by systemd comes back within seconds, so readings
	// return to it within half a minute.
	DefaultRetryMin = 30 * time.Second
	// DefaultRetryMax bounds the doubling wait: reopening DCGM creates a
	// group and watches and waits for an update, which a node whose
	// hostengine is gone for good should not pay more than every 5 minutes.
	DefaultRetryMax = 5 * time.Minute
	// DefaultProbeTimeout bounds the sample that checks a reopened primary.
	DefaultProbeTimeout = 10 * time.Second
	// closeWait is how long Close waits for a switch or reconnect in flight.
	closeWait = 5 * time.Second
)

// FailoverOptions configure a Failover.
type FailoverOptions struct {
	// OpenPrimary reopens the preferred backend after it failed.
	OpenPrimary Opener
	// OpenFallback opens the backend that serves while the primary is
	// down; nil means none does: the primary is only reconnected.
	OpenFallback Opener
	// Failures is how many samples in a row the primary must fail before
	// it is given up (DefaultFailures when 0).
	Failures int
	// RetryMin and RetryMax bound the wait between attempts to reopen the
	// primary, doubling from one to the other (defaults above when 0).
	RetryMin, RetryMax time.Duration
	// ProbeTimeout bounds the sample that checks a reopened primary.
	ProbeTimeout time.Duration
	Logger       *zap.Logger
	// Now is the clock of the retry schedule; tests replace it.
	Now func() time.Time
}

// Failover serves GPU readings from a primary backend (DCGM) while it
// answers. When the primary fails Failures samples in a row it is closed, the
// fallback (NVML) is opened and serves, and the primary is reopened in the
// background at a doubling interval; readings go back to it once a fresh
// primary returns a good sample. Every open and close runs on a goroutine of
// its own, so Sample never waits longer than its context for a backend that
// hangs, and the serving backend changes only at the start of a Sample, so
// none is closed under a sample in flight. At most one primary exists at a
// time, open or being closed: go-dcgm holds one process-wide connection.
type Failover struct {
	opts        FailoverOptions
	primaryName string

	mu         sync.Mutex
	cur        *serving // nil while none can
	curPrimary bool
	ready      Backend // a reopened primary that takes over at the next Sample
	failures   int     // samples in a row the primary failed
	fallback   *sample.BackendFallback
	// primaryHeld is true while a primary backend is open (serving or
	// ready), being opened or being closed.
	primaryHeld bool
	busy        bool // a switch or reconnect goroutine is running
	backoff     time.Duration
	nextTry     time.Time
	switches    []sample.BackendSwitch
	closed      bool
	wg          sync.WaitGroup
}

// serving is the backend that serves now. Its guard holds a sample that
// outlived its context: that backend is not called again until it ends,
// while a backend that replaced it starts with a guard of its own.
type serving struct {
	Backend
	calls hung.Guard[sampleResult]
}

// Close closes the backend and ends its guard's worker.
func (s *serving) Close() error {
	s.calls.Close()
	return s.Backend.Close()
}

// serve wraps b to serve; nil stays nil, meaning none serves.
func serve(b Backend) *serving {
	if b == nil {
		return nil
	}
	return &serving{Backend: b}
}

type sampleResult struct {
	s   *sample.GPUs
	err error
}

// NewFailover serves from primary, which the caller opened.
func NewFailover(primary Backend, opts FailoverOptions) *Failover {
	if opts.Failures <= 0 {
		opts.Failures = DefaultFailures
	}
	if opts.RetryMin <= 0 {
		opts.RetryMin = DefaultRetryMin
	}
	if opts.RetryMax < opts.RetryMin {
		opts.RetryMax = max(DefaultRetryMax, opts.RetryMin)
	}
	if opts.ProbeTimeout <= 0 {
		opts.ProbeTimeout = DefaultProbeTimeout
	}
	if opts.Logger == nil {
		opts.Logger = zap.NewNop()
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	return &Failover{opts: opts, primaryName: primary.Name(), cur: serve(primary), curPrimary: true,
		primaryHeld: true, backoff: opts.RetryMin}
}

// Name is the name of the backend serving now, "none" while none can.
func (f *Failover) Name() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.cur == nil {
		return "none"
	}
	return f.cur.Name()
}

// Sample reads through the backend serving now and counts the primary's
// failures. It starts a switch or a reconnect when one is due but never
// waits for it.
func (f *Failover) Sample(ctx context.Context) (*sample.GPUs, error) {
	f.mu.Lock()
	f.takeOver()
	f.maybeReconnect()
	b, onPrimary := f.cur, f.curPrimary
	if b == nil {
		err := f.unavailable()
		f.mu.Unlock()
		return nil, err
	}
	f.mu.Unlock()
	s, err := f.sampleBounded(ctx, b)
	f.mu.Lock()
	defer f.mu.Unlock()
	if onPrimary {
		f.countPrimary(b, err)
	}
	if s != nil {
		if f.fallback != nil {
			fb := *f.fallback
			s.Fallback = &fb
		}
		s.Switches = append([]sample.BackendSwitch(nil), f.switches...)
	}
	return s, err
}

// unavailable says why no backend serves. f.mu is held.
func (f *Failover) unavailable() error {
	if f.closed || f.fallback == nil {
		return fmt.Errorf("GPU backend %s closed", f.primaryName)
	}
	return fmt.Errorf("GPU backend %s down since %s (%s); no backend serves until it or the fallback reopens",
		f.primaryName, f.fallback.Since.UTC().Format(time.RFC3339), f.fallback.Reason)
}

// sampleBounded calls b.Sample and returns at ctx's end even if the call does
// not. While such a call still runs, b is not called again.
func (f *Failover) sampleBounded(ctx context.Context, b *serving) (*sample.GPUs, error) {
	if since, running := b.calls.Running(); running {
		return nil, fmt.Errorf("%s: previous sample still running since %s", b.Name(), since.UTC().Format(time.RFC3339))
	}
	r, ok := b.calls.Call(ctx, f.opts.Now(), func() sampleResult {
		s, err := b.Sample(ctx)
		return sampleResult{s, err}
	})
	if !ok {
		return nil, fmt.Errorf("%s sample: %w", b.Name(), ctx.Err())
	}
	return r.s, r.err
}

// countPrimary counts a failed sample of the primary (an error means no GPU
// could be read, see Backend) and gives the primary up after
// opts.Failures in a row. On a node whose only GPU is lost that moves to the
// fallback too, which is harmless: it reports the GPU down as well, and the
// primary takes over again once it reads the GPU. f.mu is held.
func (f *Failover) countPrimary(b *serving, err error) {
	if b != f.cur {
		return // already given up while this sample ran
	}
	if err == nil {
		f.failures = 0
		return
	}
	f.failures++
	if f.failures < f.opts.Failures || f.busy || f.closed {
		return
	}
	now := f.opts.Now()
	f.fallback = &sample.BackendFallback{Preferred: f.primaryName, Reason: err.Error(), Since: now}
	f.cur, f.curPrimary = nil, false
	f.nextTry = now.Add(f.backoff)
	f.busy = true
	f.wg.Add(1)
	go f.giveUp(b, f.failures, err)
}

// giveUp opens the fallback, then closes the failed primary. Opening first
// gets readings back sooner: closing a primary whose hostengine hangs waits
// for its stuck call.
func (f *Failover) giveUp(primary Backend, failures int, why error) {
	defer f.wg.Done()
	log := f.opts.Logger
	to, fb, err := f.openFallback()
	switch {
	case f.opts.OpenFallback == nil:
		log.Warn("GPU backend failed; GPU metrics are off until it reconnects",
			zap.String("backend", f.primaryName), zap.Int("failed_samples", failures), zap.Error(why))
	case err != nil:
		log.Error("GPU backend failed and the fallback could not be opened; GPU metrics are off until one opens",
			zap.String("backend", f.primaryName), zap.Int("failed_samples", failures), zap.Error(why),
			zap.NamedError("fallback_error", err))
	default:
		log.Warn("GPU backend failed; reading GPUs through the fallback and reconnecting in the background",
			zap.String("from", f.primaryName), zap.String("to", to), zap.Int("failed_samples", failures),
			zap.Error(why))
	}
	f.mu.Lock()
	f.count(f.primaryName, to)
	f.mu.Unlock()
	f.setServing(fb)
	if err := primary.Close(); err != nil {
		log.Debug("closing the failed GPU backend", zap.String("backend", f.primaryName), zap.Error(err))
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.primaryHeld, f.busy = false, false
}

// openFallback opens the fallback, if there is one, and names what now
// serves.
func (f *Failover) openFallback() (name string, b Backend, err error) {
	if f.opts.OpenFallback == nil {
		return "none", nil, nil
	}
	b, err = f.opts.OpenFallback()
	if err != nil {
		return "none", nil, err
	}
	return b.Name(), b, nil
}

// setServing makes the fallback b serve unless Close came first, in which
// case b is closed instead. It runs only while nothing serves; a nil b
// leaves it so.
func (f *Failover) setServing(b Backend) {
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		if b != nil {
			_ = b.Close()
		}
		return
	}
	f.cur, f.curPrimary = serve(b), false
	f.mu.Unlock()
}

// maybeReconnect starts an attempt to reopen the primary when one is due.
// f.mu is held.
func (f *Failover) maybeReconnect() {
	if f.curPrimary || f.busy || f.primaryHeld || f.closed || f.opts.Now().Before(f.nextTry) {
		return
	}
	f.busy, f.primaryHeld = true, true
	f.wg.Add(1)
	go f.reconnect()
}

// reconnect reopens the primary and, if a sample through it succeeds, hands
// it to the next Sample to take over. While nothing serves it also retries
// the fallback.
func (f *Failover) reconnect() {
	defer f.wg.Done()
	p, err := f.probePrimary()
	if err != nil {
		f.opts.Logger.Debug("GPU backend still unavailable", zap.String("backend", f.primaryName), zap.Error(err))
		f.mu.Lock()
		// Samples hold copies of f.fallback: replace it, never modify it.
		f.fallback = &sample.BackendFallback{Preferred: f.primaryName, Reason: err.Error(), Since: f.fallback.Since}
		noneServes := f.cur == nil && !f.closed
		f.primaryHeld = false
		f.backoff = min(2*f.backoff, f.opts.RetryMax)
		f.nextTry = f.opts.Now().Add(f.backoff)
		f.mu.Unlock()
		if noneServes && f.opts.OpenFallback != nil {
			f.reopenFallback()
		}
		f.mu.Lock()
		f.busy = false
		f.mu.Unlock()
		return
	}
	f.mu.Lock()
	if f.closed {
		f.primaryHeld, f.busy = false, false
		f.mu.Unlock()
		_ = p.Close()
		return
	}
	f.ready, f.busy = p, false
	f.mu.Unlock()
}

// takeOver makes a reopened primary serve. It runs at the start of Sample,
// when no sample uses the backend it replaces; that one is closed on a
// goroutine of its own, where a call of it still hung holds its Close.
// f.mu is held.
func (f *Failover) takeOver() {
	p := f.ready
	if p == nil || f.closed {
		return
	}
	old, from := f.cur, "none"
	if old != nil {
		from = old.Name()
	}
	f.cur, f.curPrimary, f.ready = serve(p), true, nil
	f.failures, f.fallback, f.backoff = 0, nil, f.opts.RetryMin
	f.count(from, f.primaryName)
	f.opts.Logger.Info("GPU backend is back; reading GPUs through it again",
		zap.String("from", from), zap.String("to", f.primaryName))
	if old == nil {
		return
	}
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		if err := old.Close(); err != nil {
			f.opts.Logger.Warn("closing the fallback GPU backend", zap.String("backend", from), zap.Error(err))
		}
	}()
}

// probePrimary opens the primary and takes one sample through it; on failure
// the primary is closed again before it returns.
func (f *Failover) probePrimary() (Backend, error) {
	p, err := f.opts.OpenPrimary()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), f.opts.ProbeTimeout)
	defer cancel()
	if _, err = p.Sample(ctx); err != nil {
		_ = p.Close()
		return nil, fmt.Errorf("reopened, but its first sample failed: %w", err)
	}
	return p, nil
}

// reopenFallback retries the fallback after it failed to open.
func (f *Failover) reopenFallback() {
	to, fb, err := f.openFallback()
	if err != nil {
		f.opts.Logger.Debug("fallback GPU backend still unavailable", zap.Error(err))
		return
	}
	f.opts.Logger.Info("fallback GPU backend opened", zap.String("backend", to))
	f.mu.Lock()
	f.count("none", to)
	f.mu.Unlock()
	f.setServing(fb)
}

// count records a switch. f.mu is held.
func (f *Failover) count(from, to string) {
	for i := range f.switches {
		if f.switches[i].From == from && f.switches[i].To == to {
			f.switches[i].Count++
			return
		}
	}
	f.switches = append(f.switches, sample.BackendSwitch{From: from, To: to, Count: 1})
}

// Close closes the serving backend and waits a bounded time for a switch or
// reconnect in flight, which closes what it opened once it sees Close; one
// stuck in a hung driver call is left behind, as the engine leaves a hung
// sample.
func (f *Failover) Close() error {
	f.mu.Lock()
	f.closed = true
	b, ready := f.cur, f.ready
	f.cur, f.ready = nil, nil
	f.mu.Unlock()
	var err error
	if b != nil {
		err = b.Close()
	}
	if ready != nil {
		err = errors.Join(err, ready.Close())
	}
	done := make(chan struct{})
	go func() {
		f.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(closeWait):
		if err == nil {
			err = fmt.Errorf("GPU backend %s: a reconnect is still running; leaving it", f.primaryName)
		}
	}
	return err
}
