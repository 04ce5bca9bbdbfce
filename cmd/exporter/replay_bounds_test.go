package main

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/gpudiag/gpudiag/engine"
	"github.com/gpudiag/gpudiag/record"
	"github.com/gpudiag/gpudiag/record/replay"
	"github.com/gpudiag/gpudiag/sample"
)

// A trace is written by whoever wrote the file: nothing in it may make the
// daemon hold or export more than the live daemon would. These tests replay
// hostile traces through the daemon as run builds it and judge what it
// holds (the window's bytes as the engine reports them) and exports (the
// series of /metrics).

// writeTrace writes samples as record does, one frame each, a second
// apart.
func writeTrace(t *testing.T, frames ...recordedSample) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "hostile.gdrec")
	w, err := record.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Unix(1_700_000_000, 0)
	for i, f := range frames {
		if err := w.Write(f.collector, start.Add(time.Duration(i)*time.Second), f.sample); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}

type recordedSample struct {
	collector string
	sample    any
}

// hostileNCCLProcs is one ncclproc scan listing n processes, each with a
// libnccl version and an NCCL_SOCKET_IFNAME of its own: two series each.
func hostileNCCLProcs(n int) *sample.NCCLHostProcesses {
	s := &sample.NCCLHostProcesses{Processes: make([]sample.NCCLHostProcess, n)}
	for i := range s.Processes {
		s.Processes[i] = sample.NCCLHostProcess{PID: i + 1, NSPID: i + 1,
			Libraries: []sample.NCCLLibrary{{Path: "/l/libnccl.so", Version: fmt.Sprintf("2.%d.%d", i/1000, i%1000)}},
			Env:       []sample.NCCLEnv{{Name: "NCCL_SOCKET_IFNAME", Value: fmt.Sprintf("e%d", i)}}}
	}
	return s
}

// seriesCount counts the series of the families whose name has prefix.
func seriesCount(m metrics, prefix string) int {
	n := 0
	for name, mf := range m {
		if strings.HasPrefix(name, prefix) {
			n += len(mf.GetMetric())
		}
	}
	return n
}

// windowBytes is the sum of the window's bytes over its collectors, as the
// engine reports them.
func windowBytes(m metrics) float64 {
	sum := 0.0
	for _, s := range m["gpudiag_window_bytes"].GetMetric() {
		sum += s.GetGauge().GetValue()
	}
	return sum
}

// An ncclproc frame of 20,000 processes (150,000 made 300,000 series, 940
// MB of RSS and a window at 4.5 times its budget) is cut to the 1024
// processes the live collector lists, the rest counted as dropped: at most
// one library version and one setting series per process kept, and the
// window within --window.max-bytes.
func TestReplayCutsHostileFrameToLiveBounds(t *testing.T) {
	const processes, liveMax = 20_000, 1024
	path := writeTrace(t, recordedSample{"ncclproc", hostileNCCLProcs(processes)})
	td := startDaemon(t, nil, "--replay="+path, "--replay.speed=0")
	m := td.waitFor(t, "the frame replayed", func(m metrics) bool {
		_, ok := m.value("gpudiag_window_samples", "collector", "ncclproc")
		return ok && len(m["gpudiag_nccl_library_info"].GetMetric()) > 0
	})
	if n := len(m["gpudiag_nccl_library_info"].GetMetric()); n > liveMax {
		t.Errorf("%d library versions exported; the live collector lists at most %d processes", n, liveMax)
	}
	if n := len(m["gpudiag_nccl_process_env_info"].GetMetric()); n > liveMax {
		t.Errorf("%d setting series exported; the live collector lists at most %d processes", n, liveMax)
	}
	if n := seriesCount(m, "gpudiag_nccl_"); n > 2*liveMax+3 {
		t.Errorf("%d ncclproc series; at most %d", n, 2*liveMax+3)
	}
	if b := windowBytes(m); b > 16<<20 {
		t.Errorf("the window holds %.0f bytes; --window.max-bytes is %d", b, 16<<20)
	}
	if !strings.Contains(td.logs.String(), "processes: 20000 listed, at most 1024 kept") {
		t.Errorf("the cut is not logged:\n%s", td.logs.String())
	}
}

