package diagnose

import (
	"fmt"
	"slices"
	"time"

	"github.com/gpudiag/gpudiag/analyzers"
	"github.com/gpudiag/gpudiag/engine"
	"github.com/gpudiag/gpudiag/sample"
)

// Evidence from the GPU processes (gpuprocess collector): CPU cores used by
// each GPU's processes and their DataLoader workers, their threads waiting on
// I/O, what they read from storage, and where their memory and CPUs sit.

// processEvidence averages each GPU's per-interval readings over the span,
// or from its job's start when the job began inside it (spanStarts), each
// weighted by the part of its interval inside (sample.SpanWeight: a reading
// every 5 s covers up to 5 s before a span's start), and takes where the
// processes' memory and CPUs sit from the span's newest reading. It keeps
// the whole window's readings for the ranks and the jobs.
func processEvidence(w *engine.Window, b *build) {
	b.processes = engine.Range(w, sample.GPUProcessKey, time.Time{})
	entries := engine.Range(w, sample.GPUProcessKey, b.since)
	last, ok := newest(entries)
	if !ok {
		return
	}
	// prev is the reading before the span; nil when the window no longer
	// holds it, and the span's first reading is then taken as it is.
	var prev *sample.GPUProcesses
	if e, ok := engine.Before(w, sample.GPUProcessKey, b.since); ok {
		prev = e.Sample
	}
	means := processMeans(entries, prev, jobStarts(b.in, b.since))
	for i := range b.in.GPUs {
		g := &b.in.GPUs[i]
		if m := means[g.Index]; m != nil {
			m.fill(g)
		}
		placeProcesses(g, last.Sample)
	}
	b.in.Audit.Processes = last.Sample
}

// processMean is one GPU's processes' means over the span. The CPU and
// storage rates share their readings: those that measured every process
// (measuredWhole).
type processMean struct{ cores, read, iowait, throttled sample.SpanMean }

// processMeans averages each GPU's readings from its start (starts).
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
func processMeans(entries []sample.Timed[*sample.GPUProcesses], prev *sample.GPUProcesses, starts spanStarts) map[int]*processMean {
	means := map[int]*processMean{}
	for _, e := range entries {
		s := e.Sample
		for _, g := range s.GPUs {
			// A job that started inside the span is judged from its
			// start (analyzers.GPUWindow.JobStart): the readings of the
			// idle GPU before it would dilute its CPU and reads.
			weight := sample.SpanWeight(e.Time, starts.of(g.GPU), s.IntervalSeconds)
			if weight <= 0 {
				continue // before the span or the job, or a first reading: no rates yet
			}
			m := means[g.GPU]
			if m == nil {
				m = &processMean{}
				means[g.GPU] = m
			}
			if prev == nil || measuredWhole(prev, g) {
				m.cores.Add(g.CPUCoresUsed, weight)
				m.read.Add(g.StorageReadBytesPerSecond, weight)
			}
			if g.IOWaitThreadsRatio != nil {
				m.iowait.Add(*g.IOWaitThreadsRatio, weight)
			}
			// The throttled share is the cgroups' own counters over the
			// interval, whichever processes came and went.
			if g.CPUThrottledPeriodsRatio != nil {
				m.throttled.Add(*g.CPUThrottledPeriodsRatio, weight)
			}
		}
		prev = s
	}
	return means
}

// fill sets the GPU's process evidence from the means that measured
// anything.
func (m *processMean) fill(w *analyzers.GPUWindow) {
	cores, coresMeasured := m.cores.Mean()
	iowait, iowaitMeasured := m.iowait.Mean()
	if !coresMeasured && !iowaitMeasured {
		return
	}
	if coresMeasured {
		w.ProcessCPUCores, w.ProcessReadBytes = cores, m.read.MeanOr(0)
	}
	if iowaitMeasured {
		w.ProcessIOWait = iowait
	}
	w.ProcessCPUThrottled = m.throttled.MeanOr(w.ProcessCPUThrottled)
	w.HostEvidenceSource = "gpuprocess"
}

// placeProcesses takes, from the newest reading, where the GPU's processes'
// memory and CPUs sit and their CPU quota.
func placeProcesses(w *analyzers.GPUWindow, last *sample.GPUProcesses) {
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

// processNames names each GPU's processes for the page from the newest
// reading: command and PID of the first most, descendants counted. False
// when the window holds no reading.
func processNames(w *engine.Window, most int) (map[int][]string, bool) {
	p, ok := engine.Latest(w, sample.GPUProcessKey)
	if !ok {
		return nil, false
	}
	out := map[int][]string{}
	for _, g := range p.Sample.GPUs {
		children := 0
		var names []string
		for _, pr := range g.Processes {
			if !pr.OnGPU {
				children++
				continue
			}
			if len(names) < most {
				names = append(names, fmt.Sprintf("%s (pid %d)", pr.Comm, pr.PID))
			}
		}
		if children > 0 {
			names = append(names, fmt.Sprintf("+ %d child processes", children))
		}
		if len(names) > 0 {
			out[g.GPU] = names
		}
	}
	return out, true
}
