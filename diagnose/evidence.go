package diagnose

import (
	"cmp"
	"slices"
	"strings"
	"time"

	"github.com/gpudiag/gpudiag/analyzers"
	"github.com/gpudiag/gpudiag/engine"
	"github.com/gpudiag/gpudiag/sample"
)

// evidence holds the functions that add host evidence to an Input. Each
// reads one host collector's samples (two for the NCCL processes and their
// interfaces) from the window, by the collector's key, and fills fields of
// its own. The rules they follow to read a span are in sample/span.go.
// Adding a collector's evidence is one function here and its line below.
var evidence = []func(w *engine.Window, since time.Time, in *analyzers.Input){
	diskWaitEvidence,
	tcpEvidence, ncclEvidence, ncclProcessEvidence,
	pressureEvidence, cpuEvidence, diskEvidence,
	numaEvidence,
	processEvidence,
	fabricEvidence,
	jobEvidence,
	storageEvidence,
	rankEvidence,
}

// Host evidence from the node-wide collectors (pressure, cpu, diskstats)
// averages each collector's per-interval values over the span, weighting
// each by the part of its interval inside the span (sample.SpanWeight); a
// collector that is off or has no reading leaves the field NaN.

// spanStarts is where each GPU's span starts for the evidence of its
// processes: the span's start, or the GPU's job's first reading when the job
// began inside the span (analyzers.GPUWindow.JobStart). A job is judged from
// its start, as SummariseGPUs judges its SM activity: a starved job's CPU
// averaged with the idle GPU's seconds before it would be named only when
// the job filled most of the span.
type spanStarts struct {
	since time.Time
	jobs  map[int]time.Time
}

func jobStarts(in *analyzers.Input, since time.Time) spanStarts {
	s := spanStarts{since: since, jobs: map[int]time.Time{}}
	for _, g := range in.GPUs {
		if g.JobStart.After(since) {
			s.jobs[g.Index] = g.JobStart
		}
	}
	return s
}

// of is GPU gpu's start.
func (s spanStarts) of(gpu int) time.Time {
	if t, ok := s.jobs[gpu]; ok {
		return t
	}
	return s.since
}

// meanOver averages f over the entries that carry a value, weighted by the
// part of the interval each reading covers (f's weight) that lies after
// since: the span's first reading mostly covers time before the span.
func meanOver[T any](entries []sample.Timed[T], since time.Time, f func(T) (v, weight float64, ok bool)) (float64, bool) {
	var m sample.SpanMean
	for _, e := range entries {
		if v, w, ok := f(e.Sample); ok {
			m.Add(v, sample.SpanWeight(e.Time, since, w))
		}
	}
	return m.Mean()
}

func pressureEvidence(w *engine.Window, since time.Time, in *analyzers.Input) {
	entries := engine.Range(w, sample.PressureKey, since)
	line := func(resource string, full bool) func(*sample.Pressure) (float64, float64, bool) {
		return func(p *sample.Pressure) (float64, float64, bool) {
			r := p.Resource(resource)
			if r == nil || p.IntervalSeconds <= 0 {
				return 0, 0, false
			}
			l := r.Some
			if full {
				l = r.Full
			}
			if l == nil {
				return 0, 0, false
			}
			return l.IntervalRatio, p.IntervalSeconds, true
		}
	}
	if v, ok := meanOver(entries, since, line("cpu", false)); ok {
		in.Node.CPUPressure = v
	}
	if v, ok := meanOver(entries, since, line("io", false)); ok {
		in.Node.IOPressure = v
	}
	if v, ok := meanOver(entries, since, line("io", true)); ok {
		in.Node.IOFull = v
	}
}

func cpuEvidence(w *engine.Window, since time.Time, in *analyzers.Input) {
	swap := func(c *sample.CPU) (float64, float64, bool) {
		if c.Interval == nil || c.IntervalSeconds <= 0 ||
			!c.Interval.Measured(sample.VMSwapIn) || !c.Interval.Measured(sample.VMSwapOut) {
			return 0, 0, false
		}
		return c.Interval.SwapInPagesPerSecond + c.Interval.SwapOutPagesPerSecond, c.IntervalSeconds, true
	}
	if v, ok := meanOver(engine.Range(w, sample.CPUKey, since), since, swap); ok {
		in.Node.SwapPagesPerSecond = v
	}
}

