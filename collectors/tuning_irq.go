package collectors

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"

	"github.com/gpudiag/gpudiag/hostfs"
	"github.com/gpudiag/gpudiag/sample"
)

// nvidiaVendor is NVIDIA's PCI vendor ID; a GPU is a display controller
// (class 0x03xxxx) of that vendor (the NVSwitches are bridges, 0x0680).
const nvidiaVendor = 0x10de

var (
	hostIRQVectorsDesc = tuningDesc("irq_vectors", "MSI vectors of a GPU (device = PCI bus ID) or RDMA device.", "device", "kind", "numa_node")
	hostIRQRemoteDesc  = tuningDesc("irq_remote_ratio",
		"Share of a device's MSI vectors served by no CPU of its NUMA node (effective_affinity_list, else smp_affinity_list).", "device", "kind", "numa_node")
)

// readDeviceIRQs counts the NVIDIA GPUs on the PCI bus by the driver bound
// to them, and reads, for each of them and each RDMA device, its MSI
// vectors and how many are served by no CPU of its NUMA node. Devices whose node is unknown (-1, a VM) or that have no vector
// are left out.
func (c *tuningCollector) readDeviceIRQs(t *sample.HostTuning) error {
	nodeCPUs := map[int]map[int]bool{}
	local := func(node int) (map[int]bool, error) {
		if m, ok := nodeCPUs[node]; ok {
			return m, nil
		}
		cpus, _, err := c.host.NUMANodeCPUs(node)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, err
		}
		m := make(map[int]bool, len(cpus))
		for _, cpu := range cpus {
			m[cpu] = true
		}
		nodeCPUs[node] = m
		return m, nil
	}
	add := func(name, kind, busID, dir string, node int) error {
		if node < 0 {
			return nil
		}
		irqs, err := c.host.DeviceIRQs(dir)
		if err != nil || len(irqs) == 0 {
			return err
		}
		cpus, err := local(node)
		if err != nil || len(cpus) == 0 {
			return err // no cpulist for the node: nothing to compare with
		}
		d := sample.DeviceIRQs{Device: name, Kind: kind, PCIBusID: busID, NUMANode: node, Vectors: len(irqs)}
		for _, irq := range irqs {
			if !slices.ContainsFunc(irq.CPUs, func(cpu int) bool { return cpus[cpu] }) {
				d.Remote++
			}
		}
		t.DeviceIRQs = append(t.DeviceIRQs, d)
		return nil
	}
	busIDs, err := os.ReadDir(c.host.SysPath(hostfs.PCIDevicesDir))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	for _, e := range busIDs {
		id := e.Name()
		vendor, err := c.host.PCIHex(id, "vendor")
		if err != nil || vendor != nvidiaVendor {
			continue // unreadable or gone: not a GPU we can judge
		}
		if class, err := c.host.PCIHex(id, "class"); err != nil || class>>16 != 0x03 {
			continue
		}
		// The driver bound to the GPU: NVIDIA's, nouveau, vfio-pci, or
		// none, whatever the GPU backend could open.
		driver := "none"
		if target, err := os.Readlink(c.host.SysPath(hostfs.PCIDevicesDir, id, "driver")); err == nil {
			driver = filepath.Base(target)
		}
		if t.GPUPCIDrivers == nil {
			t.GPUPCIDrivers = map[string]int{}
		}
		t.GPUPCIDrivers[driver]++
		loc, err := c.host.PCILocality(id)
		if err != nil {
			continue
		}
		if err := add(id, "gpu", id, c.host.SysPath(hostfs.PCIDevicesDir, id), loc.NUMANode); err != nil {
			return err
		}
	}
	rdma, err := os.ReadDir(c.host.SysPath("class/infiniband"))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	for _, e := range rdma {
		busID, node, path := c.host.PCILocation(c.host.SysPath("class/infiniband", e.Name(), "device"))
		if busID == "" || path == nil {
			continue
		}
		dir := filepath.Join(append([]string{c.host.SysPath("devices")}, path...)...)
		if err := add(e.Name(), "rdma", busID, dir, node); err != nil {
			return err
		}
	}
	return nil
}

func deviceIRQMetrics(t *sample.HostTuning, gauge tuningGauge) {
	for _, d := range t.DeviceIRQs {
		node := strconv.Itoa(d.NUMANode)
		gauge(hostIRQVectorsDesc, float64(d.Vectors), d.Device, d.Kind, node)
		gauge(hostIRQRemoteDesc, d.RemoteRatio(), d.Device, d.Kind, node)
	}
}
