package collectors

import (
	"context"
	"testing"
	"time"
)

// sampleAs takes one sample from c, failing the test on an error, as the
// sample type S the collector returns; each collector's test names it
// (sampleCPU, sampleNUMA...).
func sampleAs[S any](t *testing.T, c interface {
	Sample(context.Context) (any, error)
}) *S {
	t.Helper()
	s, err := c.Sample(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return s.(*S)
}

// secondSample takes a sample, waits a little and returns the next: the
// first that has rates, for the tests against the live kernel.
func secondSample[S any](t *testing.T, c interface {
	Sample(context.Context) (any, error)
}) *S {
	t.Helper()
	sampleAs[S](t, c)
	time.Sleep(50 * time.Millisecond)
	return sampleAs[S](t, c)
}
