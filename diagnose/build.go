package diagnose

import (
	"time"

	"github.com/gpudiag/gpudiag/analyzers"
	"github.com/gpudiag/gpudiag/sample"
)

// build is one Input in the making: the Input, the span's start, and what
// the joins read of the window, each kept by its collector's reader. A
// slice is the whole window, oldest first: a job's identity and a rank's
// state are read whatever their age. A pointer is the newest reading, nil
// when the window holds none.
type build struct {
	in    *analyzers.Input
	since time.Time

	gpus      []sample.Timed[*sample.GPUs]
	processes []sample.Timed[*sample.GPUProcesses]
	ncclScans []sample.Timed[*sample.NCCLHostProcesses]
	datasets  []sample.Timed[*sample.Datasets]
	ncclLog   *sample.NCCL
	disks     *sample.Disks
	pods      *sample.Timed[*sample.PodResources]
	// nodeRefaults is the page cache's refaults per second over the span
	// (the cpu collector's vmstat), NaN when unmeasured.
	nodeRefaults float64
}

// newest is the last of a collector's readings, false when there are none.
func newest[T any](readings []sample.Timed[T]) (sample.Timed[T], bool) {
	if len(readings) == 0 {
		return sample.Timed[T]{}, false
	}
	return readings[len(readings)-1], true
}

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

// Host evidence from the node-wide collectors (pressure, cpu, diskstats)
// averages each collector's per-interval values over the span, weighting
// each by the part of its interval inside the span (sample.SpanWeight); a
// collector that is off or has no reading leaves the field NaN.

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
