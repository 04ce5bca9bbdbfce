package diagnose

import (
	"bytes"
	"math"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/common/expfmt"

	"github.com/gpudiag/gpudiag/analyzers"
	"github.com/gpudiag/gpudiag/engine"
	"github.com/gpudiag/gpudiag/sample"
)

func verdictOf(gpu int, class analyzers.Class, subKind string) analyzers.GPUVerdict {
	return analyzers.GPUVerdict{GPU: gpu, Verdict: analyzers.Verdict{Class: class, SubKind: subKind}}
}

func intp(i int) *int { return &i }

// The interval since the previous analysis goes to the verdict the new
// analysis reaches; the first analysis and one whose clock went back
// account nothing; past the span an interval is unknown/not_analyzed.
func TestAccountingAttributesIntervalToNewVerdict(t *testing.T) {
	a := NewAccounting(10 * time.Second)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	diag := func(class analyzers.Class, sub string) *analyzers.Diagnosis {
		return &analyzers.Diagnosis{GPUs: []analyzers.GPUVerdict{verdictOf(0, class, sub), verdictOf(1, analyzers.ClassIdle, "no_process")}}
	}
	a.Add(at(0), diag(analyzers.ClassCompute, "tensor"))         // first: nothing
	a.Add(at(1), diag(analyzers.ClassCompute, "tensor"))         // 1 s compute
	a.Add(at(3), diag(analyzers.ClassCommunication, "nvlink"))   // 2 s communication
	a.Add(at(2), diag(analyzers.ClassCommunication, "nvlink"))   // back in time: nothing
	a.Add(at(2.5), diag(analyzers.ClassCommunication, "nvlink")) // 0.5 s communication
	a.Add(at(2.5+25), diag(analyzers.ClassHost, "cpu"))          // 10 s host, 15 s not analyzed
	a.Add(at(2.5+25+0.25), diag(analyzers.ClassHost, "cpu"))     // 0.25 s host
	want := map[bottleneckKey]float64{
		{0, "compute", "tensor"}:           1,
		{0, "communication", "nvlink"}:     2.5,
		{0, "host", "cpu"}:                 10.25,
		{0, "unknown", NotAnalyzedSubKind}: 15,
		{1, "idle", "no_process"}:          1 + 2 + 0.5 + 10 + 0.25,
		{1, "unknown", NotAnalyzedSubKind}: 15,
	}
	for k, v := range want {
		if got := a.bottleneck[k]; math.Abs(got-v) > 1e-9 {
			t.Errorf("%+v: %g s, want %g", k, got, v)
		}
	}
	if len(a.bottleneck) != len(want) {
		t.Errorf("series %v, want %v", a.bottleneck, want)
	}
	// Every GPU accounts the whole time from the first analysis to the
	// last: the step back (3 to 2 s) starts a new interval, not a negative
	// one. (The daemon's sample times carry Go's monotonic reading, so a
	// wall clock step never shows here; a trace only goes forward.)
	for gpu := 0; gpu < 2; gpu++ {
		var sum float64
		for k, v := range a.bottleneck {
			if k.gpu == gpu {
				sum += v
			}
		}
		if want := 27.75 + 1; math.Abs(sum-want) > 1e-9 {
			t.Errorf("GPU %d accounts %g s, want %g", gpu, sum, want)
		}
	}
}

// Only the costly checks count, only for GPUs in work; a finding naming
// no GPU (a port) counts for the GPUs its cause acts through.
func TestAccountingFindingSeconds(t *testing.T) {
	a := NewAccounting(10 * time.Second)
	d := &analyzers.Diagnosis{
		GPUs: []analyzers.GPUVerdict{
			verdictOf(0, analyzers.ClassCommunication, "infiniband"),
			verdictOf(1, analyzers.ClassCommunication, "pcie_peer_shm"),
			verdictOf(2, analyzers.ClassIdle, "no_process"),
			verdictOf(3, analyzers.ClassHost, "cpu_quota"),
		},
		Findings: []analyzers.Finding{
			{Check: "nccl_fallback", Kind: "shm_instead_of_p2p", GPUs: []int{1, 2}},
			{Check: "ib_port_degraded", Device: "mlx5_0/1"},
			{Check: "ib_port_degraded", Device: "mlx5_1/1"}, // a second port: GPU 0's time counts once
			{Check: "cpu_quota_throttled", GPU: intp(3)},
			{Check: "cpu_governor"}, // costs no share of a GPU's time
			{Check: "ecc_correctable_rising", GPU: intp(0)},
		},
	}
	a.Add(t0, d)
	a.Add(t0.Add(4*time.Second), d)
	want := map[findingKey]float64{
		{"nccl_fallback", "shm_instead_of_p2p", 1}: 4, // GPU 2 is idle: it loses nothing
		{"ib_port_degraded", "", 0}:                4, // only the GPU over InfiniBand
		{"cpu_quota_throttled", "", 3}:             4,
	}
	if len(a.finding) != len(want) {
		t.Errorf("finding seconds %v, want %v", a.finding, want)
	}
	for k, v := range want {
		if a.finding[k] != v {
			t.Errorf("%+v: %g s, want %g", k, a.finding[k], v)
		}
	}
}

// Through the runner: a GPU that computes for 30 s then copies for 30 s
// accounts every second between its first and last analysis, split at the
// verdict's change, and the exposition is counters promtool accepts.
func TestAccountingThroughRunner(t *testing.T) {
	r, _ := runnerWith(60, func(i int) *sample.GPUs {
		if i >= 30 {
			return gpuSample(0, 59e9)
		}
		return gpuSample(0.95, 0)
	})
	reg := prometheus.NewRegistry()
	reg.MustRegister(r.AccountingMetrics().CountDrops(engine.NewDrops(nil)))
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var text bytes.Buffer
	perClass := map[string]float64{}
	var total float64
	for _, mf := range mfs {
		if _, err := expfmt.MetricFamilyToText(&text, mf); err != nil {
			t.Fatal(err)
		}
		if mf.GetName() != "gpudiag_gpu_bottleneck_seconds_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "class" {
					perClass[l.GetValue()] += m.GetCounter().GetValue()
				}
			}
			total += m.GetCounter().GetValue()
		}
	}
	if total != 59 {
		t.Errorf("accounted %g s over 60 analyses 1 s apart, want 59", total)
	}
	// The verdict follows within the span and the hysteresis (12 s), so
	// the split is 29 s compute, 30 s I/O give or take that lag.
	if perClass["compute"] < 29 || perClass["compute"] > 29+12 || perClass["io"] < 30-12 {
		t.Errorf("split %v; want about 29 s compute, 30 s io", perClass)
	}
	if n, err := testutil.GatherAndCount(reg, "gpudiag_gpu_bottleneck_seconds_total"); err != nil || n < 2 {
		t.Errorf("%d series (%v)", n, err)
	}
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Skip("promtool not on PATH")
	}
	cmd := exec.Command(promtool, "check", "metrics")
	cmd.Stdin = strings.NewReader(text.String())
	if out, err := cmd.CombinedOutput(); len(out) > 0 || err != nil {
		t.Fatalf("promtool check metrics: %v\n%s\n%s", err, out, text.String())
	}
}

// The help of gpudiag_finding_gpu_seconds_total lists the checks that
// count: it must list exactly costlyFindings.
func TestAccountingFindingHelpListsChecks(t *testing.T) {
	help := findingSecondsDesc.String()
	for check := range costlyFindings {
		if !strings.Contains(help, check) {
			t.Errorf("the help does not name %s", check)
		}
	}
}
