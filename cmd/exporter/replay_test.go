package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"go.uber.org/zap"

	gdcollectors "github.com/gpudiag/gpudiag/collectors"
	"github.com/gpudiag/gpudiag/engine"
	"github.com/gpudiag/gpudiag/internal/promtest"
	"github.com/gpudiag/gpudiag/record"
	"github.com/gpudiag/gpudiag/record/replay"
)

// --replay.loop replays the trace over and over: the first pass is the
// recorded trace shifted so that its first sample falls at the daemon's
// start, pass k+1 that shifted by a further k × (its span + the loop gap), so
// every collector's time keeps moving forward from now and the window evicts
// by age as in a live run.
func TestReplayLoopShiftsEachPass(t *testing.T) {
	path := filepath.Join(tracesDir, "bf16_gemm.gdrec")
	names, intervals, first, err := replay.Scan(path)
	if err != nil {
		t.Fatal(err)
	}
	recorded := map[string][]time.Time{}
	var earliest, latest time.Time
	for _, fr := range readFrames(t, path) {
		ts := fr.Time()
		recorded[fr.Collector] = append(recorded[fr.Collector], ts)
		if earliest.IsZero() || ts.Before(earliest) {
			earliest = ts
		}
		if ts.After(latest) {
			latest = ts
		}
	}
	gap := replay.LoopGap(intervals, time.Second)
	if gap < 900*time.Millisecond || gap > 1100*time.Millisecond {
		t.Fatalf("loop gap %v; the trace's fastest collectors sample every second", gap)
	}
	period := latest.Sub(earliest) + gap

	cs, _, loops, err := replay.Collectors(names, intervals, true, recordedCollector)
	if err != nil {
		t.Fatal(err)
	}
	const passes = 3
	const windowAge = 45 * time.Second // shorter than two passes: eviction by age must engage
	window := engine.NewWindow(windowAge, 64<<20)
	clock := &replay.Clock{}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	fed := map[string][]time.Time{}
	eng := engine.New(engine.Options{Interval: time.Second, Window: window, Now: clock.Now,
		OnSample: func(c string, ts time.Time, _ any) {
			fed[c] = append(fed[c], ts)
			if c == "gpu" && len(fed[c]) == passes*len(recorded["gpu"]) {
				cancel()
			}
		}})
	for _, c := range cs {
		eng.Add(c, 0)
	}
	start := time.Now().Truncate(time.Second) // any wall time: the daemon's start
	r := &replay.Replayer{Path: path, Loop: true, Gap: gap, First: first, Start: start, Loops: loops,
		Engine: eng, Window: window, Lookup: recordedCollector, Clock: clock, Log: zap.NewNop()}
	if err := r.Run(ctx); err != nil {
		t.Fatal(err)
	}

	for c, rec := range recorded {
		got := fed[c]
		if c == "gpu" && len(got) != passes*len(rec) {
			t.Fatalf("gpu: %d samples fed; want %d passes of %d", len(got), passes, len(rec))
		}
		for i, ts := range got {
			want := rec[i%len(rec)].Add(start.Sub(first) + time.Duration(i/len(rec))*period)
			if !ts.Equal(want) {
				t.Fatalf("%s sample %d (pass %d) at %v; want %v", c, i, i/len(rec)+1, ts, want)
			}
			if i > 0 && !ts.After(got[i-1]) {
				t.Fatalf("%s sample %d at %v does not follow %v", c, i, ts, got[i-1])
			}
		}
	}
	if got := fed["gpu"][0]; !got.Equal(start.Add(recorded["gpu"][0].Sub(first))) {
		t.Errorf("first gpu sample at %v; the trace's start maps to %v", got, start)
	}
	st := window.Stats()["gpu"]
	if st.Span > windowAge || st.Samples >= len(fed["gpu"]) {
		t.Fatalf("window holds %d gpu samples over %v after %d fed; want at most %v", st.Samples, st.Span, len(fed["gpu"]), windowAge)
	}
}

