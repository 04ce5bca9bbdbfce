package diagnose

import (
	"strconv"
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpudiag/gpudiag/analyzers"
	"github.com/gpudiag/gpudiag/engine"
	"github.com/gpudiag/gpudiag/safetext"
)

var (
	nodeClassDesc = prometheus.NewDesc(engine.Namespace+"_node_bottleneck",
		"What bounds the node, one-hot over class (compute, communication, io, host, idle, unknown).", []string{"class"}, nil)
	nodeConfDesc = prometheus.NewDesc(engine.Namespace+"_node_bottleneck_confidence",
		"Confidence of the node verdict, 0–1.", nil, nil)
	nodeInfoDesc = prometheus.NewDesc(engine.Namespace+"_node_bottleneck_info",
		"The node verdict's class and sub-kind (e.g. communication/pcie_peer_shm).", []string{"class", "sub_kind"}, nil)
	nodeSinceDesc = prometheus.NewDesc(engine.Namespace+"_node_bottleneck_last_change_timestamp_seconds",
		"Unix time the node verdict last changed class.", nil, nil)
	nodeFreeDesc = prometheus.NewDesc(engine.Namespace+"_node_free_gpus",
		"GPUs no process holds, idle: the node's headline verdict is the costliest job's, and a GPU free is no vote for idle.", nil, nil)
	groupInfoDesc = prometheus.NewDesc(engine.Namespace+"_group_bottleneck_info",
		"Each job on the node (its GPUs grouped by job identity, NCCL communicator or launcher), by its lowest GPU (group) and all of them (gpus, comma-separated): its verdict's class and sub-kind; by says what ties the GPUs (job, nccl, process_tree, process).",
		[]string{"group", "gpus", "by", "class", "sub_kind"}, nil)
	groupCostDesc = prometheus.NewDesc(engine.Namespace+"_group_bottleneck_cost_gpus",
		"GPU time a job's bottleneck costs on this node, in GPUs: over its GPUs that are communication-, I/O- or host-bound, the sum of 1 - SM activity. The node's headline is the costliest job (a critical one first).",
		[]string{"group"}, nil)
	gpuClassDesc = prometheus.NewDesc(engine.Namespace+"_gpu_bottleneck",
		"What bounds the GPU, one-hot over class (compute, communication, io, host, idle, unknown).", []string{"gpu", "class"}, nil)
	gpuConfDesc = prometheus.NewDesc(engine.Namespace+"_gpu_bottleneck_confidence",
		"Confidence of the GPU verdict, 0–1.", []string{"gpu"}, nil)
	gpuInfoDesc = prometheus.NewDesc(engine.Namespace+"_gpu_bottleneck_info",
		"The GPU verdict's class and sub-kind.", []string{"gpu", "class", "sub_kind"}, nil)
	gpuSinceDesc = prometheus.NewDesc(engine.Namespace+"_gpu_bottleneck_last_change_timestamp_seconds",
		"Unix time the GPU verdict last changed class.", []string{"gpu"}, nil)
	stragglerDesc = prometheus.NewDesc(engine.Namespace+"_gpu_straggler",
		"Whether the GPU's SM activity is far below the median of its busy peers (1) or not (0).", []string{"gpu"}, nil)
	// The Kubernetes labels are k8s_*: namespace, pod and container are the
	// target labels the Prometheus Operator gives the daemon's own pod, and
	// an exported label of the same name would be renamed exported_*.
	jobDesc = prometheus.NewDesc(engine.Namespace+"_gpu_job_info",
		"Who runs on the GPU, for GPUs in use: job_id as the scheduler or launcher names it (the same on every node of the job), job_source slurm, kubernetes, torchrun or none; k8s_namespace, k8s_pod and k8s_container for Kubernetes. Join it on (instance, job, gpu).",
		[]string{"gpu", "job_id", "job_source", "k8s_namespace", "k8s_pod", "k8s_container"}, nil)
	findingDesc = prometheus.NewDesc(engine.Namespace+"_finding",
		"A configuration or health finding, 1 while active; gpu and device are empty when not about one, kind when the check has no finer kind.", []string{"check", "severity", "gpu", "device", "kind"}, nil)
)

