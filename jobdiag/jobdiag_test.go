package jobdiag

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	v1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"
)

// fakeAPI answers instant queries from a table of query prefixes; the
// real path runs against a real Prometheus in e2e/jobs_test.go.
type fakeAPI struct {
	v1.API
	answers map[string]model.Value
	err     error
	asked   []string
}

func (f *fakeAPI) Query(_ context.Context, q string, _ time.Time, _ ...v1.Option) (model.Value, v1.Warnings, error) {
	f.asked = append(f.asked, q)
	if f.err != nil {
		return nil, nil, f.err
	}
	for prefix, v := range f.answers {
		if strings.HasPrefix(q, prefix) {
			return v, nil, nil
		}
	}
	return model.Vector{}, nil, nil
}

func sampleOf(v float64, labels ...string) *model.Sample {
	m := model.Metric{}
	for i := 0; i+1 < len(labels); i += 2 {
		m[model.LabelName(labels[i])] = model.LabelValue(labels[i+1])
	}
	return &model.Sample{Metric: m, Value: model.SampleValue(v)}
}

func TestJobNotFoundOrEnded(t *testing.T) {
	ctx := t.Context()
	now := time.Unix(1_800_000_000, 0)
	never := &fakeAPI{}
	_, err := Query(ctx, never, Selector{JobID: "4127"}, now, 5*time.Minute)
	if !errors.Is(err, ErrNoJob) || !strings.Contains(err.Error(), "no gpudiag_gpu_job_info for job 4127") {
		t.Errorf("never seen: %v", err)
	}
	ended := &fakeAPI{answers: map[string]model.Value{
		"max by (job_id, job_source) (last_over_time(": model.Vector{sampleOf(1_799_990_000, "job_id", "4127", "job_source", "slurm")},
	}}
	_, err = Query(ctx, ended, Selector{JobID: "4127"}, now, 5*time.Minute)
	if !errors.Is(err, ErrNoJob) || !strings.Contains(err.Error(), "the job ended") || !strings.Contains(err.Error(), "2027-01-15T05:13:20Z") {
		t.Errorf("ended: %v", err)
	}
	down := &fakeAPI{err: errors.New("connection refused")}
	if _, err := Query(ctx, down, Selector{JobID: "4127"}, now, 5*time.Minute); err == nil || !strings.Contains(err.Error(), "connection refused") {
		t.Errorf("unreachable: %v", err)
	}
	if _, err := Query(ctx, never, Selector{Pod: "no-slash"}, now, 5*time.Minute); err == nil || !strings.Contains(err.Error(), "namespace/name") {
		t.Errorf("bad pod: %v", err)
	}
	if _, err := Query(ctx, never, Selector{}, now, 5*time.Minute); err == nil {
		t.Error("no selector: no error")
	}
	two := &fakeAPI{answers: map[string]model.Value{
		`gpudiag_gpu_job_info{job_id="7"}`: model.Vector{
			sampleOf(1, "instance", "a", "job", "g", "gpu", "0", "job_id", "7", "job_source", "slurm"),
			sampleOf(1, "instance", "b", "job", "g", "gpu", "0", "job_id", "7", "job_source", "torchrun")},
	}}
	if _, err := Query(ctx, two, Selector{JobID: "7"}, now, 5*time.Minute); err == nil || !strings.Contains(err.Error(), "add --job-source") {
		t.Errorf("ambiguous: %v", err)
	}
	// A matrix where a vector is due is a clear error, not a panic.
	odd := &fakeAPI{answers: map[string]model.Value{`gpudiag_gpu_job_info{job_id="7"}`: model.Matrix{}}}
	if _, err := Query(ctx, odd, Selector{JobID: "7"}, now, 5*time.Minute); err == nil || !strings.Contains(err.Error(), "not a vector") {
		t.Errorf("matrix: %v", err)
	}
}

// An 8-node job over InfiniBand in which node n3's port trained down and
// runs at its line rate while the others wait at half of theirs.
func TestJudgeNamesTheDegradedNode(t *testing.T) {
	r := &Report{Classes: map[string]int{}}
	var ports []PortUse
	for i := 0; i < 8; i++ {
		inst := "n" + string(rune('0'+i)) + ":10910"
		p := PortUse{Instance: inst, Port: "mlx5_0/1", Use: 0.48, RateBytesPerSecond: 5e10}
		if i == 3 {
			p.Use, p.RateBytesPerSecond, p.Degraded = 0.97, 2.5e10, true
		}
		ports = append(ports, p)
		pc := p
		r.Nodes = append(r.Nodes, Node{Instance: inst, SMActive: 0.03, BusiestPort: &pc, Diagnose: "http://" + inst + "/diagnose", GPUs: []GPU{
			{GPU: "0", Class: "communication", SubKind: "infiniband", SMActive: 0.03},
			{GPU: "1", Class: "communication", SubKind: "infiniband", SMActive: 0.03}}})
	}
	judge(r, ports)
	if r.Class != "communication" || r.SubKind != "infiniband" || r.GPUs != 16 {
		t.Fatalf("class %s/%s on %d GPUs", r.Class, r.SubKind, r.GPUs)
	}
	if len(r.Outliers) != 2 || r.Outliers[0].Instance != "n3:10910" || r.Outliers[0].Cause != "port_degraded" ||
		r.Outliers[1].Cause != "fabric_saturated" || r.Outliers[1].Port != "mlx5_0/1" {
		t.Fatalf("outliers %+v", r.Outliers)
	}
	if r.WorstPort == nil || r.WorstPort.Instance != "n3:10910" || r.SlowestGPU != nil {
		t.Errorf("worst port %+v, slowest GPU %+v", r.WorstPort, r.SlowestGPU)
	}
	if math.Abs(float64(r.Medians.NodePortUse)-0.48) > 1e-9 {
		t.Errorf("median port use %v", r.Medians.NodePortUse)
	}
	var text strings.Builder
	if err := r.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"Held back by: n3:10910 (port_degraded)", "trained down to 200 Gb/s", "n3:10910 *", "http://n0:10910/diagnose"} {
		if !strings.Contains(text.String(), want) {
			t.Errorf("text lacks %q:\n%s", want, text.String())
		}
	}
}

