// Package hung bounds calls that can hang for good: a sample stuck in a
// driver ioctl, a DCGM hostengine that stopped answering, a read of a host
// file that never returns. Go cannot cancel such a call, so a Guard gives the
// caller control back when its context ends and leaves the call running on
// its goroutine; until that call returns, the Guard refuses to start another,
// so a hung driver holds one goroutine, not one per interval. The engine
// guards every collector's sample with it, and the GPU failover every
// backend's.
package hung

import (
	"context"
	"sync"
	"time"
)

// Guard runs one call at a time of a function that can hang. The zero value
// is ready to use; a Guard must not be copied after first use.
//
// Calls run on a worker goroutine the Guard keeps between calls rather than
// on a new goroutine each: a collector sampled every second would otherwise
// start a goroutine and grow its stack anew every second (on a busy node the
// stack copies alone were 3% of the daemon's CPU). A worker left with a hung
// call is abandoned to it, and one idle for workerIdle ends.
type Guard[T any] struct {
	mu    sync.Mutex
	idle  *worker[T] // the worker waiting for the next call; nil when none
	busy  bool       // a Call is under way on idle
	left  *worker[T] // the worker of a call left running; nil when none was left
	since time.Time
}

// worker is one goroutine serving a Guard's calls (Guard.serve).
type worker[T any] struct {
	calls   chan func() T // capacity 1, sent to only under the Guard's lock
	results chan T        // capacity 1: an abandoned worker never blocks on it
	exited  chan struct{} // closed when the goroutine ends
}

// workerIdle is how long a worker waits for a call before it ends: longer
// than every collector's interval, so that none starts a goroutine per
// sample, and short enough that a Guard no longer called does not hold one.
const workerIdle = 5 * time.Minute

// Running reports whether a call left running by Call has not returned yet,
// and when it started. A call that has returned since is forgotten: its
// result is stale.
func (g *Guard[T]) Running() (since time.Time, running bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.left == nil {
		return time.Time{}, false
	}
	select {
	case <-g.left.exited:
		g.left = nil
		return time.Time{}, false
	default:
		return g.since, true
	}
}

// Call runs call on the Guard's worker and returns its result, or ok false
// as soon as ctx is done first. The call is then left running, and Running
// reports it, as started at start, until it returns. The caller checks
// Running first: Call itself does not refuse. Calls made while another is
// under way run on a worker of their own.
func (g *Guard[T]) Call(ctx context.Context, start time.Time, call func() T) (T, bool) {
	g.mu.Lock()
	w := g.idle
	switch {
	case g.busy:
		w = g.newWorker() // not kept: it ends after this call
	case w == nil:
		w = g.newWorker()
		g.idle = w
		fallthrough
	default:
		g.busy = true
	}
	w.calls <- call // never blocks: the worker's buffer is empty
	g.mu.Unlock()

	select {
	case r := <-w.results:
		g.mu.Lock()
		if g.idle == w {
			g.busy = false
		}
		g.mu.Unlock()
		return r, true
	case <-ctx.Done():
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.idle == w {
		g.busy = false
	}
	select {
	case r := <-w.results: // returned as the context ended: in time
		return r, true
	default:
	}
	// Abandon the worker to the call: it ends once the call returns.
	if g.idle == w {
		g.idle = nil
	}
	g.left, g.since = w, start
	var zero T
	return zero, false
}

// newWorker starts a worker goroutine. Called with g.mu held.
func (g *Guard[T]) newWorker() *worker[T] {
	w := &worker[T]{calls: make(chan func() T, 1), results: make(chan T, 1), exited: make(chan struct{})}
	go g.serve(w)
	return w
}

// serve runs w's calls until w is no longer the Guard's idle worker (it was
// abandoned to a hung call, made for one call, or closed) and no call is
// handed to it, or it waited workerIdle for one.
func (g *Guard[T]) serve(w *worker[T]) {
	defer close(w.exited)
	wait := time.NewTimer(workerIdle)
	defer wait.Stop()
	for {
		select {
		case call, open := <-w.calls:
			if !open { // Close
				return
			}
			w.results <- call()
			// A call may have been handed over since the result was
			// sent, and Close or an abandonment come after it: it is
			// served before the worker ends.
			g.mu.Lock()
			kept, handed := g.idle == w, len(w.calls) > 0
			g.mu.Unlock()
			if !kept && !handed {
				return
			}
			wait.Reset(workerIdle)
		case <-wait.C:
			g.mu.Lock()
			if len(w.calls) > 0 || (g.idle == w && g.busy) { // a call came as the timer fired
				g.mu.Unlock()
				wait.Reset(workerIdle)
				continue
			}
			if g.idle == w {
				g.idle = nil
			}
			g.mu.Unlock()
			return
		}
	}
}

// Close ends the worker waiting for calls, or the one serving a call now
// once it returns; a worker left with a hung call ends when the call does.
// A Call after Close starts a worker again.
func (g *Guard[T]) Close() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.idle != nil {
		close(g.idle.calls) // sent to only under g.mu, where idle is set
		g.idle, g.busy = nil, false
	}
}

// Wait waits at most d for a call left running to return, and reports
// whether none is running any more. The engine's shutdown uses it.
func (g *Guard[T]) Wait(d time.Duration) bool {
	g.mu.Lock()
	left := g.left
	g.mu.Unlock()
	if left == nil {
		return true
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-left.exited:
		return true
	case <-t.C:
		return false
	}
}