// A looped replay looks like a live daemon to Prometheus, scraped across two
// seams (the trace at ten times real time, a pass every ~3 s):
//   - every collector's last-success time (and so every freshness alert)
//     reads now, not the recording's date;
//   - no counter or histogram series ever reads less than it did before, so
//     rate() and increase() see no reset at the seams, and the counters do
//     carry on (the NCCL log's line counter ends above its recorded maximum);
//   - the NCCL facts and the finding built on them stay present from their
//     first appearance on, although each pass's first half (before the
//     all-reduce starts) has none in the trace.
func TestReplayLoopLooksLive(t *testing.T) {
	const speed = 10
	path := filepath.Join(tracesDir, "allreduce_p2p_disabled_nccl_log.gdrec")
	_, intervals, first, err := replay.Scan(path)
	if err != nil {
		t.Fatal(err)
	}
	frames := readFrames(t, path)
	span := frames[len(frames)-1].Time().Sub(first)
	period := span + replay.LoopGap(intervals, time.Second)
	linesMax := recordedCounterMax(t, frames, "gpudiag_nccl_log_lines_total")
	if linesMax <= 0 {
		t.Fatalf("the trace's NCCL log line counter never rose (%v): the carry check below would prove nothing", linesMax)
	}

	before := time.Now()
	addr := freeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan error, 1)
	go func() {
		_, err := run(ctx, []string{"--web.listen-address=" + addr, "--replay=" + path, "--replay.loop",
			fmt.Sprintf("--replay.speed=%d", speed), "--web.disable-exporter-metrics"}, io.Discard, io.Discard, nil)
		stopped <- err
	}()
	client := &http.Client{Timeout: 30 * time.Second}
	defer func() {
		cancel()
		if err := <-stopped; err != nil {
			t.Error(err)
		}
		client.CloseIdleConnections()
	}()

	// Third pass: past two seams, wherever the daemon's start fell.
	end := before.Add(2*period + span/2)
	maxSeen := map[string]float64{} // every counter series' highest value so far
	var factsSince time.Time        // trace time the NCCL facts first showed
	scrapes, seamsHeld := 0, 0
	var lines float64
	hangGuard := time.Now().Add(3 * time.Minute) // not a timing assertion: a stuck replay
	for gpuTime := (time.Time{}); gpuTime.Before(end); {
		if time.Now().After(hangGuard) {
			t.Fatalf("hang guard: trace time %v after %d scrapes, want %v", gpuTime, scrapes, end)
		}
		time.Sleep(50 * time.Millisecond)
		fams, ok := scrapeFamilies(t, client, "http://"+addr+"/metrics")
		if !ok {
			continue // not up yet
		}
		scrapeEnd := time.Now()
		stamps := fams["gpudiag_collector_last_success_timestamp_seconds"].GetMetric()
		if len(stamps) == 0 {
			continue // no sample replayed yet
		}
		scrapes++
		// The replay runs at most speed× ahead of the wall clock from the
		// daemon's start (after before); a recorded date fails the lower
		// bound by days.
		latest := before.Add(time.Duration(speed*float64(scrapeEnd.Sub(before))) + period)
		for _, m := range stamps {
			ts := time.Unix(0, int64(m.GetGauge().GetValue()*1e9))
			if ts.Before(before) || ts.After(latest) {
				t.Fatalf("scrape %d: %s last succeeded at %v; want between the daemon's start %v and %v",
					scrapes, labelValue(m, "collector"), ts, before, latest)
			}
			if labelValue(m, "collector") == "gpu" {
				gpuTime = ts
			}
		}
		for name, mf := range fams {
			// The carry knows counters by type: a *_total gauge would escape it.
			if strings.HasSuffix(name, "_total") && mf.GetType() != dto.MetricType_COUNTER {
				t.Errorf("%s is a %s, not a counter", name, mf.GetType())
			}
		}
		for key, v := range promtest.CounterSeries(fams) {
			if prev, ok := maxSeen[key]; ok && v < prev {
				t.Fatalf("scrape %d (trace time %v): %s went back from %v to %v", scrapes, gpuTime.Sub(before), key, prev, v)
			}
			maxSeen[key] = max(maxSeen[key], v)
			if strings.HasPrefix(key, "gpudiag_nccl_log_lines_total") {
				lines = max(lines, v)
			}
		}
		fallback := seriesValue(fams["gpudiag_nccl_fallback"], map[string]string{"gpu": "0", "kind": "p2p_disabled"})
		finding := seriesValue(fams["gpudiag_finding"], map[string]string{"check": "nccl_fallback"})
		switch {
		case factsSince.IsZero() && fallback == 1 && finding == 1:
			factsSince = gpuTime
		case !factsSince.IsZero() && (fallback != 1 || finding != 1):
			t.Fatalf("scrape %d: %v into the replay (facts since %v), nccl_fallback %v and the nccl_fallback finding %v; want both 1 across the seams",
				scrapes, gpuTime.Sub(before), factsSince.Sub(before), fallback, finding)
		case !factsSince.IsZero() && gpuTime.Sub(factsSince) > period:
			seamsHeld++ // a pass later: the first half of a pass, without facts in the trace, was crossed
		}
	}
	t.Logf("%d scrapes to trace time %v (pass %v), %d counter series; NCCL facts from %v on; log lines %v (recorded at most %v)",
		scrapes, end.Sub(before).Round(time.Second), 3, len(maxSeen), factsSince.Sub(before).Round(time.Second), lines, linesMax)
	if factsSince.IsZero() || seamsHeld == 0 {
		t.Fatalf("the NCCL facts were never seen a pass after they appeared (since %v): nothing was checked across a seam", factsSince)
	}
	if lines <= linesMax {
		t.Errorf("the NCCL log line counter reached %v, no more than the trace's %v: it did not carry on across the seams", lines, linesMax)
	}
}