// diskEvidence takes the busiest disk's mean read rate, and the mean write
// rate of the disk that writes most: a starved input pipeline reads from one
// dataset volume, not from all disks at once, and a checkpoint writes to one.
func diskEvidence(w *engine.Window, since time.Time, in *analyzers.Input) {
	type acc struct{ read, write sample.SpanMean }
	accs := map[string]*acc{}
	for _, e := range engine.Range(w, sample.DiskstatsKey, since) {
		d := e.Sample
		weight := sample.SpanWeight(e.Time, since, d.IntervalSeconds)
		if weight <= 0 {
			continue
		}
		for _, dev := range d.Devices {
			if dev.Rates == nil {
				continue // a disk's first reading: a baseline, no rate yet
			}
			a := accs[dev.Name]
			if a == nil {
				a = &acc{}
				accs[dev.Name] = a
			}
			a.read.Add(dev.Rates.ReadBytesPerSecond, weight)
			a.write.Add(dev.Rates.WriteBytesPerSecond, weight)
		}
	}
	if len(accs) == 0 {
		return
	}
	in.Node.DiskReadBytes, in.Node.DiskWriteBytes = 0, 0
	for _, a := range accs {
		// Every disk's first reading in the span weighs something: a
		// disk is added only then.
		in.Node.DiskReadBytes = max(in.Node.DiskReadBytes, a.read.MeanOr(0))
		in.Node.DiskWriteBytes = max(in.Node.DiskWriteBytes, a.write.MeanOr(0))
	}
}

// Evidence from the eBPF programs (ebpf collector): on which disk each GPU's
// processes and their descendants (DataLoader workers included) wait, and
// how much. It names the disk a starved job waits on, which node-wide
// pressure and per-process thread states cannot.

// diskWaitEvidence takes exact means from the cumulative per-GPU totals,
// per disk: the increase from the GPU's first reading in the span to its
// last, over the time between the two (the rules in sample/span.go). A GPU is
// followed from its own first reading: the collector lists a GPU only once
// the GPU collector has published it. A disk missing from a reading of its
// GPU had no I/O charged to it yet (the collector adds a disk at its first
// request), so it counts from zero there, not from its own first reading:
// the requests that made it appear belong to the span. A job that began
// inside the span is followed from its start (spanStarts).
func diskWaitEvidence(w *engine.Window, since time.Time, in *analyzers.Input) {
	es := engine.Range(w, sample.EBPFKey, since)
	if len(es) == 0 || !es[len(es)-1].Sample.BlockIO.Loaded {
		return
	}
	type totals struct{ bytes, wait float64 }
	type follow struct {
		readings    int
		first, last time.Time
		prev        map[string]totals // each disk's totals at the last reading
		increase    map[string]totals
	}
	starts := jobStarts(in, since)
	byGPU := map[int]*follow{}
	for _, e := range es {
		for _, g := range e.Sample.GPUs {
			if e.Time.Before(starts.of(g.Index)) {
				continue
			}
			f := byGPU[g.Index]
			if f == nil {
				f = &follow{first: e.Time, prev: map[string]totals{}, increase: map[string]totals{}}
				byGPU[g.Index] = f
			}
			now := map[string]totals{}
			for _, b := range g.BlockIO {
				t := now[b.Device]
				t.bytes += float64(b.BytesTotal)
				t.wait += b.WaitSecondsTotal
				now[b.Device] = t
			}
			if f.readings > 0 {
				// A disk absent from the previous reading counts from
				// zero (f.prev's zero value); one absent now restarted.
				for dev, t := range now {
					p, inc := f.prev[dev], f.increase[dev]
					inc.bytes += sample.CounterIncrease(p.bytes, t.bytes)
					inc.wait += sample.CounterIncrease(p.wait, t.wait)
					f.increase[dev] = inc
				}
			}
			f.prev, f.last = now, e.Time
			f.readings++
		}
	}
	for i := range in.GPUs {
		f := byGPU[in.GPUs[i].Index]
		if f == nil || f.readings < 2 || !f.last.After(f.first) {
			continue
		}
		secs := f.last.Sub(f.first).Seconds()
		var waits []analyzers.DiskWait
		for dev, inc := range f.increase {
			d := analyzers.DiskWait{Device: dev, BytesPerSecond: inc.bytes / secs, InFlight: inc.wait / secs}
			if d.InFlight > 0 || d.BytesPerSecond > 0 {
				waits = append(waits, d)
			}
		}
		slices.SortFunc(waits, func(a, b analyzers.DiskWait) int {
			return cmp.Or(cmp.Compare(b.InFlight, a.InFlight), cmp.Compare(a.Device, b.Device))
		})
		in.GPUs[i].DiskWaits = waits
	}
}

// Evidence about the communication path: TCP bytes of the GPU processes
// (tcp collector), what NCCL's own log says it did (nccl collector), and
// how the jobs' processes are set up (ncclproc and netdev collectors).

