package hostfs

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/gpudiag/gpudiag/sample"
)

// netCounters are the counter files of /sys/class/net/<if> read, each
// of which every interface has. sysfs rather than /proc/net/dev:
// /proc/net/dev shows the network namespace of the reader, so a daemon in a
// pod network would see its own veth, while the host's /sys mounted into the
// container keeps showing the host's NICs, the same view the physical rule
// and the NUMA lookup use. Read here rather than through procfs, which takes
// a missing or garbled file for an unset value: a counter read as 0 while
// its interface is being removed would go backwards.
var netCounters = []struct {
	file string
	get  func(*sample.NetCounters) *uint64
}{
	{"statistics/rx_bytes", func(n *sample.NetCounters) *uint64 { return &n.ReceiveBytes }},
	{"statistics/tx_bytes", func(n *sample.NetCounters) *uint64 { return &n.TransmitBytes }},
	{"statistics/rx_packets", func(n *sample.NetCounters) *uint64 { return &n.ReceivePackets }},
	{"statistics/tx_packets", func(n *sample.NetCounters) *uint64 { return &n.TransmitPackets }},
	{"statistics/rx_dropped", func(n *sample.NetCounters) *uint64 { return &n.ReceiveDrops }},
	{"statistics/tx_dropped", func(n *sample.NetCounters) *uint64 { return &n.TransmitDrops }},
	{"statistics/rx_errors", func(n *sample.NetCounters) *uint64 { return &n.ReceiveErrors }},
	{"statistics/tx_errors", func(n *sample.NetCounters) *uint64 { return &n.TransmitErrors }},
	{"carrier_changes", func(n *sample.NetCounters) *uint64 { return &n.CarrierChanges }},
}

// NetClassDir is where sysfs lists the network interfaces, under /sys.
const NetClassDir = "class/net"

// NetInterfaceNames lists /sys/class/net, sorted by name. A kernel without
// networking has no such directory: the error is then fs.ErrNotExist.
func (f FS) NetInterfaceNames() ([]string, error) {
	entries, err := os.ReadDir(f.SysPath(NetClassDir))
	if err != nil {
		return nil, err
	}
	names := make([]string, len(entries))
	for i, e := range entries {
		names[i] = e.Name()
	}
	return names, nil
}

// NetInterfacePhysical is whether /sys/class/net/<if>/device exists: a bus
// device (PCI NIC, IPoIB port, SR-IOV VF, virtio-net) backs the interface.
// Loopback, veth, bridges, bonds, VLANs and tunnels have none.
func (f FS) NetInterfacePhysical(name string) bool {
	_, err := os.Stat(f.NetInterfaceDevice(name))
	return err == nil
}

// NetInterfaceDevice is the path of the /sys/class/net/<if>/device link,
// which PCILocation resolves.
func (f FS) NetInterfaceDevice(name string) string {
	return f.SysPath(NetClassDir, name, "device")
}

// NetInterface reads a /sys/class/net/<if> directory: its state, MTU,
// speed and counters.
func (f FS) NetInterface(name string) (sample.NetInterface, error) {
	dir := f.SysPath(NetClassDir, name)
	out := sample.NetInterface{NUMANode: -1}
	var attrs struct {
		operState           string
		carrier, mtu, speed *int64
	}
	for _, a := range []struct {
		name string
		str  *string
		num  **int64
	}{{"operstate", &attrs.operState, nil}, {"carrier", nil, &attrs.carrier}, {"mtu", nil, &attrs.mtu}, {"speed", nil, &attrs.speed}} {
		v, ok, err := readNetAttr(filepath.Join(dir, a.name))
		if err != nil {
			return out, err
		}
		switch {
		case !ok:
		case a.str != nil:
			*a.str = v
		default:
			// A value that is not a number is left unset, as procfs's
			// ParseNetClassAttribute, which this replaces, left it.
			if n, err := strconv.ParseInt(v, 0, 64); err == nil {
				*a.num = &n
			}
		}
	}
	for _, st := range netCounters {
		path := filepath.Join(dir, st.file)
		b, err := ReadAttr(path)
		if err != nil {
			return out, err
		}
		v, err := ParseUintAttr(path, b)
		if err != nil {
			return out, err
		}
		*st.get(&out.Counters) = v
	}
	out.OperState = attrs.operState
	out.Carrier = attrs.carrier != nil && *attrs.carrier == 1
	if attrs.mtu != nil {
		out.MTUBytes = int(*attrs.mtu)
	}
	// speed is in Mb/s; -1 or absent means the driver does not know.
	if attrs.speed != nil && *attrs.speed > 0 {
		out.SpeedBytesPerSecond = float64(*attrs.speed) * 1e6 / 8
	}
	return out, nil
}

// readNetAttr reads one attribute of a /sys/class/net/<if> directory. ok
// is false when the kernel does not answer it: absent, unreadable, or
// EINVAL and EOPNOTSUPP (carrier and speed of an interface that is down,
// attributes a driver does not implement). Anything else, a FIFO or an
// oversized file included, is an error.
func readNetAttr(path string) (string, bool, error) {
	b, err := ReadAttr(path)
	switch {
	case err == nil:
		return strings.TrimSpace(string(b)), true, nil
	case errors.Is(err, fs.ErrNotExist), errors.Is(err, fs.ErrPermission),
		errors.Is(err, syscall.EINVAL), errors.Is(err, syscall.EOPNOTSUPP):
		return "", false, nil
	}
	return "", false, err
}
