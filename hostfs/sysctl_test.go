package hostfs

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gpudiag/gpudiag/internal/hosttest"
)

func TestSysctlInts(t *testing.T) {
	proc := t.TempDir()
	hosttest.WriteFile(t, filepath.Join(proc, "sys/vm/swappiness"), "60\n")
	hosttest.WriteFile(t, filepath.Join(proc, "sys/net/ipv4/ip_local_port_range"), "32768\t60999\n")
	hosttest.WriteFile(t, filepath.Join(proc, "sys/kernel/numa_balancing"), "on\n")
	f, err := NewFS(proc, "")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		want    []int
		wantErr string
	}{
		{"vm.swappiness", []int{60}, ""},
		{"net.ipv4.ip_local_port_range", []int{32768, 60999}, ""},
		{"vm.absent", nil, ""},
		{"kernel.numa_balancing", nil, "sys/kernel/numa_balancing: field 1 is not an integer: \"on\""},
	} {
		got, err := f.SysctlInts(tc.name)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("%s: error %v; want %q", tc.name, err, tc.wantErr)
			}
			continue
		}
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("%s: got %v, %v; want %v", tc.name, got, err, tc.want)
		}
	}
}
