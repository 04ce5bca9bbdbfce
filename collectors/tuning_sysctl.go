package collectors

import (
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpudiag/gpudiag/sample"
)

// The sysctls the audit reads on their own (vm.swappiness is read with
// the swap areas, net.ipv4.ip_local_port_range with the ports in use).

var (
	hostNUMABalDesc      = tuningDesc("numa_balancing", "kernel.numa_balancing: 0 off, 1 automatic NUMA balancing, 2 memory tiering.")
	hostKernelDesc       = tuningDesc("kernel_info", "Running kernel release.", "release")
	hostDirtyRatioDesc   = tuningDesc("vm_dirty_ratio", "vm.dirty_ratio: percent of reclaimable memory that may be dirty before writers are throttled.")
	hostDirtyBgRatioDesc = tuningDesc("vm_dirty_background_ratio", "vm.dirty_background_ratio: percent of reclaimable memory dirty before background writeback starts.")
	hostDirtyBytesDesc   = tuningDesc("vm_dirty_bytes", "vm.dirty_bytes: when non-zero, the dirty limit in bytes (overrides vm.dirty_ratio).")
	hostDirtyBgBytesDesc = tuningDesc("vm_dirty_background_bytes", "vm.dirty_background_bytes: when non-zero, overrides vm.dirty_background_ratio.")
)

func (c *tuningCollector) readNUMABalancing(t *sample.HostTuning) error {
	v, err := c.host.SysctlInts("kernel.numa_balancing")
	if err != nil {
		return err
	}
	if len(v) == 1 {
		t.NUMABalancing = &v[0]
	}
	return nil
}

func (c *tuningCollector) readKernel(t *sample.HostTuning) error {
	v, err := c.host.Sysctl("kernel.osrelease")
	if err != nil || v == nil {
		return err
	}
	t.KernelRelease = strings.Join(v, " ")
	return nil
}

func (c *tuningCollector) readDirty(t *sample.HostTuning) error {
	for _, f := range []struct {
		name string
		dst  **int
	}{{"vm.dirty_ratio", &t.DirtyRatio}, {"vm.dirty_background_ratio", &t.DirtyBackgroundRatio},
		{"vm.dirty_bytes", &t.DirtyBytes}, {"vm.dirty_background_bytes", &t.DirtyBackgroundBytes}} {
		v, err := c.host.SysctlInts(f.name)
		if err != nil {
			return err
		}
		if len(v) == 1 {
			*f.dst = &v[0]
		}
	}
	return nil
}

func numaBalancingMetrics(t *sample.HostTuning, gauge tuningGauge) {
	if t.NUMABalancing != nil {
		gauge(hostNUMABalDesc, float64(*t.NUMABalancing))
	}
}

func kernelMetrics(t *sample.HostTuning, gauge tuningGauge) {
	if t.KernelRelease != "" {
		gauge(hostKernelDesc, 1, t.KernelRelease)
	}
}

func dirtyMetrics(t *sample.HostTuning, gauge tuningGauge) {
	for _, f := range []struct {
		d *prometheus.Desc
		v *int
	}{{hostDirtyRatioDesc, t.DirtyRatio}, {hostDirtyBgRatioDesc, t.DirtyBackgroundRatio}, {hostDirtyBytesDesc, t.DirtyBytes}, {hostDirtyBgBytesDesc, t.DirtyBackgroundBytes}} {
		if f.v != nil {
			gauge(f.d, float64(*f.v))
		}
	}
}