// However a frame is shaped, the window holds no more than
// --window.max-bytes: a sample over its collector's share, even cut to the
// live bounds, is refused, and the one before it stays the latest (the
// window keeps a collector's newest sample whatever its size: the 2.4 MB of
// this one were held against a 64 KiB budget).
func TestReplayWindowWithinMaxBytes(t *testing.T) {
	const maxBytes = 64 << 10
	path := writeTrace(t, recordedSample{"ncclproc", hostileNCCLProcs(2)}, recordedSample{"ncclproc", hostileNCCLProcs(5_000)})
	td := startDaemon(t, nil, "--replay="+path, "--replay.speed=0", fmt.Sprintf("--window.max-bytes=%dKiB", maxBytes>>10))
	td.waitFor(t, "the frames replayed", func(metrics) bool { return strings.Contains(td.logs.String(), "replay finished") })
	m := td.scrape(t) // after the replay's end: the scrape that saw it may have come before
	if b := windowBytes(m); b > maxBytes {
		t.Errorf("the window holds %.0f bytes; --window.max-bytes is %d", b, maxBytes)
	}
	if n, _ := m.value("gpudiag_window_samples", "collector", "ncclproc"); n != 1 {
		t.Errorf("the window holds %v ncclproc samples; want the first frame's alone", n)
	}
	if n := len(m["gpudiag_nccl_library_info"].GetMetric()); n != 2 {
		t.Errorf("%d library versions exported; the first frame has 2", n)
	}
	if !strings.Contains(td.logs.String(), "frame 2 (offset ") ||
		!strings.Contains(td.logs.String(), "share of --window.max-bytes") {
		t.Errorf("the refused frame is not named:\n%s", td.logs.String())
	}
}

// Every recorded trace of the repository is a live daemon's: replayed, it
// loses nothing to the bounds, at the default --window.max-bytes and at the
// soak test's 1 MiB: no frame cut or refused, every sample fed.
func TestRecordedTracesPassTheReplayBounds(t *testing.T) {
	var paths []string
	for _, glob := range []string{"../../testdata/*/*.gdrec", "../../testdata/fabric/traces/*.gdrec"} {
		ms, err := filepath.Glob(glob)
		if err != nil {
			t.Fatal(err)
		}
		paths = append(paths, ms...)
	}
	if len(paths) < 20 {
		t.Fatalf("%d traces found", len(paths))
	}
	for _, path := range paths {
		for _, windowBytes := range []int{16 << 20, soakWindowBytes} {
			names, intervals, _, err := replay.Scan(path)
			if err != nil {
				t.Fatal(err)
			}
			cs, _, _, err := replay.Collectors(names, intervals, false, recordedCollector)
			if err != nil {
				t.Fatal(err)
			}
			window := engine.NewWindow(10*time.Minute, windowBytes)
			clock := &replay.Clock{}
			fed := 0
			eng := engine.New(engine.Options{Window: window, Now: clock.Now, OnSample: func(string, time.Time, any) { fed++ }})
			for _, c := range cs {
				eng.Add(c, 0)
			}
			core, logs := observer.New(zapcore.WarnLevel)
			r := &replay.Replayer{Path: path, Engine: eng, Window: window, Lookup: recordedCollector, Clock: clock, Log: zap.New(core)}
			if err := r.Run(t.Context()); err != nil {
				t.Fatal(err)
			}
			if frames := len(readFrames(t, path)); fed != frames {
				t.Errorf("%s (window %d bytes): %d of %d samples fed", filepath.Base(path), windowBytes, fed, frames)
			}
			for _, e := range logs.All() {
				t.Errorf("%s (window %d bytes): %s %v", filepath.Base(path), windowBytes, e.Message, e.ContextMap())
			}
		}
	}
}

// gpuReading is one GPU's reading with an energy counter and a temperature.
func gpuReading(joules, celsius float64) *sample.GPUs {
	v := sample.NewValues()
	v.Set(sample.EnergyJoulesTotal, joules)
	v.Set(sample.TemperatureCelsius, celsius)
	return &sample.GPUs{Backend: "nvml", Devices: []sample.GPU{{Index: 0, UUID: "GPU-0", Up: true, Values: v}}}
}

// A counter no device can read (negative) or a temperature no chip reads
// and survives is refused with the frame, the collector and the field
// named: what the frame before said stays exported (a GPU energy counter of
// -1e308 was exported as a negative _total, 1e308 °C as a temperature).
func TestReplayRefusesImpossibleValues(t *testing.T) {
	for _, tc := range []struct {
		name  string
		bad   *sample.GPUs
		field string
	}{
		{"negative counter", gpuReading(-1e308, 40), "devices[0].values.energy_joules_total: -1e+308 is not a reading"},
		{"absurd temperature", gpuReading(200, 1e308), "devices[0].values.temperature_celsius: 1e+308°C is not a reading"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := writeTrace(t, recordedSample{"gpu", gpuReading(100, 40)}, recordedSample{"gpu", tc.bad})
			td := startDaemon(t, nil, "--replay="+path, "--replay.speed=0")
			td.waitFor(t, "the frames replayed", func(metrics) bool { return strings.Contains(td.logs.String(), "replay finished") })
			m := td.scrape(t)
			if v, ok := m.value("gpudiag_gpu_energy_joules_total", "gpu", "0"); !ok || v != 100 {
				t.Errorf("energy %v (%v); want the first frame's 100", v, ok)
			}
			if v, ok := m.value("gpudiag_gpu_temperature_celsius", "gpu", "0"); !ok || v != 40 {
				t.Errorf("temperature %v (%v); want the first frame's 40", v, ok)
			}
			logs := td.logs.String()
			if !strings.Contains(logs, "frame 2 (offset ") || !strings.Contains(logs, "collector gpu") || !strings.Contains(logs, tc.field) {
				t.Errorf("the refusal does not name the frame, the collector and %q:\n%s", tc.field, logs)
			}
		})
	}
}

