package hostfs

import (
	"path/filepath"
	"strings"
)

// BlockDeviceNUMANode walks up from /sys/block/<device> to the first
// ancestor below /sys/devices with a numa_node file: the PCI function of
// its controller, whose node it returns. -1 when there is none (virtual
// devices) or no /sys/block entry at all. A numa_node that cannot be read
// for want of permission is passed over, told to skipped; one that is not
// a node number is an error naming its file.
func (f FS) BlockDeviceNUMANode(device string, skipped func(msg, path string, err error)) (int, error) {
	dev, err := filepath.EvalSymlinks(f.SysPath("block", device))
	if err != nil {
		return -1, nil
	}
	root, err := filepath.EvalSymlinks(f.SysPath())
	if err != nil {
		return -1, nil
	}
	devices := filepath.Join(root, "devices")
	for d := dev; strings.HasPrefix(d, devices+string(filepath.Separator)); d = filepath.Dir(d) {
		path := filepath.Join(d, "numa_node")
		b, ok, err := readOptionalAttr(path, skipped)
		if err != nil {
			return -1, err
		}
		if !ok {
			continue
		}
		return ParseNUMANodeAttr(path, b)
	}
	return -1, nil
}
