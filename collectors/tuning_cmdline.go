package collectors

import (
	"errors"
	"io/fs"

	"github.com/gpudiag/gpudiag/sample"
)

var (
	hostIsolatedDesc = tuningDesc("isolated_cpus", "CPUs in /sys/devices/system/cpu/isolated (isolcpus=): left out of scheduler load balancing.")
	hostNohzFullDesc = tuningDesc("nohz_full_cpus", "CPUs in /sys/devices/system/cpu/nohz_full (adaptive-tick, nohz_full=).")
)

// readCmdline reads the kernel's boot parameters that place CPUs and
// bound their idle states, and the isolated and nohz_full lists the
// kernel made of them.
func (c *tuningCollector) readCmdline(t *sample.HostTuning) error {
	cl, err := c.host.Cmdline()
	if err != nil {
		return err
	}
	t.Cmdline = sample.KernelCmdline{Isolcpus: cl.Isolcpus, NohzFull: cl.NohzFull,
		IntelIdleMaxCstate: cl.IntelIdleMaxCstate, ProcessorMaxCstate: cl.ProcessorMaxCstate}
	for _, f := range []struct {
		name string
		n    **int
		list *string
	}{{"isolated", &t.IsolatedCPUs, &t.IsolatedCPUList}, {"nohz_full", &t.NohzFullCPUs, nil}} {
		cpus, text, err := c.host.CPUList("devices/system/cpu", f.name)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return err
		}
		n := len(cpus)
		*f.n = &n
		if f.list != nil {
			*f.list = text
		}
	}
	return nil
}

func cmdlineMetrics(t *sample.HostTuning, gauge tuningGauge) {
	if t.IsolatedCPUs != nil {
		gauge(hostIsolatedDesc, float64(*t.IsolatedCPUs))
	}
	if t.NohzFullCPUs != nil {
		gauge(hostNohzFullDesc, float64(*t.NohzFullCPUs))
	}
}
