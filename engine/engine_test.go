package engine

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// fakeCollector returns what its sample func returns and exports one gauge.
type fakeCollector struct {
	name   string
	sample func(ctx context.Context) (any, error)
}

var fakeDesc = prometheus.NewDesc("gpudiag_fake_value", "Fake.", []string{"collector"}, nil)

func (f *fakeCollector) Name() string { return f.name }
func (f *fakeCollector) Sample(ctx context.Context) (any, error) {
	return f.sample(ctx)
}
func (f *fakeCollector) Metrics(s any, emit func(prometheus.Metric)) {
	emit(prometheus.MustNewConstMetric(fakeDesc, prometheus.GaugeValue, s.(float64), f.name))
}

func value(v float64) func(context.Context) (any, error) {
	return func(context.Context) (any, error) { return v, nil }
}

func TestSampleOnceExportsLatestAndSelfMetrics(t *testing.T) {
	e := New(Options{Interval: time.Second, Window: NewWindow(time.Minute, 1<<20)})
	e.Add(&fakeCollector{name: "ok", sample: value(42)}, 0)
	e.Add(&fakeCollector{name: "bad", sample: func(context.Context) (any, error) { return nil, errors.New("boom") }}, 0)
	e.SampleOnce(context.Background())

	want := `
# HELP gpudiag_collector_success Whether the collector's last sample succeeded (1) or failed, timed out or is still running (0).
# TYPE gpudiag_collector_success gauge
gpudiag_collector_success{collector="bad"} 0
gpudiag_collector_success{collector="ok"} 1
# HELP gpudiag_fake_value Fake.
# TYPE gpudiag_fake_value gauge
gpudiag_fake_value{collector="ok"} 42
`
	if err := testutil.GatherAndCompare(e, strings.NewReader(want), "gpudiag_collector_success", "gpudiag_fake_value"); err != nil {
		t.Fatal(err)
	}
	st := e.Statuses()
	if st[0].Name != "bad" || st[0].LastError != "boom" || st[0].Failures != 1 {
		t.Fatalf("bad collector status: %+v", st[0])
	}
}

func TestPanicIsReportedNotPropagated(t *testing.T) {
	e := New(Options{Interval: time.Second})
	e.Add(&fakeCollector{name: "panics", sample: func(context.Context) (any, error) { panic("kaboom") }}, 0)
	e.SampleOnce(context.Background())
	st := e.Statuses()[0]
	if st.Success || !strings.Contains(st.LastError, "kaboom") {
		t.Fatalf("panic not reported: %+v", st)
	}
}

// A panic in what processes a sample (the analyzers, the recorder) is
// survived and logged once per kind: the sample still reaches the window and
// its metrics, and later samples are processed again.
func TestOnSamplePanicIsSurvived(t *testing.T) {
	core, logs := observer.New(zap.ErrorLevel)
	w := NewWindow(time.Minute, 1<<20)
	var processed int
	e := New(Options{Interval: time.Second, Window: w, Logger: zap.New(core), OnSample: func(string, time.Time, any) {
		processed++
		if processed <= 3 {
			panic("analysis bug")
		}
	}})
	e.Add(&fakeCollector{name: "ok", sample: value(1)}, 0)
	for range 4 {
		e.SampleOnce(context.Background())
	}
	if processed != 4 {
		t.Errorf("OnSample ran %d times; want 4 (once per sample, after panics)", processed)
	}
	if n := len(w.entries("ok", time.Time{})); n != 4 {
		t.Errorf("window holds %d samples; want 4", n)
	}
	if st := e.Statuses()[0]; !st.Success {
		t.Errorf("collector marked failed by a panic after its sample: %+v", st)
	}
	if n := logs.FilterMessage("processing a sample panicked; the daemon keeps serving").Len(); n != 1 {
		t.Errorf("%d panic logs for 3 panics of one kind; want 1", n)
	}
}

