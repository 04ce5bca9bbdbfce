package replay

import (
	"context"
	"errors"
	"math"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/gpudiag/gpudiag/engine"
	"github.com/gpudiag/gpudiag/record"
)

// admitSample is the sample of admitCollector: a counter, a gauge, a
// list the bound cuts to maxItems, and its size.
type admitSample struct {
	Counter float64 `json:"counter"`
	Gauge   float64 `json:"gauge"`
	Items   []int   `json:"items"`
	Bytes   int     `json:"bytes"`
}

func (s *admitSample) SizeBytes() int { return s.Bytes }

const maxItems = 3

var (
	admitCounterDesc = prometheus.NewDesc("admit_events_total", "Events.", []string{"kind"}, nil)
	admitGaugeDesc   = prometheus.NewDesc("admit_level", "Level.", nil, nil)
)

type admitCollector struct{}

func (admitCollector) Name() string                        { return "admit" }
func (admitCollector) Sample(context.Context) (any, error) { return nil, errors.New("replayed") }
func (admitCollector) NewSample() any                      { return &admitSample{} }
func (admitCollector) Cumulative() bool                    { return false }
func (admitCollector) Metrics(s any, emit func(prometheus.Metric)) {
	r := s.(*admitSample)
	emit(prometheus.MustNewConstMetric(admitCounterDesc, prometheus.CounterValue, r.Counter, "io"))
	emit(prometheus.MustNewConstMetric(admitGaugeDesc, prometheus.GaugeValue, r.Gauge))
}
func (admitCollector) Bound(s any) ([]string, error) {
	r := s.(*admitSample)
	if len(r.Items) <= maxItems {
		return nil, nil
	}
	r.Items = r.Items[:maxItems]
	return []string{"items"}, nil
}

func lookupAdmit(name string) (Recorded, error) {
	if name != "admit" {
		return nil, errors.New("unknown collector " + name)
	}
	return admitCollector{}, nil
}

// replayFrames replays samples, written as record writes them, into an
// engine whose window holds windowBytes, and returns the samples fed and
// the warnings.
func replayFrames(t *testing.T, windowBytes int, loop bool, samples ...any) ([]*admitSample, []observer.LoggedEntry, error) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "trace.gdrec")
	w, err := record.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Unix(1_700_000_000, 0)
	for i, s := range samples {
		if err := w.Write("admit", start.Add(time.Duration(i)*time.Second), s); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	window := engine.NewWindow(time.Hour, windowBytes)
	clock := &Clock{}
	var fed []*admitSample
	eng := engine.New(engine.Options{Window: window, Now: clock.Now,
		OnSample: func(_ string, _ time.Time, s any) { fed = append(fed, s.(*admitSample)) }})
	eng.Add(admitCollector{}, time.Second)
	core, logs := observer.New(zapcore.WarnLevel)
	r := &Replayer{Path: path, Loop: loop, Engine: eng, Window: window, Lookup: lookupAdmit, Clock: clock, Log: zap.New(core)}
	err = r.Run(t.Context())
	return fed, logs.All(), err
}

// A frame that does not decode, holds an impossible value or is larger than
// its collector's share of the window is refused with its number, offset
// and collector; the replay goes on, and only the first refusal of a
// collector is a warning.
func TestReplayRefusesBadFramesAndGoesOn(t *testing.T) {
	fed, logs, err := replayFrames(t, 1000, false,
		&admitSample{Counter: 1},
		map[string]any{"counter": "one"},      // does not decode
		&admitSample{Counter: -1},             // a counter below zero
		&admitSample{Counter: 2, Bytes: 2000}, // over the window's share
		&admitSample{Counter: 3, Items: []int{1, 2, 3, 4, 5}},
	)
	if err != nil {
		t.Fatal(err)
	}
	if len(fed) != 2 || fed[0].Counter != 1 || fed[1].Counter != 3 {
		t.Fatalf("fed %+v; want the first and the last frame", fed)
	}
	if len(fed[1].Items) != maxItems {
		t.Errorf("the last frame's items %v are not cut to %d", fed[1].Items, maxItems)
	}
	var refused, cut []string
	for _, e := range logs {
		frame, _ := e.ContextMap()["frame"].(string)
		switch {
		case strings.HasPrefix(e.Message, "replayed frame refused"):
			refused = append(refused, frame+": "+e.ContextMap()["error"].(string))
		case strings.HasPrefix(e.Message, "replayed sample cut"):
			cut = append(cut, frame)
		}
	}
	if len(refused) != 1 || !strings.HasPrefix(refused[0], "frame 2 (offset ") || !strings.Contains(refused[0], "collector admit: sample does not decode") {
		t.Errorf("refusals warned of: %q; want frame 2's alone", refused)
	}
	if len(cut) != 1 || !strings.HasPrefix(cut[0], "frame 5 (offset ") {
		t.Errorf("cuts warned of: %q; want frame 5's", cut)
	}
}

// The values a series cannot have, named by the series.
func TestCheckSeries(t *testing.T) {
	for _, tc := range []struct {
		s    admitSample
		want string
	}{
		{admitSample{Counter: 5, Gauge: -3}, ""},
		{admitSample{Gauge: math.Inf(1)}, ""}, // unlimited
		{admitSample{Counter: -1e308}, `admit_events_total{kind="io"} is -1e+308: a counter is a finite total, never negative`},
		{admitSample{Counter: math.Inf(1)}, `admit_events_total{kind="io"} is +Inf`},
		{admitSample{Counter: math.NaN()}, `admit_events_total{kind="io"} is NaN`},
		{admitSample{Gauge: math.NaN()}, `admit_level is NaN: what is not measured is left out`},
	} {
		err := checkSeries(admitCollector{}, &tc.s)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%+v: %v", tc.s, err)
		case tc.want != "" && (err == nil || !strings.HasPrefix(err.Error(), tc.want)):
			t.Errorf("%+v: %v; want %s", tc.s, err, tc.want)
		}
	}
	if err := checkSeries(panicking{}, &admitSample{}); err == nil || !strings.Contains(err.Error(), "panicked") {
		t.Errorf("a Metrics that panics: %v", err)
	}
}

type panicking struct{ admitCollector }

func (panicking) Metrics(any, func(prometheus.Metric)) { panic("index out of range") }

// A looped trace whose every frame is refused ends the replay with an
// error instead of passing over nothing forever.
func TestReplayLoopOfRefusedFramesEnds(t *testing.T) {
	fed, _, err := replayFrames(t, 1000, true, &admitSample{Counter: -1}, &admitSample{Counter: -2})
	if err == nil || len(fed) != 0 {
		t.Fatalf("fed %d, %v; want none and an error", len(fed), err)
	}
}
