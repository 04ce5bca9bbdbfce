package diagnose

import (
	"bytes"
	"encoding/json"
	"slices"
	"strings"
	"testing"
)

// The page's context is read into the report when it is served: each GPU's
// model, processes and sparklines, and the verdicts' history. None of it
// reaches the JSON, which the golden replays compare byte for byte.
func TestReportCarriesWhatThePageShows(t *testing.T) {
	r, now := switchingRunner(2, 60, 30)
	rep := newReport(r.Latest(), nil, now)
	r.addHistory(rep)
	r.addGPUContext(rep)
	if rep.Models != "2 × NVIDIA H100 80GB HBM3" {
		t.Errorf("models %q", rep.Models)
	}
	if len(rep.History) == 0 || !rep.TimelineStart.Equal(rep.History[0].Start) {
		t.Errorf("timeline from %s, history %+v; want the history's start", rep.TimelineStart, rep.History)
	}
	gpu1, ok := rep.GPUContext[1]
	if !ok {
		t.Fatalf("no context for GPU 1: %+v", rep.GPUContext)
	}
	if want := []string{"pid 1001 (40.0 GiB)"}; !slices.Equal(gpu1.Processes, want) {
		t.Errorf("GPU 1 processes %q; want %q", gpu1.Processes, want)
	}
	var names []string
	for _, s := range gpu1.Sparks {
		names = append(names, s.Name)
		if s.Points == "" {
			t.Errorf("GPU 1 %s sparkline has no points", s.Name)
		}
	}
	if want := []string{"SM active", "PCIe", "NVLink"}; !slices.Equal(names, want) {
		t.Errorf("GPU 1 sparklines %q; want %q", names, want)
	}

	served, err := json.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	bare, err := json.Marshal(&Report{Diagnosis: rep.Diagnosis})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(served, bare) {
		t.Errorf("the served context reached the JSON:\n%s\nwant\n%s", served, bare)
	}
}

// The text draws its timeline from the report's history alone.
func TestTextTimelineIsTheReportsHistory(t *testing.T) {
	r, now := switchingRunner(2, 60, 30)
	rep := newReport(r.Latest(), nil, now)
	var without bytes.Buffer
	writeText(&without, rep)
	r.addHistory(rep)
	var with bytes.Buffer
	writeText(&with, rep)
	if strings.Contains(without.String(), "TIMELINE") || !strings.Contains(with.String(), "TIMELINE") {
		t.Errorf("timeline without history: %v, with: %v; want only with", strings.Contains(without.String(), "TIMELINE"), strings.Contains(with.String(), "TIMELINE"))
	}
}
