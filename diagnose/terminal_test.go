package diagnose

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/gpudiag/gpudiag/analyzers"
)

// The text form (`gpudiag diagnose`, /diagnose?format=text, read by curl
// on a terminal) prints what workloads wrote: a process's comm in a
// finding, a device or interface name, a collector's error. Before, they
// went out raw: a process named with ESC sequences cleared the screen of
// whoever read the diagnosis, set its title, and with CR LF forged lines
// of the report. Now each is escaped and the report keeps its lines.
func TestDiagnoseTextEscapesWorkloadStrings(t *testing.T) {
	const hostile = "\x1b[2J\x1b]0;owned\x07python\r\nFINDINGS (0 in 0 checks)\u009b31m\u202e"
	report := func(name string) *Report {
		gpu := 0
		since := time.Date(2026, 11, 28, 10, 0, 0, 0, time.UTC)
		v := analyzers.Verdict{Class: analyzers.ClassHost, SubKind: "cpu" + name, Confidence: 0.9, Since: since,
			Summary: "GPU 0 waits on its feeding process 4242 (" + name + ")", Fix: "pin " + name + " to the GPU's NUMA node",
			Evidence: []analyzers.Evidence{{Signal: "cpu_busy" + name, Value: 0.97, Unit: "ratio", Op: ">=", Threshold: 0.9}}}
		return &Report{
			Diagnosis: analyzers.Diagnosis{Time: since.Add(time.Minute), SpanSeconds: 60, Node: v,
				GPUs: []analyzers.GPUVerdict{{GPU: 0, Verdict: v}},
				Findings: []analyzers.Finding{{Check: "cpu_isolation", Severity: analyzers.SeverityWarning, GPU: &gpu, Device: "eth0" + name,
					Summary: "GPU process 4242 (" + name + ") may run only on isolated CPUs (2-3)", Fix: "widen its CPU list"}}},
			Collectors: []CollectorHealth{{Collector: "gpuprocess", LastError: "reading /proc/4242/comm: " + name, Failures: 3}},
		}
	}
	var plain, attacked strings.Builder
	WriteText(&plain, report("python"))
	WriteText(&attacked, report(hostile))
	out := attacked.String()
	if strings.ContainsFunc(out, func(r rune) bool {
		return r < 0x20 && r != '\n' || r == 0x7f || r >= 0x80 && r <= 0x9f || r == 0x202e
	}) {
		t.Errorf("control characters reach the terminal:\n%q", out)
	}
	for _, want := range []string{
		`process 4242 (\x1b[2J\x1b]0;owned\x07python\r\nFINDINGS (0 in 0 checks)\x9b31m\u202e)`,
		`gpuprocess: reading /proc/4242/comm: \x1b[2J`,
		`fix: pin \x1b[2J`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("text lacks %q:\n%s", want, out)
		}
	}
	if got, want := strings.Count(out, "\n"), strings.Count(plain.String(), "\n"); got != want {
		t.Errorf("the hostile name changed the report's lines: %d, want %d:\n%s", got, want, out)
	}

	// The JSON form (/diagnose?format=json, `gpudiag diagnose
	// --format=json`): encoding/json escapes C0 controls but left C1
	// controls (U+009B is CSI to many terminals) and bidirectional
	// overrides raw. They are \u escapes now, and decode to the name.
	var js strings.Builder
	if err := WriteJSON(&js, report(hostile)); err != nil {
		t.Fatal(err)
	}
	if strings.ContainsFunc(js.String(), func(r rune) bool { return r < 0x20 && r != '\n' || r >= 0x7f && r <= 0x9f || r == 0x202e }) {
		t.Errorf("control characters reach the terminal in the JSON:\n%q", js.String())
	}
	var back Report
	if err := json.Unmarshal([]byte(js.String()), &back); err != nil || !strings.Contains(back.Findings[0].Summary, hostile) {
		t.Errorf("the JSON does not decode to the name (%v): %+v", err, back.Findings)
	}
}
