// Package engine runs collectors on their own clock, keeps their recent
// samples in a bounded window and serves the latest ones to Prometheus.
//
// The contract that keeps scrapes fast and safe: a scrape only reads what the
// sampling goroutines already prepared. It never calls a driver, never reads
// /proc, and never waits on a collector.
package engine

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Collector samples one part of the node.
type Collector interface {
	// Name is the collector's short name, as in --collector.<name>.
	Name() string
	// Sample takes one reading. It should honour ctx where it can; the
	// engine stops waiting at the deadline whether it does or not, and does
	// not start another Sample of this collector until this one returns.
	// The returned value must not be modified afterwards: the window, the
	// metrics and the analyzers share it.
	Sample(ctx context.Context) (any, error)
	// Metrics turns a sample this collector returned into metrics, passing
	// each to emit. It runs on the sampling goroutine right after Sample,
	// never during a scrape, so a scrape only copies finished metrics.
	Metrics(sample any, emit func(prometheus.Metric))
}

// Intervaler is implemented by collectors that want a clock of their own,
// e.g. host facts that change rarely and cost a /proc scan. The engine uses
// it when the collector is added without an explicit interval.
type Intervaler interface {
	Interval() time.Duration
}

// Pacer is implemented by collectors whose next sample should come sooner
// than their interval for a while: after each sample the engine asks when
// the next one is due; a result of zero, or one longer than the interval,
// keeps the interval. The gpuprocess collector reads a new job's processes
// every second until their CPU has a rate, so that a starved job is named
// within the span, not a slow interval later.
type Pacer interface {
	NextSample() time.Duration
}

// Sentinel is implemented by collectors whose samples tell whether the node
// has GPU work (the GPUs): true keeps their clock while the node is quiet
// (Engine.SetQuiet), so that the work that ends the spell is seen at once.
type Sentinel interface {
	WatchesForWork() bool
}

// Prompter is implemented by collectors that an event elsewhere should
// sample at once: a signal on Prompt's channel starts a sample before the
// interval's tick. A nil channel never prompts.
type Prompter interface {
	Prompt() <-chan struct{}
}

// Partial is implemented by samples that can be taken in part: a host
// collector whose file lacks a line (an older kernel, a container's
// partial /proc) reads the rest and names what it could not read, e.g.
// "meminfo MemAvailable". The engine reports the names of the latest
// sample in the collector's Status, without failing it.
type Partial interface {
	UnmeasuredFields() []string
}

// Sizer is implemented by samples that know their approximate memory cost, so
// the window can hold a fixed number of bytes rather than of samples.
type Sizer interface {
	SizeBytes() int
}

// defaultSampleSize is what a sample without a Sizer is charged.
const defaultSampleSize = 1024

func sizeOf(s any) int {
	if z, ok := s.(Sizer); ok {
		return z.SizeBytes()
	}
	return defaultSampleSize
}
