package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"go.uber.org/zap"

	gdcollectors "github.com/gpudiag/gpudiag/collectors"
	"github.com/gpudiag/gpudiag/engine"
	"github.com/gpudiag/gpudiag/record"
)

// --replay.loop replays the trace over and over: the first pass is the
// recorded trace shifted so that its first sample falls at the daemon's
// start, pass k+1 that shifted by a further k × (its span + the loop gap), so
// every collector's time keeps moving forward from now and the window evicts
// by age as in a live run.
func TestReplayLoopShiftsEachPass(t *testing.T) {
	path := filepath.Join(tracesDir, "bf16_gemm.gdrec")
	names, intervals, first, err := scanRecord(path)
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

	cs, decoders, loops, err := replayCollectors(names, intervals, true)
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
	start := time.Now().Truncate(time.Second) // any wall time: the daemon's start
	r := &replayer{path: path, loop: true, gap: gap, first: first, start: start, loops: loops,
		eng: eng, decoders: decoders, clock: clock, log: zap.NewNop()}
	if err := r.run(ctx); err != nil {
		t.Fatal(err)
	}

	for c, rec := range recorded {
		got := fed[c]
		if c == "gpu" && len(got) != passes*len(rec) {
			t.Fatalf("gpu: %d samples fed; want %d passes of %d", len(got), passes, len(rec))
		}
		for i, ts := range got {
			want := rec[i%len(rec)].Add(start.Sub(first) + time.Duration(i/len(rec))*period)
			if !ts.Equal(want) {
				t.Fatalf("%s sample %d (pass %d) at %v; want %v", c, i, i/len(rec)+1, ts, want)
			}
			if i > 0 && !ts.After(got[i-1]) {
				t.Fatalf("%s sample %d at %v does not follow %v", c, i, ts, got[i-1])
			}
		}
	}
	if got := fed["gpu"][0]; !got.Equal(start.Add(recorded["gpu"][0].Sub(first))) {
		t.Errorf("first gpu sample at %v; the trace's start maps to %v", got, start)
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

// A looped replay looks like a live daemon to Prometheus, scraped across two
// seams (the trace at ten times real time, a pass every ~3 s):
//   - every collector's last-success time (and so every freshness alert)
//     reads now, not the recording's date;
//   - no counter or histogram series ever reads less than it did before, so
//     rate() and increase() see no reset at the seams, and the counters do
//     carry on (the NCCL log's line counter ends above its recorded maximum);
//   - the NCCL facts and the finding built on them stay present from their
//     first appearance on, although each pass's first half (before the
//     all-reduce starts) has none in the trace.
func TestReplayLoopLooksLive(t *testing.T) {
	const speed = 10
	path := filepath.Join(tracesDir, "allreduce_p2p_disabled_nccl_log.gdrec")
	_, intervals, first, err := scanRecord(path)
	if err != nil {
		t.Fatal(err)
	}
	frames := readFrames(t, path)
	span := frames[len(frames)-1].Time().Sub(first)
	period := span + loopGap(intervals, time.Second)
	linesMax := recordedCounterMax(t, frames, "gpudiag_nccl_log_lines_total")
	if linesMax <= 0 {
		t.Fatalf("the trace's NCCL log line counter never rose (%v): the carry check below would prove nothing", linesMax)
	}

	before := time.Now()
	addr := freeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan error, 1)
	go func() {
		_, err := run(ctx, []string{"--web.listen-address=" + addr, "--replay=" + path, "--replay.loop",
			fmt.Sprintf("--replay.speed=%d", speed), "--web.disable-exporter-metrics"}, io.Discard, io.Discard, nil)
		stopped <- err
	}()
	client := &http.Client{Timeout: 30 * time.Second}
	defer func() {
		cancel()
		if err := <-stopped; err != nil {
			t.Error(err)
		}
		client.CloseIdleConnections()
	}()

	// Third pass: past two seams, wherever the daemon's start fell.
	end := before.Add(2*period + span/2)
	maxSeen := map[string]float64{} // every counter series' highest value so far
	var factsSince time.Time        // trace time the NCCL facts first showed
	scrapes, seamsHeld := 0, 0
	var lines float64
	hangGuard := time.Now().Add(3 * time.Minute) // not a timing assertion: a stuck replay
	for gpuTime := (time.Time{}); gpuTime.Before(end); {
		if time.Now().After(hangGuard) {
			t.Fatalf("hang guard: trace time %v after %d scrapes, want %v", gpuTime, scrapes, end)
		}
		time.Sleep(50 * time.Millisecond)
		fams, ok := scrapeFamilies(t, client, "http://"+addr+"/metrics")
		if !ok {
			continue // not up yet
		}
		scrapeEnd := time.Now()
		stamps := fams["gpudiag_collector_last_success_timestamp_seconds"].GetMetric()
		if len(stamps) == 0 {
			continue // no sample replayed yet
		}
		scrapes++
		// The replay runs at most speed× ahead of the wall clock from the
		// daemon's start (after before); a recorded date fails the lower
		// bound by days.
		latest := before.Add(time.Duration(speed*float64(scrapeEnd.Sub(before))) + period)
		for _, m := range stamps {
			ts := time.Unix(0, int64(m.GetGauge().GetValue()*1e9))
			if ts.Before(before) || ts.After(latest) {
				t.Fatalf("scrape %d: %s last succeeded at %v; want between the daemon's start %v and %v",
					scrapes, labelValue(m, "collector"), ts, before, latest)
			}
			if labelValue(m, "collector") == "gpu" {
				gpuTime = ts
			}
		}
		for name, mf := range fams {
			// The carry knows counters by type: a *_total gauge would escape it.
			if strings.HasSuffix(name, "_total") && mf.GetType() != dto.MetricType_COUNTER {
				t.Errorf("%s is a %s, not a counter", name, mf.GetType())
			}
		}
		for key, v := range counterSeries(fams) {
			if prev, ok := maxSeen[key]; ok && v < prev {
				t.Fatalf("scrape %d (trace time %v): %s went back from %v to %v", scrapes, gpuTime.Sub(before), key, prev, v)
			}
			maxSeen[key] = max(maxSeen[key], v)
			if strings.HasPrefix(key, "gpudiag_nccl_log_lines_total") {
				lines = max(lines, v)
			}
		}
		fallback := seriesValue(fams["gpudiag_nccl_fallback"], map[string]string{"gpu": "0", "kind": "p2p_disabled"})
		finding := seriesValue(fams["gpudiag_finding"], map[string]string{"check": "nccl_fallback"})
		switch {
		case factsSince.IsZero() && fallback == 1 && finding == 1:
			factsSince = gpuTime
		case !factsSince.IsZero() && (fallback != 1 || finding != 1):
			t.Fatalf("scrape %d: %v into the replay (facts since %v), nccl_fallback %v and the nccl_fallback finding %v; want both 1 across the seams",
				scrapes, gpuTime.Sub(before), factsSince.Sub(before), fallback, finding)
		case !factsSince.IsZero() && gpuTime.Sub(factsSince) > period:
			seamsHeld++ // a pass later: the first half of a pass, without facts in the trace, was crossed
		}
	}
	t.Logf("%d scrapes to trace time %v (pass %v), %d counter series; NCCL facts from %v on; log lines %v (recorded at most %v)",
		scrapes, end.Sub(before).Round(time.Second), 3, len(maxSeen), factsSince.Sub(before).Round(time.Second), lines, linesMax)
	if factsSince.IsZero() || seamsHeld == 0 {
		t.Fatalf("the NCCL facts were never seen a pass after they appeared (since %v): nothing was checked across a seam", factsSince)
	}
	if lines <= linesMax {
		t.Errorf("the NCCL log line counter reached %v, no more than the trace's %v: it did not carry on across the seams", lines, linesMax)
	}
}

// recordedCounterMax is the highest value any series of the named counter
// has in the trace.
func recordedCounterMax(t *testing.T, frames []record.Frame, name string) float64 {
	t.Helper()
	most := 0.0
	for _, fr := range frames {
		rc, err := gdcollectors.ReplayCollector(fr.Collector)
		if err != nil {
			t.Fatal(err)
		}
		s := rc.NewSample()
		if err := json.Unmarshal(fr.Sample, s); err != nil {
			t.Fatal(err)
		}
		reg := prometheus.NewPedanticRegistry()
		reg.MustRegister(sampleCollector{rc, s})
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() == name {
				for _, m := range mf.GetMetric() {
					most = max(most, m.GetCounter().GetValue())
				}
			}
		}
	}
	return most
}

