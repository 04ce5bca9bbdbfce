package engine

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

var (
	famA = prometheus.NewDesc("gpudiag_test_a", "A.", []string{"gpu"}, nil)
	famB = prometheus.NewDesc("gpudiag_test_b_total", "B.", nil, nil)
	famC = prometheus.NewDesc("gpudiag_test_a", "A with another help.", []string{"gpu"}, nil)
)

func TestFamiliesGroupSortAndCheck(t *testing.T) {
	g := func(d *prometheus.Desc, v float64, l ...string) prometheus.Metric {
		return prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, l...)
	}
	c := func(d *prometheus.Desc, v float64) prometheus.Metric {
		return prometheus.MustNewConstMetric(d, prometheus.CounterValue, v)
	}
	fams, err := families([]prometheus.Metric{c(famB, 3), g(famA, 1, "2"), g(famA, 2, "10"), g(famA, 0, "1")}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(fams) != 2 || fams[0].GetName() != "gpudiag_test_a" || fams[1].GetType().String() != "COUNTER" {
		t.Fatalf("families %v", fams)
	}
	var order []string
	for _, m := range fams[0].Metric {
		order = append(order, m.Label[0].GetValue())
	}
	if strings.Join(order, ",") != "1,10,2" { // lexical, as the registry sorts
		t.Fatalf("series order %v", order)
	}
	if _, err := families([]prometheus.Metric{g(famA, 1, "0"), g(famA, 2, "0")}, nil); err == nil || !strings.Contains(err.Error(), "twice") {
		t.Fatalf("duplicate series not rejected: %v", err)
	}
	if _, err := families([]prometheus.Metric{g(famA, 1, "0"), g(famC, 2, "1")}, nil); err == nil {
		t.Fatal("two help texts for one name not rejected")
	}
}
