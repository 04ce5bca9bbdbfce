package engine

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// partialReading is a sample that could be read only in part.
type partialReading struct{ missing []string }

func (p *partialReading) UnmeasuredFields() []string { return p.missing }

type partialCollector struct{ missing []string }

func (c *partialCollector) Name() string { return "partial" }
func (c *partialCollector) Sample(context.Context) (any, error) {
	return &partialReading{missing: c.missing}, nil
}
func (c *partialCollector) Metrics(any, func(prometheus.Metric)) {}

// A sample that names what it could not read leaves its collector
// succeeding, with the names in its status; the next whole sample clears
// them.
func TestPartialSampleIsNamedInStatusWithoutFailing(t *testing.T) {
	c := &partialCollector{missing: []string{"meminfo MemAvailable"}}
	e := New(Options{Interval: time.Second})
	e.Add(c, 0)
	e.SampleOnce(context.Background())
	st := e.Statuses()[0]
	if !st.Success || st.Failures != 0 || st.LastError != "" || !slices.Equal(st.Unmeasured, []string{"meminfo MemAvailable"}) {
		t.Fatalf("partial sample's status: %+v", st)
	}
	c.missing = nil
	e.SampleOnce(context.Background())
	if st := e.Statuses()[0]; !st.Success || st.Unmeasured != nil {
		t.Fatalf("whole sample's status: %+v", st)
	}
}
