// Package gpu defines what a GPU backend (NVML, DCGM) provides to the GPU
// collector, and Open picks one: DCGM, wrapped in a Failover, when it answers,
// else NVML. Backends live in subpackages and the caller hands their openers
// to Open; the collector integrates rates into counters and turns readings
// into metrics, the same way for every backend.
package gpu

import (
	"context"

	"github.com/gpudiag/gpudiag/sample"
)

// Backend reads every GPU of the node.
type Backend interface {
	// Name is "nvml" or "dcgm".
	Name() string
	// Sample reads every GPU once. Rates and activity ratios in the result
	// average over the time since the previous call (IntervalSeconds). A GPU
	// that fails is reported with Up false; an error means no GPU could be
	// read at all.
	Sample(ctx context.Context) (*sample.GPUs, error)
	// Close releases the backend (NVML shutdown, DCGM disconnect).
	Close() error
}
