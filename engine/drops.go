package engine

import (
	"fmt"
	"runtime/debug"
	"sort"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/gpudiag/gpudiag/safetext"
)

// Why the export boundary dropped something: the reason label of
// gpudiag_metrics_dropped_total.
const (
	// DropInvalid: client_golang would not make a series (label values
	// that do not fit the descriptor, a series twice, two types under one
	// name, an unknown value type). In a collector's Metrics this drops
	// the collector's series until its next sample; in a registry
	// collector's Collect, the one series.
	DropInvalid = "invalid"
	// DropPanic: a collector's Metrics or a registry collector's Collect
	// panicked. The series sent before the panic stand.
	DropPanic = "panic"
)

// Drops counts what the export boundary refused rather than let it end the
// process or fail the scrape, by source (a collector's name, or the registry
// collector's: diagnose, recorder) and reason (DropInvalid, DropPanic), and
// logs each distinct error once. client_golang runs a registry collector's
// Collect on a goroutine of its own, where a panic, such as
// MustNewConstMetric's on a label value that is not UTF-8, ends the daemon:
// every series leaving it passes here or through the engine's families.
// Both source and reason are names the code gives, never data, so the
// counter's series stay few. The zero value is not usable; a nil *Drops
// counts and logs nothing but still guards.
type Drops struct {
	log *zap.Logger

	mu     sync.Mutex
	counts map[dropKey]uint64
	logged map[string]struct{} // the errors logged, to log each once
	full   bool                // logged reached dropsMaxLogged
}

type dropKey struct{ source, reason string }

// dropsMaxLogged bounds the distinct errors remembered: a collector whose
// error names a changing value cannot grow the set, nor the log, without
// bound. Past it drops are still counted.
const dropsMaxLogged = 256

// dropErrorBytes bounds an error as logged: it may quote a label value
// that came from a workload or a kubelet.
const dropErrorBytes = 512

// NewDrops returns a counter logging to log (nil: no log).
func NewDrops(log *zap.Logger) *Drops {
	if log == nil {
		log = zap.NewNop()
	}
	return &Drops{log: log, counts: map[dropKey]uint64{}, logged: map[string]struct{}{}}
}

// Count records one drop; stack, when not nil, is where a panic happened and
// is logged with the first occurrence of its error.
func (d *Drops) Count(source, reason string, err error, stack []byte) {
	if d == nil {
		return
	}
	msg := safetext.Line(err.Error(), dropErrorBytes)
	key := source + "\x00" + reason + "\x00" + msg
	d.mu.Lock()
	d.counts[dropKey{source, reason}]++
	_, seen := d.logged[key]
	first, overflow := !seen && !d.full, false
	if first {
		d.logged[key] = struct{}{}
		if len(d.logged) >= dropsMaxLogged {
			d.full, overflow = true, true
		}
	}
	d.mu.Unlock()
	if !first {
		return
	}
	fields := []zap.Field{zap.String("source", source), zap.String("reason", reason), zap.String("error", msg)}
	if stack != nil {
		fields = append(fields, zap.ByteString("stack", stack))
	}
	d.log.Error("metrics dropped at the export boundary; the daemon keeps serving", fields...)
	if overflow {
		d.log.Warn("further distinct export errors are counted in gpudiag_metrics_dropped_total, not logged",
			zap.Int("logged", dropsMaxLogged))
	}
}

// Total is the number of drops of source for reason so far.
func (d *Drops) Total(source, reason string) uint64 {
	if d == nil {
		return 0
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.counts[dropKey{source, reason}]
}

var droppedDesc = prometheus.NewDesc(Namespace+"_metrics_dropped_total",
	"Series, or a collector's whole sample's series, that the export boundary dropped instead of exporting or ending the daemon: "+
		"reason invalid (client_golang refused the series: label values that do not fit, a series twice), panic (a collector's Metrics or a registry collector's Collect panicked). "+
		"source is the collector, or diagnose or recorder. A series appears with its first drop: a healthy daemon exports none.",
	[]string{"source", "reason"}, nil)

// metrics are the counter's series, one per source and reason that dropped
// anything.
func (d *Drops) metrics() []prometheus.Metric {
	if d == nil {
		return nil
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	keys := make([]dropKey, 0, len(d.counts))
	for k := range d.counts {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		return keys[i].source < keys[j].source || keys[i].source == keys[j].source && keys[i].reason < keys[j].reason
	})
	out := make([]prometheus.Metric, 0, len(keys))
	for _, k := range keys {
		if m, err := prometheus.NewConstMetric(droppedDesc, prometheus.CounterValue, float64(d.counts[k]),
			exportLabel(k.source), k.reason); err == nil {
			out = append(out, m)
		}
	}
	return out
}

// ConstEmit sends one series from a registry collector's Collect.
type ConstEmit func(desc *prometheus.Desc, typ prometheus.ValueType, value float64, labelValues ...string)

// Guard runs collect, the body of a registry collector's Collect, so that it
// never panics: each series collect emits has its label values made valid
// UTF-8 (exportLabel) and is made with NewConstMetric; one that still fails
// is dropped and counted (DropInvalid), and a panic is recovered and counted
// (DropPanic). The series sent before either stand, and the scrape answers.
func (d *Drops) Guard(source string, ch chan<- prometheus.Metric, collect func(emit ConstEmit)) {
	defer func() {
		if p := recover(); p != nil {
			d.Count(source, DropPanic, fmt.Errorf("panic: %v", p), debug.Stack())
		}
	}()
	collect(func(desc *prometheus.Desc, typ prometheus.ValueType, value float64, labelValues ...string) {
		m, err := prometheus.NewConstMetric(desc, typ, value, exportLabels(labelValues)...)
		if err != nil {
			d.Count(source, DropInvalid, err, nil)
			return
		}
		ch <- m
	})
}

// exportLabelMaxBytes bounds any label value the daemon exports: far above
// every name it exports (a mount point is at most PATH_MAX, 4096 bytes), so
// that it never cuts a real value and two values stay two series; a
// collector bounds its own values to what they can be (safetext.Label).
const exportLabelMaxBytes = 4096

// exportLabel is a label value as it may leave the daemon: valid UTF-8 (an
// invalid byte becomes U+FFFD) of at most exportLabelMaxBytes. A value that
// is both is returned as it is, without allocating.
func exportLabel(v string) string { return safetext.Cut(v, exportLabelMaxBytes) }

// exportLabels applies exportLabel to each value; it returns values itself
// when none changed.
func exportLabels(values []string) []string {
	for i, v := range values {
		if exportLabel(v) == v {
			continue
		}
		out := make([]string, len(values))
		copy(out, values[:i])
		for j := i; j < len(values); j++ {
			out[j] = exportLabel(values[j])
		}
		return out
	}
	return values
}
