package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/gpudiag/gpudiag/diagnose"
	"github.com/gpudiag/gpudiag/logging"
	"github.com/gpudiag/gpudiag/record"
)

// Faults seen from outside the daemon: what /metrics and /diagnose show
// while a collector panics or the --record disk is full, and that both
// clear by themselves.

const fixtureHost = "../../hostfs/testdata/host"

// testDaemon is a daemon serving on a free port, as run starts it, with the
// host collectors reading the fixture tree (or another root).
type testDaemon struct {
	*daemon
	base string
	logs *syncBuffer
	stop func() // stops the daemon and waits for it; also run at cleanup
}

// startDaemon builds the daemon from args (fixture paths, no GPU backend,
// 100 ms samples and no /diagnose rate limit unless args say otherwise),
// lets setup change it before it runs, and serves until the test ends.
func startDaemon(t *testing.T, setup func(*daemon), args ...string) *testDaemon {
	t.Helper()
	addr := freeAddr(t)
	defaults := []string{"--web.listen-address=" + addr, "--sample.interval=100ms", "--collector.gpu.backend=none",
		"--path.procfs=" + filepath.Join(fixtureHost, "proc"), "--path.sysfs=" + filepath.Join(fixtureHost, "sys"),
		"--web.diagnose-rate=0", "--web.disable-exporter-metrics"}
	// A flag the test gives replaces its default (kingpin refuses repeats).
	given := map[string]bool{}
	for _, a := range args {
		given[strings.SplitN(a, "=", 2)[0]] = true
	}
	var merged []string
	for _, a := range defaults {
		if !given[strings.SplitN(a, "=", 2)[0]] {
			merged = append(merged, a)
		}
	}
	args = append(merged, args...)
	o, err := parseFlags(args)
	if err != nil {
		t.Fatal(err)
	}
	logs := &syncBuffer{}
	log, err := logging.New(*o.log, logs)
	if err != nil {
		t.Fatal(err)
	}
	d, err := newDaemon(o, log)
	if err != nil {
		t.Fatal(err)
	}
	if setup != nil {
		setup(d)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.serve(ctx, nil) }()
	td := &testDaemon{daemon: d, base: "http://" + addr, logs: logs}
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
		d.close()
		http.DefaultClient.CloseIdleConnections()
	}
	t.Cleanup(stop)
	td.stop = stop
	td.waitFor(t, "the daemon to serve", func(m metrics) bool { return true })
	return td
}

// metrics is one scrape, by family name.
type metrics map[string]*dto.MetricFamily

// value returns the sample of name whose labels include the given pairs,
// and whether there is one.
func (m metrics) value(name string, labels ...string) (float64, bool) {
	mf, ok := m[name]
	if !ok {
		return 0, false
	}
next:
	for _, s := range mf.GetMetric() {
		for i := 0; i+1 < len(labels); i += 2 {
			found := false
			for _, l := range s.GetLabel() {
				if l.GetName() == labels[i] && l.GetValue() == labels[i+1] {
					found = true
				}
			}
			if !found {
				continue next
			}
		}
		switch {
		case s.Counter != nil:
			return s.Counter.GetValue(), true
		case s.Gauge != nil:
			return s.Gauge.GetValue(), true
		case s.Untyped != nil:
			return s.Untyped.GetValue(), true
		}
	}
	return 0, false
}

