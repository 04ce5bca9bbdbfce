package hung

import (
	"context"
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
	if !g.Wait(time.Second) {
		t.Fatal("Wait timed out after the call returned")
	}
	if _, running := g.Running(); running {
		t.Fatal("Running after the hung call returned")
	}
}
