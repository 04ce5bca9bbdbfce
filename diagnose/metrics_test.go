package diagnose

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/gpudiag/gpudiag/analyzers"
	"github.com/gpudiag/gpudiag/engine"
	"github.com/gpudiag/gpudiag/safetext"
	"github.com/gpudiag/gpudiag/sample"
)

// The diagnosis collector runs on client_golang's gather goroutine, where a
// panic ends the daemon. Given a diagnosis whose job identity and finding
// device hold what a workload, a kubelet or a trace could put there (a name
// cut inside a character, invalid bytes, escape sequences, 100 kB), a
// registry's Gather answers, every label value is valid UTF-8 of at most
// safetext.LabelMaxBytes, and nothing is dropped. Before, MustNewConstMetric
// panicked on the first invalid value and took the test binary with it.
func TestDiagnosisMetricsSurviveHostileValues(t *testing.T) {
	r, _ := runnerWith(3, func(int) *sample.GPUs { return gpuSample(0, 59e9) })
	d := *r.Latest()
	cutPod := strings.Repeat("a", 252) + "\xc3" // "é" cut after its first byte
	gpu := 0
	d.Jobs = []analyzers.GPUJob{{GPU: 0, Source: analyzers.JobSourceKubernetes, JobID: "\x1b]0;owned\x07\xff",
		Namespace: "research", Pod: cutPod, Container: strings.Repeat("c", 100_000)}}
	d.Findings = append(d.Findings,
		analyzers.Finding{Check: "mount_slow", Severity: analyzers.SeverityWarning, GPU: &gpu, Device: strings.Repeat("/m", 200) + "1"},
		analyzers.Finding{Check: "mount_slow", Severity: analyzers.SeverityWarning, GPU: &gpu, Device: strings.Repeat("/m", 200) + "2"})
	r.mu.Lock()
	r.last = &d
	r.mu.Unlock()

	drops := engine.NewDrops(nil)
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(r.Metrics().CountDrops(drops))
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	jobs, findings := 0, 0
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if v := l.GetValue(); !utf8.ValidString(v) || len(v) > safetext.LabelMaxBytes {
					t.Errorf("%s{%s} = %d bytes, valid %v", mf.GetName(), l.GetName(), len(v), utf8.ValidString(v))
				}
				if l.GetName() == "k8s_pod" && l.GetValue() != strings.Repeat("a", 250)+safetext.Marker {
					t.Errorf("pod exported as %q", l.GetValue())
				}
			}
		}
		switch mf.GetName() {
		case "gpudiag_gpu_job_info":
			jobs = len(mf.GetMetric())
		case "gpudiag_finding":
			for _, m := range mf.GetMetric() {
				if strings.HasPrefix(labelNamed(m, "device"), "/m/m") {
					findings++
				}
			}
		}
	}
	if jobs != 1 {
		t.Errorf("%d job series; want the one, its values made safe", jobs)
	}
	if findings != 1 {
		t.Errorf("%d series for two devices whose names differ past the cut; want one", findings)
	}
	if n := drops.Total("diagnose", engine.DropInvalid) + drops.Total("diagnose", engine.DropPanic); n != 0 {
		t.Errorf("%d series dropped; values made safe drop nothing", n)
	}
}

func labelNamed(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}
