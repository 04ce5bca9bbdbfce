package collectors

import (
	"maps"
	"slices"

	"github.com/gpudiag/gpudiag/sample"
)

var hostGovernorDesc = tuningDesc("cpu_scaling_governor_cpus", "CPUs running each cpufreq scaling governor.", "governor")

func (c *tuningCollector) readGovernors(t *sample.HostTuning) error {
	f, err := c.host.ScalingGovernors()
	t.ScalingGovernors, t.ScalingGovernorCPUs, t.ScalingDriver = f.Governors, f.GovernorCPUs, f.Driver
	return err
}

func governorMetrics(t *sample.HostTuning, gauge tuningGauge) {
	for _, g := range slices.Sorted(maps.Keys(t.ScalingGovernors)) {
		gauge(hostGovernorDesc, float64(t.ScalingGovernors[g]), g)
	}
}
