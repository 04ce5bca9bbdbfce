// Package jobdiag diagnoses one training job across its nodes from
// Prometheus: the gpudiag daemons' series of every node the job runs on,
// joined on gpudiag_gpu_job_info. Prometheus is the distributed engine; this
// package only asks it questions (its HTTP API, client_golang's
// api/prometheus/v1) and reads the answers with the same rules the
// training-job recording rules follow (alerts/gpudiag.rules.yml), so it works
// whether or not those rules are loaded.
package jobdiag

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	v1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"
)

// The numbers of the cross-node rules; alerts/gpudiag.rules.yml (group
// gpudiag.training_job) holds the same, with their reasons.
const (
	stragglerRatio   = 0.6 // a node's SM activity below this share of the job's median
	smActiveCompute  = 0.5 // the median above which SM activity says the job computes
	portSaturated    = 0.9 // a port at this share of its line rate is the ceiling
	portAboveMedian  = 1.5 // … and this many times the job's median node
	degradedCarrying = 0.5 // a trained-down port carrying this share of its rate holds the job
	minNodesCompare  = 3   // nodes needed to compare against a median
	// endedLookback is how far back a job with no GPU now is looked for,
	// to tell "ended" from "never seen".
	endedLookback = 6 * time.Hour
)

// Selector names the job: its job_id (and job_source, when two sources
// share an ID), or a Kubernetes pod of it as namespace/name.
type Selector struct {
	JobID, JobSource string
	Pod              string
}

// Report is the job's diagnosis.
type Report struct {
	JobID     string    `json:"job_id"`
	JobSource string    `json:"job_source"`
	Time      time.Time `json:"time"`
	// Class and SubKind are what most of the job's GPUs are bound by;
	// Classes counts the GPUs per class/sub_kind.
	Class   string         `json:"class"`
	SubKind string         `json:"sub_kind,omitempty"`
	Classes map[string]int `json:"classes"`
	GPUs    int            `json:"gpus"`
	Nodes   []Node         `json:"nodes"`
	// Outliers are the nodes that hold the job back, worst first, with
	// why; SlowestGPU the GPU furthest below the job's median SM activity
	// when it is far below.
	Outliers   []Outlier `json:"outliers,omitempty"`
	SlowestGPU *GPUSlow  `json:"slowest_gpu,omitempty"`
	WorstPort  *PortUse  `json:"worst_port,omitempty"`
	Findings   []Finding `json:"findings,omitempty"`
	Medians    Medians   `json:"medians"`
	// Life is where the job's GPU-hours went since it started (life.go);
	// absent where the daemons do not account them.
	Life     *Life    `json:"life,omitempty"`
	Warnings []string `json:"warnings,omitempty"`
}

// Medians are the job's medians the outliers are judged against.
type Medians struct {
	NodeSMActive Value `json:"node_sm_active"`
	GPUSMActive  Value `json:"gpu_sm_active"`
	NodePortUse  Value `json:"node_port_use"`
}

// Value is a measurement that may be missing (NaN): JSON null then, as
// everywhere in gpudiag (sample.Measured).
type Value float64

// MarshalJSON writes null for a value not measured.
func (v Value) MarshalJSON() ([]byte, error) {
	if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
		return []byte("null"), nil
	}
	return strconv.AppendFloat(nil, float64(v), 'g', -1, 64), nil
}

// Node is one node's part of the job.
type Node struct {
	Instance string `json:"instance"`
	Job      string `json:"scrape_job"`
	GPUs     []GPU  `json:"gpus"`
	// SMActive is the mean over the job's GPUs of the node (rate over the
	// window).
	SMActive Value `json:"sm_active"`
	// BusiestPort is the node's RDMA port with the highest use of its line
	// rate; empty without RDMA ports.
	BusiestPort *PortUse `json:"busiest_port,omitempty"`
	// DegradedPorts trained down below their peers.
	DegradedPorts []string `json:"degraded_ports,omitempty"`
	// Diagnose is the node's /diagnose page (the scrape address; https if
	// the daemons serve TLS).
	Diagnose string `json:"diagnose"`
}