// scrape gets /metrics; any status but 200 fails the test.
func (td *testDaemon) scrape(t *testing.T) metrics {
	t.Helper()
	resp, err := http.Get(td.base + "/metrics")
	if err != nil {
		t.Fatalf("/metrics: %v", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("/metrics answered %d: %s", resp.StatusCode, b)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("/metrics does not parse: %v", err)
	}
	return fams
}

// waitFor scrapes until cond holds; the deadline only guards against a hang.
func (td *testDaemon) waitFor(t *testing.T, what string, cond func(metrics) bool) metrics {
	t.Helper()
	// Only a condition that never comes runs into the deadline, shortly
	// before the test binary's -timeout; a loaded machine may take many
	// sampling intervals over it.
	deadline := time.Now().Add(requestWait(t))
	for {
		if resp, err := http.Get(td.base + "/healthz"); err == nil {
			resp.Body.Close()
			if m := td.scrape(t); cond(m) {
				return m
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting for %s; logs:\n%s", what, td.logs.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// diagnosis gets /diagnose as JSON.
func (td *testDaemon) diagnosis(t *testing.T) diagnose.Report {
	t.Helper()
	code, body := get(t, td.base+"/diagnose?format=json")
	var d diagnose.Report
	if err := json.Unmarshal([]byte(body), &d); code != http.StatusOK || err != nil {
		t.Fatalf("/diagnose: %d %v\n%s", code, err, body)
	}
	return d
}

func collectorHealth(d diagnose.Report, name string) (diagnose.CollectorHealth, bool) {
	for _, h := range d.Collectors {
		if h.Collector == name {
			return h, true
		}
	}
	return diagnose.CollectorHealth{}, false
}

// flaky is a collector the test makes panic: on every sample, on every
// other one, or never.
type flaky struct {
	mode    atomic.Int32
	samples atomic.Int64
}

const (
	flakyHealthy = iota
	flakyEveryOther
	flakyAlways
)

var flakyDesc = prometheus.NewDesc("gpudiag_flaky_samples", "Samples the flaky test collector took.", nil, nil)

func (f *flaky) Name() string { return "flaky" }

func (f *flaky) Sample(context.Context) (any, error) {
	n := f.samples.Add(1)
	switch f.mode.Load() {
	case flakyAlways:
		panic(fmt.Sprintf("injected fault in sample %d", n))
	case flakyEveryOther:
		if n%2 == 0 {
			panic(fmt.Sprintf("injected fault in sample %d", n))
		}
	}
	return float64(n), nil
}

func (f *flaky) Metrics(s any, emit func(prometheus.Metric)) {
	emit(prometheus.MustNewConstMetric(flakyDesc, prometheus.GaugeValue, s.(float64)))
}

// A collector that panics on some samples and not others: /metrics keeps
// answering, says which collector fails and counts the failures, the other
// collectors keep sampling, /diagnose names the collector and its panic, and
// all of it clears when the panics stop.
func TestCollectorPanicsThroughDaemon(t *testing.T) {
	f := &flaky{}
	td := startDaemon(t, func(d *daemon) { d.eng.Add(f, 0) })
	td.waitFor(t, "flaky and cpu to succeed", func(m metrics) bool {
		fl, _ := m.value("gpudiag_collector_success", "collector", "flaky")
		cpu, _ := m.value("gpudiag_collector_success", "collector", "cpu")
		return fl == 1 && cpu == 1
	})

	f.mode.Store(flakyEveryOther)
	seen := map[float64]bool{}
	td.waitFor(t, "flaky to fail and succeed in turn", func(m metrics) bool {
		v, _ := m.value("gpudiag_collector_success", "collector", "flaky")
		seen[v] = true
		n, _ := m.value("gpudiag_collector_failures_total", "collector", "flaky")
		return n >= 3 && seen[0] && seen[1]
	})

	f.mode.Store(flakyAlways)
	m := td.waitFor(t, "flaky to fail", func(m metrics) bool {
		v, _ := m.value("gpudiag_collector_success", "collector", "flaky")
		return v == 0
	})
	failures, _ := m.value("gpudiag_collector_failures_total", "collector", "flaky")
	cpuSince, _ := m.value("gpudiag_collector_last_success_timestamp_seconds", "collector", "cpu")
	m = td.waitFor(t, "failures to go on while other collectors sample", func(m metrics) bool {
		n, _ := m.value("gpudiag_collector_failures_total", "collector", "flaky")
		cpu, _ := m.value("gpudiag_collector_last_success_timestamp_seconds", "collector", "cpu")
		return n >= failures+3 && cpu > cpuSince
	})
	for _, c := range []string{"cpu", "pressure", "diskstats", "numa"} {
		if v, ok := m.value("gpudiag_collector_success", "collector", c); !ok || v != 1 {
			t.Errorf("collector %s success %v (present %v) while flaky panics; want 1", c, v, ok)
		}
	}
	if v, _ := m.value("gpudiag_collector_success", "collector", "flaky"); v != 0 {
		t.Errorf("flaky success %v while every sample panics", v)
	}

	h, ok := collectorHealth(td.diagnosis(t), "flaky")
	if !ok || h.OK || !strings.Contains(h.LastError, "panic: injected fault in sample") || h.Failures < 3 {
		t.Errorf("/diagnose collectors entry for flaky: %+v (present %v)", h, ok)
	}
	if cpu, ok := collectorHealth(td.diagnosis(t), "cpu"); !ok || !cpu.OK {
		t.Errorf("/diagnose says cpu %+v (present %v); want ok", cpu, ok)
	}
	if _, text := get(t, td.base+"/diagnose?format=text"); !strings.Contains(text, "flaky: panic: injected fault") {
		t.Errorf("/diagnose text does not name the panicking collector:\n%s", text)
	}
	if !strings.Contains(td.logs.String(), "collector panicked") {
		t.Errorf("no log of the panic:\n%s", td.logs.String())
	}

	f.mode.Store(flakyHealthy)
	td.waitFor(t, "flaky to recover", func(m metrics) bool {
		v, _ := m.value("gpudiag_collector_success", "collector", "flaky")
		_, served := m.value("gpudiag_flaky_samples")
		return v == 1 && served
	})
	if h, _ := collectorHealth(td.diagnosis(t), "flaky"); !h.OK || h.LastError != "" {
		t.Errorf("/diagnose after recovery: %+v", h)
	}
	if !strings.Contains(td.logs.String(), "collector recovered") {
		t.Errorf("no log of the recovery")
	}
}

// diskFull stands a full disk in front of the recorder's writes and counts
// the frames that got through.
type diskFull struct {
	full    atomic.Bool
	write   func(collector string, t time.Time, s any) error
	written atomic.Int64
}

func (d *diskFull) Write(collector string, t time.Time, s any) error {
	if d.full.Load() {
		return fmt.Errorf("writing %s frame: %w", collector, &os.PathError{Op: "write", Path: "trace.gdrec", Err: syscall.ENOSPC})
	}
	err := d.write(collector, t, s)
	if err == nil {
		d.written.Add(1)
	}
	return err
}

// With --record on a disk that fills up, the daemon keeps sampling and
// serving, /metrics shows the failure, and recording resumes when space
// comes back; the file reads back whole. (record's TestDiskFullMidFrame
// covers the frame cut mid-write; TestRecordOnFullFilesystem a real disk.)
func TestRecordDiskFullThroughDaemon(t *testing.T) {
	path := filepath.Join(t.TempDir(), "trace.gdrec")
	disk := &diskFull{}
	td := startDaemon(t, func(d *daemon) {
		disk.write = d.recorder.write
		d.recorder.write = disk.Write
	}, "--record="+path)
	td.waitFor(t, "samples recorded", func(m metrics) bool {
		n, _ := m.value("gpudiag_record_samples_total")
		return n >= 5
	})

	disk.full.Store(true)
	m := td.waitFor(t, "record errors", func(m metrics) bool {
		n, _ := m.value("gpudiag_record_errors_total")
		return n >= 5
	})
	if v, _ := m.value("gpudiag_record_success"); v != 0 {
		t.Errorf("gpudiag_record_success %v while the disk is full", v)
	}
	framesWhenFull, _ := m.value("gpudiag_record_samples_total")
	windowWhenFull, _ := m.value("gpudiag_window_samples", "collector", "cpu")
	m = td.waitFor(t, "sampling to go on", func(m metrics) bool {
		n, _ := m.value("gpudiag_window_samples", "collector", "cpu")
		return n > windowWhenFull+3
	})
	if n, _ := m.value("gpudiag_record_samples_total"); n != framesWhenFull {
		t.Errorf("samples recorded while the disk is full: %v, then %v", framesWhenFull, n)
	}
	td.diagnosis(t) // /diagnose answers too

	disk.full.Store(false)
	td.waitFor(t, "recording to resume", func(m metrics) bool {
		n, _ := m.value("gpudiag_record_samples_total")
		ok, _ := m.value("gpudiag_record_success")
		return n >= framesWhenFull+5 && ok == 1
	})
	td.stop()

	frames := readTrace(t, path)
	if int64(len(frames)) != disk.written.Load() || int64(len(frames)) != td.recorder.w.Frames {
		t.Errorf("the file holds %d frames; %d writes got through, the recorder counted %d",
			len(frames), disk.written.Load(), td.recorder.w.Frames)
	}
	logs := td.logs.String()
	if strings.Count(logs, "recording failed") != 1 || !strings.Contains(logs, "recording resumed") {
		t.Errorf("want one 'recording failed' and a 'recording resumed' log line:\n%s", logs)
	}
}

// readTrace reads every frame of a record file; any error but a clean end
// fails the test: a torn or corrupt frame must not be there.
func readTrace(t *testing.T, path string) []record.Frame {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r, err := record.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	var frames []record.Frame
	for {
		fr, err := r.Next()
		if err == io.EOF {
			return frames
		}
		if err != nil {
			t.Fatalf("after %d frames: %v", len(frames), err)
		}
		frames = append(frames, fr)
	}
}

// The recorder logs a lasting failure when it starts, once a minute while
// it lasts, and when it ends, however many samples fail in between.
func TestRecorderLogsBounded(t *testing.T) {
	w, err := record.Create(filepath.Join(t.TempDir(), "trace.gdrec"))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	core, logs := observer.New(zapcore.InfoLevel)
	r := newRecorder(w, zap.New(core))
	now := time.Unix(1_800_000_000, 0)
	r.now = func() time.Time { return now }
	disk := &diskFull{write: r.write}
	r.write = disk.Write

	disk.full.Store(true)
	for range 150 { // 2.5 minutes of 1 s samples
		r.OnSample("cpu", now, map[string]int{"x": 1})
		now = now.Add(time.Second)
	}
	disk.full.Store(false)
	r.OnSample("cpu", now, map[string]int{"x": 1})

	var got []string
	for _, e := range logs.All() {
		got = append(got, e.Message)
	}
	want := []string{"recording failed; the daemon keeps serving and retries with every sample",
		"recording still failing", "recording still failing", "recording resumed"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("logs %q; want %q", got, want)
	}
	if lost := logs.All()[3].ContextMap()["samples_lost"]; lost != uint64(150) {
		t.Errorf("resumed log says %v samples lost; want 150", lost)
	}
	if r.errors != 150 || w.Frames != 1 {
		t.Errorf("%d errors, %d frames; want 150 and 1", r.errors, w.Frames)
	}
}

// A real full filesystem: a 256 KiB tmpfs mostly taken by a filler file.
// The daemon records until the disk is full, keeps serving, shows the
// failure, and appends again once the filler is deleted; the whole file
// reads back without a torn or corrupt frame. Needs root (mount).
func TestRecordOnFullFilesystem(t *testing.T) {
	dir := t.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size=256k"); err != nil {
		t.Skipf("cannot mount a tmpfs to fill (needs root or CAP_SYS_ADMIN): %v", err)
	}
	t.Cleanup(func() {
		if err := syscall.Unmount(dir, 0); err != nil {
			t.Errorf("umount %s: %v", dir, err)
		}
	})
	filler := filepath.Join(dir, "filler")
	if err := os.WriteFile(filler, make([]byte, 224<<10), 0o644); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "trace.gdrec")
	td := startDaemon(t, nil, "--record="+path)

	// Frames differ in size, so a small one may still fit after a larger
	// one failed: wait for a scrape that shows the failure.
	m := td.waitFor(t, "the disk to fill and gpudiag_record_success to read 0", func(m metrics) bool {
		n, _ := m.value("gpudiag_record_errors_total")
		ok, _ := m.value("gpudiag_record_success")
		return n >= 3 && ok == 0
	})
	framesWhenFull, _ := m.value("gpudiag_record_samples_total")
	if framesWhenFull == 0 {
		t.Fatal("nothing was recorded before the disk filled; the test proves nothing")
	}
	if code, _ := get(t, td.base+"/healthz"); code != http.StatusOK {
		t.Errorf("/healthz %d on a full disk", code)
	}
	td.diagnosis(t)
	if v, _ := m.value("gpudiag_collector_success", "collector", "cpu"); v != 1 {
		t.Errorf("cpu collector success %v while the record disk is full", v)
	}

	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	m = td.waitFor(t, "recording to resume", func(m metrics) bool {
		n, _ := m.value("gpudiag_record_samples_total")
		ok, _ := m.value("gpudiag_record_success")
		return n >= framesWhenFull+10 && ok == 1
	})
	td.stop()
	frames := readTrace(t, path)
	if int64(len(frames)) != td.recorder.w.Frames {
		t.Errorf("the file holds %d frames; the recorder wrote %d", len(frames), td.recorder.w.Frames)
	}
	errs, _ := m.value("gpudiag_record_errors_total")
	t.Logf("%v samples recorded before the disk filled, at least %v lost while full, %d in the file at the end",
		framesWhenFull, errs, len(frames))
	if !strings.Contains(td.logs.String(), "no space left on device") {
		t.Errorf("the log does not say the disk is full:\n%s", td.logs.String())
	}
}
