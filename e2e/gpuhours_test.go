package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpudiag/gpudiag/internal/fabricsim"
	"github.com/gpudiag/gpudiag/jobdiag"
	"github.com/gpudiag/gpudiag/record"
	"github.com/gpudiag/gpudiag/sample"
)

// gpuHoursSpeed is the replay speed: the 10-minute job replays in two
// minutes. Prometheus scrapes every 500 ms, 2.5 s of trace: a class's
// counter first scraped at up to that value loses at most half of it in
// increase() (which extrapolates back toward zero), about 0.1% of the job.
const gpuHoursSpeed = 5

// gpuHoursJobID is the Slurm job ID the test writes into the traces'
// ncclproc samples, where the daemon reads a job's identity.
const gpuHoursJobID = "4242"

// phaseTruth is what a node's trace holds, GPU by GPU, in seconds of trace
// time by class: idle until the GPU's first reading that lists a process,
// then the scenario's phases (e2e/testdata/job2_phases_10min.json): the
// all-reduce over InfiniBand to 360 s, compute to 540 s, and from there the
// GPUs idle while their processes keep using the CPU (the base's NCCL
// threads): host-bound.
func phaseTruth(t *testing.T, frames []record.Frame) map[string]float64 {
	t.Helper()
	start := frames[0].Time()
	var end time.Duration
	firstProcess := map[int]time.Duration{}
	for _, f := range frames {
		if f.Collector != sample.GPUKey.Name() {
			continue
		}
		at := f.Time().Sub(start)
		end = at
		var s sample.GPUs
		if err := json.Unmarshal(f.Sample, &s); err != nil {
			t.Fatal(err)
		}
		for _, d := range s.Devices {
			if _, ok := firstProcess[d.Index]; !ok && len(d.Processes) > 0 {
				firstProcess[d.Index] = at
			}
		}
	}
	out := map[string]float64{}
	for _, p := range firstProcess {
		out["idle"] += p.Seconds()
		out["communication"] += 360 - p.Seconds()
		out["compute"] += 540 - 360
		out["host"] += end.Seconds() - 540
	}
	return out
}

// needsCostlyFinding reports whether a query reads the seconds GPUs spent
// under a finding that costs them time (gpudiag_finding_gpu_seconds_total
// or its rules): it returns data only where such a finding held a working
// GPU, as node 0's trained-down port in TestGPUHoursSplitOfAJob, not in
// TestEndToEnd's traces.
// needsRangeHistory reports whether q sums a recorded rate over the
// dashboard's range at one-minute steps ([$__range:1m]), steps aligned to
// the minute (checkDashboardQueries says what that asks of a check).
func needsRangeHistory(q dashboardQuery) bool {
	return strings.Contains(q.Expr, "[$__range:")
}

func needsCostlyFinding(q dashboardQuery) bool {
	for _, n := range metricNames(q.Expr) {
		if strings.Contains(n, "gpudiag_finding_gpu_seconds") {
			return true
		}
	}
	return false
}

// leadIn is how long, in trace time, a written trace holds only a copy of
// its first host reading before its own frames: the replay waits for it
// (leadIn/gpuHoursSpeed of wall time), long enough for the daemon to serve
// and Prometheus to scrape it before the first GPU reading. Without it the
// job's first seconds (no process yet, NCCL's start) were counted before
// the first scrape, and increase() counts a series from its first sample.
const leadIn = 20 * time.Second

// withJobID writes frames to path, after the lead-in, with the Slurm job
// ID set on every NCCL process, so that the daemon names the job.
func withJobID(t *testing.T, path string, frames []record.Frame) {
	t.Helper()
	for _, f := range frames {
		if f.Collector != sample.GPUKey.Name() {
			lead := f
			lead.UnixNano = frames[0].UnixNano - leadIn.Nanoseconds()
			frames = append([]record.Frame{lead}, frames...)
			break
		}
	}
	writeTrace(t, path, frames, 0, func(collector string, _ time.Duration, raw json.RawMessage) any {
		if collector != sample.NCCLProcKey.Name() {
			return nil
		}
		var s sample.NCCLHostProcesses
		if err := json.Unmarshal(raw, &s); err != nil {
			t.Fatal(err)
		}
		for i := range s.Processes {
			s.Processes[i].SlurmJobID = gpuHoursJobID
		}
		return &s
	})
}