// GPU is one GPU of the job.
type GPU struct {
	GPU      string `json:"gpu"`
	Class    string `json:"class"`
	SubKind  string `json:"sub_kind,omitempty"`
	SMActive Value  `json:"sm_active"`
	Pod      string `json:"k8s_pod,omitempty"`
}

// PortUse is one RDMA port's busier direction over its line rate.
type PortUse struct {
	Instance           string  `json:"instance"`
	Port               string  `json:"port"` // mlx5_0/1
	Use                float64 `json:"use"`
	RateBytesPerSecond float64 `json:"rate_bytes_per_second"`
	Degraded           bool    `json:"degraded,omitempty"`
}

// Outlier is a node that holds the job back.
type Outlier struct {
	Instance string `json:"instance"`
	// Cause is port_degraded, fabric_saturated or sm_activity, as the
	// recording rules name it.
	Cause   string  `json:"cause"`
	Value   float64 `json:"value"`
	Median  Value   `json:"job_median"`
	Port    string  `json:"port,omitempty"`
	Summary string  `json:"summary"`
	Fix     string  `json:"fix"`
}

// GPUSlow is the job's slowest GPU against the job's median.
type GPUSlow struct {
	Instance string  `json:"instance"`
	GPU      string  `json:"gpu"`
	SMActive float64 `json:"sm_active"`
	Median   float64 `json:"job_median"`
}

// Finding is an active finding of a node of the job.
type Finding struct {
	Instance string `json:"instance"`
	Check    string `json:"check"`
	Severity string `json:"severity"`
	GPU      string `json:"gpu,omitempty"`
	Device   string `json:"device,omitempty"`
	Kind     string `json:"kind,omitempty"`
}

// ErrNoJob is returned (wrapped) when Prometheus has no GPU of the job:
// the message says whether it ended or was never seen.
var ErrNoJob = errors.New("no such job")

// ErrPrometheus is matched (errors.Is) by the errors Prometheus is at fault
// for: unreachable, slow, failing or answering nonsense. The others name
// the flag at fault themselves.
var ErrPrometheus = errors.New("prometheus failed")

type prometheusError struct{ error }

func (e prometheusError) Unwrap() error { return e.error }

func (prometheusError) Is(target error) bool { return target == ErrPrometheus }

