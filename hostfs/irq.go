package hostfs

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
)

// Device interrupts: which MSI/MSI-X vectors a PCI function owns
// (/sys/bus/pci/devices/<bdf>/msi_irqs/<irq>, one empty entry per vector)
// and which CPUs serve each (/proc/irq/<irq>/effective_affinity_list, the
// CPUs the interrupt is delivered to; smp_affinity_list, the CPUs it may
// be delivered to, on kernels before 4.15 that lack the former).

// MaxDeviceIRQs bounds the vectors read per device: an mlx5 function has
// one completion vector per CPU and a few more, 2048 at most (MSI-X); a
// tree under --path.sysfs naming more is not the kernel's.
const MaxDeviceIRQs = 4096

// IRQAffinity is one interrupt and the CPUs that serve it.
type IRQAffinity struct {
	IRQ  int
	CPUs []int
	// Effective is false when the CPUs are smp_affinity_list's (the
	// kernel has no effective_affinity_list).
	Effective bool
}

// DeviceIRQs lists the MSI vectors of the PCI function at dir (a
// /sys/bus/pci/devices/<bdf> link or the function's directory) with their
// affinity, by IRQ number. A device without MSI gives nil, nil; a vector
// whose /proc/irq entry vanished (the driver freed it since the listing)
// is skipped.
func (f FS) DeviceIRQs(dir string) ([]IRQAffinity, error) {
	entries, err := os.ReadDir(filepath.Join(dir, "msi_irqs"))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if len(entries) > MaxDeviceIRQs {
		return nil, fmt.Errorf("%s: %d MSI vectors, more than %d", filepath.Join(dir, "msi_irqs"), len(entries), MaxDeviceIRQs)
	}
	var out []IRQAffinity
	for _, e := range entries {
		n, err := strconv.Atoi(e.Name())
		if err != nil || n < 0 {
			return nil, fmt.Errorf("%s: entry %s is not an IRQ number", filepath.Join(dir, "msi_irqs"), Quote(e.Name()))
		}
		a, err := f.IRQAffinity(n)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, err
		}
		out = append(out, a)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].IRQ < out[j].IRQ })
	return out, nil
}

// IRQAffinity reads /proc/irq/<n>/effective_affinity_list, else
// smp_affinity_list.
func (f FS) IRQAffinity(n int) (IRQAffinity, error) {
	dir := f.ProcPath("irq", strconv.Itoa(n))
	cpus, _, err := f.readCPUList(filepath.Join(dir, "effective_affinity_list"))
	if err == nil {
		return IRQAffinity{IRQ: n, CPUs: cpus, Effective: true}, nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return IRQAffinity{}, err
	}
	cpus, _, err = f.readCPUList(filepath.Join(dir, "smp_affinity_list"))
	if err != nil {
		return IRQAffinity{}, err
	}
	return IRQAffinity{IRQ: n, CPUs: cpus}, nil
}