// tcpEvidence is the exact mean TCP throughput (both directions, both
// scopes) of each GPU's processes: the increase of their byte totals from
// the GPU's first reading in the span to its last, divided by the time
// between the two (sample.SpanCounter). A GPU is followed from its own first
// reading, not the span's: the tcp collector lists a GPU only once the GPU
// collector has published it, so the daemon's (and a trace's) first reading
// lists none, and a span reaching back to it must not drop every GPU. A
// job that began inside the span is followed from its start (spanStarts).
func tcpEvidence(w *engine.Window, since time.Time, in *analyzers.Input) {
	total := func(g sample.TCPGPU) float64 {
		return float64(g.Loopback.TransmitBytesTotal + g.Loopback.ReceiveBytesTotal + g.Network.TransmitBytesTotal + g.Network.ReceiveBytesTotal)
	}
	starts := jobStarts(in, since)
	byGPU := map[int]*sample.SpanCounter{}
	for _, e := range engine.Range(w, sample.TCPKey, since) {
		for _, g := range e.Sample.GPUs {
			if e.Time.Before(starts.of(g.Index)) {
				continue
			}
			c := byGPU[g.Index]
			if c == nil {
				c = &sample.SpanCounter{}
				byGPU[g.Index] = c
			}
			c.Add(e.Time, total(g))
		}
	}
	for i := range in.GPUs {
		if c := byGPU[in.GPUs[i].Index]; c != nil {
			if r, ok := c.Rate(); ok {
				in.GPUs[i].ProcessTCPBytes = r
			}
		}
	}
}

// ncclEvidence attaches the newest NCCL facts of each GPU: transports used
// and fallbacks, and keeps the sample for the audit.
func ncclEvidence(w *engine.Window, since time.Time, in *analyzers.Input) {
	e, ok := engine.Latest(w, sample.NCCLKey)
	if !ok || len(e.Sample.GPUs) == 0 {
		return
	}
	s := e.Sample
	in.Audit.NCCL = s
	for _, g := range s.GPUs {
		p := s.Process(g)
		if !p.Current {
			continue
		}
		for i := range in.GPUs {
			if in.GPUs[i].Index != g.GPU {
				continue
			}
			in.GPUs[i].NCCL = true
			in.GPUs[i].NCCLEnv = mergeEnv(in.GPUs[i].NCCLEnv, p.Env)
			for _, t := range p.Transports {
				in.GPUs[i].NCCLTransports = append(in.GPUs[i].NCCLTransports, t.Transport)
			}
			for _, f := range p.Fallbacks {
				in.GPUs[i].NCCLFallbacks = append(in.GPUs[i].NCCLFallbacks, f.Kind)
			}
		}
	}
}

// ncclProcessEvidence keeps, for the audit, the newest scan of the NCCL
// processes and the newest reading of the network interfaces. The scan runs
// on a slower clock than the span, and both change rarely: the newest is
// taken whatever its age.
func ncclProcessEvidence(w *engine.Window, _ time.Time, in *analyzers.Input) {
	if e, ok := engine.Latest(w, sample.NCCLProcKey); ok {
		in.Audit.NCCLProcesses = e.Sample
		for _, p := range e.Sample.Processes {
			if p.ForkOf != 0 {
				continue // a forked worker repeats its parent
			}
			for i := range in.GPUs {
				if !slices.Contains(p.GPUs, in.GPUs[i].Index) {
					continue
				}
				in.GPUs[i].NCCLEnv = mergeEnv(in.GPUs[i].NCCLEnv, ncclVariables(p.Env))
				if p.MapsNCCL() {
					in.GPUs[i].NCCL = true
				}
			}
		}
	}
	if e, ok := engine.Latest(w, sample.NetDevKey); ok {
		in.Audit.NetDevices = e.Sample
	}
}

// mergeEnv adds to env the variables of more it does not set yet: NCCL's
// log, read first, says what NCCL took.
func mergeEnv(env, more []sample.NCCLEnv) []sample.NCCLEnv {
	for _, e := range more {
		if !slices.ContainsFunc(env, func(x sample.NCCLEnv) bool { return x.Name == e.Name }) {
			env = append(env, e)
		}
	}
	return env
}

// ncclVariables keeps the NCCL_* variables of a process's environment.
func ncclVariables(env []sample.NCCLEnv) []sample.NCCLEnv {
	var out []sample.NCCLEnv
	for _, e := range env {
		if strings.HasPrefix(e.Name, "NCCL_") {
			out = append(out, e)
		}
	}
	return out
}

// Evidence from the GPU processes (gpuprocess collector): CPU cores used by
// each GPU's processes and their DataLoader workers, their threads waiting on
// I/O, what they read from storage, and where their memory and CPUs sit.