// Query asks Prometheus about the job at t and diagnoses it, with rates
// over window (5 minutes as the recording rules take them; shorter right
// after a job starts, since rate() divides by the whole window).
func Query(ctx context.Context, api v1.API, sel Selector, t time.Time, window time.Duration) (*Report, error) {
	if window <= 0 {
		return nil, fmt.Errorf("rate window %s: must be positive", window)
	}
	w := model.Duration(window).String()
	q := querier{api: api, t: t}
	info, err := q.resolve(ctx, sel)
	if err != nil {
		return nil, err
	}
	jobSel := fmt.Sprintf(`gpudiag_gpu_job_info{job_id=%q,job_source=%q}`, info.jobID, info.jobSource)
	nodesOf := fmt.Sprintf(`max by (instance, job) (%s)`, jobSel)
	r := &Report{JobID: info.jobID, JobSource: info.jobSource, Time: t, Classes: map[string]int{}}

	type key struct{ instance, job string }
	nodes := map[key]*Node{}
	node := func(m model.Metric) *Node {
		k := key{string(m["instance"]), string(m["job"])}
		if nodes[k] == nil {
			nodes[k] = &Node{Instance: k.instance, Job: k.job, SMActive: Value(math.NaN()), Diagnose: "http://" + k.instance + "/diagnose"}
		}
		return nodes[k]
	}
	gpuOf := func(m model.Metric) *GPU {
		n := node(m)
		for i := range n.GPUs {
			if n.GPUs[i].GPU == string(m["gpu"]) {
				return &n.GPUs[i]
			}
		}
		n.GPUs = append(n.GPUs, GPU{GPU: string(m["gpu"]), SMActive: Value(math.NaN())})
		return &n.GPUs[len(n.GPUs)-1]
	}
	for _, s := range info.series {
		gpuOf(s.Metric).Pod = string(s.Metric["k8s_pod"])
	}
	// Each GPU's verdict is the class and sub-kind it held longest over
	// the window (a verdict series is 1 while it holds): one instant can
	// fall on a phase change.
	verdicts, err := q.vector(ctx, fmt.Sprintf(`sum_over_time(gpudiag_gpu_bottleneck_info[%s]) * on (instance, job, gpu) group_left () %s`, w, jobSel))
	if err != nil {
		return nil, err
	}
	held := map[[3]string]float64{}
	for _, s := range verdicts {
		g := gpuOf(s.Metric)
		id := [3]string{string(s.Metric["instance"]), string(s.Metric["job"]), string(s.Metric["gpu"])}
		if v := float64(s.Value); v > held[id] || (v == held[id] && string(s.Metric["class"]) < g.Class) {
			held[id] = v
			g.Class, g.SubKind = string(s.Metric["class"]), string(s.Metric["sub_kind"])
		}
	}
	sm, err := q.vector(ctx, fmt.Sprintf(`rate(gpudiag_gpu_sm_active_seconds_total[%s]) * on (instance, job, gpu) group_left () %s`, w, jobSel))
	if err != nil {
		return nil, err
	}
	for _, s := range sm {
		gpuOf(s.Metric).SMActive = Value(s.Value)
	}
	ports, err := q.vector(ctx, fmt.Sprintf(`(
		  rate(gpudiag_infiniband_port_data_transmitted_bytes_total[%[1]s]) > rate(gpudiag_infiniband_port_data_received_bytes_total[%[1]s])
		or
		  rate(gpudiag_infiniband_port_data_received_bytes_total[%[1]s])
		) / (gpudiag_infiniband_rate_bytes_per_second > 0) and on (instance, job) %[2]s`, w, nodesOf))
	if err != nil {
		return nil, err
	}
	rates, err := q.vector(ctx, fmt.Sprintf(`gpudiag_infiniband_rate_bytes_per_second and on (instance, job) %s`, nodesOf))
	if err != nil {
		return nil, err
	}
	degraded, err := q.vector(ctx, fmt.Sprintf(`gpudiag_infiniband_port_rate_degraded == 1 and on (instance, job) %s`, nodesOf))
	if err != nil {
		return nil, err
	}
	portName := func(m model.Metric) string { return string(m["device"]) + "/" + string(m["port"]) }
	rateOf := map[key]map[string]float64{}
	for _, s := range rates {
		k := key{string(s.Metric["instance"]), string(s.Metric["job"])}
		if rateOf[k] == nil {
			rateOf[k] = map[string]float64{}
		}
		rateOf[k][portName(s.Metric)] = float64(s.Value)
	}
	isDegraded := map[key]map[string]bool{}
	for _, s := range degraded {
		n := node(s.Metric)
		n.DegradedPorts = append(n.DegradedPorts, portName(s.Metric))
		k := key{n.Instance, n.Job}
		if isDegraded[k] == nil {
			isDegraded[k] = map[string]bool{}
		}
		isDegraded[k][portName(s.Metric)] = true
	}
	var allPorts []PortUse
	for _, s := range ports {
		n := node(s.Metric)
		k := key{n.Instance, n.Job}
		p := PortUse{Instance: n.Instance, Port: portName(s.Metric), Use: float64(s.Value),
			RateBytesPerSecond: rateOf[k][portName(s.Metric)], Degraded: isDegraded[k][portName(s.Metric)]}
		allPorts = append(allPorts, p)
		if n.BusiestPort == nil || p.Use > n.BusiestPort.Use {
			pc := p
			n.BusiestPort = &pc
		}
	}
	findings, err := q.vector(ctx, fmt.Sprintf(`gpudiag_finding{severity=~"critical|warning"} == 1 and on (instance, job) %s`, nodesOf))
	if err != nil {
		return nil, err
	}
	for _, s := range findings {
		m := s.Metric
		r.Findings = append(r.Findings, Finding{Instance: string(m["instance"]), Check: string(m["check"]), Severity: string(m["severity"]),
			GPU: string(m["gpu"]), Device: string(m["device"]), Kind: string(m["kind"])})
	}
	sort.Slice(r.Findings, func(i, j int) bool {
		a, b := r.Findings[i], r.Findings[j]
		return fmt.Sprint(a.Severity != "critical", a.Instance, a.Check, a.GPU, a.Device) < fmt.Sprint(b.Severity != "critical", b.Instance, b.Check, b.GPU, b.Device)
	})

	for _, n := range nodes {
		slices.SortFunc(n.GPUs, func(a, b GPU) int { return compareNumeric(a.GPU, b.GPU) })
		var sum float64
		var k int
		for _, g := range n.GPUs {
			if x := float64(g.SMActive); !math.IsNaN(x) {
				sum += x
				k++
			}
		}
		if k > 0 {
			n.SMActive = Value(sum / float64(k))
		}
		slices.Sort(n.DegradedPorts)
		r.Nodes = append(r.Nodes, *n)
	}
	slices.SortFunc(r.Nodes, func(a, b Node) int { return strings.Compare(a.Instance, b.Instance) })
	judge(r, allPorts)
	if r.Life, err = q.life(ctx, jobSel); err != nil {
		return nil, err
	}
	return r, nil
}

