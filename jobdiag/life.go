package jobdiag

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/common/model"
)

// Life is where the job's GPU-hours went over its life (issue 39): the
// increase, from the job's first GPU to now, of the seconds each of its GPUs
// spent in each verdict (gpudiag_gpu_bottleneck_seconds_total) and under
// each finding that costs time (gpudiag_finding_gpu_seconds_total), the
// counters joined to the job on (instance, job, gpu) as the recording rules
// join them. increase() counts across a daemon's restart without counting
// twice.
type Life struct {
	// Since is when Prometheus first saw a GPU of the job, at minute
	// resolution, within the last lifeLookback.
	Since time.Time `json:"since"`
	// GPUSeconds is every second accounted, the sum of Split.
	GPUSeconds float64 `json:"gpu_seconds"`
	// Split is the job's GPU-seconds by class and sub-kind, largest first.
	Split []Share `json:"split"`
	// Findings are the GPU-seconds the job's working GPUs spent under each
	// costly finding, largest first.
	Findings []FindingCost `json:"findings,omitempty"`
	// Estimates say what fixing a cause could give back, each with its
	// basis; none where the evidence does not support one.
	Estimates []Estimate `json:"estimates,omitempty"`
}

// Share is the job's time in one verdict.
type Share struct {
	Class      string  `json:"class"`
	SubKind    string  `json:"sub_kind,omitempty"`
	GPUSeconds float64 `json:"gpu_seconds"`
	Share      float64 `json:"share"`
}

// FindingCost is the job's GPU time under one costly finding.
type FindingCost struct {
	Check      string  `json:"check"`
	Kind       string  `json:"kind,omitempty"`
	GPUSeconds float64 `json:"gpu_seconds"`
}

// Estimate is GPU time a fix could give back: an estimate, never a
// measurement, so Basis says what it rests on.
type Estimate struct {
	Cause      string  `json:"cause"` // host, nccl_fallback
	GPUSeconds float64 `json:"gpu_seconds"`
	Basis      string  `json:"basis"`
}

// lifeLookback is how far back the job's first GPU is looked for, as far
// as an ended job is (a minute-step subquery over it: 360 steps a GPU); a
// job older than this is accounted over this much of its life.
const lifeLookback = endedLookback

// life queries the job's split. It returns nil without error when the
// daemons export no accounting (older than issue 39).
func (q querier) life(ctx context.Context, jobSel string) (*Life, error) {
	first, err := q.vector(ctx, fmt.Sprintf(`min(min_over_time(timestamp(%s)[%s:1m]))`, jobSel, model.Duration(lifeLookback)))
	if err != nil {
		return nil, err
	}
	if len(first) == 0 {
		return nil, nil
	}
	since := time.Unix(int64(first[0].Value), 0).UTC()
	// One minute more than measured: the subquery saw the first GPU at the
	// first minute step after it appeared. Seconds before the job held
	// the GPUs are not its own, but a GPU held by another job then is
	// in no job's info here, so nothing is taken from another job.
	window := model.Duration(q.t.Sub(since) + time.Minute).String()
	jobGPUs := fmt.Sprintf(`max by (instance, job, gpu) (max_over_time(%s[%s]))`, jobSel, window)
	split, err := q.vector(ctx, fmt.Sprintf(`sum by (class, sub_kind) (increase(gpudiag_gpu_bottleneck_seconds_total[%s]) * on (instance, job, gpu) group_left () %s)`, window, jobGPUs))
	if err != nil {
		return nil, err
	}
	if len(split) == 0 {
		return nil, nil
	}
	l := &Life{Since: since}
	for _, s := range split {
		v := float64(s.Value)
		if v <= 0 || math.IsNaN(v) {
			continue
		}
		l.Split = append(l.Split, Share{Class: string(s.Metric["class"]), SubKind: string(s.Metric["sub_kind"]), GPUSeconds: v})
		l.GPUSeconds += v
	}
	for i := range l.Split {
		l.Split[i].Share = l.Split[i].GPUSeconds / l.GPUSeconds
	}
	slices.SortFunc(l.Split, func(a, b Share) int {
		if a.GPUSeconds != b.GPUSeconds {
			return cmpDesc(a.GPUSeconds, b.GPUSeconds)
		}
		return strings.Compare(a.Class+"/"+a.SubKind, b.Class+"/"+b.SubKind)
	})
	findings, err := q.vector(ctx, fmt.Sprintf(`sum by (check, kind) (increase(gpudiag_finding_gpu_seconds_total[%s]) * on (instance, job, gpu) group_left () %s)`, window, jobGPUs))
	if err != nil {
		return nil, err
	}
	for _, s := range findings {
		if v := float64(s.Value); v > 0 {
			l.Findings = append(l.Findings, FindingCost{Check: string(s.Metric["check"]), Kind: string(s.Metric["kind"]), GPUSeconds: v})
		}
	}
	slices.SortFunc(l.Findings, func(a, b FindingCost) int { return cmpDesc(a.GPUSeconds, b.GPUSeconds) })
	if err := q.estimates(ctx, l, window, jobGPUs); err != nil {
		return nil, err
	}
	return l, nil
}

