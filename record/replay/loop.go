package replay

import (
	"context"
	"math"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// Loop stands in for one recorded collector while --replay.loop
// replays the trace over and over. It is the one place where the loop makes
// the exported series look like those of a daemon that never restarted:
//
//   - Counters and histograms continue from where the previous pass left
//     them. Pass 1 exports the recorded values; each later pass adds, per
//     series, an offset that makes the series start the pass at the value it
//     ended the previous one with (a series first seen mid-trace starts from
//     zero, as a new counter does, so the event that created it counts again
//     each pass). No counter goes back at the seam: Prometheus would read a
//     reset, and increase() would restart with every pass.
//   - A cumulative collector (the NCCL log tailer, whose sample is all it has
//     read from the logs so far) keeps serving the previous pass's last sample
//     until the trace's own sample has caught up with it (exports every
//     family the held one did), as the live daemon keeps a finished job's
//     NCCL facts for --collector.nccl.retention: the transports, fallbacks
//     and the findings built on them stay instead of vanishing at every seam.
//
// The samples the window and the analyzers see keep their recorded values.
// Without --replay.loop the replayed collectors are not wrapped.
type Loop struct {
	inner      intervalCollector
	cumulative bool

	mu   sync.Mutex
	pass int // 1 for the first pass
	// baseline is each counter's value in the trace's first sample of this
	// collector (absent: 0), taken on pass 1.
	baseline     map[string]float64
	baselineDone bool
	offset       map[string]float64 // added to each counter in this pass
	last         map[string]float64 // the value each counter was last exported with

	descKeys map[*prometheus.Desc]string // desc.String() of each, which allocates

	lastSample  any                 // the sample last fed, for a cumulative collector
	lastMetrics []prometheus.Metric // what it exported
	lastDescs   map[*prometheus.Desc]bool
	holding     bool // still serving the previous pass's last sample
	replayLast  bool // the next Metrics call re-emits lastMetrics
}

// maxLoopDescs bounds a loop collector's cache of descriptor names; the
// collectors' descriptors are package-level values, far fewer.
const maxLoopDescs = 4096

// maxLoopSeries bounds the counter series (a histogram's sum, count and
// buckets each count one) a loop collector carries across seams. The loop
// keeps every counter series the trace ever exported, not only those of
// the latest sample as the engine does, so a trace whose frames each bring
// new label values would otherwise grow its memory with the trace's length.
// A busy node's collectors export a few thousand; a series past the bound
// is exported as recorded, and restarts at each seam (a counter reset to
// Prometheus).
const maxLoopSeries = 1 << 14

func newLoop(c intervalCollector, cumulative bool) *Loop {
	return &Loop{inner: c, cumulative: cumulative, pass: 1,
		baseline: map[string]float64{}, offset: map[string]float64{}, last: map[string]float64{},
		descKeys: map[*prometheus.Desc]string{}}
}

func (l *Loop) Name() string                            { return l.inner.Name() }
func (l *Loop) Interval() time.Duration                 { return l.inner.Interval() }
func (l *Loop) Sample(ctx context.Context) (any, error) { return l.inner.Sample(ctx) }

// startPass is called before every pass after the first: each counter's
// offset becomes what puts its start of the trace at the value it was last
// exported with. An offset never shrinks, so a counter the trace itself
// resets cannot be carried below zero.
func (l *Loop) startPass() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.pass++
	for k, v := range l.last {
		if o := v - l.baseline[k]; o > l.offset[k] {
			l.offset[k] = o
		}
	}
	l.holding = l.cumulative && l.lastSample != nil
}

// next takes the sample the trace holds for this collector and returns the
// one to feed: the previous pass's last while a cumulative collector has not
// caught up with it, else s.
func (l *Loop) next(s any) any {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.holding {
		covered := true
		descs := map[*prometheus.Desc]bool{}
		l.inner.Metrics(s, func(m prometheus.Metric) { descs[m.Desc()] = true })
		for d := range l.lastDescs {
			if !descs[d] {
				covered = false
				break
			}
		}
		if !covered {
			l.replayLast = true
			return l.lastSample
		}
		l.holding = false
	}
	if l.cumulative {
		l.lastSample = s
	}
	return s
}