// judge fills the job's class, medians, outliers, slowest GPU and worst
// port from its nodes.
func judge(r *Report, ports []PortUse) {
	var nodeSM, gpuSM, nodePort []float64
	for _, n := range r.Nodes {
		for _, g := range n.GPUs {
			r.GPUs++
			if g.Class != "" {
				r.Classes[g.Class+"/"+g.SubKind]++
			}
			if x := float64(g.SMActive); !math.IsNaN(x) {
				gpuSM = append(gpuSM, x)
			}
		}
		if x := float64(n.SMActive); !math.IsNaN(x) {
			nodeSM = append(nodeSM, x)
		}
		if n.BusiestPort != nil {
			nodePort = append(nodePort, n.BusiestPort.Use)
		}
	}
	best, bestN := "", 0
	for k, c := range r.Classes {
		if c > bestN || (c == bestN && k < best) {
			best, bestN = k, c
		}
	}
	r.Class, r.SubKind, _ = strings.Cut(best, "/")
	medNodeSM, medGPUSM, medPort := median(nodeSM), median(gpuSM), median(nodePort)
	r.Medians = Medians{NodeSMActive: Value(medNodeSM), GPUSMActive: Value(medGPUSM), NodePortUse: Value(medPort)}
	for _, p := range ports {
		if r.WorstPort == nil || p.Use > r.WorstPort.Use {
			pc := p
			r.WorstPort = &pc
		}
	}

	nodes := len(r.Nodes)
	for _, n := range r.Nodes {
		if bp := n.BusiestPort; bp != nil && nodes >= 2 {
			for _, p := range ports {
				if p.Instance == n.Instance && p.Degraded && p.Use >= degradedCarrying {
					r.Outliers = append(r.Outliers, Outlier{Instance: n.Instance, Cause: "port_degraded", Value: p.Use, Median: Value(medPort), Port: p.Port,
						Summary: fmt.Sprintf("port %s trained down to %.0f Gb/s, below its peers, and runs at %.0f%% of it carrying the job: every collective through it runs at its pace",
							p.Port, p.RateBytesPerSecond*8/1e9, p.Use*100),
						Fix: "reseat or replace the port's cable or transceiver and check the switch port (mlxlink -d <dev> -m -c, ibstat); until then drain the node and restart the job without it"})
				}
			}
			if nodes >= minNodesCompare && bp.Use >= portSaturated && bp.Use > portAboveMedian*medPort {
				r.Outliers = append(r.Outliers, Outlier{Instance: n.Instance, Cause: "fabric_saturated", Value: bp.Use, Median: Value(medPort), Port: bp.Port,
					Summary: fmt.Sprintf("port %s runs at %.0f%% of its line rate while the job's median node uses %.0f%%: the other nodes wait for this one",
						bp.Port, bp.Use*100, medPort*100),
					Fix: "find why this node's path is slower (a trained-down or erroring port, fewer rails, congestion on its leaf): compare its ports with the others' on the node dashboard"})
			}
		}
		if sm := float64(n.SMActive); nodes >= minNodesCompare && medNodeSM >= smActiveCompute && sm < stragglerRatio*medNodeSM {
			r.Outliers = append(r.Outliers, Outlier{Instance: n.Instance, Cause: "sm_activity", Value: sm, Median: Value(medNodeSM),
				Summary: fmt.Sprintf("its GPUs' SM activity is %.2f against the job's median node at %.2f: it computes slower and the others wait for it",
					sm, medNodeSM),
				Fix: "open the node's /diagnose: its GPUs' own verdict (host- or I/O-bound, throttled clocks, a lost GPU) says why"})
		}
	}
	rank := map[string]int{"port_degraded": 0, "fabric_saturated": 1, "sm_activity": 2}
	slices.SortStableFunc(r.Outliers, func(a, b Outlier) int { return rank[a.Cause] - rank[b.Cause] })

	if len(gpuSM) >= minNodesCompare && medGPUSM >= smActiveCompute {
		for _, n := range r.Nodes {
			for _, g := range n.GPUs {
				if sm := float64(g.SMActive); sm < stragglerRatio*medGPUSM && (r.SlowestGPU == nil || sm < r.SlowestGPU.SMActive) {
					r.SlowestGPU = &GPUSlow{Instance: n.Instance, GPU: g.GPU, SMActive: sm, Median: medGPUSM}
				}
			}
		}
	}
}

