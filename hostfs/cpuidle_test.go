package hostfs

import (
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/gpudiag/gpudiag/internal/hosttest"
)

func TestCPUIdleStates(t *testing.T) {
	host := NewSysFS("testdata/host/sys")
	got, err := host.CPUIdleStates()
	want := []CPUIdleState{{"POLL", 0, 2, 2}, {"C1", 1, 2, 2}, {"C1E", 4, 2, 2}, {"C6", 170, 2, 1}}
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("got %v, %v; want %v", got, err, want)
	}
	if got, err := NewSysFS(t.TempDir()).CPUIdleStates(); got != nil || err != nil {
		t.Fatalf("no cpuidle: got %v, %v", got, err)
	}
	for _, tc := range []struct{ file, text, wantErr string }{
		{"latency", "-1", "state0/latency: not an unsigned integer"},
		{"disable", "yes", "state0/disable: not an unsigned integer"},
		{"name", "\n", "state0/name is empty"},
	} {
		sys := t.TempDir()
		dir := filepath.Join(sys, "devices/system/cpu/cpu0/cpuidle/state0")
		for f, v := range map[string]string{"name": "C6", "latency": "170", "disable": "0"} {
			hosttest.WriteFile(t, filepath.Join(dir, f), v)
		}
		hosttest.WriteFile(t, filepath.Join(dir, tc.file), tc.text)
		if _, err := NewSysFS(sys).CPUIdleStates(); err == nil || !strings.Contains(err.Error(), tc.wantErr) {
			t.Errorf("%s: error %v; want %q", tc.file, err, tc.wantErr)
		}
	}
}