// GuardedCollector is a registry collector of series made from what the
// analyses kept: no analysis happens at scrape time, and Describe sends
// nothing, as the series depend on the GPUs and verdicts met. client_golang
// calls Collect on a goroutine of its own, where a panic ends the daemon: it
// runs under the engine's Guard (a series client_golang refuses is dropped
// and counted, a panic recovered and counted).
type GuardedCollector struct {
	name    string // what the Guard counts drops under
	collect func(engine.ConstEmit)
	drops   *engine.Drops
}

// Metrics returns the collector of the newest diagnosis. It reads a pointer
// under a read lock and builds a few dozen series; every label value is
// safetext.Label: job and pod names come from a workload's environment or
// the kubelet, and a name cut inside a character made MustNewConstMetric
// panic (issue 34).
func (r *Runner) Metrics() *GuardedCollector {
	return &GuardedCollector{name: "diagnose", collect: r.collectMetrics}
}

// CountDrops makes the collector count what it drops into d (the engine's,
// which exports it) and returns it.
func (c *GuardedCollector) CountDrops(d *engine.Drops) *GuardedCollector {
	c.drops = d
	return c
}

// Describe sends nothing: the set of series depends on what was met.
func (c *GuardedCollector) Describe(chan<- *prometheus.Desc) {}

// Collect emits the series under the engine's Guard.
func (c *GuardedCollector) Collect(ch chan<- prometheus.Metric) {
	c.drops.Guard(c.name, ch, c.collect)
}

func (r *Runner) collectMetrics(emit engine.ConstEmit) {
	d := r.Latest()
	if d == nil {
		return
	}
	g := func(desc *prometheus.Desc, v float64, labels ...string) {
		for i, l := range labels {
			labels[i] = safetext.Label(l)
		}
		emit(desc, prometheus.GaugeValue, v, labels...)
	}
	for _, class := range analyzers.Classes {
		g(nodeClassDesc, oneHot(d.Node.Class == class), string(class))
	}
	g(nodeConfDesc, d.Node.Confidence)
	g(nodeInfoDesc, 1, string(d.Node.Class), d.Node.SubKind)
	if !d.Node.Since.IsZero() {
		g(nodeSinceDesc, float64(d.Node.Since.Unix()))
	}
	g(nodeFreeDesc, float64(d.FreeGPUs))
	for _, gr := range d.Groups {
		if len(gr.GPUs) == 0 {
			continue
		}
		ids := make([]string, len(gr.GPUs))
		for i, x := range gr.GPUs {
			ids[i] = strconv.Itoa(x)
		}
		g(groupInfoDesc, 1, ids[0], strings.Join(ids, ","), gr.By, string(gr.Class), gr.SubKind)
		g(groupCostDesc, gr.Cost, ids[0])
	}
	stragglers := map[int]bool{}
	for _, s := range d.Stragglers {
		stragglers[s.GPU] = true
	}
	for _, v := range d.GPUs {
		id := strconv.Itoa(v.GPU)
		for _, class := range analyzers.Classes {
			g(gpuClassDesc, oneHot(v.Class == class), id, string(class))
		}
		g(gpuConfDesc, v.Confidence, id)
		g(gpuInfoDesc, 1, id, string(v.Class), v.SubKind)
		if !v.Since.IsZero() {
			g(gpuSinceDesc, float64(v.Since.Unix()), id)
		}
		g(stragglerDesc, oneHot(stragglers[v.GPU]), id)
	}
	for _, j := range d.Jobs {
		g(jobDesc, 1, strconv.Itoa(j.GPU), j.JobID, j.Source, j.Namespace, j.Pod, j.Container)
	}
	seen := map[[5]string]bool{}
	for _, f := range d.Findings {
		gpu := ""
		if f.GPU != nil {
			gpu = strconv.Itoa(*f.GPU)
		}
		// Cut before the check for a duplicate: two devices whose
		// names differ only past the cut are one series.
		key := [5]string{f.Check, string(f.Severity), gpu, safetext.Label(f.Device), f.Kind}
		if seen[key] {
			continue
		}
		seen[key] = true
		g(findingDesc, 1, key[:]...)
	}
}

func oneHot(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
