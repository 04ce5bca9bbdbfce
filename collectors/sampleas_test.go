package collectors

import (
	"context"
	"testing"
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
