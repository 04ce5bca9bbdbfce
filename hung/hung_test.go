package hung

import (
	"context"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestGuardLeavesAHungCallAndRefusesUntilItReturns(t *testing.T) {
	var g Guard[int]
	defer g.Close()
	if r, ok := g.Call(context.Background(), time.Now(), func() int { return 7 }); !ok || r != 7 {
		t.Fatalf("Call = %d, %v; want 7, true", r, ok)
	}
	if _, running := g.Running(); running {
		t.Fatal("Running after a call that returned")
	}
	release := make(chan struct{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	start := time.Unix(1_700_000_000, 0)
	if _, ok := g.Call(ctx, start, func() int { <-release; return 1 }); ok {
		t.Fatal("Call returned ok for a call that outlived its context")
	}
	if since, running := g.Running(); !running || !since.Equal(start) {
		t.Fatalf("Running = %v, %v; want %v, true", since, running, start)
	}
	if g.Wait(10 * time.Millisecond) {
		t.Fatal("Wait reported the hung call returned")
	}
	close(release)
	if !g.Wait(time.Second) {
		t.Fatal("Wait timed out after the call returned")
	}
	if _, running := g.Running(); running {
		t.Fatal("Running after the hung call returned")
	}
}

// Calls run one after another on one kept goroutine, which Close ends.
func TestGuardKeepsOneGoroutineUntilClose(t *testing.T) {
	defer goleak.VerifyNone(t)
	var g Guard[int]
	var first *worker
	for i := range 100 {
		if r, ok := g.Call(context.Background(), time.Now(), func() int { return i }); !ok || r != i {
			t.Fatalf("call %d = %d, %v", i, r, ok)
		}
		if first == nil {
			first = g.idle
		}
		if first == nil || g.idle != first {
			t.Fatalf("after call %d the kept goroutine is %p; want the first's, %p", i, g.idle, first)
		}
	}
	g.Close()
	// A call after Close still runs, on a goroutine that ends with it.
	if r, ok := g.Call(context.Background(), time.Now(), func() int { return 7 }); !ok || r != 7 {
		t.Fatalf("call after Close = %d, %v", r, ok)
	}
}

// The goroutine of a call left running is kept for the next call once the
// call returns; after Close it ends instead.
func TestGuardReusesALeftGoroutineAndEndsItAfterClose(t *testing.T) {
	defer goleak.VerifyNone(t)
	var g Guard[int]
	release := make(chan struct{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	if _, ok := g.Call(ctx, time.Now(), func() int { <-release; return 1 }); ok {
		t.Fatal("a call that outlived its context returned ok")
	}
	left := g.left
	close(release)
	if !g.Wait(time.Second) {
		t.Fatal("Wait timed out after the call returned")
	}
	if r, ok := g.Call(context.Background(), time.Now(), func() int { return 2 }); !ok || r != 2 {
		t.Fatalf("call = %d, %v", r, ok)
	}
	if g.idle != left {
		t.Errorf("the next call ran on %p; want the goroutine of the call that returned, %p", g.idle, left)
	}

	hold := make(chan struct{})
	ctx2, cancel2 := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel2()
	if _, ok := g.Call(ctx2, time.Now(), func() int { <-hold; return 3 }); ok {
		t.Fatal("a call that outlived its context returned ok")
	}
	g.Close()
	close(hold) // the left call returns after Close: its goroutine ends
}

// A kept goroutine ends after workerIdle without a call; the next call
// starts another.
func TestGuardGoroutineEndsWhenIdle(t *testing.T) {
	defer goleak.VerifyNone(t)
	defer func(d time.Duration) { workerIdle = d }(workerIdle)
	workerIdle = 20 * time.Millisecond
	var g Guard[int]
	g.Call(context.Background(), time.Now(), func() int { return 0 })
	kept := g.idle
	deadline := time.Now().Add(5 * time.Second)
	for kept.state.Load() != workerEnded && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if s := kept.state.Load(); s != workerEnded {
		t.Fatalf("the kept goroutine's state is %d after the idle time; want ended", s)
	}
	if r, ok := g.Call(context.Background(), time.Now(), func() int { return 5 }); !ok || r != 5 {
		t.Fatalf("call after the kept goroutine ended = %d, %v", r, ok)
	}
	g.Close()
}
