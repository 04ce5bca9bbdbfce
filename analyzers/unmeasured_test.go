package analyzers

import (
	"testing"

	"github.com/gpudiag/gpudiag/sample"
)

// A vmstat counter unmeasured at one end of the span (a /proc without
// vmstat, a line the file lacked) is not taken for 0: swap configured
// stays a warning, not "N pages swapped out in the span" counted from 0.
func TestSwapAuditIgnoresUnmeasuredCounters(t *testing.T) {
	tuning := &sample.HostTuning{SwapDevices: 1, SwapBytes: 8 << 30}
	unread := &sample.CPU{VM: sample.VMCounters{Unmeasured: []string{sample.VMSwapOut}}}
	read := &sample.CPU{VM: sample.VMCounters{SwapOutPages: 35045}}
	for _, tc := range []struct {
		name        string
		first, last *sample.CPU
	}{{"unmeasured first", unread, read}, {"unmeasured last", read, unread}} {
		fs := auditTuningAnyNode(AuditInput{Tuning: tuning, LastCPU: tc.last, FirstCPU: tc.first})
		if len(fs) != 1 || fs[0].Check != "swap_active" || fs[0].Severity != SeverityWarning {
			t.Errorf("%s: %+v", tc.name, fs)
		}
	}
}
