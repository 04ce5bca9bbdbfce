package collectors

// Reading one process, at most once per sample (procCycle), and what is kept
// from one sample to the next: the last readings for rates, the placement and
// cgroup membership while they stand, the stat and io files held open.

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"strconv"
	"time"

	"github.com/prometheus/procfs"
	"go.uber.org/zap"

	"github.com/gpudiag/gpudiag/hostfs"
	"github.com/gpudiag/gpudiag/sample"
)

// procCycle is one sample's reads: each process is read at most once, and
// at most budget processes are read.
type procCycle struct {
	c      *gpuProcessCollector
	ctx    context.Context
	now    time.Time
	budget int
	cache  map[int]*procReading // nil: vanished or unreadable
	// tree finds each process's children, by the kernel's children files
	// or, without them, one scan of every process's parent.
	tree *hostfs.ProcTree
	// cgroups holds this sample's cgroup CPU limits, by the process's
	// cgroup lines: the processes of a container share them.
	cgroups map[string]cgroupRead
	// ioStall is the host's I/O stall total as this sample read it
	// (ioStallKnown: read), for the thread censuses (threadCensus.quiet).
	ioStall      uint64
	ioStallKnown bool
	// ioQuiet tells that the host's I/O stall grew by less than
	// censusIOStallShare of the time since the previous sample
	// (gpuProcessCollector.stallMark): a process first seen now gets a
	// presumed census instead of a read one.
	ioQuiet bool
}

// read returns the process, or nil when it vanished or cannot be read; ok is
// false when the cap or the deadline left it unread.
func (cy *procCycle) read(pid int) (r *procReading, ok bool) {
	if r, done := cy.cache[pid]; done {
		return r, true
	}
	if cy.budget <= 0 || cy.ctx.Err() != nil {
		return nil, false
	}
	cy.budget--
	r = cy.c.readProcess(cy, pid)
	cy.cache[pid] = r
	return r, true
}

// procReading is one process read once per sample and shared by every GPU
// that lists it.
type procReading struct {
	detail      sample.GPUProcess
	counters    procCounters
	attrs       processAttrs
	allowedCPUs []int
	childPIDs   []int // what its threads forked (hostfs.ProcTree)
	census      threadCensus
	errs        []string // files that could not be parsed, named
	broken      bool     // stat unparseable: nothing usable
	nm          *numaMapsResult
	limitsRead  bool   // processLimits ran
	rssPages    uint64 // resident pages, from stat
}