// sampleCollector exports one sample's metrics to a registry.
type sampleCollector struct {
	c engine.Collector
	s any
}

func (c sampleCollector) Describe(chan<- *prometheus.Desc) {}
func (c sampleCollector) Collect(ch chan<- prometheus.Metric) {
	c.c.Metrics(c.s, func(m prometheus.Metric) { ch <- m })
}

// scrapeFamilies reads and parses url; false when the daemon is not up yet.
// A body that does not parse fails the test.
func scrapeFamilies(t *testing.T, client *http.Client, url string) (map[string]*dto.MetricFamily, bool) {
	t.Helper()
	resp, err := client.Get(url)
	if err != nil {
		return nil, false
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("%s: %s", url, resp.Status)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("%s: %v", url, err)
	}
	return fams, true
}

func labelValue(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// counterSeries flattens every counter and histogram series (count, sum and
// each bucket) to name{labels} → value.
func counterSeries(fams map[string]*dto.MetricFamily) map[string]float64 {
	out := map[string]float64{}
	for name, mf := range fams {
		for _, m := range mf.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, l.GetName()+"="+l.GetValue())
			}
			key := name + "{" + strings.Join(labels, ",") + "}"
			switch mf.GetType() {
			case dto.MetricType_COUNTER:
				out[key] = m.GetCounter().GetValue()
			case dto.MetricType_HISTOGRAM:
				h := m.GetHistogram()
				out[key+"_count"] = float64(h.GetSampleCount())
				out[key+"_sum"] = h.GetSampleSum()
				for _, b := range h.GetBucket() {
					out[fmt.Sprintf("%s_bucket{le=%g}", key, b.GetUpperBound())] = float64(b.GetCumulativeCount())
				}
			}
		}
	}
	return out
}

