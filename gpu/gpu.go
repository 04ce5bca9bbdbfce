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

// Clock event reasons, as NVML numbers them (nvmlClocksEventReason*). DCGM
// reports the same bits in DCGM_FI_DEV_CLOCKS_EVENT_REASONS.
var ClockEventReasons = []struct {
	Bit  uint64
	Name string
}{
	{0x1, "gpu_idle"},
	{0x2, "applications_clocks_setting"},
	{0x4, "sw_power_cap"},
	{0x8, "hw_slowdown"},
	{0x10, "sync_boost"},
	{0x20, "sw_thermal_slowdown"},
	{0x40, "hw_thermal_slowdown"},
	{0x80, "hw_power_brake_slowdown"},
	{0x100, "display_clock_setting"},
}
