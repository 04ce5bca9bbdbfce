package collectors

// A process's threads counted by state (the I/O wait ratio), and when a
// census of every thread is worth its cost.

import (
	"cmp"
	"slices"
	"time"

	"github.com/gpudiag/gpudiag/hostfs"
)

// threadCensusInterval is how long the thread states of a process stand
// when its last census found none of its threads waiting on I/O: a busy
// node's ranks and DataLoader workers hold thousands of pool threads
// asleep (CUDA, NCCL, OpenMP, gloo), and a census costs one stat file per
// thread. The main thread (the one a DataLoader worker reads data on, and a
// rank without workers) is read every sample from the process's stat; a
// process found waiting is counted in full every sample.
const threadCensusInterval = 30 * time.Second

// A census due by its interval is taken only where it could find threads
// waiting on I/O: when the host's I/O stall time (/proc/pressure/io, some:
// the time at least one task waited on I/O) grew since the last census by
// at least censusIOStallShare of the time passed; else the last census
// stands, up to threadCensusMaxAge. A thread's share of time in I/O wait
// cannot exceed the host's share with some task waiting, so below 1% a
// census would find, on average, under 1% of threads in D state, against
// the 25% the I/O verdict asks for (analyzers.Thresholds.IOWaitThreads).
// That holds for threads born since the last census too, so a changed
// thread count is no reason to count again (runtimes and pools add and drop
// threads all along; the verdict's share is over the threads counted). A
// compute-bound job whose data sits in memory then costs no census at all;
// one whose loaders read storage is counted as before. Without pressure
// files (a kernel without PSI) every due census is taken.
const (
	censusIOStallShare = 0.01
	threadCensusMaxAge = 5 * time.Minute
)

// threadCensus is a process's threads other than the main one, counted by
// state at time at; ioStall is the host's I/O stall total then
// (microseconds; ioKnown: read).
type threadCensus struct {
	at      time.Time
	states  []stateCount
	ioStall uint64
	ioKnown bool
	// presumed marks the census of a process first seen while the host's
	// I/O had been quiet since the previous sample (procCycle.ioQuiet): no
	// thread but the main one was read, and the others are counted as not
	// waiting, by the rule that lets a census stand. It stands as a
	// census does, so the first one read is taken when the host's I/O
	// stalls (at the next sample, not after threadCensusInterval: none was
	// read) or at threadCensusMaxAge.
	presumed bool
}

type stateCount struct {
	state byte
	n     int
}

// quiet tells whether the census may stand past its interval at now: the
// host's I/O stall grew by less than censusIOStallShare of the time since
// it was taken (stall: this sample's total), and it is younger than
// threadCensusMaxAge.
func (t threadCensus) quiet(now time.Time, stall uint64, stallKnown bool) bool {
	age := now.Sub(t.at)
	if !stallKnown || !t.ioKnown || stall < t.ioStall || age >= threadCensusMaxAge || age <= 0 {
		return false
	}
	return float64(stall-t.ioStall) < censusIOStallShare*float64(age.Microseconds())
}

// waiting tells whether the census found a thread in uninterruptible sleep.
func (t threadCensus) waiting() bool {
	for _, s := range t.states {
		if s.state == 'D' {
			return true
		}
	}
	return false
}

// readThreads counts the process's threads by state and finds its children
// (hostfs.ProcTree). The main thread's state is the process's own, read
// every sample; the other threads are counted by a census, taken every
// sample for processes whose main thread or last census was waiting on I/O,
// for new processes unless the host's I/O was quiet since the previous
// sample (then presumed: threadCensus.presumed), and otherwise every
// threadCensusInterval unless the host's I/O was quiet since
// (threadCensus.quiet; the last census stands in between). It returns false
// when the process vanished.
func (c *gpuProcessCollector) readThreads(cy *procCycle, r *procReading) bool {
	pid := r.detail.PID
	var states [256]int
	if r.detail.State != "" {
		states[r.detail.State[0]]++
	}
	prev, known := c.lastSeen[pid]
	known = known && prev.start == r.detail.StartTicks
	switch {
	case known && r.detail.State != "D" && !prev.census.waiting() &&
		(!prev.census.presumed && cy.now.Sub(prev.census.at) < threadCensusInterval ||
			prev.census.quiet(cy.now, cy.ioStall, cy.ioStallKnown)):
		r.census = prev.census
		c.childrenOf(cy, r)
	case !known && r.detail.State != "D" && cy.ioQuiet:
		// New, under a quiet host: a census would find, as one standing
		// does, no thread waiting. A job's processes start together (a
		// rank and its DataLoader workers, a new epoch's workers): their
		// first censuses were most of what the collector read.
		r.census = threadCensus{at: cy.now, ioStall: cy.ioStall, ioKnown: cy.ioStallKnown, presumed: true}
		c.childrenOf(cy, r)
	default:
		census, ok := c.takeCensus(cy, r)
		if !ok {
			return false
		}
		r.census = census
	}
	for _, sc := range r.census.states {
		states[sc.state] += sc.n
	}
	for state, n := range states {
		if n > 0 {
			if r.detail.ThreadStates == nil {
				r.detail.ThreadStates = map[string]int{}
			}
			r.detail.ThreadStates[threadStateNames[state]] = n
		}
	}
	return true
}

// takeCensus reads the stat file of every thread but the main one (up to
// the cap) and collects the children of the threads read.
func (c *gpuProcessCollector) takeCensus(cy *procCycle, r *procReading) (threadCensus, bool) {
	pid := r.detail.PID
	tasks, err := c.stats.OpenTasks(pid)
	if err != nil {
		return threadCensus{}, !hostfs.Vanished(err)
	}
	defer tasks.Close()
	threads, err := tasks.IDs(c.tidBuf)
	c.tidBuf = threads
	if err != nil {
		return threadCensus{}, !hostfs.Vanished(err)
	}
	// The main thread first: under the cap it is the one that forks
	// DataLoader workers.
	slices.SortFunc(threads, func(a, b int) int {
		if (a == pid) != (b == pid) {
			if a == pid {
				return -1
			}
			return 1
		}
		return cmp.Compare(a, b)
	})
	if len(threads) > c.opts.maxThreads {
		threads = threads[:c.opts.maxThreads]
	}
	var states [256]int
	// The threads read, whose children the tree looks for, kept in place.
	tids := threads[:0]
	for _, tid := range threads {
		if tid == pid {
			tids = append(tids, tid) // counted from the process's stat
			continue
		}
		st, err := tasks.Stat(tid)
		if err != nil {
			continue // the thread exited
		}
		states[st.State]++
		tids = append(tids, tid)
	}
	kids, errs := cy.tree.ChildrenOfThreads(pid, tids)
	c.noteChildErrors(pid, errs)
	r.childPIDs = kids
	census := threadCensus{at: cy.now, ioStall: cy.ioStall, ioKnown: cy.ioStallKnown}
	for state, n := range states {
		if n > 0 {
			census.states = append(census.states, stateCount{state: byte(state), n: n})
		}
	}
	return census, true
}

// threadStateNames are the one-letter strings of stat's state byte, made
// once.
var threadStateNames = func() (out [256]string) {
	for i := range out {
		out[i] = string([]byte{byte(i)})
	}
	return out
}()
