package engine

import (
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// NewSeries is prometheus.MustNewConstMetric for a collector's Metrics: the
// same series, but one whose label pairs the engine makes once and reuses
// from one scrape's families to the next while the series is exported. A
// const metric builds its label pairs on every call (a slice, a pair and
// two strings per label): on a busy 8-GPU node those were a fifth of the
// objects the daemon allocated. A label value that is not valid UTF-8, or
// is longer than any name the daemon exports, is made so (exportLabel)
// when its pairs are made; label values that do not fit the descriptor, or
// a value type that is none of the three, fail the collector's families
// with client_golang's error. The
// series keeps labelValues: the caller must not change them afterwards (a
// variadic call's slice is its own).
func NewSeries(desc *prometheus.Desc, typ prometheus.ValueType, value float64, labelValues ...string) prometheus.Metric {
	return &series{desc: desc, typ: typ, value: value, labels: labelValues}
}

type series struct {
	desc   *prometheus.Desc
	typ    prometheus.ValueType
	value  float64
	labels []string
}

func (s *series) Desc() *prometheus.Desc { return s.desc }

// Write is the const metric's, for callers outside the engine's families.
func (s *series) Write(m *dto.Metric) error {
	cm, err := prometheus.NewConstMetric(s.desc, s.typ, s.value, exportLabels(s.labels)...)
	if err != nil {
		return err
	}
	return cm.Write(m)
}

// sameSlice is whether a and b are one slice (exportLabels changed nothing).
func sameSlice(a, b []string) bool {
	return len(a) == len(b) && (len(a) == 0 || &a[0] == &b[0])
}

// labelPairs keeps the label pairs of a collector's series between builds
// of its families: those a build did not use are dropped after it, so the
// cache holds what is exported now and no series that went. Not safe for
// concurrent use (the state's buildMu guards it). The pairs are shared by
// the families of consecutive builds and never changed once made.
type labelPairs struct {
	byDesc map[*prometheus.Desc]map[string]*pairsEntry
	build  uint64
	key    []byte
}

type pairsEntry struct {
	pairs []*dto.LabelPair
	// values is how many label values made the pairs: a call with another
	// count is a caller's error that only a miss reports (the key joins
	// the values with 0xff, which no valid value holds, so a hit with the
	// same count is the same values).
	values int
	build  uint64 // the last build that used it
}

// metric writes s as a series with cached label pairs, making them (through
// client_golang, which checks the values) the first time. Label values that
// had to be made valid are made again on each build, never cached.
func (lp *labelPairs) metric(s *series) (*dto.Metric, error) {
	lp.key = lp.key[:0]
	for _, v := range s.labels {
		lp.key = append(append(lp.key, v...), 0xff)
	}
	byKey := lp.byDesc[s.desc]
	e := byKey[string(lp.key)] // no string is made for the lookup
	knownType := s.typ == prometheus.CounterValue || s.typ == prometheus.GaugeValue || s.typ == prometheus.UntypedValue
	if e == nil || e.values != len(s.labels) || !knownType {
		// The one place a collector's label values are made valid
		// (exportLabel), on a miss only: a hit is values made before.
		labels := exportLabels(s.labels)
		cm, err := prometheus.NewConstMetric(s.desc, s.typ, s.value, labels...)
		if err != nil {
			return nil, err
		}
		var made dto.Metric
		if err := cm.Write(&made); err != nil {
			return nil, err
		}
		if !sameSlice(labels, s.labels) {
			// Not cached: an invalid value may hold the key's 0xff
			// separator, so its key could spell other values'.
			return valueMetric(made.Label, s.typ, s.value), nil
		}
		if lp.byDesc == nil {
			lp.byDesc = map[*prometheus.Desc]map[string]*pairsEntry{}
		}
		if byKey == nil {
			byKey = map[string]*pairsEntry{}
			lp.byDesc[s.desc] = byKey
		}
		e = &pairsEntry{pairs: made.Label, values: len(s.labels)}
		byKey[string(lp.key)] = e
	}
	e.build = lp.build
	return valueMetric(e.pairs, s.typ, s.value), nil
}

// valueMetric allocates a series and its value in one object.
func valueMetric(pairs []*dto.LabelPair, typ prometheus.ValueType, v float64) *dto.Metric {
	switch typ {
	case prometheus.CounterValue:
		b := &struct {
			m dto.Metric
			c dto.Counter
			v float64
		}{v: v}
		b.c.Value, b.m.Counter, b.m.Label = &b.v, &b.c, pairs
		return &b.m
	case prometheus.GaugeValue:
		b := &struct {
			m dto.Metric
			g dto.Gauge
			v float64
		}{v: v}
		b.g.Value, b.m.Gauge, b.m.Label = &b.v, &b.g, pairs
		return &b.m
	default:
		b := &struct {
			m dto.Metric
			u dto.Untyped
			v float64
		}{v: v}
		b.u.Value, b.m.Untyped, b.m.Label = &b.v, &b.u, pairs
		return &b.m
	}
}

// begin starts a build; end drops the pairs it did not use.
func (lp *labelPairs) begin() { lp.build++ }

func (lp *labelPairs) end() {
	for desc, byKey := range lp.byDesc {
		for k, e := range byKey {
			if e.build != lp.build {
				delete(byKey, k)
			}
		}
		if len(byKey) == 0 {
			delete(lp.byDesc, desc)
		}
	}
}
