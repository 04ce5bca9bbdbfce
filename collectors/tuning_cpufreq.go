package collectors

import (
	"maps"
	"slices"

	"github.com/gpudiag/gpudiag/sample"
)

var hostGovernorDesc = tuningDesc("cpu_scaling_governor_cpus", "CPUs running each cpufreq scaling governor.", "governor")

func (c *tuningCollector) readGovernors(t *sample.HostTuning) error {
	var err error
	t.ScalingGovernors, err = c.host.ScalingGovernors()
	return err
}

func governorMetrics(t *sample.HostTuning, gauge tuningGauge) {
	for _, g := range slices.Sorted(maps.Keys(t.ScalingGovernors)) {
		gauge(hostGovernorDesc, float64(t.ScalingGovernors[g]), g)
	}
}
