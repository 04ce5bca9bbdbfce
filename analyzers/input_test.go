package analyzers

import (
	"math"
	"testing"
	"time"

	"github.com/gpudiag/gpudiag/sample"
)

// A job that starts 6 s into a 10 s span is judged on its 4 s: the idle
// seconds before its first process do not dilute its SM activity.
func TestSummariseJudgesAJobFromItsStart(t *testing.T) {
	t0 := time.Unix(1000, 0)
	var readings []sample.Timed[*sample.GPUs]
	for i := 1; i <= 10; i++ {
		v := sample.NewValues()
		sm, procs := 0.0, 0.0
		if i > 6 {
			sm, procs = 0.9, 1
		}
		v.Set(sample.SMActive, sm)
		v.Set(sample.ComputeProcesses, procs)
		readings = append(readings, sample.Timed[*sample.GPUs]{Time: t0.Add(time.Duration(i) * time.Second),
			Sample: &sample.GPUs{Devices: []sample.GPU{{Index: 0, UUID: "GPU-a", Up: true, IntervalSeconds: 1, Values: v}}}})
	}
	w := SummariseGPUs(readings, t0)
	if len(w) != 1 || math.Abs(w[0].SMActive-0.9) > 1e-9 || w[0].ComputeProcesses != 1 {
		t.Fatalf("SM activity %v with %d processes; want 0.9 from the job's start", w[0].SMActive, w[0].ComputeProcesses)
	}
	if want := t0.Add(7 * time.Second); !w[0].JobStart.Equal(want) {
		t.Errorf("job start %v; want the 7th reading's %v", w[0].JobStart, want)
	}
	// A reading without the process count (the driver's query failed)
	// in the middle of the job starts no new job.
	readings[8].Sample.Devices[0].Values.Set(sample.ComputeProcesses, math.NaN())
	if w = SummariseGPUs(readings, t0); !w[0].JobStart.Equal(t0.Add(7 * time.Second)) {
		t.Errorf("job start %v after a reading without a process count; want the 7th reading's", w[0].JobStart)
	}
	// A GPU busy all along is averaged over the whole span.
	w = SummariseGPUs(readings[6:], t0)
	if math.Abs(w[0].SMActive-0.9) > 1e-9 {
		t.Errorf("busy span: %v", w[0].SMActive)
	}
}
