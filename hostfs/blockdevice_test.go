package hostfs

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpudiag/gpudiag/internal/hosttest"
)

// BlockDeviceNUMANode on a /sys tree: the walk up from /sys/block/<dev> to
// the controller's PCI function, and the devices that have no node.
func TestBlockDeviceNUMANode(t *testing.T) {
	sys := t.TempDir()
	host, err := NewFS(t.TempDir(), sys)
	if err != nil {
		t.Fatal(err)
	}
	link := func(target, device string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Join(sys, "devices", target), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Join(sys, "block"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(filepath.Join("../devices", target), filepath.Join(sys, "block", device)); err != nil {
			t.Fatal(err)
		}
	}
	// NVMe: the node is the PCI function's, three levels up.
	nvme := "pci0000:3b/0000:3b:01.0/0000:3c:00.0"
	hosttest.WriteFile(t, filepath.Join(sys, "devices", nvme, "numa_node"), "1\n")
	link(nvme+"/nvme/nvme0/nvme0n1", "nvme0n1")
	// virtio-blk: the PCI function knows no node.
	vda := "pci0000:00/0000:00:05.0"
	hosttest.WriteFile(t, filepath.Join(sys, "devices", vda, "numa_node"), "-1\n")
	link(vda+"/virtio2/block/vda", "vda")
	// A virtual device: nothing on the way has a numa_node.
	link("virtual/block/loop0", "loop0")
	// A garbled numa_node.
	bad := "pci0000:5d/0000:5d:00.0"
	hosttest.WriteFile(t, filepath.Join(sys, "devices", bad, "numa_node"), "one\n")
	link(bad+"/host0/target0:0:0/0:0:0:0/block/sda", "sda")
	// A numa_node that is no sysfs attribute (past SysfsAttrBytes).
	huge := "pci0000:80/0000:80:00.0"
	hosttest.WriteFile(t, filepath.Join(sys, "devices", huge, "numa_node"), strings.Repeat("1", SysfsAttrBytes+1))
	link(huge+"/nvme/nvme1/nvme1n1", "nvme1n1")

	for _, tc := range []struct {
		device  string
		want    int
		wantErr string // a substring; empty when it must succeed
	}{
		{"nvme0n1", 1, ""},
		{"vda", -1, ""},
		{"loop0", -1, ""},
		{"nosuch", -1, ""}, // no /sys/block entry
		{"sda", -1, filepath.Join(bad, "numa_node") + ": not a NUMA node"},
		{"nvme1n1", -1, filepath.Join(huge, "numa_node")},
	} {
		var skipped []string
		got, err := host.BlockDeviceNUMANode(tc.device, func(msg, path string, err error) {
			skipped = append(skipped, msg+" "+path)
		})
		switch {
		case tc.wantErr == "" && err != nil:
			t.Errorf("%s: %v", tc.device, err)
		case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
			t.Errorf("%s: error %v; want one with %q", tc.device, err, tc.wantErr)
		case got != tc.want:
			t.Errorf("%s: node %d; want %d", tc.device, got, tc.want)
		}
		if len(skipped) != 0 {
			t.Errorf("%s: skipped %q", tc.device, skipped)
		}
	}

	// Without a /sys tree every device is unknown.
	none, err := NewFS(t.TempDir(), filepath.Join(sys, "nosuch"))
	if err != nil {
		t.Fatal(err)
	}
	if got, err := none.BlockDeviceNUMANode("nvme0n1", func(string, string, error) {}); got != -1 || err != nil {
		t.Errorf("no /sys: %d, %v", got, err)
	}
}
