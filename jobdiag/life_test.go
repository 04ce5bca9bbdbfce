package jobdiag

import (
	"encoding/json"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/model"
)

// A job that started 10 minutes ago spent 62% of its GPU time
// communicating over NVLink under an NCCL fallback, 30% computing and 8%
// host-bound: one line says so, the JSON holds the seconds, and each
// estimate states its basis.
func TestLifeSplit(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	const total = 2 * 600.0 // 2 GPUs for 10 minutes
	api := &fakeAPI{answers: map[string]model.Value{
		`gpudiag_gpu_job_info{job_id="llm"}`: model.Vector{
			sampleOf(1, "instance", "a", "job", "g", "gpu", "0", "job_id", "llm", "job_source", "slurm"),
			sampleOf(1, "instance", "a", "job", "g", "gpu", "1", "job_id", "llm", "job_source", "slurm")},
		"min(min_over_time(timestamp(": model.Vector{sampleOf(float64(now.Add(-10 * time.Minute).Unix()))},
		"sum by (class, sub_kind) (increase(gpudiag_gpu_bottleneck_seconds_total": model.Vector{
			sampleOf(0.61*total, "class", "communication", "sub_kind", "nvlink"),
			// NCCL's start on another path: too little to hide the link.
			sampleOf(0.01*total, "class", "communication", "sub_kind", "pcie_peer_shm"),
			sampleOf(0.20*total, "class", "compute", "sub_kind", "tensor"),
			sampleOf(0.10*total, "class", "compute", "sub_kind", "other_sm"),
			sampleOf(0.08*total, "class", "host", "sub_kind", "cpu"),
			sampleOf(0, "class", "idle", "sub_kind", "no_process")},
		"sum by (check, kind) (increase(gpudiag_finding_gpu_seconds_total": model.Vector{
			sampleOf(0.62*total, "check", "nccl_fallback", "kind", "p2p_disabled")},
		"sum(increase(gpudiag_gpu_sm_active_seconds_total":         model.Vector{sampleOf(0.5 * total)},
		"avg(rate(gpudiag_gpu_pcie_transmit_bytes_total":           model.Vector{sampleOf(45e9)},
		"avg(gpudiag_gpu_nvlink_capacity_bytes_per_second > 0 and": model.Vector{sampleOf(450e9)},
	}}
	r, err := Query(t.Context(), api, Selector{JobID: "llm"}, now, 5*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	l := r.Life
	if l == nil {
		t.Fatalf("no life split; asked %v", api.asked)
	}
	if !l.Since.Equal(now.Add(-10*time.Minute)) || math.Abs(l.GPUSeconds-total) > 1e-9 || len(l.Split) != 5 {
		t.Fatalf("life %+v", l)
	}
	if got, want := l.SplitLine(), "62% communication over NVLink, 30% compute, 8% host"; got != want {
		t.Errorf("split line %q, want %q", got, want)
	}
	// The window reaches a minute before the first GPU was seen.
	for _, q := range api.asked {
		if strings.HasPrefix(q, "sum by (class, sub_kind)") && !strings.Contains(q, "[11m]") {
			t.Errorf("split over the wrong range: %s", q)
		}
	}
	if len(l.Estimates) != 2 {
		t.Fatalf("estimates %+v", l.Estimates)
	}
	host, fallback := l.Estimates[0], l.Estimates[1]
	// Host: 96 s host-bound x (1 - 0.5 SM activity) = 48 s.
	if host.Cause != "host" || math.Abs(host.GPUSeconds-48) > 1e-6 || !strings.Contains(host.Basis, "idle SM share, 1 - 0.50") {
		t.Errorf("host estimate %+v", host)
	}
	// Fallback: 744 s at 45 GB/s where NVLink carries 450: 90% of it back.
	if fallback.Cause != "nccl_fallback" || math.Abs(fallback.GPUSeconds-0.9*744) > 1e-6 || !strings.Contains(fallback.Basis, "45.0 GB/s over PCIe") || !strings.Contains(fallback.Basis, "450 GB/s") {
		t.Errorf("fallback estimate %+v", fallback)
	}
	var text strings.Builder
	if err := r.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"Over its life (since 2027-01-15T07:50:00Z, 0.33 GPU-hours): 62% communication over NVLink, 30% compute, 8% host",
		"under nccl_fallback (p2p_disabled): 0.21 GPU-hours", "a fix of host could give back about 0.01 GPU-hours (estimate: "} {
		if !strings.Contains(text.String(), want) {
			t.Errorf("text lacks %q:\n%s", want, text.String())
		}
	}
	var js strings.Builder
	if err := r.WriteJSON(&js); err != nil {
		t.Fatal(err)
	}
	var back struct {
		Life Life `json:"life"`
	}
	if err := json.Unmarshal([]byte(js.String()), &back); err != nil || len(back.Life.Split) != 5 || back.Life.Split[0].Share != 0.61 {
		t.Errorf("JSON life %+v (%v)", back.Life, err)
	}
}

// Daemons that do not account (no counters) give no split and no
// estimate: nothing is made up.
func TestLifeAbsentWithoutCounters(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	api := &fakeAPI{answers: map[string]model.Value{
		`gpudiag_gpu_job_info{job_id="old"}`: model.Vector{sampleOf(1, "instance", "a", "job", "g", "gpu", "0", "job_id", "old", "job_source", "slurm")},
		"min(min_over_time(timestamp(":       model.Vector{sampleOf(float64(now.Add(-time.Hour).Unix()))},
	}}
	r, err := Query(t.Context(), api, Selector{JobID: "old"}, now, 5*time.Minute)
	if err != nil || r.Life != nil {
		t.Errorf("life %+v, err %v", r.Life, err)
	}
}
