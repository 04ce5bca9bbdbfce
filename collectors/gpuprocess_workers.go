package collectors

import (
	"time"

	"github.com/gpudiag/gpudiag/hostfs"
	"github.com/gpudiag/gpudiag/sample"
)

// dataLoaderWorkerComm is the name recent PyTorch gives its DataLoader
// worker processes (analyzers.DataLoaderWorkerComm).
const dataLoaderWorkerComm = "pt_data_worker"

// workerTrack is what the collector remembers of one GPU process's
// DataLoader workers: the last non-empty set seen, how many times a set
// replaced the one before it whole, and since when it watches.
type workerTrack struct {
	last     map[hostfs.ProcID]bool
	respawns int
	since    time.Time
}

// trackWorkers counts, for each GPU process, the times its DataLoader
// workers were all replaced by new ones between samples while it lived:
// a DataLoader without persistent_workers tears its workers down at the
// end of every epoch and forks new ones (seed-001 row 19). A sample
// between epochs, with no workers, is passed over: the next set is
// compared with the last one seen. A replaced set is told by identity
// (PID and start time), so a reused PID is a new worker.
func (c *gpuProcessCollector) trackWorkers(out *sample.GPUProcesses, now time.Time) {
	if c.workers == nil {
		c.workers = map[hostfs.ProcID]*workerTrack{}
	}
	live := map[hostfs.ProcID]bool{}
	for gi := range out.GPUs {
		procs := out.GPUs[gi].Processes
		byParent := map[int]map[hostfs.ProcID]bool{}
		for _, p := range procs {
			if !p.OnGPU && p.Comm == dataLoaderWorkerComm {
				if byParent[p.PPID] == nil {
					byParent[p.PPID] = map[hostfs.ProcID]bool{}
				}
				byParent[p.PPID][hostfs.ProcID{PID: p.PID, StartTicks: p.StartTicks}] = true
			}
		}
		for i := range procs {
			p := &procs[i]
			if !p.OnGPU {
				continue
			}
			id := hostfs.ProcID{PID: p.PID, StartTicks: p.StartTicks}
			live[id] = true
			set := byParent[p.PID]
			t := c.workers[id]
			if t == nil {
				if len(set) == 0 {
					continue
				}
				t = &workerTrack{since: now}
				c.workers[id] = t
			}
			if len(set) > 0 {
				if len(t.last) > 0 && disjoint(t.last, set) {
					t.respawns++
				}
				t.last = set
			}
			p.WorkerRespawns, p.WorkersWatchedSeconds = t.respawns, now.Sub(t.since).Seconds()
		}
	}
	for id := range c.workers {
		if !live[id] {
			delete(c.workers, id)
		}
	}
}

// disjoint says whether two sets of processes share none.
func disjoint(a, b map[hostfs.ProcID]bool) bool {
	for id := range b {
		if a[id] {
			return false
		}
	}
	return true
}
