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
	"time"
)

// Guard runs one call at a time of a function that can hang. The zero value
// is ready to use; a Guard must not be copied after first use.
type Guard[T any] struct {
	mu    sync.Mutex
	left  <-chan struct{} // closed when the call left running returns; nil when none was left
	since time.Time
}

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
	case <-g.left:
		g.left = nil
		return time.Time{}, false
	default:
		return g.since, true
	}
}

// Call runs call on a goroutine of its own and returns its result, or ok
// false as soon as ctx is done first. The call is then left running, and
// Running reports it, as started at start, until it returns. The caller
// checks Running first: Call itself does not refuse.
func (g *Guard[T]) Call(ctx context.Context, start time.Time, call func() T) (T, bool) {
	var r T // written by the call's goroutine; read only once it is done
	done := make(chan struct{})
	go func() {
		r = call()
		close(done)
	}()
	select {
	case <-done:
		return r, true
	case <-ctx.Done():
		g.mu.Lock()
		g.left, g.since = done, start
		g.mu.Unlock()
		var zero T
		return zero, false
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
	select {
	case <-left:
		return true
	case <-time.After(d):
		return false
	}
}
