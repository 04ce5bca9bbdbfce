package collectors

import (
	"testing"
	"time"

	"github.com/gpudiag/gpudiag/sample"
)

// A GPU process whose DataLoader workers are all replaced between samples
// respawned them; the same workers again, a sample between epochs without
// workers, or a worker added beside the others is no respawn. A process
// that goes away is forgotten.
func TestGPUProcessWorkerRespawns(t *testing.T) {
	c := &gpuProcessCollector{}
	t0 := time.Unix(1_700_000_000, 0)
	reading := func(workers ...int) *sample.GPUProcesses {
		procs := []sample.GPUProcess{{PID: 100, StartTicks: 50, Comm: "python", OnGPU: true}}
		for _, w := range workers {
			procs = append(procs, sample.GPUProcess{PID: w, PPID: 100, StartTicks: uint64(w) * 10, Comm: "pt_data_worker", Depth: 1})
		}
		return &sample.GPUProcesses{GPUs: []sample.GPUProcessGroup{{GPU: 0, Processes: procs}}}
	}
	steps := []struct {
		at       time.Duration
		workers  []int
		respawns int
	}{
		{0, []int{201, 202}, 0},
		{5 * time.Second, []int{201, 202}, 0},
		{10 * time.Second, []int{201, 202, 203}, 0}, // one more beside the others
		{3 * time.Minute, nil, 0},                   // between epochs
		{3*time.Minute + 5*time.Second, []int{301, 302}, 1},
		{6 * time.Minute, []int{401, 402}, 2},
	}
	for _, s := range steps {
		r := reading(s.workers...)
		c.trackWorkers(r, t0.Add(s.at))
		p := r.GPUs[0].Processes[0]
		if p.WorkerRespawns != s.respawns || p.WorkersWatchedSeconds != s.at.Seconds() {
			t.Fatalf("at %v: respawns %d, watched %gs; want %d, %gs", s.at, p.WorkerRespawns, p.WorkersWatchedSeconds, s.respawns, s.at.Seconds())
		}
	}
	c.trackWorkers(&sample.GPUProcesses{}, t0.Add(7*time.Minute))
	if len(c.workers) != 0 {
		t.Fatalf("a process gone is still followed: %v", c.workers)
	}
}
