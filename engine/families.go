package engine

import (
	"fmt"
	"sort"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// families turns one sample's metrics into sorted, checked metric families.
// It does what a registry's Gather does for them (group by name, sort series,
// reject duplicates and name clashes) without building a registry each cycle:
// that cost about 150 KB and most of a host cycle's CPU (two 1000-slot
// channels per Gather).
// Series made by NewSeries take their label pairs from lp when it is not
// nil (a collector's state keeps one across builds).
func families(ms []prometheus.Metric, lp *labelPairs) ([]*dto.MetricFamily, error) {
	if lp != nil {
		lp.begin()
		defer lp.end()
	}
	byName := map[string]*dto.MetricFamily{}
	for _, m := range ms {
		meta, err := metaOf(m.Desc())
		if err != nil {
			return nil, err
		}
		var d *dto.Metric
		if s, ok := m.(*series); ok && lp != nil {
			d, err = lp.metric(s)
		} else {
			d = &dto.Metric{}
			err = m.Write(d)
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", meta.name, err)
		}
		typ, err := typeOf(d)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", meta.name, err)
		}
		mf, ok := byName[meta.name]
		if !ok {
			name, help := meta.name, meta.help
			mf = &dto.MetricFamily{Name: &name, Help: &help, Type: typ.Enum()}
			byName[meta.name] = mf
		} else if mf.GetType() != typ || mf.GetHelp() != meta.help {
			return nil, fmt.Errorf("metric %s exported with two types or help texts", meta.name)
		}
		mf.Metric = append(mf.Metric, d)
	}
	out := make([]*dto.MetricFamily, 0, len(byName))
	for _, mf := range byName {
		sort.Slice(mf.Metric, func(i, j int) bool { return labelsLess(mf.Metric[i].Label, mf.Metric[j].Label) })
		for i := 1; i < len(mf.Metric); i++ {
			if !labelsLess(mf.Metric[i-1].Label, mf.Metric[i].Label) {
				return nil, fmt.Errorf("metric %s: series %v exported twice", mf.GetName(), mf.Metric[i].Label)
			}
		}
		out = append(out, mf)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].GetName() < out[j].GetName() })
	return out, nil
}

// labelsLess orders series as the registry does: by label values in the
// order of the (name-sorted) label pairs.
func labelsLess(a, b []*dto.LabelPair) bool {
	for i := 0; i < len(a) && i < len(b); i++ {
		if a[i].GetName() != b[i].GetName() {
			return a[i].GetName() < b[i].GetName()
		}
		if a[i].GetValue() != b[i].GetValue() {
			return a[i].GetValue() < b[i].GetValue()
		}
	}
	return len(a) < len(b)
}

func typeOf(d *dto.Metric) (dto.MetricType, error) {
	switch {
	case d.Gauge != nil:
		return dto.MetricType_GAUGE, nil
	case d.Counter != nil:
		return dto.MetricType_COUNTER, nil
	case d.Histogram != nil:
		return dto.MetricType_HISTOGRAM, nil
	case d.Summary != nil:
		return dto.MetricType_SUMMARY, nil
	case d.Untyped != nil:
		return dto.MetricType_UNTYPED, nil
	}
	return 0, fmt.Errorf("metric without a value")
}

type descMeta struct{ name, help string }

// metaCache maps descriptors to their name and help. Descriptors are
// package-level values in practice; the cache is cleared if it ever grows
// past maxDescs, so a collector that made descriptors per cycle would cost
// time, not memory.
var (
	metaMu    sync.Mutex
	metaCache = map[*prometheus.Desc]descMeta{}
)

const maxDescs = 4096

// metaOf learns a descriptor's name and help once, through a registry (the
// only public way to read them), and remembers them.
func metaOf(desc *prometheus.Desc) (descMeta, error) {
	metaMu.Lock()
	m, ok := metaCache[desc]
	metaMu.Unlock()
	if ok {
		return m, nil
	}
	reg := prometheus.NewRegistry()
	probe := descProbe{desc}
	if err := reg.Register(probe); err != nil {
		return descMeta{}, err
	}
	mfs, err := reg.Gather()
	if err != nil || len(mfs) != 1 {
		return descMeta{}, fmt.Errorf("descriptor %s: %v", desc, err)
	}
	m = descMeta{name: mfs[0].GetName(), help: mfs[0].GetHelp()}
	metaMu.Lock()
	if len(metaCache) >= maxDescs {
		metaCache = map[*prometheus.Desc]descMeta{}
	}
	metaCache[desc] = m
	metaMu.Unlock()
	return m, nil
}

// descProbe emits one untyped zero-valued series of a descriptor, with
// placeholder label values, so a registry reveals its name and help.
type descProbe struct{ desc *prometheus.Desc }

func (p descProbe) Describe(ch chan<- *prometheus.Desc) { ch <- p.desc }
func (p descProbe) Collect(ch chan<- prometheus.Metric) {
	ch <- probeMetric{p.desc}
}

type probeMetric struct{ desc *prometheus.Desc }

func (p probeMetric) Desc() *prometheus.Desc { return p.desc }
func (p probeMetric) Write(m *dto.Metric) error {
	zero := 0.0
	m.Untyped = &dto.Untyped{Value: &zero}
	return nil
}