// readProcess reads one process. A process that vanishes while being read is
// dropped whole (nil): half a reading would feed wrong deltas.
func (c *gpuProcessCollector) readProcess(cy *procCycle, pid int) *procReading {
	skip := func(what string, err error) *procReading {
		c.log.Debug("GPU process skipped", zap.Int("pid", pid), zap.String("reading", what), zap.Error(err))
		return nil
	}
	dir := c.host.ProcPath(strconv.Itoa(pid))
	files, st, err := c.processFiles(pid)
	if err != nil {
		if hostfs.Vanished(err) || errors.Is(err, fs.ErrPermission) {
			return skip("stat", err)
		}
		return &procReading{errs: []string{err.Error()}, broken: true}
	}
	r := &procReading{detail: sample.GPUProcess{
		PID: pid, PPID: st.PPID, StartTicks: st.Starttime, Comm: files.Comm(), State: string(st.State), Threads: st.NumThreads,
		UserSeconds: float64(st.UTime) / hostfs.UserHZ, SystemSeconds: float64(st.STime) / hostfs.UserHZ,
		ChildrenUserSeconds: float64(st.CUTime) / hostfs.UserHZ, ChildrenSystemSeconds: float64(st.CSTime) / hostfs.UserHZ,
		BlockIODelaySeconds: float64(st.DelayAcctBlkIOTicks) / hostfs.UserHZ,
	}}
	r.rssPages = st.RSSPages
	d := &r.detail
	r.counters = procCounters{
		user: d.UserSeconds + d.ChildrenUserSeconds, system: d.SystemSeconds + d.ChildrenSystemSeconds,
		own: d.UserSeconds + d.SystemSeconds,
	}
	unreadable := func(file string, err error) {
		c.log.Debug("GPU process file unreadable", zap.Int("pid", pid), zap.String("file", file), zap.Error(err))
		d.Unreadable = append(d.Unreadable, file)
	}

	prev, known := c.lastSeen[pid]
	known = known && prev.start == st.Starttime
	if known {
		r.attrs = prev.attrs
	}
	// An exec (numactl, taskset, a launcher's wrapper) keeps the PID and
	// start time but may bring a new placement: a new command name makes
	// the attributes due.
	attrsDue := !known || r.attrs.due(cy.now) || r.attrs.comm != d.Comm
	if attrsDue {
		r.attrs.placement, r.attrs.membership, r.attrs.limitRead = false, false, false
		r.attrs.memlock = nil
		r.attrs.readAt, r.attrs.comm = cy.now, d.Comm
		if !known {
			r.attrs.firstSeen = cy.now
		}
	}

	if attrsDue || !r.attrs.placement {
		cpus, mems, allowed, err := c.host.AllowedLists(pid)
		switch {
		case err == nil:
			r.attrs.placement = true
			r.attrs.cpus, r.attrs.mems, r.attrs.allowed = cpus, mems, allowed
		case hostfs.Vanished(err):
			return skip("status", err)
		case errors.Is(err, fs.ErrPermission):
			unreadable("status", err)
		default:
			r.errs = append(r.errs, err.Error())
		}
	}
	if r.attrs.placement {
		d.CPUsAllowedList, d.MemsAllowedList, d.CPUsAllowed, r.allowedCPUs =
			r.attrs.cpus, r.attrs.mems, len(r.attrs.allowed), r.attrs.allowed
	}

	pio, err := files.IO()
	switch {
	case err == nil:
		d.IO = &sample.ProcessIO{StorageReadBytes: pio.ReadBytes, SyscallReadBytes: pio.RChar, ReadSyscalls: pio.SyscR}
		r.counters.ioKnown = true
		r.counters.storageRead, r.counters.syscallRead, r.counters.readSyscalls =
			float64(pio.ReadBytes), float64(pio.RChar), float64(pio.SyscR)
	case hostfs.Vanished(err):
		return skip("io", err)
	case errors.Is(err, fs.ErrPermission):
		unreadable("io", err)
	default:
		r.errs = append(r.errs, err.Error())
	}

	if attrsDue || !r.attrs.membership {
		cgs, err := c.cgroupsOf(pid)
		switch {
		case err == nil:
			r.attrs.membership, r.attrs.cgroups = true, cgs
		case hostfs.Vanished(err):
			return skip("cgroup", err)
		case errors.Is(err, fs.ErrPermission):
			unreadable("cgroup", err)
		default:
			r.errs = append(r.errs, fmt.Sprintf("%s/cgroup: %v", dir, err))
		}
	}
	if r.attrs.membership {
		cgs := r.attrs.cgroups
		d.Cgroup, d.ContainerID, d.PodUID, d.SlurmJobID = hostfs.CgroupIdentity(cgs)
		// The limit and its throttling counters are the cgroup's, read
		// every sample.
		cr := cy.cgroupLimit(cgs)
		d.CPULimit = cr.limit
		if cr.err != "" {
			r.errs = append(r.errs, cr.err)
		}
		if cr.gone && r.attrs.limitRead {
			// The cgroup whose limit was read is gone: the process
			// moved; read its membership again next sample. (A cgroup
			// never readable, outside the daemon's namespace, stands.)
			r.attrs.membership, r.attrs.limitRead = false, false
		}
		r.attrs.limitRead = r.attrs.limitRead || cr.limit != nil
	}

	if !c.readThreads(cy, r) {
		return skip("task", fs.ErrNotExist)
	}
	d.OMPNumThreads = c.ompNumThreads(hostfs.ProcID{PID: pid, StartTicks: d.StartTicks})

	if known {
		if dt := cy.now.Sub(prev.at).Seconds(); dt > 0 {
			cores := sample.CounterRate(prev.c.own, r.counters.own, dt)
			d.CPUCoresUsed = &cores
			if d.IO != nil && prev.c.ioKnown {
				rate := sample.CounterRate(prev.c.storageRead, r.counters.storageRead, dt)
				d.IO.StorageReadBytesPerSecond = &rate
			}
		}
	}
	return r
}