// A collector that hangs must neither block a scrape nor another collector,
// and must not pile up goroutines: one sample in flight at most.
func TestHungCollectorDoesNotBlockScrapeOrOthers(t *testing.T) {
	release := make(chan struct{})
	var calls int
	var mu sync.Mutex
	hang := func(ctx context.Context) (any, error) {
		mu.Lock()
		calls++
		mu.Unlock()
		<-release // ignores ctx, as a stuck driver call would
		return 1.0, nil
	}
	e := New(Options{Interval: 20 * time.Millisecond, Timeout: 10 * time.Millisecond})
	e.Add(&fakeCollector{name: "hang", sample: hang}, 0)
	e.Add(&fakeCollector{name: "fine", sample: value(7)}, 0)

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { e.Run(ctx); close(done) }()

	// Judged by progress, not by a clock: once the hung collector has
	// failed three times (it is stuck for good until release), "fine"
	// must succeed again. Under load a 10 ms timeout may fail some of
	// fine's samples too; one success after the hang is the proof, and
	// only the test binary's timeout ends the wait.
	guard := untilTestTimeout(t)
	var stuckAt time.Time
	for {
		st := e.Statuses()
		if st[0].Name != "fine" {
			t.Fatalf("statuses %+v; want fine first", st)
		}
		if stuckAt.IsZero() && st[1].Failures >= 3 {
			stuckAt = time.Now()
		}
		if !stuckAt.IsZero() && st[0].LastSuccess.After(stuckAt) {
			break
		}
		select {
		case <-guard:
			t.Fatalf("collectors did not progress: %+v", st)
		case <-time.After(5 * time.Millisecond):
		}
	}

	// A scrape returns while the hung sample is still blocked: blocked
	// behind it, the scrape would wait until release, which comes later.
	scraped := make(chan int, 1)
	go func() {
		n, _ := testutil.GatherAndCount(e)
		scraped <- n
	}()
	select {
	case n := <-scraped:
		if n == 0 {
			t.Fatal("scrape returned nothing")
		}
	case <-guard:
		t.Fatal("scrape blocked behind a hung collector")
	}
	hangSt := e.Statuses()[1]
	if hangSt.Success || !strings.Contains(hangSt.LastError, "still running") && !strings.Contains(hangSt.LastError, "timed out") {
		t.Fatalf("hung collector not reported: %+v", hangSt)
	}
	mu.Lock()
	if calls != 1 {
		t.Errorf("hung collector was called %d times; want 1 (no pile-up)", calls)
	}
	mu.Unlock()

	close(release)
	cancel()
	select {
	case <-done:
	case <-guard:
		t.Fatal("Run did not return after cancel")
	}
}

// untilTestTimeout fires shortly before the test binary's -timeout would
// end the run, or never where there is none: a wait on it tells a call
// that never returns from a slow one without a limit of its own, failing
// nothing the timeout would not, but naming what was stuck.
func untilTestTimeout(t *testing.T) <-chan time.Time {
	d, ok := t.Deadline()
	if !ok {
		return nil
	}
	left := time.Until(d)
	return time.After(left - min(left/10, 30*time.Second))
}

func TestStaleSampleIsDropped(t *testing.T) {
	now := time.Unix(1000, 0)
	fail := false
	e := New(Options{Interval: time.Second, Now: func() time.Time { return now }})
	e.Add(&fakeCollector{name: "c", sample: func(context.Context) (any, error) {
		if fail {
			return nil, errors.New("down")
		}
		return 3.0, nil
	}}, 0)
	e.SampleOnce(context.Background())
	fail = true
	now = now.Add(time.Second)
	e.SampleOnce(context.Background())
	// One failed cycle: the last good value is still served.
	if n, _ := testutil.GatherAndCount(e, "gpudiag_fake_value"); n != 1 {
		t.Fatalf("fresh sample not served after one failure: %d series", n)
	}
	now = now.Add(10 * time.Second)
	if n, _ := testutil.GatherAndCount(e, "gpudiag_fake_value"); n != 0 {
		t.Fatalf("stale sample still served: %d series", n)
	}
}

type slowCollector struct{ fakeCollector }

func (slowCollector) Interval() time.Duration { return time.Minute }

func TestCollectorOwnInterval(t *testing.T) {
	e := New(Options{Interval: time.Second})
	e.Add(&slowCollector{fakeCollector{name: "slow", sample: value(1)}}, 0)
	e.Add(&fakeCollector{name: "fast", sample: value(1)}, 0)
	e.Add(&slowCollector{fakeCollector{name: "forced", sample: value(1)}}, 5*time.Second)
	got := map[string]time.Duration{}
	for _, s := range e.Statuses() {
		got[s.Name] = s.Interval
	}
	if got["slow"] != time.Minute || got["fast"] != time.Second || got["forced"] != 5*time.Second {
		t.Fatalf("intervals %v", got)
	}
}

