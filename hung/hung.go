// Package hung bounds calls that can hang for good: a sample stuck in a
// driver ioctl, a DCGM hostengine that stopped answering, a read of a host
// file that never returns. Go cannot cancel such a call, so a Guard gives the
// caller control back when its context ends and leaves the call running on a
// goroutine of its own; until that call returns, the Guard refuses to start
// another, so a hung driver holds one goroutine, not one per interval. The
// engine guards every collector's sample with it, and the GPU failover every
// backend's.
package hung

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// Guard runs one call at a time of a function that can hang. The zero value
// is ready to use; a Guard must not be copied after first use.
//
// The calls run on a goroutine the Guard keeps between them, not on a new one
// each: a collector sampled every second would otherwise start a goroutine a
// second and grow its stack from the runtime's starting size each time. The
// kept goroutine ends after workerIdle without a call, or at Close.
type Guard[T any] struct {
	mu     sync.Mutex
	left   *worker // runs the call left running; nil when none was left
	since  time.Time
	idle   *worker // waits for the next call; nil when none does
	closed bool
}

// workerIdle is how long a Guard's goroutine waits for the next call before
// it ends (the next call then starts another); tests shorten it.
var workerIdle = 2 * time.Minute

// worker is a goroutine that runs one call after another.
type worker struct {
	calls chan func()   // closed to end the worker
	done  chan struct{} // one token per call returned
	// state: 0 waiting for a call, 1 claimed by a Call, 2 ended. A
	// Call claims a waiting worker and the worker ends only unclaimed, so
	// a call is never handed to a worker that has ended.
	state atomic.Int32
	stop  sync.Once
	idle  time.Duration // workerIdle when it started
}

const (
	workerWaiting int32 = iota
	workerClaimed
	workerEnded
)

func startWorker() *worker {
	w := &worker{calls: make(chan func()), done: make(chan struct{}, 1), idle: workerIdle}
	w.state.Store(workerClaimed)
	go w.run()
	return w
}

func (w *worker) run() {
	idle := time.NewTimer(w.idle)
	defer idle.Stop()
	for {
		select {
		case call, ok := <-w.calls:
			if !ok {
				return
			}
			call()
			w.done <- struct{}{}
			idle.Reset(w.idle)
		case <-idle.C:
			if w.state.CompareAndSwap(workerWaiting, workerEnded) {
				return
			}
			idle.Reset(w.idle) // claimed: its call is on the way
		}
	}
}

// end makes the worker return once its call, if any, has.
func (w *worker) end() { w.stop.Do(func() { close(w.calls) }) }

// claim takes a worker that waits for a call, or starts one.
func (g *Guard[T]) claim() *worker {
	g.mu.Lock()
	w := g.idle
	g.idle = nil
	g.mu.Unlock()
	if w != nil && w.state.CompareAndSwap(workerWaiting, workerClaimed) {
		return w
	}
	return startWorker()
}

// release keeps w, whose call returned, for the next call; after Close it
// ends w.
func (g *Guard[T]) release(w *worker) {
	w.state.Store(workerWaiting)
	g.mu.Lock()
	defer g.mu.Unlock()
	switch {
	case g.closed:
		w.end()
	case g.idle == nil:
		g.idle = w
	default:
		// One waits already (a call left running returned after
		// another was made).
		w.end()
	}
}

// Close ends the goroutine kept for the next call, and the one of a call
// left running once that call returns. A Call after Close runs on a
// goroutine that ends with it.
func (g *Guard[T]) Close() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.closed = true
	if g.idle != nil {
		g.idle.end()
		g.idle = nil
	}
	if g.left != nil {
		g.left.end()
	}
}

// Running reports whether a call left running by Call has not returned yet,
// and when it started. A call that has returned since is forgotten: its
// result is stale.
func (g *Guard[T]) Running() (since time.Time, running bool) {
	g.mu.Lock()
	w := g.left
	if w == nil {
		g.mu.Unlock()
		return time.Time{}, false
	}
	select {
	case <-w.done:
		g.left = nil
		g.mu.Unlock()
		g.release(w)
		return time.Time{}, false
	default:
		defer g.mu.Unlock()
		return g.since, true
	}
}

// Call runs call and returns its result, or gives up when ctx ends first:
// the call is then left running and ok is false. start is when the caller
// began, reported by Running while the call is left. The caller checks
// Running first; a Call made while one is left running runs anyway.
func (g *Guard[T]) Call(ctx context.Context, start time.Time, call func() T) (T, bool) {
	var r T // written by the worker; read only once its call is done
	w := g.claim()
	w.calls <- func() { r = call() }
	select {
	case <-w.done:
		g.release(w)
		return r, true
	case <-ctx.Done():
		g.mu.Lock()
		g.left, g.since = w, start
		g.mu.Unlock()
		var zero T
		return zero, false
	}
}

// Wait waits up to d for a call left running to return, and reports whether
// none is left running.
func (g *Guard[T]) Wait(d time.Duration) bool {
	g.mu.Lock()
	w := g.left
	g.mu.Unlock()
	if w == nil {
		return true
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-w.done:
		g.mu.Lock()
		if g.left == w {
			g.left = nil
		}
		g.mu.Unlock()
		g.release(w)
		return true
	case <-t.C:
		return false
	}
}
