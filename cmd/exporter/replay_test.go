package main

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/gpudiag/gpudiag/engine"
)

// --replay.loop replays the trace over and over: pass k is the recorded
// trace shifted by k × (its span + the loop gap), so every collector's time
// keeps moving forward and the window evicts by age as in a live run.
func TestReplayLoopShiftsEachPass(t *testing.T) {
	path := filepath.Join(tracesDir, "bf16_gemm.gdrec")
	names, intervals, _, err := scanRecord(path)
	if err != nil {
		t.Fatal(err)
	}
	recorded := map[string][]time.Time{}
	var earliest, latest time.Time
	for _, fr := range readFrames(t, path) {
		ts := fr.Time()
		recorded[fr.Collector] = append(recorded[fr.Collector], ts)
		if earliest.IsZero() || ts.Before(earliest) {
			earliest = ts
		}
		if ts.After(latest) {
			latest = ts
		}
	}
	gap := loopGap(intervals, time.Second)
	if gap < 900*time.Millisecond || gap > 1100*time.Millisecond {
		t.Fatalf("loop gap %v; the trace's fastest collectors sample every second", gap)
	}
	period := latest.Sub(earliest) + gap

	cs, decoders, err := replayCollectors(names, intervals)
	if err != nil {
		t.Fatal(err)
	}
	const passes = 3
	const windowAge = 45 * time.Second // shorter than two passes: eviction by age must engage
	window := engine.NewWindow(windowAge, 64<<20)
	clock := &replayClock{}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	fed := map[string][]time.Time{}
	eng := engine.New(engine.Options{Interval: time.Second, Window: window, Now: clock.Now,
		OnSample: func(c string, ts time.Time, _ any) {
			fed[c] = append(fed[c], ts)
			if c == "gpu" && len(fed[c]) == passes*len(recorded["gpu"]) {
				cancel()
			}
		}})
	for _, c := range cs {
		eng.Add(c, 0)
	}
	r := &replayer{path: path, loop: true, gap: gap, eng: eng, decoders: decoders, clock: clock, log: zap.NewNop()}
	if err := r.run(ctx); err != nil {
		t.Fatal(err)
	}

	for c, rec := range recorded {
		got := fed[c]
		if c == "gpu" && len(got) != passes*len(rec) {
			t.Fatalf("gpu: %d samples fed; want %d passes of %d", len(got), passes, len(rec))
		}
		for i, ts := range got {
			want := rec[i%len(rec)].Add(time.Duration(i/len(rec)) * period)
			if !ts.Equal(want) {
				t.Fatalf("%s sample %d (pass %d) at %v; want %v", c, i, i/len(rec)+1, ts, want)
			}
			if i > 0 && !ts.After(got[i-1]) {
				t.Fatalf("%s sample %d at %v does not follow %v", c, i, ts, got[i-1])
			}
		}
	}
	st := window.Stats()["gpu"]
	if st.Span > windowAge || st.Samples >= len(fed["gpu"]) {
		t.Fatalf("window holds %d gpu samples over %v after %d fed; want at most %v", st.Samples, st.Span, len(fed["gpu"]), windowAge)
	}
}

func TestLoopGap(t *testing.T) {
	for _, tc := range []struct {
		intervals map[string]time.Duration
		want      time.Duration
	}{
		{map[string]time.Duration{"gpu": time.Second, "gpuprocess": 5 * time.Second}, time.Second},
		{map[string]time.Duration{"gpuprocess": 5 * time.Second, "tuning": time.Minute}, 5 * time.Second},
		{map[string]time.Duration{"gpu": 0}, 200 * time.Millisecond}, // one sample each: the fallback
		{nil, 200 * time.Millisecond},
	} {
		if got := loopGap(tc.intervals, 200*time.Millisecond); got != tc.want {
			t.Errorf("loopGap(%v) = %v; want %v", tc.intervals, got, tc.want)
		}
	}
}
