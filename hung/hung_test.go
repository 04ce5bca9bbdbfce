package hung

import (
	"context"
	"runtime"
	"sync"
	"testing"
	"time"
)

func TestGuardLeavesAHungCallAndRefusesUntilItReturns(t *testing.T) {
	var g Guard[int]
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
	// The call now returns: Wait must see it, however long a loaded
	// machine takes to run the worker; only a call that never ends (or a
	// Wait that never looks) outlasts the test's time.
	if !g.Wait(timeLeft(t)) {
		t.Fatal("Wait timed out after the call returned")
	}
	if _, running := g.Running(); running {
		t.Fatal("Running after the hung call returned")
	}
}

func TestGuardKeepsOneWorkerAcrossCalls(t *testing.T) {
	var g Guard[int]
	if r, ok := g.Call(context.Background(), time.Now(), func() int { return 0 }); !ok || r != 0 {
		t.Fatalf("Call = %d, %v; want 0, true", r, ok)
	}
	before := runtime.NumGoroutine()
	for i := 1; i <= 100; i++ {
		if r, ok := g.Call(context.Background(), time.Now(), func() int { return i }); !ok || r != i {
			t.Fatalf("call %d = %d, %v", i, r, ok)
		}
	}
	if grown := runtime.NumGoroutine() - before; grown > 0 {
		t.Errorf("%d more goroutines after 100 calls; want the one worker reused", grown)
	}
}

func TestGuardAnswersEachCallWithItsOwnResult(t *testing.T) {
	var g Guard[int]
	release := make(chan struct{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	if _, ok := g.Call(ctx, time.Now(), func() int { <-release; return -1 }); ok {
		t.Fatal("Call returned ok for a call that outlived its context")
	}
	// A call made while the hung one still runs gets a worker of its own.
	if r, ok := g.Call(context.Background(), time.Now(), func() int { return 2 }); !ok || r != 2 {
		t.Fatalf("Call beside a hung call = %d, %v; want 2, true", r, ok)
	}
	close(release)
	if !g.Wait(timeLeft(t)) { // as above: judged by return, not speed
		t.Fatal("Wait timed out after the hung call returned")
	}
	for i := 3; i < 6; i++ {
		if r, ok := g.Call(context.Background(), time.Now(), func() int { return i }); !ok || r != i {
			t.Fatalf("Call after the hung call returned = %d, %v; want %d (not its stale result)", r, ok, i)
		}
	}

	// Calls made at once each get their own answer.
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if r, ok := g.Call(context.Background(), time.Now(), func() int { time.Sleep(time.Millisecond); return 100 + i }); !ok || r != 100+i {
				t.Errorf("concurrent call %d = %d, %v", i, r, ok)
			}
		}()
	}
	wg.Wait()
}

// A call handed to the worker after its previous call's result was sent, but
// before the worker checked it is still kept, runs even when Close comes in
// between (the worker once ended with the call in its buffer, and the caller
// waited for its context). The lock held by the test orders the parties:
// A's timeout path, B's Call, Close, then the worker.
func TestGuardCloseServesAHandedCall(t *testing.T) {
	var g Guard[int]
	releaseA := make(chan struct{})
	startedA := make(chan struct{})
	ctxA, cancelA := context.WithCancel(context.Background())
	aDone := make(chan bool)
	go func() {
		_, ok := g.Call(ctxA, time.Now(), func() int { close(startedA); <-releaseA; return 1 })
		aDone <- ok
	}()
	<-startedA
	pause := func() { time.Sleep(30 * time.Millisecond) }

	g.mu.Lock() // queue, in order: A's timeout path, B's Call, Close, the worker
	cancelA()
	pause()
	bRan := make(chan struct{})
	bDone := make(chan bool, 1)
	go func() {
		_, ok := g.Call(context.Background(), time.Now(), func() int { close(bRan); return 2 })
		bDone <- ok
	}()
	pause()
	go g.Close()
	pause()
	close(releaseA) // the worker puts A's result in its buffer, then waits for g.mu
	pause()
	g.mu.Unlock()

	if !<-aDone {
		t.Fatal("A returned !ok although its result was there")
	}
	select {
	case ok := <-bDone:
		if !ok {
			t.Fatal("B returned !ok although its call ran")
		}
	case <-time.After(timeLeft(t)):
		// B's context never ends: the bug blocked it for good, which
		// only the test's time tells from a slow machine.
		select {
		case <-bRan:
			t.Fatal("B's call ran but Call B did not return")
		default:
		}
		_, running := g.Running()
		t.Fatalf("Call B accepted by the worker never ran and is still blocked (Running=%v)", running)
	}
}

// timeLeft is the wait that tells a call that never returns from a slow
// one without a limit of its own: until shortly before the test binary's
// -timeout would end the run, or a day where there is none. A wait on it
// fails nothing the timeout would not, and names what was stuck.
func timeLeft(t *testing.T) time.Duration {
	d, ok := t.Deadline()
	if !ok {
		return 24 * time.Hour
	}
	left := time.Until(d)
	return left - min(left/10, 30*time.Second)
}

// deepCall needs about depth KiB of stack, as a collector's sample does
// (a few frames of parsers and the procfs readers).
//
//go:noinline
func deepCall(depth int) int {
	var pad [1024]byte
	pad[depth%len(pad)] = byte(depth)
	if depth == 0 {
		return int(pad[0])
	}
	return deepCall(depth-1) + int(pad[depth%len(pad)])
}

// BenchmarkGuardCall is one guarded call of a function needing 32 KiB of
// stack, the engine's path for every sample.
func BenchmarkGuardCall(b *testing.B) {
	var g Guard[int]
	defer g.Close()
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		g.Call(ctx, time.Time{}, func() int { return deepCall(32) })
	}
}
