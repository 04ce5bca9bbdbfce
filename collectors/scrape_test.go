package collectors

import (
	"io"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// metrics is a parsed exposition, by family name.
type metrics map[string]*dto.MetricFamily

func parseExposition(t *testing.T, text io.Reader) metrics {
	t.Helper()
	p := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := p.TextToMetricFamilies(text)
	if err != nil {
		t.Fatalf("exposition does not parse: %v", err)
	}
	return mfs
}

// gatherMap gathers g and parses its text exposition, as Prometheus would.
func gatherMap(t *testing.T, g prometheus.Gatherer) metrics {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	return parseExposition(t, strings.NewReader(string(exposition(t, mfs))))
}

// lookup returns the value of the series of family name whose labels include
// the given name, value pairs.
func (m metrics) lookup(name string, labels ...string) (float64, bool) {
	mf, ok := m[name]
	if !ok {
		return 0, false
	}
	for _, s := range mf.GetMetric() {
		have := map[string]string{}
		for _, l := range s.GetLabel() {
			have[l.GetName()] = l.GetValue()
		}
		match := true
		for i := 0; i+1 < len(labels); i += 2 {
			match = match && have[labels[i]] == labels[i+1]
		}
		if !match {
			continue
		}
		switch {
		case s.Gauge != nil:
			return s.GetGauge().GetValue(), true
		case s.Counter != nil:
			return s.GetCounter().GetValue(), true
		default:
			return s.GetUntyped().GetValue(), true
		}
	}
	return 0, false
}

func (m metrics) value(t *testing.T, name string, labels ...string) float64 {
	t.Helper()
	x, ok := m.lookup(name, labels...)
	if !ok {
		t.Fatalf("no series %s%v", name, labels)
	}
	return x
}

func (m metrics) want(t *testing.T, want float64, name string, labels ...string) {
	t.Helper()
	if got := m.value(t, name, labels...); got != want {
		t.Fatalf("%s%v = %v; want %v", name, labels, got, want)
	}
}

// gpuCounters returns every GPU counter series, keyed by name and labels.
func (m metrics) gpuCounters() map[string]float64 {
	out := map[string]float64{}
	for name, mf := range m {
		if mf.GetType() != dto.MetricType_COUNTER || !strings.HasPrefix(name, "gpudiag_gpu_") {
			continue
		}
		for _, s := range mf.GetMetric() {
			var ls []string
			for _, l := range s.GetLabel() {
				ls = append(ls, l.GetName()+"="+l.GetValue())
			}
			sort.Strings(ls)
			out[name+"{"+strings.Join(ls, ",")+"}"] = s.GetCounter().GetValue()
		}
	}
	return out
}

// lockedClock is a fake clock safe to read from the failover's goroutines.
type lockedClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *lockedClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *lockedClock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// waitUntil polls cond until it holds, however long a loaded machine
// takes; only hangGuard, at the test binary's timeout, ends the wait.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	guard := hangGuard(t)
	for !cond() {
		select {
		case <-guard:
			t.Fatalf("still waiting for %s", what)
		case <-time.After(time.Millisecond):
		}
	}
}
