package hostfs

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// netCounters are the counter files of /sys/class/net/<if> read, each
// of which every interface has. sysfs rather than /proc/net/dev:
// /proc/net/dev shows the network namespace of the reader, so a daemon in a
// pod network would see its own veth, while the host's /sys mounted into the
// container keeps showing the host's NICs, the same view the physical rule
// and the NUMA lookup use. Read here rather than through procfs, which takes
// a missing or garbled file for an unset value: a counter read as 0 while
// its interface is being removed would go backwards. name is how
// NetInterface.Unmeasured names the counter; statistic says /proc/net/dev
// has it too (FromProcNetDev).
var netCounters = []struct {
	file, name string
	statistic  bool
	get        func(*NetCounters) *uint64
}{
	{"statistics/rx_bytes", "rx_bytes", true, func(n *NetCounters) *uint64 { return &n.ReceiveBytes }},
	{"statistics/tx_bytes", "tx_bytes", true, func(n *NetCounters) *uint64 { return &n.TransmitBytes }},
	{"statistics/rx_packets", "rx_packets", true, func(n *NetCounters) *uint64 { return &n.ReceivePackets }},
	{"statistics/tx_packets", "tx_packets", true, func(n *NetCounters) *uint64 { return &n.TransmitPackets }},
	{"statistics/rx_dropped", "rx_dropped", true, func(n *NetCounters) *uint64 { return &n.ReceiveDrops }},
	{"statistics/tx_dropped", "tx_dropped", true, func(n *NetCounters) *uint64 { return &n.TransmitDrops }},
	{"statistics/rx_errors", "rx_errors", true, func(n *NetCounters) *uint64 { return &n.ReceiveErrors }},
	{"statistics/tx_errors", "tx_errors", true, func(n *NetCounters) *uint64 { return &n.TransmitErrors }},
	{"carrier_changes", "carrier_changes", false, func(n *NetCounters) *uint64 { return &n.CarrierChanges }},
}

// NetInterface is what /sys/class/net/<if> says of one interface.
type NetInterface struct {
	OperState string // up, down, lowerlayerdown, unknown...
	// Carrier is false when the link has no carrier or the interface is
	// administratively down (the kernel then refuses to say).
	Carrier  bool
	MTUBytes int
	// SpeedBytesPerSecond is the negotiated line rate, one direction; 0 when
	// the driver does not report one (virtual interfaces, link down).
	SpeedBytesPerSecond float64
	Counters            NetCounters
	// Unmeasured names the counters, as sysfs names them (rx_bytes, …,
	// carrier_changes), that were not read: they are 0 and mean nothing.
	Unmeasured []string
}

// NetCounters are the kernel's interface statistics since the driver
// registered the interface.
type NetCounters struct {
	ReceiveBytes    uint64
	TransmitBytes   uint64
	ReceivePackets  uint64
	TransmitPackets uint64
	ReceiveDrops    uint64
	TransmitDrops   uint64
	ReceiveErrors   uint64
	TransmitErrors  uint64
	CarrierChanges  uint64
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
	names := make([]string, 0, len(entries))
	for _, e := range entries {
		// bonding_masters, a file the bonding driver adds, is no
		// interface: interfaces are directories, or links to them.
		if e.Type().IsRegular() {
			continue
		}
		names = append(names, e.Name())
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

// NetInterface reads a /sys/class/net/<if> directory: its state and
// counters (NetInterfaceState) and its MTU and speed (NetInterfaceLink).
func (f FS) NetInterface(name string) (NetInterface, error) {
	out, err := f.NetInterfaceState(name)
	if err != nil {
		return out, err
	}
	out.MTUBytes, out.SpeedBytesPerSecond, err = f.NetInterfaceLink(name)
	return out, err
}

// NetInterfaceState reads an interface's operational state, carrier and
// counters: what moves from second to second, each read without the
// kernel's rtnl lock. A counter file the interface lacks (no statistics/
// directory) is named in Unmeasured; an interface whose directory is gone
// is an error wrapping fs.ErrNotExist.
func (f FS) NetInterfaceState(name string) (NetInterface, error) {
	dir := f.SysPath(NetClassDir, name)
	var out NetInterface
	operState, ok, err := f.readNetAttr(filepath.Join(dir, "operstate"))
	if err != nil {
		return out, err
	}
	if ok {
		out.OperState = operState
	}
	carrier, ok, err := f.readNetAttr(filepath.Join(dir, "carrier"))
	if err != nil {
		return out, err
	}
	out.Carrier = ok && carrier == "1"
	for _, st := range netCounters {
		path := filepath.Join(dir, st.file)
		b, err := f.readAttr(path)
		if errors.Is(err, fs.ErrNotExist) {
			out.Unmeasured = append(out.Unmeasured, st.name)
			continue
		}
		if err != nil {
			return out, err
		}
		v, err := ParseUintAttr(path, b)
		if err != nil {
			return out, err
		}
		*st.get(&out.Counters) = v
	}
	// A counter file that is not there is unmeasured where the interface
	// has none (no statistics/), and the interface gone where its
	// directory went with it.
	if len(out.Unmeasured) > 0 {
		if _, err := os.Stat(dir); err != nil {
			return out, err
		}
	}
	return out, nil
}

// NetInterfaceLink reads an interface's MTU and negotiated speed (0 when
// the driver reports none, or the interface is down). The speed is the
// costly one: the kernel takes the rtnl lock for it (and restarts the read
// while another holds it, as a CNI plugin does on a busy Kubernetes node)
// and asks the driver, which on a ConnectX NIC queries its firmware.
func (f FS) NetInterfaceLink(name string) (mtuBytes int, speedBytesPerSecond float64, err error) {
	dir := f.SysPath(NetClassDir, name)
	for _, a := range []struct {
		name string
		set  func(int64)
	}{
		{"mtu", func(n int64) { mtuBytes = int(n) }},
		// speed is in Mb/s; -1 or absent means the driver does not know.
		{"speed", func(n int64) {
			if n > 0 {
				speedBytesPerSecond = float64(n) * 1e6 / 8
			}
		}},
	} {
		v, ok, err := f.readNetAttr(filepath.Join(dir, a.name))
		if err != nil {
			return 0, 0, err
		}
		// A value that is not a number is left unset, as procfs's
		// ParseNetClassAttribute, which this replaces, left it.
		if n, perr := strconv.ParseInt(v, 0, 64); ok && perr == nil {
			a.set(n)
		}
	}
	return mtuBytes, speedBytesPerSecond, nil
}

// readNetAttr reads one attribute of a /sys/class/net/<if> directory. ok
// is false when the kernel does not answer it: absent, unreadable, or
// EINVAL and EOPNOTSUPP (carrier and speed of an interface that is down,
// attributes a driver does not implement). Anything else, a FIFO or an
// oversized file included, is an error.
func (f FS) readNetAttr(path string) (string, bool, error) {
	b, err := f.readAttr(path)
	switch {
	case err == nil:
		return strings.TrimSpace(string(b)), true, nil
	case errors.Is(err, fs.ErrNotExist), errors.Is(err, fs.ErrPermission),
		errors.Is(err, syscall.EINVAL), errors.Is(err, syscall.EOPNOTSUPP):
		return "", false, nil
	}
	return "", false, err
}