// seriesValue is the value of the family's first series whose labels
// include want; NaN when there is none.
func seriesValue(mf *dto.MetricFamily, want map[string]string) float64 {
	for _, m := range mf.GetMetric() {
		match := true
		for k, v := range want {
			if labelValue(m, k) != v {
				match = false
			}
		}
		if match {
			return m.GetGauge().GetValue()
		}
	}
	return math.NaN()
}

// fakeLoopSample is one reading of fakeLoopCollector: counters by label
// (absent: not exported), a histogram's count, a gauge.
type fakeLoopSample struct {
	counters map[string]float64
	hist     uint64
	gauge    float64
}

var (
	fakeCounterDesc = prometheus.NewDesc("fake_events_total", "Events.", []string{"kind"}, nil)
	fakeHistDesc    = prometheus.NewDesc("fake_latency_seconds", "Latency.", nil, nil)
	fakeGaugeDesc   = prometheus.NewDesc("fake_level", "Level.", nil, nil)
)

type fakeLoopCollector struct{}

func (fakeLoopCollector) Name() string                        { return "fake" }
func (fakeLoopCollector) Sample(context.Context) (any, error) { return nil, nil }
func (fakeLoopCollector) Metrics(s any, emit func(prometheus.Metric)) {
	r := s.(*fakeLoopSample)
	for kind, v := range r.counters {
		emit(prometheus.MustNewConstMetric(fakeCounterDesc, prometheus.CounterValue, v, kind))
	}
	if r.hist > 0 {
		emit(prometheus.MustNewConstHistogram(fakeHistDesc, r.hist, float64(r.hist)/10, map[float64]uint64{0.1: r.hist / 2, 1: r.hist}))
	}
	emit(prometheus.MustNewConstMetric(fakeGaugeDesc, prometheus.GaugeValue, r.gauge))
}

