package collectors

import (
	"context"
	"errors"
	"io"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpudiag/gpudiag/engine"
	"github.com/gpudiag/gpudiag/sample"
)

// closingPressure is a typed collector that holds something to release.
type closingPressure struct {
	closed int
	fail   bool
}

func (c *closingPressure) Name() string { return sample.PressureKey.Name() }
func (c *closingPressure) Sample(context.Context) (*sample.Pressure, error) {
	if c.fail {
		return nil, errors.New("no PSI")
	}
	return &sample.Pressure{IntervalSeconds: 1}, nil
}
func (c *closingPressure) Metrics(*sample.Pressure, func(prometheus.Metric)) {}
func (c *closingPressure) Close() error                                      { c.closed++; return nil }

// The engine sees a typed collector through the registry's adapter: its
// sample as the *S it returned, a failed sample as a plain nil (never a
// typed nil inside an any), and its Close passed through so the daemon
// releases what it holds.
func TestKeyedCollectorPassesThrough(t *testing.T) {
	c := &closingPressure{}
	var ec engine.Collector = asEngine(c)
	s, err := ec.Sample(context.Background())
	if p, ok := s.(*sample.Pressure); err != nil || !ok || p.IntervalSeconds != 1 {
		t.Fatalf("sample %#v, %v", s, err)
	}
	c.fail = true
	if s, err := ec.Sample(context.Background()); s != nil || err == nil {
		t.Fatalf("failed sample: %#v, %v; want a nil any and the error", s, err)
	}
	if err := ec.(io.Closer).Close(); err != nil || c.closed != 1 {
		t.Fatalf("Close: %v, closed %d times", err, c.closed)
	}
	if iv := ec.(engine.Intervaler).Interval(); iv != 0 {
		t.Fatalf("a collector without a clock of its own asks for %s", iv)
	}
}
