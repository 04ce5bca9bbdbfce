package engine

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

// metricsPanicker samples fine and panics in Metrics while panics is set.
type metricsPanicker struct{ panics bool }

var panickerDesc = prometheus.NewDesc("gpudiag_panicker_value", "Panicker.", nil, nil)

func (m *metricsPanicker) Name() string                        { return "exporter_bug" }
func (m *metricsPanicker) Sample(context.Context) (any, error) { return 1.0, nil }
func (m *metricsPanicker) Metrics(s any, emit func(prometheus.Metric)) {
	emit(prometheus.MustNewConstMetric(panickerDesc, prometheus.GaugeValue, s.(float64)))
	if m.panics {
		var labels map[string]string
		labels["boom"] = "" // a nil map: a collector's bug, not a test's panic()
	}
}

func droppedValue(t *testing.T, g prometheus.Gatherer, source, reason string) float64 {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "gpudiag_metrics_dropped_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			if labelOf(m, "source") == source && labelOf(m, "reason") == reason {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

func labelOf(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// A collector whose Metrics panics loses its series for that sample, and
// only those: the scrape answers with the others, the panic is counted in
// gpudiag_metrics_dropped_total{source=<collector>,reason="panic"} once per
// sample and logged once with its stack, and the next good sample exports
// again.
func TestMetricsPanicIsCountedAndSurvived(t *testing.T) {
	core, logs := observer.New(zap.ErrorLevel)
	e := New(Options{Interval: time.Second, Logger: zap.New(core)})
	bug := &metricsPanicker{panics: true}
	e.Add(bug, 0)
	e.Add(&fakeCollector{name: "ok", sample: value(7)}, 0)
	if droppedValue(t, e, "exporter_bug", DropPanic) != 0 {
		t.Fatal("a drop counted before any")
	}
	for range 3 {
		e.SampleOnce(context.Background())
		want := "# HELP gpudiag_fake_value Fake.\n# TYPE gpudiag_fake_value gauge\ngpudiag_fake_value{collector=\"ok\"} 7\n"
		if err := testutil.GatherAndCompare(e, strings.NewReader(want), "gpudiag_fake_value", "gpudiag_panicker_value"); err != nil {
			t.Fatal(err)
		}
	}
	if v := droppedValue(t, e, "exporter_bug", DropPanic); v != 3 {
		t.Errorf("dropped{reason=panic} = %v after three samples whose Metrics panicked; want 3", v)
	}
	logged := logs.FilterMessage("metrics dropped at the export boundary; the daemon keeps serving").All()
	if len(logged) != 1 {
		t.Fatalf("%d logs for three panics of one kind; want 1", len(logged))
	}
	if f := logged[0].ContextMap(); f["source"] != "exporter_bug" || !strings.Contains(f["error"].(string), "nil map") ||
		!strings.Contains(f["stack"].(string), "drops_test.go") {
		t.Errorf("log fields %v: want the source, the panic and its stack", f)
	}
	bug.panics = false
	e.SampleOnce(context.Background())
	if err := testutil.GatherAndCompare(e, strings.NewReader(
		"# HELP gpudiag_panicker_value Panicker.\n# TYPE gpudiag_panicker_value gauge\ngpudiag_panicker_value 1\n"),
		"gpudiag_panicker_value"); err != nil {
		t.Fatal(err)
	}
}

// Families that cannot be made count as invalid drops of their collector.
func TestBadFamiliesAreCountedAsInvalid(t *testing.T) {
	c := &countingCollector{badFrom: 1}
	e := New(Options{Interval: time.Second})
	e.Add(c, 0)
	e.SampleOnce(context.Background())
	if v := droppedValue(t, e, "counting", DropInvalid); v != 1 {
		t.Errorf("dropped{reason=invalid} = %v for one sample exporting a series twice; want 1", v)
	}
}

// A collector's label value that is not UTF-8 (a name cut inside a
// character) is exported with U+FFFD in place of the bad bytes, not
// refused: the collector keeps its series. Such a value's pairs are not
// cached, so two value lists whose 0xff bytes spell the same key stay two.
func TestInvalidLabelValuesAreMadeValid(t *testing.T) {
	var lp labelPairs
	build := func(a, b string) string {
		t.Helper()
		fams, err := families([]prometheus.Metric{NewSeries(seriesGauge, prometheus.GaugeValue, 1, a, b)}, &lp)
		if err != nil {
			t.Fatal(err)
		}
		var vals []string
		for _, l := range fams[0].Metric[0].Label {
			if !utf8.ValidString(l.GetValue()) {
				t.Fatalf("label %s = %q exported", l.GetName(), l.GetValue())
			}
			vals = append(vals, l.GetName()+"="+l.GetValue())
		}
		return strings.Join(vals, ",")
	}
	cut := strings.Repeat("a", 252) + "\xc3" // "é" cut after its first byte
	if got, want := build(cut, "0"), "gpu="+strings.Repeat("a", 252)+"\uFFFD,link=0,node=n1"; got != want {
		t.Errorf("cut name exported as %q, want %q", got, want)
	}
	if got := build("a\xff", "b"); got != "gpu=a\uFFFD,link=b,node=n1" {
		t.Errorf("first spelling: %q", got)
	}
	if got := build("a", "\xffb"); got != "gpu=a,link=\uFFFDb,node=n1" {
		t.Errorf("second spelling of the same key served the first's pairs: %q", got)
	}
	long := strings.Repeat("x", exportLabelMaxBytes+100)
	if got := build(long, "0"); len(got) > exportLabelMaxBytes+len("gpu=,link=0,node=n1") {
		t.Errorf("a %d-byte value exported as %d bytes", len(long), len(got))
	}
}

// guarded is a registry collector whose Collect runs under Drops.Guard.
type guarded struct {
	drops   *Drops
	collect func(emit ConstEmit)
}

func (g guarded) Describe(chan<- *prometheus.Desc) {}
func (g guarded) Collect(ch chan<- prometheus.Metric) {
	g.drops.Guard("diagnose", ch, g.collect)
}

// A registry collector that panics, or emits a series client_golang
// refuses, under Guard: the registry's Gather answers (client_golang runs
// Collect on a goroutine of its own, where an unrecovered panic would end
// the test binary, as it ended the daemon), the series before the panic
// and the other collectors' stand, and each drop is counted.
func TestGuardedCollectNeverPanics(t *testing.T) {
	core, logs := observer.New(zap.ErrorLevel)
	drops := NewDrops(zap.New(core))
	desc := prometheus.NewDesc("gpudiag_test_guarded", "Guarded.", []string{"pod"}, nil)
	reg := prometheus.NewRegistry()
	reg.MustRegister(guarded{drops, func(emit ConstEmit) {
		emit(desc, prometheus.GaugeValue, 1, strings.Repeat("a", 252)+"\xc3") // made valid
		emit(desc, prometheus.GaugeValue, 2)                                  // one label value short: dropped
		emit(desc, prometheus.GaugeValue, 3, "before-the-panic")
		var gpus []int
		_ = gpus[3] // index out of range
		emit(desc, prometheus.GaugeValue, 4, "after-the-panic")
	}})
	other := prometheus.NewGauge(prometheus.GaugeOpts{Name: "gpudiag_test_other", Help: "Other."})
	other.Set(9)
	reg.MustRegister(other)
	for scrape := 1; scrape <= 2; scrape++ {
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatalf("scrape %d: %v", scrape, err)
		}
		var got []string
		for _, mf := range mfs {
			for _, m := range mf.GetMetric() {
				got = append(got, mf.GetName()+"{"+labelOf(m, "pod")+"}")
			}
		}
		want := "gpudiag_test_guarded{" + strings.Repeat("a", 252) + "\uFFFD},gpudiag_test_guarded{before-the-panic},gpudiag_test_other{}"
		if strings.Join(got, ",") != want {
			t.Fatalf("scrape %d exported %v", scrape, got)
		}
		if drops.Total("diagnose", DropInvalid) != uint64(scrape) || drops.Total("diagnose", DropPanic) != uint64(scrape) {
			t.Fatalf("after scrape %d: invalid %d, panic %d", scrape,
				drops.Total("diagnose", DropInvalid), drops.Total("diagnose", DropPanic))
		}
	}
	if n := logs.Len(); n != 2 {
		t.Errorf("%d log lines for two kinds of drop, each twice; want 2", n)
	}
	// A nil Drops still guards.
	var none *Drops
	ch := make(chan prometheus.Metric, 1)
	none.Guard("recorder", ch, func(ConstEmit) { panic(errors.New("no counter")) })
}

// An engine exports the drops counted into it by the registry collectors
// beside it, and a daemon without drops exports no such series.
func TestEngineExportsRegistryDrops(t *testing.T) {
	e := New(Options{Interval: time.Second})
	e.Add(&fakeCollector{name: "ok", sample: value(1)}, 0)
	e.SampleOnce(context.Background())
	mfs, err := e.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "gpudiag_metrics_dropped_total" {
			t.Fatalf("healthy engine exports %v", mf)
		}
	}
	e.Drops().Guard("recorder", make(chan prometheus.Metric, 1), func(ConstEmit) { panic("recorder bug") })
	if v := droppedValue(t, e, "recorder", DropPanic); v != 1 {
		t.Errorf("dropped{source=recorder,reason=panic} = %v; want 1", v)
	}
}

