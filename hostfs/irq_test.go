package hostfs

import (
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/gpudiag/gpudiag/internal/hosttest"
)

func TestDeviceIRQs(t *testing.T) {
	host, err := NewFS("testdata/host/proc", "testdata/host/sys")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		dir  string
		want []IRQAffinity
	}{
		{"GPU on node 0", "0000:18:00.0", []IRQAffinity{{100, []int{0}, true}, {101, []int{1}, true}, {102, []int{64}, true}, {103, []int{2}, true}}},
		// 113 has only smp_affinity_list (a kernel before 4.15).
		{"GPU on node 1", "0000:9a:00.0", []IRQAffinity{{110, []int{3}, true}, {111, []int{4}, true}, {112, []int{65}, true}, {113, seq(32, 63), false}}},
		{"no MSI", "0000:05:00.0", nil},
	} {
		got, err := host.DeviceIRQs(host.SysPath(PCIDevicesDir, tc.dir))
		if err != nil || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: got %v, %v; want %v", tc.name, got, err, tc.want)
		}
	}

	bad := t.TempDir()
	for _, tc := range []struct {
		name, entry, file, text, wantErr string
	}{
		{"entry not a number", "x", "", "", `entry "x" is not an IRQ number`},
		{"bad list", "7", "proc/irq/7/effective_affinity_list", "3-1", "bad list range"},
	} {
		root := filepath.Join(bad, strings.ReplaceAll(tc.name, " ", "_"))
		hosttest.WriteFile(t, filepath.Join(root, "sys/dev/msi_irqs", tc.entry), "")
		if tc.file != "" {
			hosttest.WriteFile(t, filepath.Join(root, tc.file), tc.text)
		}
		h, err := NewFS(filepath.Join(root, "proc"), filepath.Join(root, "sys"))
		if err != nil {
			hosttest.WriteFile(t, filepath.Join(root, "proc/.keep"), "")
			h, _ = NewFS(filepath.Join(root, "proc"), filepath.Join(root, "sys"))
		}
		if _, err := h.DeviceIRQs(filepath.Join(root, "sys/dev")); err == nil || !strings.Contains(err.Error(), tc.wantErr) {
			t.Errorf("%s: error %v; want %q", tc.name, err, tc.wantErr)
		}
	}
}

func seq(a, b int) []int {
	var out []int
	for i := a; i <= b; i++ {
		out = append(out, i)
	}
	return out
}
