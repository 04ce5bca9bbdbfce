package collectors

import (
	"errors"
	"io/fs"

	"github.com/gpudiag/gpudiag/sample"
)

var (
	hostSwappinessDesc  = tuningDesc("vm_swappiness", "vm.swappiness: the kernel's willingness to swap anonymous memory out (0-200).")
	hostSwapDevicesDesc = tuningDesc("swap_devices", "Active swap areas (rows of /proc/swaps).")
	hostSwapSizeDesc    = tuningDesc("swap_size_bytes", "Size of all active swap areas.")
	hostSwapUsedDesc    = tuningDesc("swap_used_bytes", "Swap in use across all active swap areas.")
)

func (c *tuningCollector) readSwap(t *sample.HostTuning) error {
	v, err := c.host.SysctlInts("vm.swappiness")
	if err != nil {
		return err
	}
	if len(v) == 1 {
		t.Swappiness = &v[0]
	}
	swaps, err := c.host.SwapTotals()
	if errors.Is(err, fs.ErrNotExist) {
		return nil // kernel built without swap
	}
	if err != nil {
		return err
	}
	t.SwapDevices, t.SwapBytes, t.SwapUsedBytes = swaps.Devices, swaps.SizeBytes, swaps.UsedBytes
	t.SwapZramDevices = swaps.ZramDevices
	return nil
}

func swapMetrics(t *sample.HostTuning, gauge tuningGauge) {
	if t.Swappiness != nil {
		gauge(hostSwappinessDesc, float64(*t.Swappiness))
	}
	gauge(hostSwapDevicesDesc, float64(t.SwapDevices))
	gauge(hostSwapSizeDesc, float64(t.SwapBytes))
	gauge(hostSwapUsedDesc, float64(t.SwapUsedBytes))
}
