package analyzers

import "math"

// The arithmetic that verdicts and findings state their evidence with.

// confidence grows from 0.6 at the threshold to 1 at twice the threshold:
// a value just over the line is a weaker claim than one far past it.
func confidence(v, thr float64) float64 {
	if thr <= 0 || math.IsNaN(v) {
		return 0.6
	}
	x := (v - thr) / thr
	return round(0.6 + 0.4*math.Max(0, math.Min(1, x)))
}

// withOp is e compared another way: the same signal is a threshold in one
// verdict and only information in another.
func withOp(e Evidence, op string) Evidence {
	e.Op = op
	return e
}

// maxNaN is the larger of a and b, or the measured one when the other is
// NaN (not measured).
func maxNaN(a, b float64) float64 {
	switch {
	case math.IsNaN(a):
		return b
	case math.IsNaN(b):
		return a
	}
	return math.Max(a, b)
}

// round keeps four decimals: evidence shows the value, not float noise.
func round(x float64) float64 {
	if math.IsNaN(x) || math.IsInf(x, 0) {
		return x
	}
	return math.Round(x*1e4) / 1e4
}

// maxOf is the largest of xs and 0: a NaN (not measured) counts as none.
func maxOf(xs ...float64) float64 {
	m := 0.0
	for _, x := range xs {
		if x > m {
			m = x
		}
	}
	return m
}
