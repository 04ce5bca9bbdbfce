package diagnose

import (
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpudiag/gpudiag/analyzers"
	"github.com/gpudiag/gpudiag/engine"
)

// Where the GPU-hours go (issue 39): each GPU's time, in seconds, by the
// verdict it held, and by the findings that cost it time while it worked.
// The counters only ever grow, so increase() over any range in Prometheus
// is an exact account of that range, whatever the scrape interval; the jobs
// come from joining gpudiag_gpu_job_info in the rules, never from a label
// here (the cardinality stays classes x sub-kinds x GPUs).
var (
	bottleneckSecondsDesc = prometheus.NewDesc(engine.Namespace+"_gpu_bottleneck_seconds_total",
		"Seconds the GPU spent in each verdict (class and sub-kind, idle and unknown included): each analysis gives the time since the previous one to the verdict it reaches; time with no analysis for longer than the span is unknown/"+NotAnalyzedSubKind+".",
		[]string{"gpu", "class", "sub_kind"}, nil)
	findingSecondsDesc = prometheus.NewDesc(engine.Namespace+"_finding_gpu_seconds_total",
		"Seconds a GPU in work (compute-, communication-, I/O- or host-bound) spent while a finding that costs it time was active (nccl_fallback, cpu_quota_throttled, ib_port_degraded, gpudirect_rdma_missing, rdma_congestion, nfs_slow_reads; docs/diagnosis.md).",
		[]string{"check", "kind", "gpu"}, nil)
)

// NotAnalyzedSubKind is the sub-kind of unknown given to the part of an
// interval between two analyses longer than the span: no verdict covers it.
const NotAnalyzedSubKind = "not_analyzed"

// costlyFindings are the checks whose cause costs a working GPU time, and,
// for a finding that names no GPU (a port, a mount), the verdict through
// which the cause acts: the GPUs with that verdict pay for it. The other
// checks are configuration or health facts whose cost is not a share of
// the GPU's time (a governor, an ECC count, a library mismatch) or is
// already the verdict itself (a stalled collective).
var costlyFindings = map[string]func(analyzers.Verdict) bool{
	// NCCL took a slower transport than the node carries: its GPUs'
	// collectives run at the slower path's rate. It names its GPUs.
	"nccl_fallback": worksThroughAny,
	// The container's CPU quota holds the GPU's processes (host/cpu_quota).
	"cpu_quota_throttled": worksThroughAny,
	// A port trained down, congested, or RDMA staged through host memory:
	// the GPUs communicating over the fabric wait for it.
	"ib_port_degraded":       communicatesOverFabric,
	"rdma_congestion":        communicatesOverFabric,
	"gpudirect_rdma_missing": communicatesOverFabric,
	// Slow NFS reads: the GPUs waiting on storage wait for them.
	"nfs_slow_reads": func(v analyzers.Verdict) bool { return v.Class == analyzers.ClassIO },
}

// worksThroughAny is for findings that name their GPUs: any GPU in work
// pays.
func worksThroughAny(analyzers.Verdict) bool { return true }

func communicatesOverFabric(v analyzers.Verdict) bool {
	return v.Class == analyzers.ClassCommunication && (v.SubKind == "infiniband" || v.SubKind == "roce")
}

// inWork is a GPU that runs something: an idle or unknown GPU loses no
// time to a finding.
func inWork(c analyzers.Class) bool {
	switch c {
	case analyzers.ClassCompute, analyzers.ClassCommunication, analyzers.ClassIO, analyzers.ClassHost:
		return true
	}
	return false
}

type bottleneckKey struct {
	gpu            int
	class, subKind string
}

type findingKey struct {
	check, kind string
	gpu         int
}

// Accounting accumulates the seconds. The runner keeps one and adds each
// analysis to it (Runner.AccountingMetrics exports it). It has a lock of
// its own: Analyze adds under the runner's lock, a scrape reads without
// taking it.
type Accounting struct {
	// maxInterval is the span: the longest interval one verdict can
	// describe, since it is a mean over the span ending at its analysis.
	maxInterval time.Duration

	mu         sync.Mutex
	last       time.Time // the previous analysis; zero before the first
	bottleneck map[bottleneckKey]float64
	finding    map[findingKey]float64
}

// NewAccounting returns an empty account whose verdicts each cover at most
// span.
func NewAccounting(span time.Duration) *Accounting {
	return &Accounting{maxInterval: span, bottleneck: map[bottleneckKey]float64{}, finding: map[findingKey]float64{}}
}

