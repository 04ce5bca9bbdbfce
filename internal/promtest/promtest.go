// Package promtest holds what tests of several packages read Prometheus
// output and daemon logs with.
package promtest

import (
	"bytes"
	"fmt"
	"strings"
	"sync"

	dto "github.com/prometheus/client_model/go"
)

// CounterSeries flattens every counter and histogram series (count, sum and
// each bucket) to name{labels} → value, for asserting that none goes back.
func CounterSeries(fams map[string]*dto.MetricFamily) map[string]float64 {
	out := map[string]float64{}
	for name, mf := range fams {
		for _, m := range mf.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, l.GetName()+"="+l.GetValue())
			}
			key := name + "{" + strings.Join(labels, ",") + "}"
			switch mf.GetType() {
			case dto.MetricType_COUNTER:
				out[key] = m.GetCounter().GetValue()
			case dto.MetricType_HISTOGRAM:
				h := m.GetHistogram()
				out[key+"_count"] = float64(h.GetSampleCount())
				out[key+"_sum"] = h.GetSampleSum()
				for _, b := range h.GetBucket() {
					out[fmt.Sprintf("%s_bucket{le=%g}", key, b.GetUpperBound())] = float64(b.GetCumulativeCount())
				}
			}
		}
	}
	return out
}

// SyncBuffer is a bytes.Buffer a logger writes to while the test reads it.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
