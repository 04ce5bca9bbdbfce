package main

import (
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpudiag/gpudiag/analyzers"
	"github.com/gpudiag/gpudiag/diagnose"
	"github.com/gpudiag/gpudiag/engine"
	"github.com/gpudiag/gpudiag/record"
	"github.com/gpudiag/gpudiag/sample"
)

const tracesDir = "../../testdata/traces"

// Every trace recorded on a real H200 (scripts/validate/situations.py) replays
// to the verdict the live daemon gave: the analyzers' regression suite.
func TestRecordedTraces(t *testing.T) {
	for _, tc := range []struct {
		trace, class, sub string
		findings          []string
	}{
		{"idle", "idle", "no_process", nil},
		{"bf16_gemm", "compute", "tensor", []string{"clocks_throttled"}},
		{"d2d_copy", "compute", "memory_bandwidth", nil},
		{"pinned_h2d_copy", "io", "h2d_copy", nil},
		{"python_input_pipeline", "host", "cpu", nil},
		{"disk_reader", "io", "storage_read", nil},
		// 2×H200 (NV18), torch.distributed all-reduce in NCCL's three modes
		// (scripts/validate/nccl_modes.py): from traffic alone, and with
		// NCCL's log found through NCCL_DEBUG_FILE in the ranks' environment.
		{"allreduce_nvlink_nccl_log", "communication", "nvlink", nil},
		{"allreduce_p2p_disabled", "communication", "pcie_peer_shm", []string{"nccl_env_override"}},
		{"allreduce_p2p_disabled_nccl_log", "communication", "pcie_peer_shm", []string{"nccl_fallback", "nccl_env_override"}},
		{"allreduce_sockets", "communication", "network", []string{"nccl_env_override"}},
		{"allreduce_sockets_nccl_log", "communication", "network", []string{"nccl_fallback", "nccl_env_override"}},
	} {
		t.Run(tc.trace, func(t *testing.T) {
			var out syncBuffer
			code, err := run(t.Context(), []string{"diagnose", "--replay=" + filepath.Join(tracesDir, tc.trace+".gdrec"),
				"--for=10s", "--format=json"}, &out, io.Discard, nil)
			if err != nil {
				t.Fatal(err)
			}
			var d analyzers.Diagnosis
			if err := json.Unmarshal([]byte(out.String()), &d); err != nil {
				t.Fatal(err)
			}
			if string(d.Node.Class) != tc.class || d.Node.SubKind != tc.sub {
				t.Fatalf("replayed verdict %s/%s (%s); live it was %s/%s", d.Node.Class, d.Node.SubKind, d.Node.Summary, tc.class, tc.sub)
			}
			got := map[string]bool{}
			for _, f := range d.Findings {
				got[f.Check] = true
			}
			for _, f := range tc.findings {
				if !got[f] {
					t.Errorf("finding %s missing; got %v", f, got)
				}
			}
			// Nothing claims a fallback that did not happen (the NVLink
			// run, and every single-GPU situation).
			if got["nccl_fallback"] && !slices.Contains(tc.findings, "nccl_fallback") {
				t.Errorf("nccl_fallback reported for %s", tc.trace)
			}
			wantCode := exitOK
			if tc.class == "io" || tc.class == "host" || tc.class == "communication" {
				wantCode = exitBottleneck
			}
			if code != wantCode {
				t.Errorf("exit code %d; want %d", code, wantCode)
			}
		})
	}
}

// readFrames reads a trace whole.
func readFrames(t *testing.T, path string) []record.Frame {
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
	var out []record.Frame
	for {
		fr, err := r.Next()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, fr)
	}
}

