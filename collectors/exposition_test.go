package collectors

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/prometheus/client_golang/prometheus"
	versioncollector "github.com/prometheus/client_golang/prometheus/collectors/version"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"

	"github.com/gpudiag/gpudiag/analyzers"
	"github.com/gpudiag/gpudiag/diagnose"
	"github.com/gpudiag/gpudiag/engine"
	"github.com/gpudiag/gpudiag/gpu"
	"github.com/gpudiag/gpudiag/gpu/nvmlgpu"
	"github.com/gpudiag/gpudiag/gpu/nvmlgpu/nvmlfake"
	"github.com/gpudiag/gpudiag/server"
)

var updateREADME = flag.Bool("update-readme", false, "rewrite the metric table in README.md from the collectors' output")

const fixtureRoot = "../hostfs/testdata/host"

// fixtureGPUs are two fake Hopper GPUs with every optional signal present:
// NVLinks, a throttle reason, compute processes and an XID event.
func fixtureGPUs() *nvmlfake.Lib {
	a, b := nvmlfake.Hopper(0), nvmlfake.Hopper(4)
	a.Bus, b.Bus = 0x18, 0x9a
	a.PIDs, b.PIDs = []uint32{4242}, []uint32{4343}
	for _, g := range []*nvmlfake.GPU{a, b} {
		g.Util = nvml.Utilization{Gpu: 100, Memory: 30}
		g.ClockEvents = 0x4
		for id := nvml.GPM_METRIC_GRAPHICS_UTIL; id <= nvml.GPM_METRIC_NVLINK_L17_TX_PER_SEC; id++ {
			g.GPM[id] = 50
		}
	}
	lib := nvmlfake.New(a, b)
	sent := false
	lib.Events = func() (nvml.EventSet, nvml.Return) {
		return &mock.EventSet{
			WaitFunc: func(uint32) (nvml.EventData, nvml.Return) {
				if sent {
					return nvml.EventData{}, nvml.ERROR_TIMEOUT
				}
				sent = true
				dev, _ := lib.DeviceGetHandleByIndex(0)
				return nvml.EventData{Device: dev, EventType: nvml.EventTypeXidCriticalError, EventData: 79}, nvml.SUCCESS
			},
			FreeFunc: func() nvml.Return { return nvml.SUCCESS },
		}, nvml.SUCCESS
	}
	return lib
}

// gatherAll builds every registered collector, as the daemon does, over the
// fixture host and fake GPUs, samples twice and gathers.
func gatherAll(t *testing.T) []*dto.MetricFamily {
	t.Helper()
	mfs, _ := gatherAllWindow(t)
	return mfs
}

// gatherAllWindow is gatherAll that also returns the window the samples went to.
func gatherAllWindow(t *testing.T) ([]*dto.MetricFamily, *engine.Window) {
	t.Helper()
	cs, err := Build(Config{ProcPath: filepath.Join(fixtureRoot, "proc"), SysPath: filepath.Join(fixtureRoot, "sys"),
		GPU: gpu.Options{
			OpenDCGM: func() (gpu.Backend, error) { return nil, os.ErrNotExist },
			OpenNVML: func() (gpu.Backend, error) { return nvmlgpu.Open(fixtureGPUs(), nvmlgpu.Options{}) },
		}})
	if err != nil {
		t.Fatal(err)
	}
	window := engine.NewWindow(time.Minute, 1<<20)
	runner := diagnose.NewRunner(window, analyzers.DefaultThresholds)
	e := engine.New(engine.Options{Interval: testEngineInterval, Window: window, OnSample: runner.OnSample})
	for _, c := range cs {
		e.Add(c, testEngineInterval)
	}
	e.SampleOnce(context.Background())
	time.Sleep(150 * time.Millisecond) // GPM needs 100 ms between samples
	e.SampleOnce(context.Background())
	for _, st := range e.Statuses() {
		if !st.Success {
			t.Errorf("collector %s failed on the fixture: %s", st.Name, st.LastError)
		}
	}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(versioncollector.NewCollector("gpudiag"), runner.Metrics(), runner.AccountingMetrics(), costlyFindingAccount())
	mfs, err := server.Merge(e, reg).Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cs {
		if cl, ok := c.(interface{ Close() error }); ok {
			cl.Close()
		}
	}
	return mfs, window
}

// costlyFindingAccount is the account of a GPU held by its CPU quota for a
// second: the fixture's GPUs hold no work, so no finding costs them time, and
// gpudiag_finding_gpu_seconds_total would be missing from the exposition the
// README table and promtool read. Its GPU index is one the fixture lacks.
func costlyFindingAccount() prometheus.Collector {
	gpu := 99
	d := &analyzers.Diagnosis{
		GPUs:     []analyzers.GPUVerdict{{GPU: gpu, Verdict: analyzers.Verdict{Class: analyzers.ClassHost, SubKind: "cpu_quota"}}},
		Findings: []analyzers.Finding{{Check: "cpu_quota_throttled", GPU: &gpu}},
	}
	a := diagnose.NewAccounting(10 * time.Second)
	t := time.Unix(1700000000, 0)
	a.Add(t, d)
	a.Add(t.Add(time.Second), d)
	return a.Metrics().CountDrops(engine.NewDrops(nil))
}