// A collector that panics every sample logs its stack when the panic starts
// or changes, not every interval.
func TestRepeatedPanicLoggedOnce(t *testing.T) {
	core, logs := observer.New(zapcore.DebugLevel)
	msg := "same bug"
	e := New(Options{Interval: time.Second, Logger: zap.New(core)})
	e.Add(&fakeCollector{name: "panics", sample: func(context.Context) (any, error) { panic(msg) }}, 0)
	for range 5 {
		e.SampleOnce(context.Background())
	}
	msg = "another bug"
	e.SampleOnce(context.Background())

	panics := logs.FilterMessage("collector panicked").All()
	if len(panics) != 2 {
		t.Fatalf("%d panic logs for 6 panics of 2 kinds; want 2", len(panics))
	}
	for i, want := range []string{"panic: same bug", "panic: another bug"} {
		fields := panics[i].ContextMap()
		if fields["error"] != want || !strings.Contains(fmt.Sprint(fields["stack"]), "engine_test.go") {
			t.Errorf("panic log %d: %v; want error %q and the stack", i, fields, want)
		}
	}
	if st := e.Statuses()[0]; st.Failures != 6 {
		t.Errorf("%d failures counted; want 6", st.Failures)
	}
}

// pacedCollector asks for its next sample after next, then stops asking.
type pacedCollector struct {
	fakeCollector
	next    time.Duration
	samples atomic.Int32
	fast    int32 // samples for which it asks to be fast
}

func (p *pacedCollector) NextSample() time.Duration {
	if p.samples.Load() <= p.fast {
		return p.next
	}
	return 0
}

// A pacer gets its next samples as soon as it asks, then falls back to its
// interval (an hour here: no more sample comes in the test).
func TestPacerSamplesSoonerWhileItAsks(t *testing.T) {
	p := &pacedCollector{next: time.Millisecond, fast: 5}
	p.fakeCollector = fakeCollector{name: "paced", sample: func(context.Context) (any, error) {
		p.samples.Add(1)
		return 1.0, nil
	}}
	e := New(Options{Interval: time.Hour})
	e.Add(p, 0)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { e.Run(ctx); close(done) }()
	guard := time.After(time.Minute) // not a timing assertion: a stuck loop
	for p.samples.Load() < 6 {
		select {
		case <-guard:
			t.Fatalf("%d samples; the pacer asked for 6 at once", p.samples.Load())
		case <-time.After(time.Millisecond):
		}
	}
	time.Sleep(50 * time.Millisecond)
	if n := p.samples.Load(); n != 6 {
		t.Errorf("%d samples; want 6 (the first, then 5 asked for), then none before the hour", n)
	}
	cancel()
	<-done
}

// promptedCollector samples when its channel fires.
type promptedCollector struct {
	fakeCollector
	prompt  chan struct{}
	samples atomic.Int32
}

func (p *promptedCollector) NextSample() time.Duration { return 0 }
func (p *promptedCollector) Prompt() <-chan struct{}   { return p.prompt }

// A prompt starts a sample at once, long before the interval's tick.
func TestPromptStartsASample(t *testing.T) {
	p := &promptedCollector{prompt: make(chan struct{}, 1)}
	p.fakeCollector = fakeCollector{name: "prompted", sample: func(context.Context) (any, error) {
		p.samples.Add(1)
		return 1.0, nil
	}}
	e := New(Options{Interval: time.Hour})
	e.Add(p, 0)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { e.Run(ctx); close(done) }()
	wait := func(n int32) {
		guard := time.After(time.Minute) // not a timing assertion: a stuck loop
		for p.samples.Load() < n {
			select {
			case <-guard:
				t.Fatalf("%d samples; want %d", p.samples.Load(), n)
			case <-time.After(time.Millisecond):
			}
		}
	}
	wait(1)
	for i := int32(2); i <= 4; i++ {
		p.prompt <- struct{}{}
		wait(i)
	}
	cancel()
	<-done
}

// countingCollector counts its Metrics calls; from sample number badFrom on
// it exports a series twice, which families rejects.
type countingCollector struct {
	n, metricsCalls atomic.Int64
	badFrom         int64
}

var countingDesc = prometheus.NewDesc("gpudiag_counting_value", "Counting.", nil, nil)

func (c *countingCollector) Name() string { return "counting" }
func (c *countingCollector) Sample(context.Context) (any, error) {
	return float64(c.n.Add(1)), nil
}
func (c *countingCollector) Metrics(s any, emit func(prometheus.Metric)) {
	c.metricsCalls.Add(1)
	v := s.(float64)
	emit(prometheus.MustNewConstMetric(countingDesc, prometheus.GaugeValue, v))
	if c.badFrom > 0 && int64(v) >= c.badFrom {
		emit(prometheus.MustNewConstMetric(countingDesc, prometheus.GaugeValue, v))
	}
}