// Two traces back to back (a GEMM, then a pinned host→device copy loop): the
// node verdict switches to io/h2d_copy within the analysis span plus the
// hysteresis count of sampling intervals after the copy loop starts.
func TestVerdictSwitchBetweenTraces(t *testing.T) {
	a := readFrames(t, filepath.Join(tracesDir, "bf16_gemm.gdrec"))
	b := readFrames(t, filepath.Join(tracesDir, "pinned_h2d_copy.gdrec"))
	shift := a[len(a)-1].Time().Add(time.Second).Sub(b[0].Time())

	names := map[string]bool{}
	for _, f := range append(append([]record.Frame{}, a...), b...) {
		names[f.Collector] = true
	}
	var list []string
	for n := range names {
		list = append(list, n)
	}
	cs, decoders, _, err := replayCollectors(list, nil, false)
	if err != nil {
		t.Fatal(err)
	}
	clock := &replayClock{}
	window := engine.NewWindow(10*time.Minute, 16<<20)
	runner := diagnose.NewRunner(window, analyzers.DefaultThresholds)
	type point struct {
		t     time.Time
		class string
	}
	var verdicts []point
	eng := engine.New(engine.Options{Interval: time.Second, Window: window, Now: clock.Now,
		OnSample: func(c string, ts time.Time, s any) {
			runner.OnSample(c, ts, s)
			if c == diagnose.TriggerCollector {
				d := runner.Latest()
				verdicts = append(verdicts, point{ts, string(d.Node.Class) + "/" + d.Node.SubKind})
			}
		}})
	for _, c := range cs {
		eng.Add(c, 0)
	}
	var copyStart time.Time
	feed := func(frames []record.Frame, offset time.Duration) {
		for _, fr := range frames {
			s := decoders[fr.Collector]()
			if err := json.Unmarshal(fr.Sample, s); err != nil {
				t.Fatal(err)
			}
			ts := fr.Time().Add(offset)
			if g, ok := s.(*sample.GPUs); ok && offset != 0 && copyStart.IsZero() && len(g.Devices) > 0 {
				if rx, ok := g.Devices[0].Values.Get(sample.PCIeRxBytesPerSecond); ok && rx > analyzers.DefaultThresholds.H2DBytes {
					copyStart = ts
				}
			}
			clock.set(ts)
			if err := eng.Ingest(fr.Collector, ts, s); err != nil {
				t.Fatal(err)
			}
		}
	}
	feed(a, 0)
	if last := verdicts[len(verdicts)-1]; last.class != "compute/tensor" {
		t.Fatalf("after the GEMM trace: %s", last.class)
	}
	feed(b, shift)
	if copyStart.IsZero() {
		t.Fatal("no copy traffic found in the second trace")
	}
	var switched time.Time
	for _, v := range verdicts {
		if v.t.After(copyStart) && v.class == "io/h2d_copy" {
			switched = v.t
			break
		}
	}
	limit := time.Duration(analyzers.DefaultThresholds.SpanSeconds*float64(time.Second)) +
		time.Duration(analyzers.DefaultThresholds.Hysteresis)*time.Second + 500*time.Millisecond
	lag := switched.Sub(copyStart)
	if switched.IsZero() || lag > limit {
		t.Fatalf("switched %v after the copy started; want within %v. Verdicts: %v", lag, limit, verdicts)
	}
	t.Logf("verdict followed the workload change after %v (limit %v)", lag, limit)
	if strings.Contains(verdicts[len(verdicts)-1].class, "compute") {
		t.Fatal("ended on compute")
	}
}

// Each replayed collector keeps the interval it was recorded at, so one on a
// slow clock (gpuprocess every 5 s) is not dropped as stale between samples.
func TestReplayKeepsRecordedIntervals(t *testing.T) {
	names, intervals, _, err := scanRecord(filepath.Join(tracesDir, "python_input_pipeline.gdrec"))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(names, "gpuprocess") {
		t.Fatalf("collectors %v", names)
	}
	near := func(d, want time.Duration) bool { return d > want*9/10 && d < want*11/10 }
	if !near(intervals["gpu"], time.Second) || !near(intervals["gpuprocess"], 5*time.Second) {
		t.Fatalf("intervals %v", intervals)
	}
}