// Every collector can be replayed from a recorded trace: it registered a
// replay spec whose sample type is the one it really produces, and a sample
// survives the JSON round trip of a record file with the same metrics.
func TestEveryCollectorCanBeReplayed(t *testing.T) {
	_, window := gatherAllWindow(t)
	for _, name := range Names() {
		if !registry[name].defaultOn {
			continue // off by default, so not built on the fixture; it checks its own round trip
		}
		rc, err := ReplayCollector(name)
		if err != nil {
			t.Errorf("collector %s: %v (call register in its init)", name, err)
			continue
		}
		latest, ok := registry[name].latest(window)
		if !ok {
			t.Errorf("collector %s produced no sample of its key's type on the fixture", name)
			continue
		}
		if got, want := fmt.Sprintf("%T", latest), fmt.Sprintf("%T", rc.NewSample()); got != want {
			t.Errorf("collector %s samples %s but replays %s", name, got, want)
			continue
		}
		raw, err := json.Marshal(latest)
		if err != nil {
			t.Errorf("collector %s: sample does not encode: %v", name, err)
			continue
		}
		decoded := rc.NewSample()
		if err := json.Unmarshal(raw, decoded); err != nil {
			t.Errorf("collector %s: sample does not decode: %v", name, err)
			continue
		}
		if a, b := metricText(t, rc, latest), metricText(t, rc, decoded); a != b {
			t.Errorf("collector %s: metrics differ after a record round trip:\n%s\nvs\n%s", name, a, b)
		}
	}
}

func metricText(t *testing.T, c engine.Collector, s any) string {
	t.Helper()
	var out []string
	c.Metrics(s, func(m prometheus.Metric) {
		var d dto.Metric
		if err := m.Write(&d); err != nil {
			t.Fatal(err)
		}
		out = append(out, m.Desc().String()+" "+d.String())
	})
	sort.Strings(out)
	return strings.Join(out, "\n")
}

func exposition(t *testing.T, mfs []*dto.MetricFamily) []byte {
	t.Helper()
	var buf bytes.Buffer
	enc := expfmt.NewEncoder(&buf, expfmt.NewFormat(expfmt.TypeTextPlain))
	for _, mf := range mfs {
		if err := enc.Encode(mf); err != nil {
			t.Fatal(err)
		}
	}
	return buf.Bytes()
}

// promtool's linter must have nothing to say about anything we export.
func TestPromtoolCheckMetrics(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("promtool not installed; CI must install Debian's prometheus package")
		}
		t.Skip("promtool not installed")
	}
	text := exposition(t, gatherAll(t))
	cmd := exec.Command(promtool, "check", "metrics")
	cmd.Stdin = bytes.NewReader(text)
	out, err := cmd.CombinedOutput()
	if err != nil || len(out) > 0 {
		t.Fatalf("promtool check metrics: %v\n%s", err, out)
	}
	if !bytes.Contains(text, []byte("gpudiag_gpu_sm_active_ratio")) {
		t.Fatal("exposition lacks GPU metrics; the check above proved nothing")
	}
}

const (
	tableStart = "<!-- metrics:start (generated by: go test ./collectors -run TestREADMEMetricTable -update-readme) -->"
	tableEnd   = "<!-- metrics:end -->"
)

// renderMetricTable lists every metric family with its type, labels and help.
func renderMetricTable(mfs []*dto.MetricFamily) string {
	var b strings.Builder
	b.WriteString("| metric | type | labels | meaning |\n|---|---|---|---|\n")
	sort.Slice(mfs, func(i, j int) bool { return mfs[i].GetName() < mfs[j].GetName() })
	for _, mf := range mfs {
		labels := map[string]bool{}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = true
			}
		}
		names := make([]string, 0, len(labels))
		for n := range labels {
			names = append(names, n)
		}
		sort.Strings(names)
		help := strings.ReplaceAll(mf.GetHelp(), "|", "\\|")
		b.WriteString("| `" + mf.GetName() + "` | " + strings.ToLower(mf.GetType().String()) + " | " +
			strings.Join(names, ", ") + " | " + help + " |\n")
	}
	return b.String()
}

// The README's metric table is generated from what the collectors export, so
// it cannot drift: this test fails when it is stale.
func TestREADMEMetricTable(t *testing.T) {
	var mfs []*dto.MetricFamily
	for _, mf := range gatherAll(t) {
		if strings.HasPrefix(mf.GetName(), "gpudiag_") {
			mfs = append(mfs, mf)
		}
	}
	table := renderMetricTable(mfs)
	path := filepath.Join("..", "README.md")
	readme, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	s := string(readme)
	i, j := strings.Index(s, tableStart), strings.Index(s, tableEnd)
	if i < 0 || j < i {
		t.Fatalf("README.md lacks the metric table markers %q … %q", tableStart, tableEnd)
	}
	current := strings.TrimSpace(s[i+len(tableStart) : j])
	if *updateREADME {
		s = s[:i+len(tableStart)] + "\n" + table + s[j:]
		if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	if current != strings.TrimSpace(table) {
		t.Fatalf("README.md metric table is stale; regenerate with:\n  go test ./collectors -run TestREADMEMetricTable -update-readme")
	}
}
