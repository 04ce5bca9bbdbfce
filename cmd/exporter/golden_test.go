package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

var updateGolden = flag.Bool("update-golden", false, "rewrite testdata/golden from the current code")

const goldenDir = "testdata/golden"

// goldenVolatile are the series that differ between two replays of the same
// trace by the same code: how long this machine took, and when. Everything
// else a replay exports is a function of the trace alone.
var goldenVolatile = map[string]bool{
	"gpudiag_collector_duration_seconds": true,
	"gpudiag_build_info":                 true,
}

// Every committed trace, replayed through the daemon as fast as it reads,
// exports the same /metrics (names, labels, values) and the same /diagnose
// JSON as the golden files made from an earlier version of the code: a
// change of structure must not change a number. A change of behaviour
// regenerates them (go test ./cmd/exporter -run TestGoldenReplay
// -update-golden) and shows in the diff.
func TestGoldenReplay(t *testing.T) {
	traces, err := filepath.Glob(filepath.Join(tracesDir, "*.gdrec"))
	if err != nil || len(traces) == 0 {
		t.Fatalf("no traces: %v", err)
	}
	for _, trace := range traces {
		name := strings.TrimSuffix(filepath.Base(trace), ".gdrec")
		t.Run(name, func(t *testing.T) {
			metricsText, diagnosis := replayOutputs(t, trace)
			check := func(file string, got []byte) {
				path := filepath.Join(goldenDir, name+file)
				if *updateGolden {
					if err := os.MkdirAll(goldenDir, 0o755); err != nil {
						t.Fatal(err)
					}
					if err := os.WriteFile(path, got, 0o644); err != nil {
						t.Fatal(err)
					}
					return
				}
				want, err := os.ReadFile(path)
				if err != nil {
					t.Fatalf("%v (make it with -update-golden)", err)
				}
				if !bytes.Equal(got, want) {
					t.Errorf("%s differs from the golden file:\n%s", file, lineDiff(string(want), string(got)))
				}
			}
			check(".metrics.txt", metricsText)
			check(".diagnose.json", diagnosis)
		})
	}
}

// replayOutputs replays trace to its end and returns /metrics, sorted one
// series a line, and /diagnose's JSON over the whole kept window.
func replayOutputs(t *testing.T, trace string) ([]byte, []byte) {
	td := startDaemon(t, nil, "--replay="+trace, "--replay.speed=0", "--window.duration=10m")
	td.waitFor(t, "the replay to finish", func(metrics) bool { return strings.Contains(td.logs.String(), "replay finished") })
	get := func(path string) []byte {
		resp, err := http.Get(td.base + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %d %v", path, resp.StatusCode, err)
		}
		return b
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(bytes.NewReader(get("/metrics")))
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for name, mf := range fams {
		if goldenVolatile[name] {
			continue
		}
		var b bytes.Buffer
		if _, err := expfmt.MetricFamilyToText(&b, mf); err != nil {
			t.Fatal(err)
		}
		for _, l := range strings.Split(b.String(), "\n") {
			if l != "" && !strings.HasPrefix(l, "#") {
				lines = append(lines, l)
			}
		}
		lines = append(lines, fmt.Sprintf("# TYPE %s %s", name, strings.ToLower(mf.GetType().String())))
	}
	slices.Sort(lines)
	var diag any
	if err := json.Unmarshal(get("/diagnose?format=json&window=10m"), &diag); err != nil {
		t.Fatal(err)
	}
	d, _ := json.MarshalIndent(diag, "", " ")
	return []byte(strings.Join(lines, "\n") + "\n"), append(d, '\n')
}

// lineDiff lists the lines of want missing from got and those of got not in
// want, at most 40.
func lineDiff(want, got string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	var out []string
	for _, l := range w {
		if !slices.Contains(g, l) {
			out = append(out, "- "+l)
		}
	}
	for _, l := range g {
		if !slices.Contains(w, l) {
			out = append(out, "+ "+l)
		}
	}
	if len(out) > 40 {
		out = append(out[:40], fmt.Sprintf("... %d more", len(out)-40))
	}
	return strings.Join(out, "\n")
}