// processFiles reads the stat file of the process pid through its held
// files, opening them for a process not held (new, or its PID now another
// process's: the held files of a reaped process answer ESRCH).
func (c *gpuProcessCollector) processFiles(pid int) (*hostfs.ProcessFiles, hostfs.TaskStat, error) {
	if files := c.heldFiles[pid]; files != nil {
		st, err := files.Stat()
		if err == nil || !hostfs.Vanished(err) {
			return files, st, err
		}
		files.Close()
		delete(c.heldFiles, pid)
	}
	files, err := c.host.OpenProcessFiles(pid)
	if err != nil {
		return nil, hostfs.TaskStat{}, err
	}
	st, err := files.Stat()
	if err != nil {
		files.Close()
		return nil, hostfs.TaskStat{}, err
	}
	if c.heldFiles == nil {
		c.heldFiles = map[int]*hostfs.ProcessFiles{}
	}
	c.heldFiles[pid] = files
	return files, st, nil
}

// processAttrInterval is how long a process's placement (the CPUs and
// memory nodes it may use, from its status file) and cgroup membership
// stand between reads once the process is that old. Both are set when a
// launcher starts the process (torchrun, numactl, the container runtime,
// Slurm) or soon after by the process itself, and seldom change later: a
// young process has them read every sample, an old one every
// processAttrInterval, which spares a busy node's workers two of the four
// files each is read from every sample. A GPU process's memlock limit and
// capabilities (its limits and status files) go with them. Counters (stat,
// io, the cgroup's throttling) are read every sample.
const processAttrInterval = 30 * time.Second

// processAttrs is a process's placement and cgroup membership as last read;
// placement and membership tell which of the two were read (an unreadable
// file is tried again every sample).
type processAttrs struct {
	firstSeen, readAt     time.Time
	comm                  string // the command name when read
	placement, membership bool
	limitRead             bool // the membership's cgroup CPU limit was read
	cpus, mems            string
	allowed               []int
	cgroups               []procfs.Cgroup
	// memlock is a GPU process's RLIMIT_MEMLOCK and whether it holds
	// CAP_IPC_LOCK (processLimits), set at its start like the placement
	// (prlimit can change it later: seen within processAttrInterval).
	memlock *memlockRead
}

// due tells whether the attributes are read again this sample: every
// sample while the process is young, then every processAttrInterval.
func (a processAttrs) due(now time.Time) bool {
	return now.Sub(a.firstSeen) < processAttrInterval || now.Sub(a.readAt) >= processAttrInterval
}

// trackedProc is a process as last read; at is set where rates need it.
type trackedProc struct {
	start  uint64
	parent int
	at     time.Time
	c      procCounters
	census threadCensus
	attrs  processAttrs
}

// rememberProcesses keeps this sample's readings for next sample's
// per-process rates, and forgets numa_maps of processes no longer seen.
func (c *gpuProcessCollector) rememberProcesses(cy *procCycle, now time.Time) {
	seen := make(map[int]trackedProc, len(cy.cache))
	live := map[hostfs.ProcID]bool{}
	for pid, r := range cy.cache {
		if r == nil || r.broken {
			continue
		}
		seen[pid] = trackedProc{start: r.detail.StartTicks, parent: r.detail.PPID, at: now, c: r.counters, census: r.census, attrs: r.attrs}
		live[hostfs.ProcID{PID: pid, StartTicks: r.detail.StartTicks}] = true
	}
	c.lastSeen = seen
	for pid, files := range c.heldFiles {
		if _, ok := seen[pid]; !ok {
			files.Close()
			delete(c.heldFiles, pid)
		}
	}
	for id := range c.numaMaps {
		if !live[id] {
			delete(c.numaMaps, id)
		}
	}
	for id := range c.ompNumThreadsSeen {
		if !live[id] {
			delete(c.ompNumThreadsSeen, id)
		}
	}
}