// The log of distinct errors is bounded: a bug whose message names a
// changing value logs dropsMaxLogged lines and a note, then only counts.
func TestDropsLogIsBounded(t *testing.T) {
	core, logs := observer.New(zap.WarnLevel)
	d := NewDrops(zap.New(core))
	for i := range dropsMaxLogged + 50 {
		d.Count("gpu", DropInvalid, errors.New(strings.Repeat("x", i)), nil)
	}
	if n := logs.Len(); n != dropsMaxLogged+1 {
		t.Errorf("%d log lines; want %d and the note", n, dropsMaxLogged+1)
	}
	if v := d.Total("gpu", DropInvalid); v != dropsMaxLogged+50 {
		t.Errorf("counted %d; want %d", v, dropsMaxLogged+50)
	}
}

// FuzzSeriesLabels: whatever label values a collector makes, its series
// are exported (never refused for their bytes), each value valid UTF-8 of
// at most exportLabelMaxBytes and the value exportLabel makes of it, build
// after build through the cached pairs: two value lists whose bytes spell
// one cache key never share pairs.
func FuzzSeriesLabels(f *testing.F) {
	f.Add("a\xff", "b", "a", "\xffb")
	f.Add(strings.Repeat("a", 252)+"\xc3", "0", "gpu", "\x1b]0;t\x07")
	f.Add("0", "0", "0\xff0", "")
	f.Fuzz(func(t *testing.T, a, b, c, d string) {
		var lp labelPairs
		for _, vals := range [][2]string{{a, b}, {c, d}, {a, b}, {c, d}} {
			fams, err := families([]prometheus.Metric{NewSeries(seriesGauge, prometheus.GaugeValue, 1, vals[0], vals[1])}, &lp)
			if err != nil {
				t.Fatalf("%q: %v", vals, err)
			}
			m := fams[0].Metric[0]
			for i, name := range []string{"gpu", "link"} {
				got := labelOf(m, name)
				if !utf8.ValidString(got) || len(got) > exportLabelMaxBytes || got != exportLabel(vals[i]) {
					t.Fatalf("%s of %q exported as %q", name, vals, got)
				}
			}
		}
	})
}
