package server

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

func gaugeRegistry(names ...string) *prometheus.Registry {
	reg := prometheus.NewRegistry()
	for _, n := range names {
		g := prometheus.NewGauge(prometheus.GaugeOpts{Name: n, Help: "h"})
		reg.MustRegister(g)
	}
	return reg
}

func TestMergeSortsAndRejectsDuplicates(t *testing.T) {
	mfs, err := Merge(gaugeRegistry("b_x", "d_x"), gaugeRegistry("a_x", "c_x")).Gather()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, mf := range mfs {
		names = append(names, mf.GetName())
	}
	if got := strings.Join(names, ","); got != "a_x,b_x,c_x,d_x" {
		t.Fatalf("order %s", got)
	}
	if _, err := Merge(gaugeRegistry("a_x"), gaugeRegistry("a_x")).Gather(); err == nil || !strings.Contains(err.Error(), "a_x exported twice") {
		t.Fatalf("duplicate not reported: %v", err)
	}
}