// Where the GPU-hours go, end to end: a 2-node job (cmd/fabricsim over the
// real 2xH200 all-reduce) runs 10 minutes of trace through three phases;
// two daemons replay it and a real Prometheus with the shipped rules
// scrapes them. Node 1's daemon is stopped at 300 s and a new one replays
// the rest, so its counters start again from zero. `gpudiag job` splits the
// job's GPU time over its life by class: each share is within 2 points of
// what the traces hold, the restarted node accounts its 10 minutes once
// (increase() across the reset), not 15.
func TestGPUHoursSplitOfAJob(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end test skipped in -short mode")
	}
	prometheus := binary(t, "prometheus")
	goTool := binary(t, "go")
	dir := t.TempDir()
	daemon := filepath.Join(dir, "gpudiag")
	buildCtx, cancelBuild := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancelBuild()
	if out, err := exec.CommandContext(buildCtx, goTool, "build", "-o", daemon, "../cmd/exporter").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	s, err := fabricsim.Load(filepath.Join("testdata", "job2_phases_10min.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "sim"), 0o755); err != nil {
		t.Fatal(err)
	}
	paths, err := fabricsim.WriteTraces(s, filepath.Join(dir, "sim"))
	if err != nil {
		t.Fatal(err)
	}
	const cut = 300 * time.Second // node 1's daemon restarts here
	truth := map[string]float64{}
	var node0Communication float64 // node 0's GPUs over InfiniBand, under its trained-down port
	var node0, node1a, node1b string
	var traceSeconds float64
	for i, p := range paths {
		frames := readTrace(t, p)
		nodeTruth := phaseTruth(t, frames)
		for c, v := range nodeTruth {
			truth[c] += v
		}
		if i == 0 {
			node0Communication = nodeTruth["communication"]
		}
		traceSeconds = frames[len(frames)-1].Time().Sub(frames[0].Time()).Seconds()
		if i == 0 {
			node0 = filepath.Join(dir, "node0.gdrec")
			withJobID(t, node0, frames)
			continue
		}
		split := sort.Search(len(frames), func(k int) bool { return frames[k].Time().Sub(frames[0].Time()) >= cut })
		node1a, node1b = filepath.Join(dir, "node1a.gdrec"), filepath.Join(dir, "node1b.gdrec")
		withJobID(t, node1a, frames[:split])
		withJobID(t, node1b, frames[split:])
	}

	addrs := []string{freeAddr(t), freeAddr(t)}
	ruleDir := compressedRules(t, dir)
	promAddr := freeAddr(t)
	promStarted := time.Now()
	api := startPrometheus(ctx, t, prometheus, dir, promAddr, fmt.Sprintf(`global:
  scrape_interval: 500ms
  scrape_timeout: 500ms
  evaluation_interval: 1s
rule_files:
  - %s/*.yml
scrape_configs:
  - job_name: gpudiag
    static_configs:
      - targets: [%q, %q]
`, ruleDir, addrs[0], addrs[1]))

	replay := func(name, addr, trace string) *process {
		p := start(t, dir, name, daemon, "--web.listen-address="+addr, "--replay="+trace,
			"--replay.speed="+strconv.Itoa(gpuHoursSpeed), "--sample.interval=30s")
		waitHTTP(ctx, t, p, "http://"+addr+"/healthz")
		return p
	}
	// accounted is the GPU-seconds a node's daemon has counted so far, as
	// Prometheus last scraped them.
	accounted := func(addr string) float64 {
		res := api.query(fmt.Sprintf(`sum(gpudiag_gpu_bottleneck_seconds_total{instance=%q})`, addr))
		if len(res) == 0 {
			return 0
		}
		v, _ := strconv.ParseFloat(fmt.Sprint(res[0].Value[1]), 64)
		return v
	}
	waitAccounted := func(addr string, want float64) {
		for accounted(addr) < want {
			select {
			case <-ctx.Done():
				t.Fatalf("%s accounted %.0f GPU-seconds; waited for %.0f", addr, accounted(addr), want)
			case <-time.After(500 * time.Millisecond):
			}
		}
	}
	replay("node0", addrs[0], node0)
	first := replay("node1a", addrs[1], node1a)
	// 2 GPUs each; a few seconds short of the end: the last analysis
	// falls at the last GPU reading, the first accounts nothing.
	waitAccounted(addrs[1], 2*(cut.Seconds()-5))
	time.Sleep(time.Second) // two more scrapes of the first daemon's last value
	_ = first.cmd.Process.Kill()
	<-first.done
	replay("node1b", addrs[1], node1b)
	waitAccounted(addrs[0], 2*(traceSeconds-5))
	waitAccounted(addrs[1], 2*(traceSeconds-cut.Seconds()-5))
	time.Sleep(2 * time.Second)

	// The restarted node: its daemon's counters went back to zero at the
	// restart; increase() over the test counts its 10 minutes once.
	life := fmt.Sprintf("%ds", int(time.Since(promStarted).Seconds())+10)
	res := api.query(fmt.Sprintf(`sum(increase(gpudiag_gpu_bottleneck_seconds_total{instance=%q}[%s]))`, addrs[1], life))
	if len(res) != 1 {
		t.Fatalf("no increase for node 1: %s", resultString(res))
	}
	node1, _ := strconv.ParseFloat(fmt.Sprint(res[0].Value[1]), 64)
	res = api.query(fmt.Sprintf(`sum(increase(gpudiag_gpu_bottleneck_seconds_total{instance=%q}[%s]))`, addrs[0], life))
	if len(res) != 1 {
		t.Fatalf("no increase for node 0: %s", resultString(res))
	}
	node0Seconds, _ := strconv.ParseFloat(fmt.Sprint(res[0].Value[1]), 64)
	// Both nodes replay the same 10 minutes: the restart costs node 1 the
	// seconds between its two daemons, and a reset counted twice (or as
	// a fall) would put it half a trace away from node 0.
	if math.Abs(node1-node0Seconds) > 0.02*node0Seconds || math.Abs(node1-2*traceSeconds) > 0.02*2*traceSeconds {
		t.Errorf("node 1 (restarted at %s) accounts %.0f GPU-seconds over the test, node 0 %.0f; each trace holds %.0f", cut, node1, node0Seconds, 2*traceSeconds)
	}
	if last := accounted(addrs[1]); last > 0.6*2*traceSeconds {
		t.Errorf("node 1's counters read %.0f after the restart: the new daemon did not start from zero", last)
	}

	// `gpudiag job`: the split over the job's life.
	var truthTotal float64
	for _, v := range truth {
		truthTotal += v
	}
	jobCmd := exec.CommandContext(ctx, daemon, "job", "--prometheus.url=http://"+promAddr, "--window=30s", "--job-id="+gpuHoursJobID, "--format=json")
	out, _ := jobCmd.Output()
	var r jobdiag.Report
	if err := json.Unmarshal(out, &r); err != nil || r.Life == nil {
		t.Fatalf("gpudiag job --format=json: %v\n%s", err, out)
	}
	measured := map[string]float64{}
	for _, sh := range r.Life.Split {
		measured[sh.Class] += sh.Share
	}
	var report []string
	for _, c := range []string{"communication", "compute", "host", "idle", "unknown"} {
		want := truth[c] / truthTotal
		report = append(report, fmt.Sprintf("%s %.1f%% (trace %.1f%%)", c, 100*measured[c], 100*want))
		if math.Abs(measured[c]-want) > 0.02 {
			t.Errorf("%s: %.1f%% of the job's GPU time; its traces hold %.1f%%", c, 100*measured[c], 100*want)
		}
	}
	for c := range measured {
		if _, known := truth[c]; !known && c != "unknown" {
			t.Errorf("the split holds %s, which the traces do not", c)
		}
	}
	if math.Abs(r.Life.GPUSeconds-truthTotal) > 0.02*truthTotal {
		t.Errorf("the job accounts %.0f GPU-seconds; its traces hold %.0f", r.Life.GPUSeconds, truthTotal)
	}
	// What node 0's trained-down port cost: its GPUs' time over
	// InfiniBand, nothing of node 1's.
	var portCost float64
	for _, f := range r.Life.Findings {
		if f.Check == "ib_port_degraded" {
			portCost += f.GPUSeconds
		}
	}
	if math.Abs(portCost-node0Communication) > 0.02*truthTotal {
		t.Errorf("the trained-down port cost the job %.0f GPU-seconds; node 0's GPUs communicated over InfiniBand for %.0f", portCost, node0Communication)
	}
	report = append(report, fmt.Sprintf("ib_port_degraded %.0f GPU-s (trace %.0f)", portCost, node0Communication))
	t.Logf("split over the job's life: %s; %.0f GPU-seconds accounted, %.0f in the traces", strings.Join(report, ", "), r.Life.GPUSeconds, truthTotal)
	text, err := exec.CommandContext(ctx, daemon, "job", "--prometheus.url=http://"+promAddr, "--window=30s", "--job-id="+gpuHoursJobID).CombinedOutput()
	// The command asks Prometheus again, a moment later: its shares may
	// round a point apart from the ones above, never more.
	printed := lifeShares(string(text))
	for _, c := range []string{"communication", "compute", "host", "idle"} {
		if got, ok := printed[c]; !ok || math.Abs(got-100*measured[c]) > 1.5 {
			t.Errorf("gpudiag job (%v) prints %s at %v%% (printed: %v), want about %.1f%% as in %q:\n%s",
				err, c, got, ok, 100*measured[c], r.Life.SplitLine(), text)
		}
	}
	t.Logf("gpudiag job --job-id=%s:\n%s", gpuHoursJobID, text)

	// The dashboards' GPU-hours panels on this job (the fleet's and the
	// job's, the costly findings' among them; the namespace's need a
	// Kubernetes pod, which TestTrainingJobAcrossNodes has): each returns
	// data.
	names := map[string]bool{}
	for _, n := range api.labelValues("__name__") {
		names[n] = true
	}
	panels := dashboardQueries(t, func(q dashboardQuery) bool {
		return (strings.Contains(q.Expr, "gpudiag_gpu_bottleneck_seconds:") || needsCostlyFinding(q)) && !strings.Contains(q.Expr, "namespace:")
	})
	if len(panels) < 6 {
		t.Errorf("%d dashboard queries read the GPU-hours rules; want the fleet's four and the job's two", len(panels))
	}
	checkDashboardQueries(t, api, panels, time.Now(), map[string]string{"job_id": gpuHoursJobID, "job_source": "slurm"}, names)
}

