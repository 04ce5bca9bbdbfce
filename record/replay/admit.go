package replay

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"reflect"
	"strconv"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"go.uber.org/zap"

	"github.com/gpudiag/gpudiag/engine"
	"github.com/gpudiag/gpudiag/record"
	"github.com/gpudiag/gpudiag/safetext"
)

// A trace is input the daemon did not read itself: a trace author can write
// any sample. Each frame is admitted only once it is held to what the live
// daemon could hold (admit): cut to the live collector's bounds, its values
// possible readings, its metrics possible series, and its size within the
// collector's share of the window. Nothing in a trace can then make the
// daemon hold or export more than the live one would.

// admission is the replayer's record of the frames it cut or refused.
type admission struct {
	recorded map[string]Recorded // by collector name, looked up once
	refused  int                 // frames refused over the whole run
	cut      int                 // frames cut to the live bounds
	// said holds the kinds of event ("cut", "refused") warned of, by
	// collector: the first of each is warned of, the rest are counted and
	// said at debug level, so that a trace of a million bad frames does
	// not flood the log.
	said map[string]bool
}

// frameName names a frame for the log: its number in the file (the first is
// 1), its offset and its collector.
func frameName(n int, offset int64, collector string) string {
	return fmt.Sprintf("frame %d (offset %d), collector %s", n, offset, safetext.Cut(collector, 64))
}

// admit decodes a frame's sample and holds it to the live bounds; false
// refuses it, after saying why.
func (r *Replayer) admit(at string, fr record.Frame) (any, bool) {
	s, cuts, err := r.decode(fr)
	if len(cuts) > 0 {
		r.cut++
		r.say("cut", fr.Collector, "replayed sample cut to what the live collector could hold",
			zap.String("frame", at), zap.Strings("cut", cuts))
	}
	if err != nil {
		r.refused++
		who := fr.Collector
		if r.recorded[who] == nil {
			who = "" // unknown: the log's memory is not the trace's to grow
		}
		r.say("refused", who, "replayed frame refused; the replay goes on with the next",
			zap.String("frame", at), zap.Error(err))
		return nil, false
	}
	return s, true
}

// say warns of the first event of its kind of a collector and says the
// rest at debug level.
func (r *Replayer) say(kind, collector, msg string, fields ...zap.Field) {
	key := kind + "\x00" + collector
	if r.said[key] {
		r.Log.Debug(msg, fields...)
		return
	}
	if r.said == nil {
		r.said = map[string]bool{}
	}
	r.said[key] = true
	r.Log.Warn(msg, fields...)
}

// sayRefused sums up, once, the frames refused and cut beyond the first of
// each collector.
func (r *Replayer) sayRefused() {
	if r.refused+r.cut > 0 {
		r.Log.Warn("frames of the trace were refused or cut to the live bounds; the first of each collector is logged",
			zap.String("file", r.Path), zap.Int("refused", r.refused), zap.Int("cut", r.cut))
	}
}

// decode returns the frame's sample, cut to its collector's live bounds,
// and what was cut; an error says why the frame is refused.
func (r *Replayer) decode(fr record.Frame) (any, []string, error) {
	rc, err := r.recordedCollector(fr.Collector)
	if err != nil {
		return nil, nil, err
	}
	s := rc.NewSample()
	budget := record.MaxPayload
	if r.Window != nil {
		budget = decodeFactor * r.Window.CollectorBytes()
	}
	if decodedBytes(fr.Sample, reflect.TypeOf(s), budget) > budget {
		return nil, nil, fmt.Errorf("decoding the sample would take more than %d bytes, %d times the collector's share of --window.max-bytes", budget, decodeFactor)
	}
	if err := json.Unmarshal(fr.Sample, s); err != nil {
		return nil, nil, fmt.Errorf("sample does not decode: %w", err)
	}
	cuts, err := rc.Bound(s)
	if err != nil {
		return nil, cuts, err
	}
	if v, ok := s.(interface{ Validate() error }); ok {
		if err := v.Validate(); err != nil {
			return nil, cuts, err
		}
	}
	if err := checkSeries(rc, s); err != nil {
		return nil, cuts, err
	}
	if z, ok := s.(engine.Sizer); ok && r.Window != nil {
		if size, share := z.SizeBytes(), r.Window.CollectorBytes(); size > share {
			return nil, cuts, fmt.Errorf("sample of %d bytes is over the collector's %d-byte share of --window.max-bytes", size, share)
		}
	}
	return s, cuts, nil
}

