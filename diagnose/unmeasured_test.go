package diagnose

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpudiag/gpudiag/engine"
	"github.com/gpudiag/gpudiag/sample"
)

// A collector that succeeds without some fields (a host whose meminfo has
// no MemAvailable) is ok and names them, in every format; a node listing
// thousands of interfaces names a bounded few and how many more.
func TestDiagnoseNamesUnmeasuredFields(t *testing.T) {
	r, now := runnerWith(3, func(int) *sample.GPUs { return gpuSample(0.9, 0) })
	var many []string
	for i := range 1000 {
		many = append(many, fmt.Sprintf("veth%d rx_bytes", i))
	}
	statuses := []engine.Status{
		{Name: "cpu", Success: true, LastAttempt: now, LastSuccess: now, Unmeasured: []string{"meminfo MemAvailable"}},
		{Name: "netdev", Success: true, LastAttempt: now, LastSuccess: now, Unmeasured: many},
		{Name: "numa", Success: true, LastAttempt: now, LastSuccess: now, Unmeasured: []string{"node0 distance \x1b[2J"}},
	}
	r.ReportCollectors(func() []engine.Status { return statuses })
	h := r.Handler(HandlerOptions{Now: func() time.Time { return now }})

	_, body := serve(t, h, "/diagnose?format=json", "")
	var d Report
	if err := json.Unmarshal([]byte(body), &d); err != nil {
		t.Fatal(err)
	}
	cpu, netdev := d.Collectors[0], d.Collectors[1]
	if !cpu.OK || cpu.LastError != "" || !slices.Equal(cpu.Unmeasured, []string{"meminfo MemAvailable"}) {
		t.Errorf("cpu %+v", cpu)
	}
	if !netdev.OK || len(netdev.Unmeasured) != maxUnmeasured+1 || netdev.Unmeasured[maxUnmeasured] != "and 984 more" {
		t.Errorf("netdev names %d: %q", len(netdev.Unmeasured), netdev.Unmeasured)
	}

	_, text := serve(t, h, "/diagnose?format=text", "")
	if !strings.Contains(text, "collectors: all 3 ok") || !strings.Contains(text, "  cpu: unmeasured: meminfo MemAvailable\n") ||
		strings.Contains(text, "\x1b") {
		t.Errorf("text:\n%q", text)
	}
	_, html := serve(t, h, "/diagnose?format=html", "")
	if !strings.Contains(html, "All 3 collectors sampling.") || !strings.Contains(html, "<td>cpu</td><td>meminfo MemAvailable</td>") {
		t.Errorf("html collectors section lacks the unmeasured fields:\n%s", html)
	}
}

// A node whose vmstat lacks the swap and refault counters (or has no
// vmstat) gives no swap rate and no refault rate: not measured (NaN), not
// 0, so no verdict reads "no swapping" or "the page cache holds" from it.
func TestUnmeasuredVMStatRatesAreNotZero(t *testing.T) {
	w := engine.NewWindow(time.Hour, 64<<20)
	for i := 0; i <= 30; i++ {
		put(w, sample.CPUKey, at(i), &sample.CPU{IntervalSeconds: 1, Interval: &sample.CPUInterval{
			Unmeasured: []string{sample.VMSwapIn, sample.VMSwapOut, sample.VMMajorFaults, sample.VMPageCacheRefaults}}})
	}
	put(w, sample.DatasetKey, at(30), &sample.Datasets{IntervalSeconds: 15})
	in := FromWindow(w, at(30), 10*time.Second)
	if !math.IsNaN(in.Node.SwapPagesPerSecond) {
		t.Errorf("swap pages/s %v; want NaN, not measured", in.Node.SwapPagesPerSecond)
	}
	if in.Audit.Storage == nil || !math.IsNaN(in.Audit.Storage.NodeRefaultsPerSecond) {
		t.Errorf("storage input %+v; want the node's refaults NaN, not measured", in.Audit.Storage)
	}
}