// exported feeds s to the loop collector as the replayer does (next, then
// Metrics on what next returned) and returns what was fed and the metrics,
// flattened as counterSeries does.
func exported(t *testing.T, l *loopCollector, s *fakeLoopSample) (any, map[string]float64) {
	t.Helper()
	fed := l.next(s)
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(sampleCollector{l, fed})
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	fams := map[string]*dto.MetricFamily{}
	for _, mf := range mfs {
		fams[mf.GetName()] = mf
	}
	out := counterSeries(fams)
	if g := fams["fake_level"]; g != nil {
		out["level"] = g.GetMetric()[0].GetGauge().GetValue()
	}
	return fed, out
}

// The loop's carry, on a trace with every kind of counter series: one with a
// since-boot value at the start (it carries on from where the last pass left
// it, the seam adding nothing), one that first appears mid-trace (each pass
// counts it again from its start at zero), one the trace itself resets (it
// resets each pass, as recorded, but is never carried below zero), and a
// histogram. Gauges pass through; pass 1 is the trace as recorded.
func TestLoopCollectorCarriesCounters(t *testing.T) {
	trace := []*fakeLoopSample{
		{counters: map[string]float64{"boot": 1000, "reset": 50}, hist: 4, gauge: 1},
		{counters: map[string]float64{"boot": 1010, "reset": 60, "mid": 1}, hist: 6, gauge: 2},
		{counters: map[string]float64{"boot": 1030, "reset": 5, "mid": 3}, hist: 10, gauge: 3},
	}
	l := newLoopCollector(intervalCollector{fakeLoopCollector{}, time.Second}, false)
	var got []map[string]float64
	for pass := 1; pass <= 3; pass++ {
		if pass > 1 {
			l.startPass()
		}
		for _, s := range trace {
			_, g := exported(t, l, s)
			got = append(got, g)
		}
	}
	key := func(kind string) string { return "fake_events_total{kind=" + kind + "}" }
	for i, want := range []struct{ boot, reset, mid, count float64 }{
		{1000, 50, math.NaN(), 4}, {1010, 60, 1, 6}, {1030, 5, 3, 10}, // pass 1: as recorded
		{1030, 50, math.NaN(), 10}, {1040, 60, 4, 12}, {1060, 5, 6, 16}, // offsets 30, 0 (the reset's end is below its start), 3, 6
		{1060, 50, math.NaN(), 16}, {1070, 60, 7, 18}, {1090, 5, 9, 22},
	} {
		g := got[i]
		mid, hasMid := g[key("mid")]
		if g[key("boot")] != want.boot || g[key("reset")] != want.reset || g["fake_latency_seconds{}_count"] != want.count ||
			hasMid != !math.IsNaN(want.mid) || (hasMid && mid != want.mid) {
			t.Errorf("sample %d (pass %d): boot %v reset %v mid %v (%v) histogram count %v; want %v %v %v %v",
				i, i/3+1, g[key("boot")], g[key("reset")], mid, hasMid, g["fake_latency_seconds{}_count"], want.boot, want.reset, want.mid, want.count)
		}
		if g["level"] != trace[i%3].gauge {
			t.Errorf("sample %d: gauge %v; want %v as recorded", i, g["level"], trace[i%3].gauge)
		}
		if b := g["fake_latency_seconds{}_bucket{le=1}"]; b != want.count {
			t.Errorf("sample %d: the +1 bucket holds %v; want the count %v", i, b, want.count)
		}
	}
	// Pass 1's reset aside (recorded), nothing goes back, seams included.
	for i := 3; i < len(got); i++ {
		for k, v := range got[i] {
			if prev, ok := got[i-1][k]; ok && v < prev && k != key("reset") && k != "level" {
				t.Errorf("sample %d: %s went back from %v to %v", i, k, prev, v)
			}
		}
	}
}

