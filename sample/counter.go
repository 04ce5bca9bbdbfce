package sample

import "math"

// CounterDelta is the increase of a monotonic counter between two readings.
// A counter that went backwards (reset on reboot or driver reload, or a wrap)
// yields 0 for that interval: never a negative rate.
func CounterDelta(prev, cur float64) float64 {
	if cur < prev {
		return 0
	}
	return cur - prev
}

// CounterRate is CounterDelta per second; 0 when seconds is not positive.
func CounterRate(prev, cur, seconds float64) float64 {
	if seconds <= 0 {
		return 0
	}
	return CounterDelta(prev, cur) / seconds
}

// Measured reports whether x is a measurement: NaN (and an infinity, which
// no gauge reads) stands for "not measured". This is the one NaN-to-JSON
// convention of the daemon: JSON has neither, so an unmeasured value is
// left out of it, never faked as 0 (a map key omitted, a field null, an
// evidence line dropped), and reads back as NaN.
func Measured(x float64) bool { return !math.IsNaN(x) && !math.IsInf(x, 0) }
