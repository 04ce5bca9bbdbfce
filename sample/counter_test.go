package sample

import "testing"

func TestCounterRate(t *testing.T) {
	for _, tc := range []struct{ prev, cur, secs, want float64 }{
		{100, 300, 2, 100},
		{300, 100, 2, 0}, // reset: never negative
		{5, 5, 1, 0},
		{1, 2, 0, 0},
	} {
		if got := CounterRate(tc.prev, tc.cur, tc.secs); got != tc.want {
			t.Errorf("CounterRate(%v, %v, %v) = %v; want %v", tc.prev, tc.cur, tc.secs, got, tc.want)
		}
	}
}
