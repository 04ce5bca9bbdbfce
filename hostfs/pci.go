package hostfs

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"
)

// PCIDevicesDir is where sysfs lists every PCI function, under /sys.
const PCIDevicesDir = "bus/pci/devices"

// LocalityRefresh is how often a reader re-reads a device's PCI locality:
// it is a property of the slot, and reading it (and, without a GPU
// backend, scanning every PCI device's vendor and class) was a sixth of a
// host cycle.
const LocalityRefresh = 30 * time.Second

// PCILocality is where a PCI device sits: its node, the CPUs local to it.
type PCILocality struct {
	NUMANode     int // -1: unknown
	LocalCPUList string
	LocalCPUs    []int
	DeviceID     string
	// Path is the device's place in the PCIe tree (PCIPath); nil when sysfs
	// does not resolve it (a flat test tree, a VM without a host bridge).
	Path []string
}

var pciBusIDPattern = regexp.MustCompile(`^[0-9a-f]{4,8}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$`)

// PCILocality reads numa_node and local_cpulist of one device under
// /sys/bus/pci/devices. sysfs.PciDevices would parse every device on the
// bus and fail on the first odd one, for two files of a handful of devices.
func (f FS) PCILocality(busID string) (PCILocality, error) {
	if !pciBusIDPattern.MatchString(busID) {
		return PCILocality{}, fmt.Errorf("PCI bus ID %q is not in kernel form (0000:3b:00.0)", busID)
	}
	dir := f.SysPath(PCIDevicesDir, busID)
	if _, err := os.Stat(dir); err != nil {
		return PCILocality{}, err
	}
	loc := PCILocality{NUMANode: -1, Path: f.PCIPath(dir)}
	// Without CONFIG_NUMA there is no numa_node file: unknown, like -1.
	if b, err := ReadAttr(filepath.Join(dir, "numa_node")); err == nil {
		if loc.NUMANode, err = ParseNUMANodeAttr(filepath.Join(dir, "numa_node"), b); err != nil {
			return PCILocality{}, err
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return PCILocality{}, err
	}
	cpus, list, err := f.readCPUList(filepath.Join(dir, "local_cpulist"))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return PCILocality{}, err
	}
	loc.LocalCPUs, loc.LocalCPUList = cpus, list
	if b, err := ReadAttr(filepath.Join(dir, "device")); err == nil {
		loc.DeviceID = strings.TrimSpace(string(b))
	}
	return loc, nil
}

// PCIHex reads a PCI ID attribute (vendor, device, class) of one device
// under /sys/bus/pci/devices.
func (f FS) PCIHex(busID, attr string) (uint64, error) {
	path := f.SysPath(PCIDevicesDir, busID, attr)
	b, err := ReadAttr(path)
	if err != nil {
		return 0, err
	}
	return ParseHexAttr(path, b)
}

// pciAddressPattern is a PCI function's directory name, any domain width:
// looser than pciBusIDPattern, which checks an ID given to look up.
var pciAddressPattern = regexp.MustCompile(`^[0-9a-f]{4,}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$`)

// PCILocation resolves a sysfs device link (/sys/class/net/<if>/device,
// /sys/class/infiniband/<dev>/device) to the PCI function that holds it and
// that function's NUMA node. It walks up from the device because some
// devices (virtio-net's virtioN) sit below the PCI function and have no
// numa_node of their own. Unknown: "", -1.
func (f FS) PCILocation(deviceLink string) (pciBusID string, numaNode int, path []string) {
	dev, err := filepath.EvalSymlinks(deviceLink)
	if err != nil {
		return "", -1, nil
	}
	root, err := filepath.EvalSymlinks(f.SysPath("devices"))
	if err != nil {
		return "", -1, nil
	}
	for d := dev; strings.HasPrefix(d, root+string(filepath.Separator)); d = filepath.Dir(d) {
		b, err := ReadAttr(filepath.Join(d, "numa_node"))
		if err != nil {
			continue
		}
		node, _ := ParseNUMANodeAttr(d, b) // -1, unknown, when malformed
		if name := filepath.Base(d); pciAddressPattern.MatchString(name) {
			pciBusID = name
			path = pciPathBelow(root, d)
		}
		return pciBusID, node, path
	}
	return "", -1, nil
}

// PCIPath resolves a device directory or link (/sys/bus/pci/devices/<id>)
// to its place in the PCIe tree: its sysfs device path below /sys/devices,
// from the host bridge down to the function, as ["pci0000:17",
// "0000:17:01.0", "0000:18:00.0"]; nil when it does not resolve below
// /sys/devices to a chain of PCI functions under a host bridge.
func (f FS) PCIPath(device string) []string {
	dev, err := filepath.EvalSymlinks(device)
	if err != nil {
		return nil
	}
	root, err := filepath.EvalSymlinks(f.SysPath("devices"))
	if err != nil {
		return nil
	}
	return pciPathBelow(root, dev)
}

// pciHostBridgePattern is a host bridge's directory under /sys/devices
// (pci0000:17, pci10000:00 for VMD domains).
var pciHostBridgePattern = regexp.MustCompile(`^pci[0-9a-f]{4,}:[0-9a-f]{2}$`)

// pciPathBelow splits dev, a resolved directory below root (/sys/devices),
// into the host bridge and the PCI functions under it. Anything else on
// the way (a platform device, a virtual bus) makes the path unknown.
func pciPathBelow(root, dev string) []string {
	rel, err := filepath.Rel(root, dev)
	if err != nil || strings.HasPrefix(rel, "..") {
		return nil
	}
	parts := strings.Split(filepath.ToSlash(rel), "/")
	if len(parts) < 2 || !pciHostBridgePattern.MatchString(parts[0]) {
		return nil
	}
	for _, p := range parts[1:] {
		if !pciAddressPattern.MatchString(p) {
			return nil
		}
	}
	return parts
}