// processEvidence averages each GPU's per-interval readings over the span,
// or from its job's start when the job began inside it (spanStarts), each
// weighted by the part of its interval inside (sample.SpanWeight: a reading
// every 5 s covers up to 5 s before a span's start).
//
// A GPU's CPU and storage rates are left out of a reading in which they
// miss a process's interval (measuredWhole): the collector counts nothing
// for a process it meets whose parent it did not follow (its past belongs
// to before the daemon looked), and starts a GPU's account afresh when the
// GPU reappears. So the reading where a job's processes first show reads
// zero for them, a baseline and not a measurement: every GPU's second
// reading after the daemon starts, the one a short diagnose run leans on
// most, and the reading after a job starts. The share of threads in I/O
// wait is a count at the reading, valid in every one.
func processEvidence(w *engine.Window, since time.Time, in *analyzers.Input) {
	entries := engine.Range(w, sample.GPUProcessKey, since)
	if len(entries) == 0 {
		return
	}
	type acc struct{ cores, read, iowait, throttled sample.SpanMean }
	accs := map[int]*acc{}
	starts := jobStarts(in, since)
	// prev is the previous reading; nil when the window no longer holds
	// it, and the span's first reading is then taken as it is.
	var prev *sample.GPUProcesses
	if e, ok := engine.Before(w, sample.GPUProcessKey, since); ok {
		prev = e.Sample
	}
	var last *sample.GPUProcesses
	for _, e := range entries {
		s := e.Sample
		last = s
		for _, g := range s.GPUs {
			// A job that started inside the span is judged from its
			// start (analyzers.GPUWindow.JobStart): the readings of the
			// idle GPU before it would dilute its CPU and reads.
			weight := sample.SpanWeight(e.Time, starts.of(g.GPU), s.IntervalSeconds)
			if weight <= 0 {
				continue // before the span or the job, or a first reading: no rates yet
			}
			a := accs[g.GPU]
			if a == nil {
				a = &acc{}
				accs[g.GPU] = a
			}
			if prev == nil || measuredWhole(prev, g) {
				a.cores.Add(g.CPUCoresUsed, weight)
				a.read.Add(g.StorageReadBytesPerSecond, weight)
			}
			if g.IOWaitThreadsRatio != nil {
				a.iowait.Add(*g.IOWaitThreadsRatio, weight)
			}
			// The throttled share is the cgroups' own counters over the
			// interval, whichever processes came and went.
			if g.CPUThrottledPeriodsRatio != nil {
				a.throttled.Add(*g.CPUThrottledPeriodsRatio, weight)
			}
		}
		prev = s
	}
	for i := range in.GPUs {
		w := &in.GPUs[i]
		if a := accs[w.Index]; a != nil {
			cores, coresMeasured := a.cores.Mean()
			iowait, iowaitMeasured := a.iowait.Mean()
			if coresMeasured || iowaitMeasured {
				if coresMeasured {
					w.ProcessCPUCores, w.ProcessReadBytes = cores, a.read.MeanOr(0)
				}
				if iowaitMeasured {
					w.ProcessIOWait = iowait
				}
				w.ProcessCPUThrottled = a.throttled.MeanOr(w.ProcessCPUThrottled)
				w.HostEvidenceSource = "gpuprocess"
			}
		}
		if last == nil {
			continue
		}
		for _, g := range last.GPUs {
			if g.GPU != w.Index {
				continue
			}
			if g.RemoteMemoryRatio != nil {
				w.RemoteMemoryRatio = *g.RemoteMemoryRatio
			}
			if g.CPUsOffNodeRatio != nil {
				w.CPUsOffNodeRatio = *g.CPUsOffNodeRatio
			}
			if g.CPUQuotaCores != nil {
				w.ProcessCPUQuota = *g.CPUQuotaCores
			}
		}
	}
	in.Audit.Processes = last
}

// measuredWhole reports whether a GPU's rates in a reading count every one
// of its processes over the interval since prev, the reading before: the
// GPU was in prev (else its account starts here), and each process is
// either seen before (it has a rate of its own) or the child of a process
// of the GPU in prev (born since, the collector counts it whole). A
// process first seen whose parent was not followed counts nothing yet.
func measuredWhole(prev *sample.GPUProcesses, g sample.GPUProcessGroup) bool {
	i := slices.IndexFunc(prev.GPUs, func(p sample.GPUProcessGroup) bool { return p.GPU == g.GPU })
	if i < 0 {
		return false
	}
	followed := make(map[int]bool, len(prev.GPUs[i].Processes))
	for _, p := range prev.GPUs[i].Processes {
		followed[p.PID] = true
	}
	for _, p := range g.Processes {
		if p.CPUCoresUsed == nil && !followed[p.PPID] {
			return false
		}
	}
	return true
}

// numaEvidence keeps the newest NUMA reading for the placement audit: a job
// whose GPUs sit on different NUMA nodes talks over the inter-socket link.
func numaEvidence(w *engine.Window, _ time.Time, in *analyzers.Input) {
	if e, ok := engine.Latest(w, sample.NUMAKey); ok {
		in.Audit.NUMA = e.Sample
	}
}
