package replay

import (
	"context"
	"math"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/gpudiag/gpudiag/engine"
	"github.com/gpudiag/gpudiag/internal/promtest"
)

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
		if got := LoopGap(tc.intervals, 200*time.Millisecond); got != tc.want {
			t.Errorf("LoopGap(%v) = %v; want %v", tc.intervals, got, tc.want)
		}
	}
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
func exported(t *testing.T, l *Loop, s *fakeLoopSample) (any, map[string]float64) {
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
	out := promtest.CounterSeries(fams)
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
	l := newLoop(intervalCollector{fakeLoopCollector{}, time.Second}, false)
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
	l := newLoop(intervalCollector{fakeLoopCollector{}, time.Second}, true)
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

// sampleCollector exports one sample's metrics to a registry.
type sampleCollector struct {
	c engine.Collector
	s any
}

func (c sampleCollector) Describe(chan<- *prometheus.Desc) {}
func (c sampleCollector) Collect(ch chan<- prometheus.Metric) {
	c.c.Metrics(c.s, func(m prometheus.Metric) { ch <- m })
}

// A trace whose every sample brings new counter series does not grow the
// loop's memory with its length: past maxLoopSeries, new series are
// exported as recorded, and the ones carried keep their carry.
func TestLoopCarriesBoundedSeries(t *testing.T) {
	l := newLoop(intervalCollector{fakeLoopCollector{}, time.Second}, false)
	const perSample = 1000
	for i := range 2 * maxLoopSeries / perSample {
		s := &fakeLoopSample{counters: map[string]float64{"boot": float64(100 + i)}}
		for j := range perSample {
			s.counters["k"+strconv.Itoa(i*perSample+j)] = 1
		}
		exported(t, l, s)
	}
	if n := len(l.last) + len(l.baseline) + len(l.offset); n > 2*maxLoopSeries {
		t.Fatalf("the loop holds %d entries for %d series; at most %d", n, 2*maxLoopSeries, 2*maxLoopSeries)
	}
	l.startPass()
	_, got := exported(t, l, &fakeLoopSample{counters: map[string]float64{"boot": 100, "k99999": 1}})
	if v := got["fake_events_total{kind=boot}"]; v != 100+2*maxLoopSeries/perSample-1 {
		t.Errorf("a carried series reads %v after the seam; want it carried", v)
	}
	if v := got["fake_events_total{kind=k99999}"]; v != 1 {
		t.Errorf("a series past the bound reads %v; want it as recorded", v)
	}
}

// At a seam the offset is last - start, and start + offset can round one
// unit in the last place below last (755.587 and 5746.772 do): Prometheus
// would read that as a counter reset at every seam. The loop holds it at
// last; a real step back of the trace's own is kept (the "reset" series of
// TestLoopCollectorCarriesCounters).
func TestLoopSeamRoundingIsNoReset(t *testing.T) {
	start, end := 755.587, 5746.772 // variables: Go's constant arithmetic is exact
	if (end-start)+start >= end {
		t.Skip("this platform's floating point does not round the example down")
	}
	l := newLoop(intervalCollector{fakeLoopCollector{}, time.Second}, false)
	_, first := exported(t, l, &fakeLoopSample{counters: map[string]float64{"boot": start}})
	_, last := exported(t, l, &fakeLoopSample{counters: map[string]float64{"boot": end}})
	l.startPass()
	_, seam := exported(t, l, &fakeLoopSample{counters: map[string]float64{"boot": start}})
	for k, v := range seam {
		if v < last[k] {
			t.Errorf("%s went back at the seam: %v -> %v (first %v)", k, last[k], v, first[k])
		}
	}
}