// querier runs instant queries at one time.
type querier struct {
	api v1.API
	t   time.Time
}

type jobInfo struct {
	jobID, jobSource string
	series           model.Vector
}

// resolve finds the job's info series now, or says why there are none.
func (q querier) resolve(ctx context.Context, sel Selector) (jobInfo, error) {
	var match string
	switch {
	case sel.Pod != "":
		ns, name, ok := strings.Cut(sel.Pod, "/")
		if !ok || ns == "" || name == "" {
			return jobInfo{}, fmt.Errorf("--pod %q: want namespace/name", sel.Pod)
		}
		match = fmt.Sprintf(`k8s_namespace=%q,k8s_pod=%q`, ns, name)
	case sel.JobID != "":
		match = fmt.Sprintf(`job_id=%q`, sel.JobID)
		if sel.JobSource != "" {
			match += fmt.Sprintf(`,job_source=%q`, sel.JobSource)
		}
	default:
		return jobInfo{}, errors.New("name the job: --job-id, or --pod namespace/name")
	}
	v, err := q.vector(ctx, `gpudiag_gpu_job_info{`+match+`}`)
	if err != nil {
		return jobInfo{}, err
	}
	if len(v) == 0 {
		// The newest sample of the job's info series over the lookback, at
		// minute resolution (a subquery: the series are gone now).
		last, err := q.vector(ctx, fmt.Sprintf(`max by (job_id, job_source) (last_over_time(timestamp(gpudiag_gpu_job_info{%s})[%s:1m]))`, match, model.Duration(endedLookback)))
		if err != nil {
			return jobInfo{}, err
		}
		if len(last) > 0 {
			at := time.Unix(int64(last[0].Value), 0).UTC()
			return jobInfo{}, fmt.Errorf("%s: %w: %s has no GPU in Prometheus now; its last GPU was seen at %s: the job ended (or its nodes are no longer scraped)",
				flagOf(sel), ErrNoJob, describe(sel), at.Format(time.RFC3339))
		}
		check := "check the job ID (gpudiag names it as the scheduler does: the Slurm job ID, the Kubernetes workload, torchrun's run ID) and that its nodes run gpudiag"
		if sel.Pod != "" {
			check = "check the pod's namespace and name (kubectl get pod -n NAMESPACE NAME) and that its node runs gpudiag"
		}
		return jobInfo{}, fmt.Errorf("%s: %w: Prometheus has no gpudiag_gpu_job_info for %s in the last %s: %s%s",
			flagOf(sel), ErrNoJob, describe(sel), model.Duration(endedLookback), check, q.knownJobs(ctx))
	}
	ids := map[[2]string]bool{}
	for _, s := range v {
		ids[[2]string{string(s.Metric["job_id"]), string(s.Metric["job_source"])}] = true
	}
	if len(ids) > 1 {
		var names []string
		for id := range ids {
			names = append(names, id[1]+" "+id[0])
		}
		slices.Sort(names)
		return jobInfo{}, fmt.Errorf("%s matches several jobs (%s): add --job-source", describe(sel), strings.Join(names, ", "))
	}
	var id [2]string
	for k := range ids {
		id = k
	}
	if id[0] == "" {
		return jobInfo{}, fmt.Errorf("%s: %w: the GPUs of %s carry no job ID (job_source %q)", flagOf(sel), ErrNoJob, describe(sel), id[1])
	}
	if sel.Pod != "" {
		// The job is the pod's job: every pod of it, on every node.
		v, err = q.vector(ctx, fmt.Sprintf(`gpudiag_gpu_job_info{job_id=%q,job_source=%q}`, id[0], id[1]))
		if err != nil {
			return jobInfo{}, err
		}
	}
	return jobInfo{jobID: id[0], jobSource: id[1], series: v}, nil
}

