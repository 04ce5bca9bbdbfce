package hostfs

import (
	"errors"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"
)

// referenceHost is the fixture tree's handle.
func referenceHost(t *testing.T) FS {
	t.Helper()
	root := filepath.Join("testdata", "host")
	host, err := NewFS(filepath.Join(root, "proc"), filepath.Join(root, "sys"))
	if err != nil {
		t.Fatal(err)
	}
	return host
}

// PCILocality on the reference host: a GPU with its node, local CPUs and
// place in the PCIe tree; an NVSwitch without numa_node or local_cpulist;
// IDs that are not in kernel form or name no device.
func TestPCILocality(t *testing.T) {
	host := referenceHost(t)
	for _, tc := range []struct {
		busID    string
		node     int
		cpuList  string
		cpus     int
		deviceID string
		path     string
		wantErr  string // a substring; empty when it must succeed
	}{
		{"0000:18:00.0", 0, "0-31,64-95", 64, "0x2330", "pci0000:15/0000:15:01.0/0000:16:00.0/0000:17:00.0/0000:18:00.0", ""},
		{"0000:db:00.0", 1, "32-63,96-127", 64, "0x2330", "pci0000:d8/0000:d8:01.0/0000:d9:00.0/0000:da:00.0/0000:db:00.0", ""},
		{"0000:05:00.0", -1, "", 0, "", "pci0000:00/0000:00:01.1/0000:05:00.0", ""},
		{"18:00.0", 0, "", 0, "", "", "not in kernel form"},
		{"0000:18:00.0/../0000:2a:00.0", 0, "", 0, "", "", "not in kernel form"},
	} {
		loc, err := host.PCILocality(tc.busID)
		switch {
		case tc.wantErr == "" && err != nil:
			t.Errorf("%s: %v", tc.busID, err)
		case tc.wantErr != "":
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("%s: error %v; want one with %q", tc.busID, err, tc.wantErr)
			}
		case loc.NUMANode != tc.node || loc.LocalCPUList != tc.cpuList || len(loc.LocalCPUs) != tc.cpus ||
			loc.DeviceID != tc.deviceID || strings.Join(loc.Path, "/") != tc.path:
			t.Errorf("%s: %+v", tc.busID, loc)
		}
	}
	if _, err := host.PCILocality("0000:ff:00.0"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("no such device: error %v", err)
	}
}

// PCIHex reads the ID attributes of a PCI function.
func TestPCIHex(t *testing.T) {
	host := referenceHost(t)
	for _, tc := range []struct {
		busID, attr string
		want        uint64
	}{
		{"0000:18:00.0", "vendor", 0x10de},
		{"0000:18:00.0", "class", 0x030200},
		{"0000:05:00.0", "class", 0x068000},
		{"0000:0b:00.0", "vendor", 0x1a03},
	} {
		if got, err := host.PCIHex(tc.busID, tc.attr); err != nil || got != tc.want {
			t.Errorf("%s %s: %#x, %v; want %#x", tc.busID, tc.attr, got, err, tc.want)
		}
	}
	if _, err := host.PCIHex("0000:05:00.0", "device"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("no device attribute: error %v", err)
	}
}

// PCILocation resolves the device links of network interfaces and HCAs to
// the PCI function that holds them.
func TestPCILocation(t *testing.T) {
	host := referenceHost(t)
	for _, tc := range []struct {
		link  string
		busID string
		node  int
		path  string
	}{
		{"class/net/ens9c0np0/device", "0000:9c:00.0", 1, "pci0000:97/0000:97:01.0/0000:98:00.0/0000:99:02.0/0000:9c:00.0"},
		{"class/infiniband/mlx5_0/device", "0000:1a:00.0", 0, "pci0000:15/0000:15:01.0/0000:16:00.0/0000:17:02.0/0000:1a:00.0"},
		{"class/net/eth0/device", "0000:03:00.0", 0, "pci0000:00/0000:00:1c.0/0000:03:00.0"},
		{"class/net/lo/device", "", -1, ""}, // a virtual interface has none
		{"class/net/nosuch/device", "", -1, ""},
	} {
		busID, node, path := host.PCILocation(host.SysPath(tc.link))
		if busID != tc.busID || node != tc.node || strings.Join(path, "/") != tc.path {
			t.Errorf("%s: %q %d %q; want %q %d %q", tc.link, busID, node, path, tc.busID, tc.node, tc.path)
		}
	}
}
