package collectors

import (
	"testing"
	"time"
)

// The eBPF TCP reading stays fresh for the reader's bound or two of the
// ebpf collector's current intervals, whichever is longer: on a quiet node
// that collector samples every few seconds, and the tcp collector must not
// fall back to listing sockets between its readings.
func TestFreshKernelTCPFollowsTheEBPFPace(t *testing.T) {
	var s Shared
	t0 := time.Unix(1000, 0)
	for _, c := range []struct {
		every time.Duration
		age   time.Duration
		fresh bool
	}{
		{time.Second, 4 * time.Second, true},
		{time.Second, 6 * time.Second, false},
		{5 * time.Second, 6 * time.Second, true},
		{5 * time.Second, 9 * time.Second, true},
		{5 * time.Second, 11 * time.Second, false},
		{0, 5 * time.Second, true},
	} {
		s.SetKernelTCP(&KernelTCP{At: t0, Every: c.every})
		if got := s.FreshKernelTCP(t0.Add(c.age), 5*time.Second) != nil; got != c.fresh {
			t.Errorf("a reading %v old, taken %v after the one before: fresh %v, want %v", c.age, c.every, got, c.fresh)
		}
	}
	s.SetKernelTCP(nil)
	if s.FreshKernelTCP(t0, time.Hour) != nil {
		t.Error("a withdrawn reading is fresh")
	}
}
