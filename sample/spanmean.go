package sample

// SpanMean is the mean of per-interval readings over a span, each weighted
// by the part of its interval inside the span (SpanWeight): the rule for
// rates and ratios in span.go, kept in one place so that every reader of a
// span averages alike.
type SpanMean struct {
	sum, weight float64
}

// Add takes a reading of value v that weighs weight; a reading that weighs
// nothing (its interval lies before the span) is left out.
func (m *SpanMean) Add(v, weight float64) {
	if weight <= 0 {
		return
	}
	m.sum += v * weight
	m.weight += weight
}

// Mean is the weighted mean of the readings taken; false when none weighed
// anything.
func (m SpanMean) Mean() (float64, bool) {
	if m.weight <= 0 {
		return 0, false
	}
	return m.sum / m.weight, true
}

// MeanOr is the mean, or unmeasured when no reading weighed anything.
func (m SpanMean) MeanOr(unmeasured float64) float64 {
	if v, ok := m.Mean(); ok {
		return v
	}
	return unmeasured
}
