package collectors

import (
	"context"
	"testing"
	"time"

	"github.com/gpudiag/gpudiag/engine"
)

// sampleAs takes one sample from c, failing the test on an error, as the
// sample type S the collector returns; each collector's test names it
// (sampleCPU, sampleNUMA...).
func sampleAs[S any](t *testing.T, c interface {
	Sample(context.Context) (*S, error)
}) *S {
	t.Helper()
	s, err := c.Sample(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// secondSample takes a sample, waits a little and returns the next: the
// first that has rates, for the tests against the live kernel.
func secondSample[S any](t *testing.T, c interface {
	Sample(context.Context) (*S, error)
}) *S {
	t.Helper()
	sampleAs[S](t, c)
	time.Sleep(50 * time.Millisecond)
	return sampleAs[S](t, c)
}

// asEngine is a collector as the engine runs it, for tests that give one to
// an engine directly rather than through Build.
func asEngine[S any, C typedCollector[S]](c C) engine.Collector { return keyedCollector[S, C]{c} }

// asEngineErr is asEngine for a constructor's two results.
func asEngineErr[S any, C typedCollector[S]](c C, err error) (engine.Collector, error) {
	if err != nil {
		return nil, err
	}
	return asEngine(c), nil
}
