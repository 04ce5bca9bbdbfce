package diagnose

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/gpudiag/gpudiag/sample"
)

// Evidence reads with human labels and scaled units in the text and on the
// page; JSON keeps the signals' machine names.
func TestEvidenceHumanLabels(t *testing.T) {
	r, now := runnerWith(20, func(int) *sample.GPUs { return gpuSample(0, 59e9) })
	h := r.Handler(HandlerOptions{MaxSpan: 10 * time.Minute, Now: func() time.Time { return now }})
	_, text := serve(t, h, "/diagnose", "")
	_, html := serve(t, h, "/diagnose", "text/html")
	_, js := serve(t, h, "/diagnose", "application/json")
	for name, body := range map[string]string{"text": text, "html": html} {
		if !strings.Contains(body, "PCIe, received by the GPU") || !strings.Contains(body, "SM activity") {
			t.Errorf("%s: no human evidence labels:\n%s", name, body)
		}
	}
	if strings.Contains(text, "pcie_rx_bytes_per_second") || strings.Contains(text, "sm_active") {
		t.Errorf("text shows machine names:\n%s", text)
	}
	if !strings.Contains(js, `"signal": "pcie_rx_bytes_per_second"`) && !strings.Contains(js, `"signal":"pcie_rx_bytes_per_second"`) {
		t.Errorf("JSON lost the machine name:\n%s", js)
	}
	if got := signalLabel("pcie_min_direction_bytes_per_second"); got != "PCIe, slower direction" {
		t.Errorf("pcie_min_direction_bytes_per_second reads %q", got)
	}
	if got := signalLabel("some_new_signal"); got != "some new signal" {
		t.Errorf("an unlabelled signal reads %q", got)
	}
	for _, tc := range []struct {
		x    float64
		unit string
		want string
	}{
		{59e9, "B/s", "59.00 GB/s"}, {12.5e6, "B/s", "12.5 MB/s"}, {2500, "B/s", "2.5 kB/s"}, {12, "B/s", "12 B/s"},
		{64 << 20, "B", "64.0 MiB"}, {2 << 30, "B", "2.0 GiB"}, {512, "B", "512 B"},
		{20, "percent", "20%"}, {150, "us", "150 µs"}, {3, "1/s", "3/s"}, {math.NaN(), "B/s", "n/a"},
	} {
		if got := formatValue(tc.x, tc.unit); got != tc.want {
			t.Errorf("formatValue(%v, %q) = %q, want %q", tc.x, tc.unit, got, tc.want)
		}
	}
}