// lifeShares reads the whole percents of "Over its life (since ...): 60%
// communication over InfiniBand, 30% compute, ..." by class, the class
// being each part's first word after its percent.
func lifeShares(text string) map[string]float64 {
	out := map[string]float64{}
	for _, line := range strings.Split(text, "\n") {
		_, split, ok := strings.Cut(line, "Over its life (since ")
		if !ok {
			continue
		}
		if _, split, ok = strings.Cut(split, "): "); !ok {
			continue
		}
		for _, part := range strings.Split(split, ", ") {
			var n float64
			var class string
			if _, err := fmt.Sscanf(part, "%g%% %s", &n, &class); err == nil {
				out[class] = n
			}
		}
	}
	return out
}

func TestLifeShares(t *testing.T) {
	text := "slurm job 1\n  Over its life (since 2026-11-29T03:47:59Z, 0.66 GPU-hours): 60% communication over InfiniBand, 30% compute, 9% host, 1% idle\n"
	got := lifeShares(text)
	want := map[string]float64{"communication": 60, "compute": 30, "host": 9, "idle": 1}
	if len(got) != len(want) {
		t.Fatalf("lifeShares = %v, want %v", got, want)
	}
	for c, n := range want {
		if got[c] != n {
			t.Fatalf("lifeShares = %v, want %v", got, want)
		}
	}
}
