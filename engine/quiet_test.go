package engine

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// countedCollector counts its samples.
type countedCollector struct {
	fakeCollector
	samples atomic.Int32
}

func newCounted(name string) *countedCollector {
	c := &countedCollector{}
	c.fakeCollector = fakeCollector{name: name, sample: func(context.Context) (any, error) {
		c.samples.Add(1)
		return 1.0, nil
	}}
	return c
}

// sentinelCollector watches for work: it keeps its clock while quiet.
type sentinelCollector struct{ *countedCollector }

func (sentinelCollector) WatchesForWork() bool { return true }

// waitSamples waits until c has sampled at least n times; only a loop that
// never gets there runs into the guard.
func waitSamples(t *testing.T, c *countedCollector, n int32) {
	t.Helper()
	guard := time.After(time.Minute)
	for c.samples.Load() < n {
		select {
		case <-guard:
			t.Fatalf("%s: %d samples; want %d", c.name, c.samples.Load(), n)
		case <-time.After(time.Millisecond):
		}
	}
}

// While the node is quiet a collector samples at the quiet interval and a
// sentinel at its own; when the spell ends the slowed one samples at once.
func TestQuietSlowsAllButSentinels(t *testing.T) {
	host, gpu := newCounted("host"), newCounted("gpu")
	e := New(Options{Interval: 5 * time.Millisecond, QuietInterval: time.Hour})
	e.Add(host, 0)
	e.Add(sentinelCollector{gpu}, 0)
	e.SetQuiet(true)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { e.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()

	waitSamples(t, gpu, 20)
	waitSamples(t, host, 1)
	// Twenty samples of the sentinel are a hundred of the host's own
	// interval: quiet, it took its first and waits an hour for the next.
	if n := host.samples.Load(); n != 1 {
		t.Fatalf("quiet: the host collector sampled %d times while the sentinel sampled %d", n, gpu.samples.Load())
	}
	// The loop sets the host's pace right after its sample: wait for it.
	guard := time.After(time.Minute) // not a timing assertion: a pace never set
	for {
		intervals := map[string]time.Duration{}
		for _, s := range e.Statuses() {
			intervals[s.Name] = s.Interval
		}
		if intervals["host"] == time.Hour && intervals["gpu"] == 5*time.Millisecond {
			break
		}
		select {
		case <-guard:
			t.Fatalf("quiet: status intervals %v", intervals)
		case <-time.After(time.Millisecond):
		}
	}

	e.SetQuiet(false)
	waitSamples(t, host, 3) // an hour away unless woken
	e.SetQuiet(true)
	e.SetQuiet(true) // again: no second spell, nothing closed twice
	e.SetQuiet(false)
	e.SetQuiet(false)
}

// A quiet collector's last sample is served for as long as the quiet
// interval says the next one may take, and no longer.
func TestQuietSampleStaysFresh(t *testing.T) {
	var now atomic.Pointer[time.Time]
	t0 := time.Unix(1000, 0)
	now.Store(&t0)
	clock := func() time.Time { return *now.Load() }
	host := newCounted("host")
	e := New(Options{Interval: time.Second, QuietInterval: time.Minute, Now: clock})
	e.Add(host, 0)
	e.SetQuiet(true)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { e.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	waitSamples(t, host, 1)
	// The loop sets its pace right after the sample; wait for it.
	guard := time.After(time.Minute) // not a timing assertion: a loop that never sets it
	for e.Statuses()[0].Interval != time.Minute {
		select {
		case <-guard:
			t.Fatalf("quiet: status interval %v, want a minute", e.Statuses()[0].Interval)
		case <-time.After(time.Millisecond):
		}
	}

	later := t0.Add(90 * time.Second) // past 2 s + 1 s, within 2 min + 1 s
	now.Store(&later)
	if n, _ := testutil.GatherAndCount(e, "gpudiag_fake_value"); n != 1 {
		t.Fatalf("a quiet collector's sample 90 s old is dropped (%d series); its next is due a minute after it", n)
	}
	want := `
# HELP gpudiag_collector_interval_seconds How often the collector samples now: its own interval, or --sample.quiet-interval while no GPU of the node has work.
# TYPE gpudiag_collector_interval_seconds gauge
gpudiag_collector_interval_seconds{collector="host"} 60
`
	if err := testutil.GatherAndCompare(e, strings.NewReader(want), "gpudiag_collector_interval_seconds"); err != nil {
		t.Fatal(err)
	}
	muchLater := t0.Add(5 * time.Minute)
	now.Store(&muchLater)
	if n, _ := testutil.GatherAndCount(e, "gpudiag_fake_value"); n != 0 {
		t.Fatalf("a sample two quiet intervals overdue is still served (%d series)", n)
	}
}

// A collector whose own interval is longer than the quiet interval keeps it.
func TestQuietKeepsLongerIntervals(t *testing.T) {
	e := New(Options{Interval: time.Second, QuietInterval: 5 * time.Second})
	slow := &slowCollector{fakeCollector{name: "slow", sample: value(1)}}
	e.Add(slow, 0)
	e.SetQuiet(true)
	next, wake := e.pace(e.states[0])
	if next != time.Minute || wake != nil {
		t.Fatalf("a minute's collector while quiet: next %v, wake %v; want its minute and no wake", next, wake)
	}
}

// A sentinel that fails ends the quiet spell: unread GPUs may have work.
func TestQuietEndsWhenTheSentinelFails(t *testing.T) {
	e := New(Options{Interval: time.Second, QuietInterval: time.Hour})
	fail := false
	gpu := sentinelCollector{&countedCollector{fakeCollector: fakeCollector{name: "gpu", sample: func(context.Context) (any, error) {
		if fail {
			return nil, errors.New("GPU is lost")
		}
		return 1.0, nil
	}}}}
	host := newCounted("host")
	e.Add(host, 0)
	e.Add(gpu, 0)
	e.SetQuiet(true)
	e.SampleOnce(context.Background()) // the host's failures would not end it
	if next, _ := e.pace(e.states[0]); next != time.Hour {
		t.Fatalf("quiet, the GPUs read: the host waits %v, want the quiet hour", next)
	}
	fail = true
	e.SampleOnce(context.Background())
	if next, wake := e.pace(e.states[0]); next != time.Second || wake != nil {
		t.Fatalf("the GPUs failed: the host waits %v, want its second", next)
	}
}

// A replayed trace's quiet stretch keeps its samples served as long as they
// were live: the pace is the recorded gap where it is well past the
// interval, and the interval again once the samples come a second apart.
func TestIngestKeepsARecordedPace(t *testing.T) {
	e := New(Options{Interval: time.Second})
	e.Add(newCounted("host"), 0)
	t0 := time.Unix(1000, 0)
	for _, c := range []struct {
		at   time.Duration
		want time.Duration
	}{{0, time.Second}, {time.Second, time.Second}, {1100 * time.Millisecond, time.Second}, {6100 * time.Millisecond, 5 * time.Second}, {7100 * time.Millisecond, time.Second}} {
		if err := e.Ingest("host", t0.Add(c.at), 1.0); err != nil {
			t.Fatal(err)
		}
		if got := e.Statuses()[0].Interval; got != c.want {
			t.Fatalf("after the sample at %v: interval %v, want %v", c.at, got, c.want)
		}
	}
}

// A sentinel that hangs ends the quiet spell at its deadline, and again at
// each sample skipped while it still runs.
func TestQuietEndsWhenTheSentinelHangs(t *testing.T) {
	release := make(chan struct{})
	var calls atomic.Int32
	gpu := sentinelCollector{&countedCollector{fakeCollector: fakeCollector{name: "gpu", sample: func(ctx context.Context) (any, error) {
		if calls.Add(1) > 1 {
			<-release // the driver hangs from the second call on
		}
		return 1.0, nil
	}}}}
	host := newCounted("host")
	e := New(Options{Interval: 10 * time.Millisecond, Timeout: 5 * time.Millisecond, QuietInterval: time.Hour})
	e.Add(host, 0)
	e.Add(gpu, 0)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { e.Run(ctx); close(done) }()
	defer func() { close(release); cancel(); <-done }()
	waitSamples(t, host, 1)
	e.SetQuiet(true)
	// Only the hung GPU sample can end the spell: the host then samples
	// every 10 ms again instead of once an hour.
	n := host.samples.Load()
	waitSamples(t, host, n+5)
}
