package sample

import (
	"math"
	"time"
)

// How a span of readings is read, by the Input builder and the analyzers
// alike. Two kinds of readings reach them, and each has one rule, so that a
// verdict does not depend on how long the span is (issue 14):
//
//   - A cumulative counter (TCP bytes, eBPF wait seconds) is followed per
//     entity (a GPU, a disk under a GPU): its mean rate is its increase from
//     the entity's own first reading in the span to its own last one,
//     divided by the time between those two readings. An entity absent from
//     the span's first reading (a GPU the collector met later, a job that
//     started in the span) counts from its first reading; one that vanished
//     counts up to its last. A counter lower than its previous reading was
//     restarted (the collector forgot the entity and met it again, a replay
//     that looped, counters cleared by hand): it counted from zero, so all
//     of its new value is increase.
//   - A per-interval rate or ratio (a reading's IntervalSeconds before it)
//     is weighted by the part of its interval inside the span (SpanWeight):
//     the first reading of a span mostly covers time before the span began.
//     A rate that is the collector's baseline for an entity (the gpuprocess
//     reading where a job's processes first show reads zero for them) is no
//     measurement and is left out (the gpuprocess evidence).
//
// The audit counts events (XIDs, PCIe replays, InfiniBand port errors) by
// the first rule.

// Timed is one sample with its time, as the window holds it.
type Timed[T any] struct {
	Time   time.Time
	Sample T
}

// CounterIncrease is the increase of a cumulative counter between two
// readings, a counter that went back having restarted from zero. Unlike
// CounterDelta, which makes a collector's rate for one interval 0 rather
// than negative, this is summed over a span: dropping the reading after a
// restart would lose everything counted since.
func CounterIncrease(prev, cur float64) float64 {
	if cur < prev {
		return cur
	}
	return cur - prev
}

// SpanCounter follows one entity's cumulative counter through the span's
// readings, oldest first.
type SpanCounter struct {
	first, last time.Time
	prev        float64
	increase    float64
	readings    int
}

// Add takes the entity's reading at t.
func (c *SpanCounter) Add(t time.Time, v float64) {
	if c.readings == 0 {
		c.first = t
	} else {
		c.increase += CounterIncrease(c.prev, v)
	}
	c.prev, c.last = v, t
	c.readings++
}

// Increase is the counter's increase over the readings taken.
func (c *SpanCounter) Increase() float64 { return c.increase }

// Rate is the mean increase per second between the entity's first and last
// reading; false with fewer than two readings apart in time.
func (c *SpanCounter) Rate() (float64, bool) {
	secs := c.last.Sub(c.first).Seconds()
	if c.readings < 2 || secs <= 0 {
		return 0, false
	}
	return c.increase / secs, true
}

// SpanWeight is the part of a reading's interval (seconds, ending at t)
// that lies after since, the start of the span.
func SpanWeight(t, since time.Time, seconds float64) float64 {
	return math.Max(0, math.Min(seconds, t.Sub(since).Seconds()))
}