// recordedCollector looks a collector up once per replay: its bound may
// keep state across the frames.
func (r *Replayer) recordedCollector(name string) (Recorded, error) {
	if rc, ok := r.recorded[name]; ok {
		return rc, nil
	}
	if r.Lookup == nil {
		return nil, errors.New("the replayer has no lookup of recorded collectors")
	}
	rc, err := r.Lookup(name)
	if err != nil {
		return nil, err
	}
	if r.recorded == nil {
		r.recorded = map[string]Recorded{}
	}
	r.recorded[name] = rc
	return rc, nil
}

// checkSeries returns why the sample's metrics hold a value no series can: a
// counter that is negative or not finite (a total never goes below zero, and
// Prometheus reads one that goes back as a reset), or a gauge that is NaN
// (what is not measured is left out, never exported). A gauge may be +Inf: a
// limit that is unlimited. A Metrics that panics on the sample, or makes a
// metric client_golang refuses, refuses the frame too: the engine would
// fail the collector's families on it.
func checkSeries(c engine.Collector, s any) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("its metrics panicked: %v", p)
		}
	}()
	var m dto.Metric
	c.Metrics(s, func(pm prometheus.Metric) {
		if err != nil {
			return
		}
		m.Reset()
		if werr := pm.Write(&m); werr != nil {
			err = fmt.Errorf("%s: %w", descName(pm.Desc()), werr)
			return
		}
		if why := impossible(&m); why != "" {
			err = fmt.Errorf("%s %s", seriesName(pm.Desc(), &m), why)
		}
	})
	return err
}

// impossible says why a written metric's value is none a series can have;
// "" when it is possible.
func impossible(m *dto.Metric) string {
	counter := func(x float64) string {
		if math.IsNaN(x) || math.IsInf(x, 0) || x < 0 {
			return "is " + strconv.FormatFloat(x, 'g', -1, 64) + ": a counter is a finite total, never negative"
		}
		return ""
	}
	switch {
	case m.Counter != nil:
		return counter(m.Counter.GetValue())
	case m.Histogram != nil:
		return counter(m.Histogram.GetSampleSum())
	case m.Summary != nil:
		return counter(m.Summary.GetSampleSum())
	case m.Gauge != nil && math.IsNaN(m.Gauge.GetValue()), m.Untyped != nil && math.IsNaN(m.Untyped.GetValue()):
		return "is NaN: what is not measured is left out"
	}
	return ""
}

// seriesName is a series as the exposition format writes it, its label
// values cut, for an error.
func seriesName(d *prometheus.Desc, m *dto.Metric) string {
	var b strings.Builder
	b.WriteString(descName(d))
	for i, l := range m.GetLabel() {
		if i == 0 {
			b.WriteByte('{')
		} else {
			b.WriteByte(',')
		}
		b.WriteString(l.GetName())
		b.WriteByte('=')
		b.WriteString(strconv.Quote(safetext.Cut(l.GetValue(), 64)))
	}
	if len(m.GetLabel()) > 0 {
		b.WriteByte('}')
	}
	return b.String()
}

// descName is the metric name of a descriptor, which client_golang gives
// only in the descriptor's String.
func descName(d *prometheus.Desc) string {
	s := d.String()
	const key = "fqName: "
	i := strings.Index(s, key)
	if i < 0 {
		return s
	}
	q, err := strconv.QuotedPrefix(s[i+len(key):])
	if err != nil {
		return s
	}
	name, err := strconv.Unquote(q)
	if err != nil {
		return s
	}
	return name
}
