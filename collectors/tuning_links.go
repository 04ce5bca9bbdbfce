package collectors

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/gpudiag/gpudiag/hostfs"
	"github.com/gpudiag/gpudiag/sample"
)

// readDeviceLinks reads the PCIe link of each RDMA device, physical network
// interface and NVMe controller: a NIC or disk that trained below its
// generation or width, or a NIC whose line rate its link cannot carry,
// caps what the GPUs get from the network or the dataset, and nothing
// else on the node says so. One entry per PCI function: an RDMA device
// and its Ethernet or IPoIB interface share one, and the RDMA device's
// port rate is kept.
func (c *tuningCollector) readDeviceLinks(t *sample.HostTuning) error {
	seen := map[string]bool{}
	add := func(name, kind, deviceLink string, portRate func() float64) error {
		busID, _, path := c.host.PCILocation(deviceLink)
		if busID == "" || path == nil || seen[busID] {
			return nil
		}
		link, ok, err := hostfs.ReadPCIeLink(filepath.Join(append([]string{c.host.SysPath("devices")}, path...)...))
		if err != nil || !ok {
			// One device's odd attribute (a FIFO, an oversized file) loses
			// that device's link, not the node's tuning reading.
			return nil
		}
		seen[busID] = true
		d := sample.DeviceLink{Device: name, Kind: kind, PCIBusID: busID,
			CurrentGTs: link.CurrentGTs, MaxGTs: link.MaxGTs, CurrentWidth: link.CurrentWidth, MaxWidth: link.MaxWidth}
		if portRate != nil {
			d.PortBytesPerSecond = portRate()
		}
		t.DeviceLinks = append(t.DeviceLinks, d)
		return nil
	}
	rdma, err := os.ReadDir(c.host.SysPath("class/infiniband"))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	for _, e := range rdma {
		dev := e.Name()
		rate := func() float64 {
			ports, _ := os.ReadDir(c.host.SysPath("class/infiniband", dev, "ports"))
			fastest := 0.0
			for _, p := range ports {
				// A port whose rate is unreadable or odd counts as unknown,
				// never as a guess.
				b, err := hostfs.ReadAttr(c.host.SysPath("class/infiniband", dev, "ports", p.Name(), "rate"))
				if err != nil {
					continue
				}
				if v, err := hostfs.ParseInfiniBandRate(string(b)); err == nil && v > fastest {
					fastest = v
				}
			}
			return fastest
		}
		if err := add(dev, "rdma", c.host.SysPath("class/infiniband", dev, "device"), rate); err != nil {
			return err
		}
	}
	ifaces, err := c.host.NetInterfaceNames()
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	for _, name := range ifaces {
		if !c.host.NetInterfacePhysical(name) {
			continue
		}
		rate := func() float64 {
			// The speed costs the rtnl lock and a firmware query: read only
			// for a function whose link is judged, at the tuning interval.
			_, speed, err := c.host.NetInterfaceLink(name)
			if err != nil {
				return 0
			}
			return speed
		}
		if err := add(name, "nic", c.host.NetInterfaceDevice(name), rate); err != nil {
			return err
		}
	}
	nvme, err := os.ReadDir(c.host.SysPath("class/nvme"))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	for _, e := range nvme {
		// NVMe over fabrics controllers have no PCI function: PCILocation
		// resolves none and they are left out.
		if err := add(e.Name(), "nvme", c.host.SysPath("class/nvme", e.Name(), "device"), nil); err != nil {
			return err
		}
	}
	return nil
}
