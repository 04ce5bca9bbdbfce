package gpu

import "math"

// What both backends do to a reading the same way, so that a GPU reads the
// same through DCGM and NVML.

// Clamp01 bounds a ratio to [0, 1]: percentages and ratios the driver
// averages over an interval can overshoot slightly (DCGM's ratios, GPM's
// percentages). NaN, an unread value, stays NaN.
func Clamp01(x float64) float64 { return math.Max(0, math.Min(1, x)) }

// CopyCounts copies a count map (XIDs seen so far) into a sample, which
// must not share it with the backend that keeps counting; an empty one is
// nil, so a GPU without XIDs has none in the sample.
func CopyCounts(m map[uint64]uint64) map[uint64]uint64 {
	if len(m) == 0 {
		return nil
	}
	out := make(map[uint64]uint64, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}