// Add attributes the interval since the previous analysis to each GPU's
// verdict in d, analyzed at now.
//
// Why the new verdict and not the previous one: the verdict reached at now
// is a mean over the span ending at now, which holds the readings of the
// interval just ended; the previous verdict was reached before any of them.
// Attributed so, a job that runs 10 minutes accounts 10 minutes, shifted by
// the verdict's lag (the span's half and the hysteresis) at each change of
// phase, which gives as much to one side as it takes from the other.
//
// An interval longer than the span (the daemon stalled, the GPU collector
// failed before the other collectors' samples took over the analyses, a
// gap in a trace) is covered by the new verdict for one span only: the rest
// is unknown/not_analyzed, never silently the last or the new verdict.
// The first analysis accounts nothing (no interval ends at it), nor does
// one at or before the previous (a clock stepped back): it starts the next
// interval. Time is the analysis time, so a replay accounts trace time.
func (a *Accounting) Add(now time.Time, d *analyzers.Diagnosis) {
	a.mu.Lock()
	defer a.mu.Unlock()
	prev := a.last
	a.last = now
	if prev.IsZero() || !now.After(prev) {
		return
	}
	interval := now.Sub(prev)
	covered, gap := interval, time.Duration(0)
	if a.maxInterval > 0 && interval > a.maxInterval {
		covered, gap = a.maxInterval, interval-a.maxInterval
	}
	verdicts := map[int]analyzers.Verdict{}
	for _, g := range d.GPUs {
		verdicts[g.GPU] = g.Verdict
		a.bottleneck[bottleneckKey{g.GPU, string(g.Class), g.SubKind}] += covered.Seconds()
		if gap > 0 {
			a.bottleneck[bottleneckKey{g.GPU, string(analyzers.ClassUnknown), NotAnalyzedSubKind}] += gap.Seconds()
		}
	}
	// A GPU counts once per check and kind: two ports trained down cost
	// its time once, not twice.
	counted := map[findingKey]bool{}
	for _, f := range d.Findings {
		pays := costlyFindings[f.Check]
		if pays == nil {
			continue
		}
		gpus := f.GPUs
		if len(gpus) == 0 && f.GPU != nil {
			gpus = []int{*f.GPU}
		}
		named := len(gpus) > 0
		if !named {
			for _, g := range d.GPUs {
				gpus = append(gpus, g.GPU)
			}
		}
		for _, gpu := range gpus {
			k := findingKey{f.Check, f.Kind, gpu}
			v, ok := verdicts[gpu]
			if !ok || counted[k] || !inWork(v.Class) || (!named && !pays(v)) {
				continue
			}
			counted[k] = true
			a.finding[k] += covered.Seconds()
		}
	}
}

// AccountingMetrics returns the collector of the seconds each GPU spent in
// each verdict and under each costly finding.
func (r *Runner) AccountingMetrics() *GuardedCollector { return r.acct.Metrics() }

// Metrics returns the collector of the account's counters.
func (a *Accounting) Metrics() *GuardedCollector {
	return &GuardedCollector{name: "accounting", collect: a.collectMetrics}
}

// collectMetrics emits every counter met so far.
func (a *Accounting) collectMetrics(emit engine.ConstEmit) {
	a.mu.Lock()
	bottleneck := make([]bottleneckKey, 0, len(a.bottleneck))
	for k := range a.bottleneck {
		bottleneck = append(bottleneck, k)
	}
	finding := make([]findingKey, 0, len(a.finding))
	for k := range a.finding {
		finding = append(finding, k)
	}
	values := make([]float64, 0, len(bottleneck)+len(finding))
	slices.SortFunc(bottleneck, compareBottleneckKeys)
	slices.SortFunc(finding, compareFindingKeys)
	for _, k := range bottleneck {
		values = append(values, a.bottleneck[k])
	}
	for _, k := range finding {
		values = append(values, a.finding[k])
	}
	a.mu.Unlock()
	for i, k := range bottleneck {
		emit(bottleneckSecondsDesc, prometheus.CounterValue, values[i], strconv.Itoa(k.gpu), k.class, k.subKind)
	}
	for i, k := range finding {
		emit(findingSecondsDesc, prometheus.CounterValue, values[len(bottleneck)+i], k.check, k.kind, strconv.Itoa(k.gpu))
	}
}

func compareBottleneckKeys(x, y bottleneckKey) int {
	if x.gpu != y.gpu {
		return x.gpu - y.gpu
	}
	if x.class != y.class {
		return strings.Compare(x.class, y.class)
	}
	return strings.Compare(x.subKind, y.subKind)
}

func compareFindingKeys(x, y findingKey) int {
	if x.check != y.check {
		return strings.Compare(x.check, y.check)
	}
	if x.kind != y.kind {
		return strings.Compare(x.kind, y.kind)
	}
	return x.gpu - y.gpu
}
