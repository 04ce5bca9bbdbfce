package collectors

import (
	"context"
	"errors"
	"fmt"
	"sort"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpudiag/gpudiag/engine"
)

// replaySpec is what replaying a collector's recorded samples needs: a zero
// sample to decode into, and the collector's Metrics, which must not depend
// on the live collector's state.
type replaySpec struct {
	newSample func() any
	metrics   func(sample any, emit func(prometheus.Metric))
}

var replays = map[string]replaySpec{}

// registerReplay is called from each collector file's init, beside register.
// A test fails for any registered collector without it.
func registerReplay(name string, newSample func() any, metrics func(any, func(prometheus.Metric))) {
	replays[name] = replaySpec{newSample: newSample, metrics: metrics}
}

// replayCollector stands in for a live collector while a trace is replayed:
// it never samples; the engine is fed through Ingest.
type replayCollector struct {
	name string
	spec replaySpec
}

func (r *replayCollector) Name() string { return r.name }
func (r *replayCollector) Sample(context.Context) (any, error) {
	return nil, errors.New("replaying a recorded trace: nothing to sample")
}
func (r *replayCollector) Metrics(s any, emit func(prometheus.Metric)) { r.spec.metrics(s, emit) }

// NewSample returns a zero sample of the collector's type to decode into.
func (r *replayCollector) NewSample() any { return r.spec.newSample() }

// ReplayCollector returns the stand-in for a recorded collector.
func ReplayCollector(name string) (*replayCollector, error) {
	spec, ok := replays[name]
	if !ok {
		known := make([]string, 0, len(replays))
		for n := range replays {
			known = append(known, n)
		}
		sort.Strings(known)
		return nil, fmt.Errorf("recorded collector %q is unknown to this version (known: %v)", name, known)
	}
	return &replayCollector{name: name, spec: spec}, nil
}

var _ engine.Collector = (*replayCollector)(nil)
