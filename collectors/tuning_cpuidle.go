package collectors

import (
	"strconv"

	"github.com/gpudiag/gpudiag/sample"
)

var (
	hostCStateDesc = tuningDesc("cpu_idle_state_info",
		"A cpuidle state the CPUs declare; enabled says whether any CPU may enter it.", "state", "enabled")
	hostCStateLatencyDesc = tuningDesc("cpu_idle_state_latency_seconds", "Exit latency the idle driver declares for a cpuidle state.", "state")
	hostDeepestIdleDesc   = tuningDesc("cpu_deepest_idle_latency_seconds", "Exit latency of the deepest cpuidle state some CPU may enter.")
)

func (c *tuningCollector) readCPUIdle(t *sample.HostTuning) error {
	states, err := c.host.CPUIdleStates()
	if err != nil {
		return err
	}
	for _, s := range states {
		t.CPUIdleStates = append(t.CPUIdleStates, sample.CPUIdleState{Name: s.Name, LatencyMicros: s.LatencyMicros, CPUs: s.CPUs, Enabled: s.Enabled})
	}
	return nil
}

func cpuIdleMetrics(t *sample.HostTuning, gauge tuningGauge) {
	seen := map[string]bool{}
	for _, s := range t.CPUIdleStates {
		if seen[s.Name] {
			continue // two states of one name (a driver quirk): one series
		}
		seen[s.Name] = true
		gauge(hostCStateDesc, 1, s.Name, strconv.FormatBool(s.Enabled > 0))
		gauge(hostCStateLatencyDesc, float64(s.LatencyMicros)/1e6, s.Name)
	}
	if l := t.DeepestEnabledIdleLatency(); l >= 0 {
		gauge(hostDeepestIdleDesc, float64(l)/1e6)
	}
}