// A healthy job is blamed on nobody; a compute job's slow node is named by
// SM activity.
func TestJudgeHealthyAndCompute(t *testing.T) {
	healthy := &Report{Classes: map[string]int{}}
	var ports []PortUse
	for i := 0; i < 4; i++ {
		p := PortUse{Instance: "h" + string(rune('0'+i)), Port: "mlx5_0/1", Use: 0.5 + 0.01*float64(i), RateBytesPerSecond: 5e10}
		ports = append(ports, p)
		pc := p
		healthy.Nodes = append(healthy.Nodes, Node{Instance: p.Instance, SMActive: 0.9, BusiestPort: &pc,
			GPUs: []GPU{{GPU: "0", Class: "compute", SubKind: "tensor", SMActive: 0.9}}})
	}
	judge(healthy, ports)
	if len(healthy.Outliers) != 0 || healthy.SlowestGPU != nil || healthy.Class != "compute" {
		t.Errorf("healthy job: %+v %+v %s", healthy.Outliers, healthy.SlowestGPU, healthy.Class)
	}
	gemm := &Report{Classes: map[string]int{}}
	for i, sm := range []float64{0.9, 0.92, 0.2} {
		gemm.Nodes = append(gemm.Nodes, Node{Instance: "g" + string(rune('0'+i)), SMActive: Value(sm),
			GPUs: []GPU{{GPU: "0", Class: "compute", SubKind: "tensor", SMActive: Value(sm)}}})
	}
	judge(gemm, nil)
	if len(gemm.Outliers) != 1 || gemm.Outliers[0].Instance != "g2" || gemm.Outliers[0].Cause != "sm_activity" {
		t.Errorf("compute job outliers %+v", gemm.Outliers)
	}
	if gemm.SlowestGPU == nil || gemm.SlowestGPU.Instance != "g2" {
		t.Errorf("slowest GPU %+v", gemm.SlowestGPU)
	}
}

func TestValueJSON(t *testing.T) {
	for v, want := range map[float64]string{math.NaN(): "null", 0.5: "0.5", math.Inf(1): "null"} {
		b, _ := Value(v).MarshalJSON()
		if string(b) != want {
			t.Errorf("%v: %s", v, b)
		}
	}
}

// An unknown job's error names the flag at fault and lists, escaped and
// bounded, the jobs Prometheus knows; a pod is not told to check a job ID.
func TestUnknownJobNamesTheFlagAndKnownJobs(t *testing.T) {
	ctx := t.Context()
	now := time.Unix(1_800_000_000, 0)
	var known model.Vector
	for i := range 30 {
		known = append(known, sampleOf(1, "job_id", fmt.Sprint(1000+i), "job_source", "slurm"))
	}
	known = append(known, sampleOf(1, "job_id", "evil\x1b[2J", "job_source", "kubernetes"))
	api := &fakeAPI{answers: map[string]model.Value{"topk(": known[len(known)-21:]}}
	_, err := Query(ctx, api, Selector{JobID: "4127"}, now, 5*time.Minute)
	if !errors.Is(err, ErrNoJob) || !strings.HasPrefix(err.Error(), "--job-id 4127: ") ||
		!strings.Contains(err.Error(), "slurm 1010") || !strings.Contains(err.Error(), "and more") ||
		strings.Contains(err.Error(), "\x1b") || !strings.Contains(err.Error(), "evil") {
		t.Errorf("unknown job: %v", err)
	}
	if n := strings.Count(err.Error(), "slurm 10"); n != 19 {
		t.Errorf("unknown job lists %d slurm jobs, want 19 beside the kubernetes one: %v", n, err)
	}
	_, err = Query(ctx, api, Selector{Pod: "team/trainer-0"}, now, 5*time.Minute)
	if !errors.Is(err, ErrNoJob) || !strings.HasPrefix(err.Error(), "--pod team/trainer-0: ") ||
		strings.Contains(err.Error(), "job ID") || !strings.Contains(err.Error(), "namespace and name") {
		t.Errorf("unknown pod: %v", err)
	}
	_, err = Query(ctx, &fakeAPI{}, Selector{JobID: "4127", JobSource: "slurm"}, now, 5*time.Minute)
	if !strings.HasPrefix(err.Error(), "--job-id 4127 --job-source slurm: ") || !strings.Contains(err.Error(), "knows no job") {
		t.Errorf("nothing known: %v", err)
	}
}
