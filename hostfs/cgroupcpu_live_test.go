package hostfs

import (
	"testing"
	"time"

	"github.com/gpudiag/gpudiag/internal/hosttest"
)

// Real kernel: the spinning shell, limited to 0.1 CPU, is throttled in
// almost every period; the reader sees the quota and nr_throttled rise.
func TestCgroupCPULive(t *testing.T) {
	pid, cgPath, version := hosttest.ThrottledCgroup(t)
	f, err := NewFS("/proc", "/sys")
	if err != nil {
		t.Fatal(err)
	}
	read := func() CgroupCPULimit {
		p, err := f.Procfs().Proc(pid)
		if err != nil {
			t.Fatal(err)
		}
		cgs, err := p.Cgroups()
		if err != nil {
			t.Fatal(err)
		}
		l, err := f.CgroupCPU(cgs, "")
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	first := read()
	time.Sleep(time.Second)
	second := read()
	t.Logf("after 1 s: %+v → %+v", first, second)
	if second.Path != cgPath || second.Version != version || !second.Limited || second.QuotaCores() != 0.1 {
		t.Errorf("limit %+v; want 0.1 CPU at %s", second, cgPath)
	}
	periods, throttled := second.Periods-first.Periods, second.ThrottledPeriods-first.ThrottledPeriods
	// Alone on its CPU the shell is throttled in every period (10 of 10
	// measured); on a loaded machine it gets less than its quota in some.
	if periods < 5 || throttled == 0 || second.ThrottledMicros <= first.ThrottledMicros {
		t.Errorf("in 1 s: %d periods, %d throttled, %d µs throttled; want ~10 periods, throttled",
			periods, throttled, second.ThrottledMicros-first.ThrottledMicros)
	}
}