// A sample's families are made by the first scrape that wants them, once:
// samples nobody scrapes cost no metrics, and a second scrape of the same
// sample reuses them.
func TestFamiliesAreMadeOncePerScrapedSample(t *testing.T) {
	c := &countingCollector{}
	e := New(Options{Interval: time.Second})
	e.Add(c, 0)
	for range 5 {
		e.SampleOnce(context.Background())
	}
	if n := c.metricsCalls.Load(); n != 0 {
		t.Fatalf("%d Metrics calls before any scrape; want 0", n)
	}
	want := "# HELP gpudiag_counting_value Counting.\n# TYPE gpudiag_counting_value gauge\ngpudiag_counting_value %d\n"
	for range 2 {
		if err := testutil.GatherAndCompare(e, strings.NewReader(fmt.Sprintf(want, 5)), "gpudiag_counting_value"); err != nil {
			t.Fatal(err)
		}
	}
	if n := c.metricsCalls.Load(); n != 1 {
		t.Fatalf("%d Metrics calls for two scrapes of one sample; want 1", n)
	}
	e.SampleOnce(context.Background())
	if err := testutil.GatherAndCompare(e, strings.NewReader(fmt.Sprintf(want, 6)), "gpudiag_counting_value"); err != nil {
		t.Fatal(err)
	}
	if n := c.metricsCalls.Load(); n != 2 {
		t.Fatalf("%d Metrics calls after a new sample's scrape; want 2", n)
	}
}

// Families that cannot be made fail the collector, counted once per
// sample, and the scrape still serves everything else; the next good
// sample recovers.
func TestBadFamiliesFailTheCollectorNotTheScrape(t *testing.T) {
	c := &countingCollector{badFrom: 2}
	e := New(Options{Interval: time.Second})
	e.Add(c, 0)
	e.Add(&fakeCollector{name: "ok", sample: value(7)}, 0)
	e.SampleOnce(context.Background())
	e.SampleOnce(context.Background()) // sample 2 exports a series twice
	for range 3 {
		want := `
# HELP gpudiag_collector_success Whether the collector's last sample succeeded (1) or failed, timed out or is still running (0).
# TYPE gpudiag_collector_success gauge
gpudiag_collector_success{collector="counting"} 0
gpudiag_collector_success{collector="ok"} 1
# HELP gpudiag_fake_value Fake.
# TYPE gpudiag_fake_value gauge
gpudiag_fake_value{collector="ok"} 7
`
		if err := testutil.GatherAndCompare(e, strings.NewReader(want), "gpudiag_collector_success", "gpudiag_fake_value", "gpudiag_counting_value"); err != nil {
			t.Fatal(err)
		}
	}
	for _, st := range e.Statuses() {
		if st.Name == "counting" && (st.Success || st.Failures != 1 || !strings.Contains(st.LastError, "twice")) {
			t.Fatalf("status after three scrapes of one bad sample: %+v", st)
		}
	}
	c.badFrom = 0
	e.SampleOnce(context.Background())
	if err := testutil.GatherAndCompare(e, strings.NewReader(
		"# HELP gpudiag_counting_value Counting.\n# TYPE gpudiag_counting_value gauge\ngpudiag_counting_value 3\n"),
		"gpudiag_counting_value"); err != nil {
		t.Fatal(err)
	}
}

// Scrapes make families while the collectors sample (run with -race).
func TestScrapesWhileSampling(t *testing.T) {
	c := &countingCollector{}
	e := New(Options{Interval: time.Millisecond})
	e.Add(c, 0)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { e.Run(ctx); close(done) }()
	// Gather until the collector has sampled a few times, however slowly
	// a loaded machine schedules it; the guard only stops a hang.
	guard := time.Now().Add(time.Minute)
	for gathers := 0; gathers < 200 || c.n.Load() < 5; gathers++ {
		if time.Now().After(guard) {
			t.Fatalf("hang guard: %d samples after %d scrapes", c.n.Load(), gathers)
		}
		if _, err := e.Gather(); err != nil {
			t.Fatal(err)
		}
	}
	cancel()
	<-done
}

// A scrape that read sample 1 and builds after sample 2's families were made
// (a replay builds each as it ingests it) serves sample 2's: building sample
// 1 again would export its counters going back, and move a looped replay's
// carried values back (TestSoakReplayLoop saw hundreds under CPU load).
func TestOlderSampleIsNeverBuiltAfterANewer(t *testing.T) {
	c := &countingCollector{}
	e := New(Options{Interval: time.Second})
	e.Add(c, 0)
	st := e.states[0]
	e.familiesOf(st, float64(2), 2)
	fams := e.familiesOf(st, float64(1), 1)
	if n := c.metricsCalls.Load(); n != 1 {
		t.Errorf("%d Metrics calls; want 1 (sample 1 is older than the families built)", n)
	}
	if len(fams) != 1 || fams[0].GetMetric()[0].GetGauge().GetValue() != 2 {
		t.Errorf("served %v; want sample 2's families", fams)
	}
}
