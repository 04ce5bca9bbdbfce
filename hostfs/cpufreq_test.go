package hostfs

import (
	"maps"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpudiag/gpudiag/internal/hosttest"
)

func TestScalingGovernors(t *testing.T) {
	got, err := NewSysFS("testdata/host/sys").ScalingGovernors()
	if want := map[string]int{"performance": 96, "powersave": 32}; err != nil || !maps.Equal(got.Governors, want) {
		t.Fatalf("got %v, %v; want %v", got.Governors, err, want)
	}
	if n := len(got.GovernorCPUs["powersave"]); n != 32 || got.GovernorCPUs["powersave"][0] != 32 {
		t.Fatalf("powersave CPUs %v; want 32-63", got.GovernorCPUs["powersave"])
	}
	if got, err := NewSysFS(t.TempDir()).ScalingGovernors(); got.Governors != nil || err != nil {
		t.Fatalf("no cpufreq: got %v, %v", got, err)
	}
	sys := t.TempDir()
	hosttest.WriteFile(t, filepath.Join(sys, "devices/system/cpu/cpu0/cpufreq/scaling_governor"), "\n")
	if _, err := NewSysFS(sys).ScalingGovernors(); err == nil || !strings.Contains(err.Error(), "cpu0/cpufreq/scaling_governor is empty") {
		t.Fatalf("empty governor: error %v", err)
	}
}