// Metrics exports the sample's metrics with the pass's counter offsets, or
// what the held sample exported last time.
func (l *Loop) Metrics(s any, emit func(prometheus.Metric)) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.replayLast {
		l.replayLast = false
		for _, m := range l.lastMetrics {
			emit(m)
		}
		return
	}
	takeBaseline := l.pass == 1 && !l.baselineDone
	l.baselineDone = true
	var out []prometheus.Metric
	descs := map[*prometheus.Desc]bool{}
	l.inner.Metrics(s, func(m prometheus.Metric) {
		d := &dto.Metric{}
		if m.Write(d) != nil || (d.Counter == nil && d.Histogram == nil) {
			out = append(out, m) // gauges pass through; a bad metric fails in the engine as before
			descs[m.Desc()] = true
			return
		}
		dk, ok := l.descKeys[m.Desc()]
		if !ok {
			if len(l.descKeys) >= maxLoopDescs {
				clear(l.descKeys) // descriptors made per sample would cost time, not memory
			}
			dk = m.Desc().String()
			l.descKeys[m.Desc()] = dk
		}
		key := seriesKey(dk, d.Label)
		adjust := func(k string, v float64) float64 {
			if _, carried := l.last[k]; !carried && len(l.last) >= maxLoopSeries {
				return v
			}
			if takeBaseline {
				l.baseline[k] = v
			}
			v += l.offset[k]
			// At a seam the first value is the trace's start plus an offset
			// taken as last - start: in floating point that can land one
			// unit in the last place below last, which Prometheus reads as
			// a counter reset. Such a rounding step is held at last; a
			// real step back is the trace's own and stays.
			if prev, carried := l.last[k]; carried && v < prev && prev-v <= 1e-9*math.Abs(prev) {
				v = prev
			}
			l.last[k] = v
			return v
		}
		if c := d.Counter; c != nil {
			v := adjust(key, c.GetValue())
			c.Value = &v
		}
		if h := d.Histogram; h != nil {
			sum := adjust(key+"\xffsum", h.GetSampleSum())
			count := uint64(adjust(key+"\xffcount", float64(h.GetSampleCount())))
			h.SampleSum, h.SampleCount = &sum, &count
			for _, b := range h.Bucket {
				n := uint64(adjust(key+"\xffle"+strconv.FormatFloat(b.GetUpperBound(), 'g', -1, 64), float64(b.GetCumulativeCount())))
				b.CumulativeCount = &n
			}
		}
		out = append(out, writtenMetric{desc: m.Desc(), m: d})
		descs[m.Desc()] = true
	})
	for _, m := range out {
		emit(m)
	}
	if l.cumulative {
		l.lastMetrics, l.lastDescs = out, descs
	}
}

// seriesKey names one series: its descriptor and its label pairs (in the
// order client_golang writes them, sorted by name).
func seriesKey(desc string, labels []*dto.LabelPair) string {
	var b strings.Builder
	b.WriteString(desc)
	for _, p := range labels {
		b.WriteByte('\xff')
		b.WriteString(p.GetName())
		b.WriteByte('=')
		b.WriteString(p.GetValue())
	}
	return b.String()
}

// writtenMetric is a metric already written to its protobuf form (with the
// loop's offsets applied).
type writtenMetric struct {
	desc *prometheus.Desc
	m    *dto.Metric
}

func (w writtenMetric) Desc() *prometheus.Desc { return w.desc }
func (w writtenMetric) Write(out *dto.Metric) error {
	out.Label, out.Counter, out.Gauge, out.Histogram = w.m.Label, w.m.Counter, w.m.Gauge, w.m.Histogram
	out.Summary, out.Untyped, out.TimestampMs = w.m.Summary, w.m.Untyped, w.m.TimestampMs
	return nil
}
