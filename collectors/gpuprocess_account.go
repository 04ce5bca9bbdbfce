package collectors

// The accounting that turns the counters of processes that come and go into
// per-GPU counters that never decrease.

import (
	"github.com/gpudiag/gpudiag/sample"
)

// procCounters are the cumulative counters of one process.
type procCounters struct {
	// user and system include what reaped children handed over (cutime,
	// cstime), as the io counters do, so that a child's exit moves its
	// time to the parent instead of losing it.
	user, system float64
	own          float64 // utime+stime: the process's own CPU time
	ioKnown      bool
	storageRead  float64
	syscallRead  float64
	readSyscalls float64
}

func (a procCounters) minus(b procCounters) procCounters {
	d := procCounters{
		user:   sample.CounterDelta(b.user, a.user),
		system: sample.CounterDelta(b.system, a.system),
		own:    sample.CounterDelta(b.own, a.own),
	}
	if a.ioKnown && b.ioKnown {
		d.ioKnown = true
		d.storageRead = sample.CounterDelta(b.storageRead, a.storageRead)
		d.syscallRead = sample.CounterDelta(b.syscallRead, a.syscallRead)
		d.readSyscalls = sample.CounterDelta(b.readSyscalls, a.readSyscalls)
	}
	return d
}

// gpuAccount integrates the CPU time and reads of one GPU's process tree
// into counters that never decrease, whatever processes come and go.
type gpuAccount struct {
	procs                                                map[int]trackedProc
	user, system, storageRead, syscallRead, readSyscalls float64
	// The GPU's cgroups' CPU periods, throttled periods and seconds.
	cpuPeriods, cpuThrottled, cpuThrottledSec float64
}

// update adds this sample's increments and returns them.
//
// A process seen before adds its delta. A process seen for the first time
// adds everything if its parent was already watched (it was born since), and
// nothing otherwise: its past belongs to before the daemon looked. When a
// watched child has exited, its parent's cutime and io counters jump by the
// child's final totals; the part already counted (the child's last reading)
// is taken off the parent's increment, so each CPU second and byte counts
// once. A process missing because it, or an ancestor between it and a
// watched process, was left unread by the cap may still be alive: its last
// reading is kept and nothing is taken off.
func (a *gpuAccount) update(readings []*procReading, unread map[int]bool) procCounters {
	type pending struct {
		inc   procCounters
		delta bool
	}
	live := make(map[int]*procReading, len(readings))
	for _, r := range readings {
		live[r.detail.PID] = r
	}
	watched := func(pid int) bool {
		t, ok := a.procs[pid]
		r, alive := live[pid]
		return ok && alive && t.start == r.detail.StartTicks
	}
	incs := make(map[int]*pending, len(readings))
	for _, r := range readings {
		pid := r.detail.PID
		p := &pending{}
		switch {
		case watched(pid):
			p.inc, p.delta = r.counters.minus(a.procs[pid].c), true
		case watched(r.detail.PPID):
			p.inc = r.counters
		}
		incs[pid] = p
	}
	// maybeAlive: the process or a missing ancestor was not read, so its
	// parent's children were never listed.
	maybeAlive := func(pid int) bool {
		for range 64 {
			if unread[pid] {
				return true
			}
			if _, read := live[pid]; read {
				return false
			}
			t, ok := a.procs[pid]
			if !ok {
				return false
			}
			pid = t.parent
		}
		return false
	}
	next := make(map[int]trackedProc, len(readings))
	for pid, t := range a.procs {
		if watched(pid) {
			continue
		}
		if _, read := live[pid]; !read && maybeAlive(pid) {
			next[pid] = t
			continue
		}
		// Gone: charge its last reading against the first watched ancestor,
		// whose counters now include it.
		anc := t.parent
		for range 64 {
			if watched(anc) {
				if p := incs[anc]; p.delta {
					p.inc = p.inc.minus(t.c)
				}
				break
			}
			up, ok := a.procs[anc]
			if !ok {
				break
			}
			anc = up.parent
		}
	}
	var sum procCounters
	for _, p := range incs {
		sum.user += p.inc.user
		sum.system += p.inc.system
		if p.inc.ioKnown {
			sum.storageRead += p.inc.storageRead
			sum.syscallRead += p.inc.syscallRead
			sum.readSyscalls += p.inc.readSyscalls
		}
	}
	a.user += sum.user
	a.system += sum.system
	a.storageRead += sum.storageRead
	a.syscallRead += sum.syscallRead
	a.readSyscalls += sum.readSyscalls
	for _, r := range readings {
		next[r.detail.PID] = trackedProc{start: r.detail.StartTicks, parent: r.detail.PPID, c: r.counters}
	}
	a.procs = next
	return sum
}
