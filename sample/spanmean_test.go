package sample

import (
	"math"
	"testing"
)

func TestSpanMean(t *testing.T) {
	type reading struct{ v, weight float64 }
	for _, tc := range []struct {
		name     string
		readings []reading
		want     float64
		measured bool
	}{
		{name: "no reading", measured: false},
		{name: "only weightless readings", readings: []reading{{5, 0}, {7, -1}}, measured: false},
		{name: "one reading", readings: []reading{{3, 2}}, want: 3, measured: true},
		{name: "equal weights", readings: []reading{{1, 1}, {3, 1}}, want: 2, measured: true},
		// A reading whose interval mostly lies before the span counts
		// for the part inside it only.
		{name: "weighted by the part inside", readings: []reading{{10, 1}, {0, 4}}, want: 2, measured: true},
		{name: "weightless reading left out", readings: []reading{{100, 0}, {4, 2}}, want: 4, measured: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var m SpanMean
			for _, r := range tc.readings {
				m.Add(r.v, r.weight)
			}
			got, ok := m.Mean()
			if ok != tc.measured || (ok && got != tc.want) {
				t.Fatalf("Mean() = %v, %v; want %v, %v", got, ok, tc.want, tc.measured)
			}
			or := m.MeanOr(math.NaN())
			if tc.measured && or != tc.want || !tc.measured && !math.IsNaN(or) {
				t.Fatalf("MeanOr(NaN) = %v; want %v (measured %v)", or, tc.want, tc.measured)
			}
		})
	}
}
