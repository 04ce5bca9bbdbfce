package engine

import (
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/protobuf/proto"
)

var (
	seriesGauge   = prometheus.NewDesc("gpudiag_test_series_ratio", "Gauge.", []string{"gpu", "link"}, prometheus.Labels{"node": "n1"})
	seriesCounter = prometheus.NewDesc("gpudiag_test_series_bytes_total", "Counter.", []string{"gpu"}, nil)
	seriesUntyped = prometheus.NewDesc("gpudiag_test_series_untyped", "Untyped.", nil, nil)
)

// A build of a collector's families: the same sample through NewSeries and
// the cache, and through client_golang's const metrics.
func seriesBuild(t *testing.T, lp *labelPairs, v float64, gpus ...string) (cached, plain []*dto.MetricFamily) {
	t.Helper()
	var ours, theirs []prometheus.Metric
	add := func(d *prometheus.Desc, typ prometheus.ValueType, v float64, l ...string) {
		ours = append(ours, NewSeries(d, typ, v, l...))
		theirs = append(theirs, prometheus.MustNewConstMetric(d, typ, v, l...))
	}
	for i, gpu := range gpus {
		add(seriesGauge, prometheus.GaugeValue, v+float64(i), gpu, "0")
		add(seriesGauge, prometheus.GaugeValue, v/2, gpu, "1")
		add(seriesCounter, prometheus.CounterValue, 10*v, gpu)
	}
	add(seriesUntyped, prometheus.UntypedValue, -v)
	cached, err := families(ours, lp)
	if err != nil {
		t.Fatal(err)
	}
	if plain, err = families(theirs, nil); err != nil {
		t.Fatal(err)
	}
	return cached, plain
}

func sameFamilies(t *testing.T, what string, got, want []*dto.MetricFamily) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d families, want %d", what, len(got), len(want))
	}
	for i := range got {
		if !proto.Equal(got[i], want[i]) {
			t.Errorf("%s: family %d\n got %v\nwant %v", what, i, got[i], want[i])
		}
	}
}

// Series made by NewSeries come out as client_golang's const metrics do,
// build after build; the label pairs of a series still exported are the
// same objects, a series no longer exported leaves the cache, and a build
// leaves the families of the one before unchanged (a scrape may still be
// encoding them).
func TestSeriesReuseLabelPairs(t *testing.T) {
	var lp labelPairs
	first, plain := seriesBuild(t, &lp, 1, "0", "1", "2")
	sameFamilies(t, "first build", first, plain)
	firstText := first[0].String() + first[1].String() + first[2].String()

	second, plain := seriesBuild(t, &lp, 2, "0", "1")
	sameFamilies(t, "second build", second, plain)
	if first[0].Metric[0].Label[0] != second[0].Metric[0].Label[0] {
		t.Error("a series exported in both builds got new label pairs")
	}
	if got := first[0].String() + first[1].String() + first[2].String(); got != firstText {
		t.Errorf("the second build changed the first's families:\n%s\nwas\n%s", got, firstText)
	}
	// gpu 2 went: its three series leave the cache.
	if n := len(lp.byDesc[seriesGauge]) + len(lp.byDesc[seriesCounter]); n != 6 {
		t.Errorf("cache holds %d series of the gauge and counter; the second build exported 6", n)
	}

	third, plain := seriesBuild(t, &lp, 3, "0", "1", "2")
	sameFamilies(t, "third build (a series back)", third, plain)
}

// A series whose label values do not fit its descriptor, or whose value type
// is none of the three, fails the build (a value that is not UTF-8 is made
// valid instead: TestInvalidLabelValuesAreMadeValid) with client_golang's error instead
// of exporting a malformed series, cached pairs or not, and one exported
// before under the same values stays right.
func TestSeriesWrongLabelsFail(t *testing.T) {
	var lp labelPairs
	if _, err := families([]prometheus.Metric{NewSeries(seriesGauge, prometheus.GaugeValue, 1, "0")}, &lp); err == nil ||
		!strings.Contains(err.Error(), "inconsistent label cardinality") {
		t.Fatalf("one label value for two labels: %v", err)
	}
	got, plain := seriesBuild(t, &lp, 1, "0")
	sameFamilies(t, "after failures", got, plain)
	// With gpu "0", link "0" cached: one value whose bytes are the cached
	// key's, and the cached values under an unknown value type, are still
	// refused (the cache serves only what client_golang accepted).
	if _, err := families([]prometheus.Metric{NewSeries(seriesGauge, prometheus.GaugeValue, 1, "0\xff0")}, &lp); err == nil {
		t.Error("one label value spelling the cached key of two was exported")
	}
	if _, err := families([]prometheus.Metric{NewSeries(seriesGauge, prometheus.ValueType(0), 1, "0", "0")}, &lp); err == nil {
		t.Error("a series of no known value type was exported")
	}
}

// Outside the engine (a registry, the replay loop) a series writes itself as
// the const metric it stands for.
func TestSeriesWrite(t *testing.T) {
	var got, want dto.Metric
	if err := NewSeries(seriesCounter, prometheus.CounterValue, 7, "3").Write(&got); err != nil {
		t.Fatal(err)
	}
	if err := prometheus.MustNewConstMetric(seriesCounter, prometheus.CounterValue, 7, "3").Write(&want); err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(&got, &want) {
		t.Errorf("got %v, want %v", &got, &want)
	}
}

// One build of 1,000 series (8 GPUs × 125) whose label pairs were made by the build before:
// what a scrape of a fresh sample costs per collector.
func BenchmarkFamiliesFreshSample(b *testing.B) {
	desc := prometheus.NewDesc("gpudiag_bench_series_ratio", "Bench.", []string{"gpu", "link", "direction"}, nil)
	gpus := []string{"0", "1", "2", "3", "4", "5", "6", "7"}
	links := make([]string, 125)
	for i := range links {
		links[i] = "link" + strconv.Itoa(i)
	}
	for _, mode := range []string{"const", "series"} {
		b.Run(mode, func(b *testing.B) {
			var lp labelPairs
			b.ReportAllocs()
			v := 0.0
			for b.Loop() {
				v++
				ms := make([]prometheus.Metric, 0, 1024)
				for _, g := range gpus {
					for _, l := range links {
						if mode == "const" {
							ms = append(ms, prometheus.MustNewConstMetric(desc, prometheus.GaugeValue, v, g, l, "tx"))
						} else {
							ms = append(ms, NewSeries(desc, prometheus.GaugeValue, v, g, l, "tx"))
						}
					}
				}
				lpp := &lp
				if mode == "const" {
					lpp = nil
				}
				if _, err := families(ms, lpp); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