// recordedCounterMax is the highest value any series of the named counter
// has in the trace.
func recordedCounterMax(t *testing.T, frames []record.Frame, name string) float64 {
	t.Helper()
	most := 0.0
	for _, fr := range frames {
		rc, err := gdcollectors.ReplayCollector(fr.Collector)
		if err != nil {
			t.Fatal(err)
		}
		s := rc.NewSample()
		if err := json.Unmarshal(fr.Sample, s); err != nil {
			t.Fatal(err)
		}
		reg := prometheus.NewPedanticRegistry()
		reg.MustRegister(sampleCollector{rc, s})
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() == name {
				for _, m := range mf.GetMetric() {
					most = max(most, m.GetCounter().GetValue())
				}
			}
		}
	}
	return most
}

// sampleCollector exports one sample's metrics to a registry.
type sampleCollector struct {
	c engine.Collector
	s any
}

func (c sampleCollector) Describe(chan<- *prometheus.Desc) {}
func (c sampleCollector) Collect(ch chan<- prometheus.Metric) {
	c.c.Metrics(c.s, func(m prometheus.Metric) { ch <- m })
}

// scrapeFamilies reads and parses url; false when the daemon is not up yet.
// A body that does not parse fails the test.
func scrapeFamilies(t *testing.T, client *http.Client, url string) (map[string]*dto.MetricFamily, bool) {
	t.Helper()
	resp, err := client.Get(url)
	if err != nil {
		return nil, false
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("%s: %s", url, resp.Status)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("%s: %v", url, err)
	}
	return fams, true
}

func labelValue(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// seriesValue is the value of the family's first series whose labels
// include want; NaN when there is none.
func seriesValue(mf *dto.MetricFamily, want map[string]string) float64 {
	for _, m := range mf.GetMetric() {
		match := true
		for k, v := range want {
			if labelValue(m, k) != v {
				match = false
			}
		}
		if match {
			return m.GetGauge().GetValue()
		}
	}
	return math.NaN()
}

// A trace torn mid-frame, as a crash leaves it, is still a trace: diagnose
// replays the whole frames before the tear, prints the diagnosis and says
// the tail was torn; the daemon recording onto such a file says it cut it.
func TestTornTraceIsDiagnosed(t *testing.T) {
	whole, err := os.ReadFile(filepath.Join(tracesDir, "allreduce_sockets_nccl_log.gdrec"))
	if err != nil {
		t.Fatal(err)
	}
	torn := filepath.Join(t.TempDir(), "torn.gdrec")
	if err := os.WriteFile(torn, whole[:len(whole)-100], 0o600); err != nil {
		t.Fatal(err)
	}
	var out, logs syncBuffer
	code, err := run(context.Background(), []string{"diagnose", "--replay=" + torn, "--replay.speed=0", "--for=30s"}, &out, &logs, nil)
	if err != nil || code == exitError {
		t.Fatalf("exit %d, %v\n%s", code, err, logs.String())
	}
	if !strings.Contains(out.String(), "NODE: communication/network") {
		t.Errorf("no diagnosis of the whole frames:\n%s", out.String())
	}
	if !strings.Contains(logs.String(), "torn frame") {
		t.Errorf("the torn tail is not logged:\n%s", logs.String())
	}

	ctx, cancel := context.WithCancel(context.Background())
	logs = syncBuffer{}
	done := make(chan error, 1)
	go func() {
		_, err := run(ctx, []string{"--web.listen-address=" + freeAddr(t), "--collector.gpu.backend=none", "--record=" + torn,
			"--path.procfs=" + filepath.Join(fixtureHost, "proc"), "--path.sysfs=" + filepath.Join(fixtureHost, "sys")}, io.Discard, &logs, nil)
		done <- err
	}()
	deadline := time.Now().Add(requestWait(t)) // only a daemon that never records meets it
	for !strings.Contains(logs.String(), "recording samples") && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(logs.String(), "torn frame") || !strings.Contains(logs.String(), "cut_bytes") {
		t.Errorf("recording onto a torn trace does not say it cut the tail:\n%s", logs.String())
	}
}