// estimates adds what a fix could give back where the evidence supports a
// number:
//
//   - host-bound time: the GPUs' idle SM share over it. The job's SM
//     activity over its life stands for its SM activity while host-bound,
//     which is no lower, so the estimate errs low.
//   - an NCCL fallback: the fallback's GPU time less the time the same
//     bytes would take at what the topology carries (the GPUs' NVLink
//     capacity against their measured PCIe rate). Only with NVLink there:
//     otherwise the faster path's rate is not known.
func (q querier) estimates(ctx context.Context, l *Life, window, jobGPUs string) error {
	var host float64
	for _, s := range l.Split {
		if s.Class == "host" {
			host += s.GPUSeconds
		}
	}
	if host > 0 {
		sm, err := q.vector(ctx, fmt.Sprintf(`sum(increase(gpudiag_gpu_sm_active_seconds_total[%s]) * on (instance, job, gpu) group_left () %s)`, window, jobGPUs))
		if err != nil {
			return err
		}
		if len(sm) == 1 && l.GPUSeconds > 0 {
			busy := math.Min(1, float64(sm[0].Value)/l.GPUSeconds)
			if gain := host * (1 - busy); gain > 0 {
				l.Estimates = append(l.Estimates, Estimate{Cause: "host", GPUSeconds: gain,
					Basis: fmt.Sprintf("%s host-bound x the GPUs' idle SM share, 1 - %.2f (their SM activity over the job's life, no lower while host-bound: the estimate errs low)", gpuHours(host), busy)})
			}
		}
	}
	var fallback float64
	for _, f := range l.Findings {
		if f.Check == "nccl_fallback" {
			fallback += f.GPUSeconds
		}
	}
	if fallback > 0 {
		onFallback := fmt.Sprintf(`on (instance, job, gpu) (increase(gpudiag_finding_gpu_seconds_total{check="nccl_fallback"}[%s]) > 0) and on (instance, job, gpu) %s`, window, jobGPUs)
		rate, err := q.vector(ctx, fmt.Sprintf(`avg(rate(gpudiag_gpu_pcie_transmit_bytes_total[%s]) and %s)`, window, onFallback))
		if err != nil {
			return err
		}
		capacity, err := q.vector(ctx, fmt.Sprintf(`avg(gpudiag_gpu_nvlink_capacity_bytes_per_second > 0 and %s)`, onFallback))
		if err != nil {
			return err
		}
		if len(rate) == 1 && len(capacity) == 1 && rate[0].Value > 0 && capacity[0].Value > rate[0].Value {
			r, c := float64(rate[0].Value), float64(capacity[0].Value)
			l.Estimates = append(l.Estimates, Estimate{Cause: "nccl_fallback", GPUSeconds: fallback * (1 - r/c),
				Basis: fmt.Sprintf("%s under the NCCL fallback moving %.1f GB/s over PCIe, where the GPUs' NVLink carries %.0f GB/s: the same bytes take %.0f%% of the time", gpuHours(fallback), r/1e9, c/1e9, r/c*100)})
		}
	}
	return nil
}

func cmpDesc(a, b float64) int {
	switch {
	case a > b:
		return -1
	case a < b:
		return 1
	}
	return 0
}

func gpuHours(seconds float64) string {
	return fmt.Sprintf("%.2f GPU-hours", seconds/3600)
}

// linkWords names a communication sub-kind as a person says it.
var linkWords = map[string]string{
	"nvlink":             "over NVLink",
	"infiniband":         "over InfiniBand",
	"roce":               "over RoCE",
	"pcie_peer_shm":      "over PCIe (shared memory)",
	"network":            "over TCP",
	"collective_stalled": "(stalled collective)",
	"peer_wait":          "(waiting for other nodes)",
	"waiting":            "(waiting for a rank)",
}

// SplitLine is the split in one line, by class, largest first, e.g. "62%
// communication over NVLink, 30% compute, 8% host": a communication class
// names its link when one sub-kind holds at least mainSubKindShare of it
// (the seconds of NCCL's start on another path do not hide the job's link).
func (l *Life) SplitLine() string {
	type classShare struct {
		class string
		share float64
		subs  map[string]float64
	}
	var classes []*classShare
	byClass := map[string]*classShare{}
	for _, s := range l.Split {
		c := byClass[s.Class]
		if c == nil {
			c = &classShare{class: s.Class, subs: map[string]float64{}}
			byClass[s.Class] = c
			classes = append(classes, c)
		}
		c.share += s.Share
		c.subs[s.SubKind] += s.Share
	}
	slices.SortStableFunc(classes, func(a, b *classShare) int { return cmpDesc(a.share, b.share) })
	var parts []string
	for _, c := range classes {
		name := field(c.class)
		if c.class == "communication" {
			for sub, share := range c.subs {
				if share < mainSubKindShare*c.share {
					continue
				}
				if w, ok := linkWords[sub]; ok {
					name += " " + w
				} else if sub != "" {
					name += " (" + field(sub) + ")"
				}
			}
		}
		parts = append(parts, fmt.Sprintf("%.0f%% %s", c.share*100, name))
	}
	return strings.Join(parts, ", ")
}

// mainSubKindShare is the share of its class a sub-kind needs for the
// split line to name it.
const mainSubKindShare = 0.9
