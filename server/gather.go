package server

import (
	"fmt"
	"sort"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// Merge joins gatherers whose metric names are disjoint (the engine's
// prepared families, and the registry of build, Go and process metrics).
// Unlike prometheus.Gatherers it does not re-hash and re-check every series:
// the engine checked its families when it built them, off the scrape path.
// A name exported by two gatherers is a bug and is reported as an error.
func Merge(gs ...prometheus.Gatherer) prometheus.Gatherer {
	return prometheus.GathererFunc(func() ([]*dto.MetricFamily, error) {
		var out []*dto.MetricFamily
		var errs prometheus.MultiError
		for _, g := range gs {
			mfs, err := g.Gather()
			if err != nil {
				errs = append(errs, err)
			}
			out = append(out, mfs...)
		}
		sort.Slice(out, func(i, j int) bool { return out[i].GetName() < out[j].GetName() })
		for i := 1; i < len(out); i++ {
			if out[i].GetName() == out[i-1].GetName() {
				errs = append(errs, fmt.Errorf("metric family %s exported twice", out[i].GetName()))
			}
		}
		return out, errs.MaybeUnwrap()
	})
}
