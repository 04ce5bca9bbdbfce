package sample

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