// A cumulative collector (the NCCL log tailer) keeps serving the previous
// pass's last sample, metrics and all, until the trace's own sample exports
// every family that one did; then the trace takes over, its counters
// carried.
func TestLoopCollectorHoldsCumulativeSample(t *testing.T) {
	start := &fakeLoopSample{counters: map[string]float64{"lines": 0}}
	facts := &fakeLoopSample{counters: map[string]float64{"lines": 40}, hist: 2, gauge: 1}
	end := &fakeLoopSample{counters: map[string]float64{"lines": 100}, hist: 5, gauge: 1}
	trace := []*fakeLoopSample{start, start, facts, end}
	l := newLoopCollector(intervalCollector{fakeLoopCollector{}, time.Second}, true)
	for _, s := range trace {
		exported(t, l, s)
	}
	l.startPass()
	for i, want := range []struct {
		sample *fakeLoopSample
		lines  float64
	}{{end, 100}, {end, 100}, {facts, 140}, {end, 200}} {
		fed, g := exported(t, l, trace[i])
		if fed != want.sample {
			t.Errorf("pass 2, sample %d: fed %+v; want %+v", i, fed, want.sample)
		}
		if g["fake_events_total{kind=lines}"] != want.lines || g["fake_latency_seconds{}_count"] == 0 {
			t.Errorf("pass 2, sample %d: lines %v, histogram count %v; want %v and the histogram held", i, g["fake_events_total{kind=lines}"], g["fake_latency_seconds{}_count"], want.lines)
		}
	}
}

// A trace torn mid-frame, as a crash leaves it, is still a trace: diagnose
// replays the whole frames before the tear, prints the diagnosis and says
// the tail was torn; the daemon recording onto such a file says it cut it.
func TestTornTraceIsDiagnosed(t *testing.T) {
	whole, err := os.ReadFile(filepath.Join(tracesDir, "allreduce_sockets_nccl_log.gdrec"))
	if err != nil {
		t.Fatal(err)
	}
	torn := filepath.Join(t.TempDir(), "torn.gdrec")
	if err := os.WriteFile(torn, whole[:len(whole)-100], 0o600); err != nil {
		t.Fatal(err)
	}
	var out, logs syncBuffer
	code, err := run(context.Background(), []string{"diagnose", "--replay=" + torn, "--replay.speed=0", "--for=30s"}, &out, &logs, nil)
	if err != nil || code == exitError {
		t.Fatalf("exit %d, %v\n%s", code, err, logs.String())
	}
	if !strings.Contains(out.String(), "NODE: communication/network") {
		t.Errorf("no diagnosis of the whole frames:\n%s", out.String())
	}
	if !strings.Contains(logs.String(), "torn frame") {
		t.Errorf("the torn tail is not logged:\n%s", logs.String())
	}

	ctx, cancel := context.WithCancel(context.Background())
	logs = syncBuffer{}
	done := make(chan error, 1)
	go func() {
		_, err := run(ctx, []string{"--web.listen-address=" + freeAddr(t), "--collector.gpu.backend=none", "--record=" + torn,
			"--path.procfs=" + filepath.Join(fixtureHost, "proc"), "--path.sysfs=" + filepath.Join(fixtureHost, "sys")}, io.Discard, &logs, nil)
		done <- err
	}()
	deadline := time.Now().Add(60 * time.Second)
	for !strings.Contains(logs.String(), "recording samples") && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(logs.String(), "torn frame") || !strings.Contains(logs.String(), "cut_bytes") {
		t.Errorf("recording onto a torn trace does not say it cut the tail:\n%s", logs.String())
	}
}