// A frame whose sample does not decode loses only itself: the replay goes
// on with the next (it stopped the replay, and every sample after it was
// lost).
func TestReplayGoesOnAfterABadFrame(t *testing.T) {
	path := writeTrace(t, recordedSample{"gpu", gpuReading(100, 40)}, recordedSample{"gpu", map[string]any{"devices": "not a list"}},
		recordedSample{"gpu", gpuReading(150, 41)})
	td := startDaemon(t, nil, "--replay="+path, "--replay.speed=0")
	td.waitFor(t, "the frames replayed", func(metrics) bool { return strings.Contains(td.logs.String(), "replay finished") })
	m := td.scrape(t)
	if v, ok := m.value("gpudiag_gpu_energy_joules_total", "gpu", "0"); !ok || v != 150 {
		t.Errorf("energy %v (%v); want the third frame's 150", v, ok)
	}
	if logs := td.logs.String(); !strings.Contains(logs, "frame 2 (offset ") || !strings.Contains(logs, "sample does not decode") {
		t.Errorf("the bad frame is not named:\n%s", logs)
	}
}

// ncclReading is one NCCL log of one process on GPU 0 that initialised
// inits communicators.
func ncclReading(inits int) *sample.NCCL {
	return &sample.NCCL{Files: []sample.NCCLFile{{Path: "/logs/nccl.log", Exists: true,
		Processes: []sample.NCCLProcess{{Host: "node", PID: 7, CommInits: inits, Current: true}}}},
		GPUs: []sample.NCCLGPU{{GPU: 0, Matched: true}}}
}

// A sample type with no range of its own is held by its metrics: a counter
// series that would be negative refuses the frame, named by the series.
func TestReplayRefusesNegativeCounterSeries(t *testing.T) {
	path := writeTrace(t, recordedSample{"nccl", ncclReading(3)}, recordedSample{"nccl", ncclReading(-5)})
	td := startDaemon(t, nil, "--replay="+path, "--replay.speed=0")
	td.waitFor(t, "the frames replayed", func(metrics) bool { return strings.Contains(td.logs.String(), "replay finished") })
	m := td.scrape(t)
	if v, ok := m.value("gpudiag_nccl_communicator_inits_total", "gpu", "0"); !ok || v != 3 {
		t.Errorf("communicator inits %v (%v); want the first frame's 3", v, ok)
	}
	want := `gpudiag_nccl_communicator_inits_total{gpu=\"0\"} is -5: a counter is a finite total, never negative`
	if logs := td.logs.String(); !strings.Contains(logs, "frame 2 (offset ") || !strings.Contains(logs, want) {
		t.Errorf("the refusal does not name the frame and %s:\n%s", want, logs)
	}
}

// A frame whose JSON would decode into far more than it takes in the trace
// (200,000 empty processes: 600 KB of JSON, 30 KB compressed, some 400 MB
// allocated by decoding it) is refused before it is decoded.
func TestReplayRefusesADecodeBomb(t *testing.T) {
	bomb := json.RawMessage(`{"processes":[` + strings.Repeat("{},", 200_000-1) + `{}]}`)
	path := writeTrace(t, recordedSample{"ncclproc", hostileNCCLProcs(2)}, recordedSample{"ncclproc", bomb})
	td := startDaemon(t, nil, "--replay="+path, "--replay.speed=0")
	td.waitFor(t, "the frames replayed", func(metrics) bool { return strings.Contains(td.logs.String(), "replay finished") })
	m := td.scrape(t)
	if n := len(m["gpudiag_nccl_library_info"].GetMetric()); n != 2 {
		t.Errorf("%d library versions exported; the first frame has 2", n)
	}
	if logs := td.logs.String(); !strings.Contains(logs, "frame 2 (offset ") || !strings.Contains(logs, "decoding the sample would take more than") {
		t.Errorf("the bomb is not refused by name:\n%s", logs)
	}
}