// flagOf names the flags that chose the job, as typed, for an error to
// point at.
func flagOf(sel Selector) string {
	if sel.Pod != "" {
		return "--pod " + sel.Pod
	}
	if sel.JobSource != "" {
		return "--job-id " + sel.JobID + " --job-source " + sel.JobSource
	}
	return "--job-id " + sel.JobID
}

// maxKnownJobs is how many job IDs an unknown job's error lists.
const maxKnownJobs = 20

// knownJobs is the end of an unknown job's error: the jobs Prometheus
// has now (at most maxKnownJobs, escaped: a hostile Prometheus writes
// them), or nothing when it has none or cannot say.
func (q querier) knownJobs(ctx context.Context) string {
	v, err := q.vector(ctx, fmt.Sprintf(`topk(%d, count by (job_id, job_source) (gpudiag_gpu_job_info{job_id!=""}))`, maxKnownJobs+1))
	if err != nil {
		return ""
	}
	if len(v) == 0 {
		return "; Prometheus knows no job now"
	}
	var names []string
	for _, s := range v {
		names = append(names, quote(string(s.Metric["job_source"]))+" "+quote(string(s.Metric["job_id"])))
	}
	slices.Sort(names)
	more := ""
	if len(names) > maxKnownJobs {
		names, more = names[:maxKnownJobs], " and more"
	}
	return "; jobs it knows now (source, ID): " + strings.Join(names, ", ") + more
}

func describe(sel Selector) string {
	if sel.Pod != "" {
		return "pod " + sel.Pod
	}
	if sel.JobSource != "" {
		return sel.JobSource + " job " + sel.JobID
	}
	return "job " + sel.JobID
}

// vector runs an instant query that must return a vector.
func (q querier) vector(ctx context.Context, query string) (model.Vector, error) {
	v, _, err := q.api.Query(ctx, query, q.t)
	if err != nil {
		return nil, prometheusError{fmt.Errorf("querying Prometheus: %w", err)}
	}
	vec, ok := v.(model.Vector)
	if !ok {
		return nil, prometheusError{fmt.Errorf("querying Prometheus: %s answered a %s, not a vector", query, v.Type())}
	}
	return vec, nil
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	// Prometheus' quantile(0.5): the mean of the two middle values of an
	// even count.
	if len(s)%2 == 0 {
		return (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return s[len(s)/2]
}

// compareNumeric orders GPU indexes as numbers ("2" before "10").
func compareNumeric(a, b string) int {
	x, errA := strconv.Atoi(a)
	y, errB := strconv.Atoi(b)
	if errA == nil && errB == nil {
		return x - y
	}
	return strings.Compare(a, b)
}
