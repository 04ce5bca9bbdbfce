package collectors

import (
	"context"
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpudiag/gpudiag/engine"
)

// replaySpec is what replaying a collector's recorded samples needs: a zero
// sample to decode into, and the collector's Metrics, which must not depend
// on the live collector's state.
type replaySpec struct {
	newSample func() any
	metrics   func(sample any, emit func(prometheus.Metric))
	// cumulative: the sample is everything the collector has read since it
	// started, not a reading of the moment (see the cumulative option).
	cumulative bool
}

// replayCollector stands in for a live collector while a trace is replayed:
// it never samples; the engine is fed through Ingest.
type replayCollector struct {
	name  string
	spec  replaySpec
	bound func(any) ([]string, error)
}

func (r *replayCollector) Name() string { return r.name }
func (r *replayCollector) Sample(context.Context) (any, error) {
	return nil, errors.New("replaying a recorded trace: nothing to sample")
}
func (r *replayCollector) Metrics(s any, emit func(prometheus.Metric)) { r.spec.metrics(s, emit) }

// Cumulative reports whether the collector's sample accumulates what it has
// read since it started (the cumulative option).
func (r *replayCollector) Cumulative() bool { return r.spec.cumulative }

// NewSample returns a zero sample of the collector's type to decode into.
func (r *replayCollector) NewSample() any { return r.spec.newSample() }

// Bound cuts a decoded sample, in place, to what the live collector could
// have returned and says what it cut (replaybounds.go); an error refuses
// the sample.
func (r *replayCollector) Bound(s any) ([]string, error) { return r.bound(s) }

// ReplayCollector returns the stand-in for a recorded collector, with a
// bound of its own: one per replay, kept across the trace's frames.
func ReplayCollector(name string) (*replayCollector, error) {
	r, ok := registry[name]
	if !ok {
		return nil, fmt.Errorf("recorded collector %q is unknown to this version (known: %v)", name, Names())
	}
	newBound, ok := replayBounds[name]
	if !ok {
		return nil, fmt.Errorf("recorded collector %q has no replay bound", name)
	}
	return &replayCollector{name: name, spec: r.replay, bound: newBound()}, nil
}

var _ engine.Collector = (*replayCollector)(nil)
