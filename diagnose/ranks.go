package diagnose

import (
	"cmp"
	"math"
	"slices"
	"strconv"

	"github.com/gpudiag/gpudiag/analyzers"
	"github.com/gpudiag/gpudiag/sample"
)

// maxGoneRanks bounds the ranks gone from the GPUs that an analysis is told
// about, newest first: a node that ran thousands of short jobs in the window
// names the few that matter to a job still waiting.
const maxGoneRanks = 256

// rankEvidence lists the processes the GPUs ran in the window (analyzers.Rank):
// the driver's process lists in the GPU readings say which run now and which
// are gone, and on which GPU; the gpuprocess readings their state, parent and
// CPU; the ncclproc scan their environment (WORLD_SIZE, RANK, the job
// identity); NCCL's log their communicators. Each source is read whatever
// its age: a process's newest reading in the window is its newest state.
func rankEvidence(b *build) {
	gpus := b.gpus
	if len(gpus) == 0 {
		return
	}
	type seen struct {
		rank  analyzers.Rank
		ticks uint64 // start time, from the gpuprocess readings
		live  bool
	}
	byPID := map[int]*seen{}
	for _, e := range gpus {
		for _, d := range e.Sample.Devices {
			for _, p := range d.Processes {
				s := byPID[int(p.PID)]
				if s == nil {
					s = &seen{rank: analyzers.Rank{PID: int(p.PID), RankID: -1, CPUCores: math.NaN(), IOWait: math.NaN()}}
					byPID[int(p.PID)] = s
				}
				s.rank.GPU, s.rank.LastSeen = d.Index, e.Time
			}
		}
	}
	// The newest reading says who runs now. A GPU that did not answer, or
	// whose process list the driver did not give, says nothing of its
	// ranks: they are not called gone.
	newest := gpus[len(gpus)-1]
	unknown := map[int]bool{}
	for _, d := range newest.Sample.Devices {
		if _, ok := d.Values.Get(sample.ComputeProcesses); !ok || !d.Up {
			unknown[d.Index] = true
		}
		for _, p := range d.Processes {
			byPID[int(p.PID)].live = true
		}
	}
	for _, e := range b.processes {
		for _, g := range e.Sample.GPUs {
			for _, p := range g.Processes {
				if s := byPID[p.PID]; s != nil && p.OnGPU {
					fillFromProcess(&s.rank, p)
					s.ticks = p.StartTicks
				}
			}
		}
	}
	// The scans of the window, newest first: a rank gone since the newest
	// scan is found in an older one.
	var procs []*sample.NCCLHostProcesses
	for i := len(b.ncclScans) - 1; i >= 0; i-- {
		procs = append(procs, b.ncclScans[i].Sample)
	}
	var live, gone []analyzers.Rank
	for _, s := range byPID {
		r := s.rank
		fillFromScan(&r, s.ticks, procs, b.ncclLog)
		switch {
		case s.live:
			live = append(live, r)
		case !unknown[r.GPU]:
			r.Gone = true
			gone = append(gone, r)
		}
	}
	slices.SortFunc(live, func(a, b analyzers.Rank) int { return cmp.Or(cmp.Compare(a.GPU, b.GPU), cmp.Compare(a.PID, b.PID)) })
	slices.SortFunc(gone, func(a, b analyzers.Rank) int {
		return cmp.Or(b.LastSeen.Compare(a.LastSeen), cmp.Compare(a.PID, b.PID))
	})
	if len(gone) > maxGoneRanks {
		gone = gone[:maxGoneRanks]
	}
	b.in.Ranks = append(live, gone...)
}

// fillFromProcess takes a rank's state, parent, name and CPU from a
// gpuprocess reading; readings come oldest first, so the newest wins.
func fillFromProcess(r *analyzers.Rank, p sample.GPUProcess) {
	r.PPID, r.Comm, r.State = p.PPID, p.Comm, p.State
	r.CPUCores, r.IOWait = math.NaN(), math.NaN()
	if p.CPUCoresUsed != nil {
		r.CPUCores = *p.CPUCoresUsed
	}
	if n := sumStates(p.ThreadStates); n > 0 {
		r.IOWait = float64(p.ThreadStates["D"]) / float64(n)
	}
	switch {
	case sample.ValidJobIdentity(sample.SlurmJobIDVar, p.SlurmJobID):
		r.Job = analyzers.JobSourceSlurm + ":" + p.SlurmJobID
	case sample.ValidJobIdentity(sample.K8sPodUID, p.PodUID):
		r.Job = analyzers.JobSourceKubernetes + ":pod-" + p.PodUID
	}
}

func sumStates(m map[string]int) int {
	n := 0
	for _, k := range m {
		n += k
	}
	return n
}

// fillFromScan takes what the ncclproc scan read of a rank's environment
// (WORLD_SIZE, RANK, a torchrun or Slurm identity when no cgroup gave one)
// and its communicators from NCCL's log, found by the PID NCCL prints (the
// process's own namespace's) and its host name.
func fillFromScan(r *analyzers.Rank, ticks uint64, scans []*sample.NCCLHostProcesses, log *sample.NCCL) {
	nspid, host := r.PID, ""
	same := func(p sample.NCCLHostProcess) bool {
		return p.PID == r.PID && (ticks == 0 || p.StartTicks == 0 || p.StartTicks == ticks) // not a reused PID
	}
	for _, procs := range scans {
		if i := slices.IndexFunc(procs.Processes, same); i >= 0 {
			p := &procs.Processes[i]
			nspid, host = p.NSPID, sample.LogHostname(p.Hostname)
			if v, ok := p.EnvValue("WORLD_SIZE"); ok {
				r.WorldSize, _ = strconv.Atoi(v)
			}
			if v, ok := p.EnvValue("RANK"); ok {
				if id, err := strconv.Atoi(v); err == nil {
					r.RankID = id
				}
			}
			if r.Job == "" {
				if id, ok := p.EnvValue(sample.SlurmJobIDVar); ok && sample.ValidJobIdentity(sample.SlurmJobIDVar, id) {
					r.Job = analyzers.JobSourceSlurm + ":" + id
				} else if id, ok := p.EnvValue(sample.TorchrunRunIDVar); ok && sample.ValidJobIdentity(sample.TorchrunRunIDVar, id) {
					r.Job = analyzers.JobSourceTorchrun + ":" + id
				}
			}
			break // the newest scan that lists it
		}
	}
	if log == nil {
		return
	}
	for _, f := range log.Files {
		for _, p := range f.Processes {
			if p.PID != nspid || (host != "" && p.Host != host) {
				continue
			}
			for _, c := range p.Comms {
				if c.CommID != "" && !slices.Contains(r.Comms, c.CommID) {
					r.Comms = append(r.Comms, c.CommID)
				}
			}
		}
	}
}
