package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpudiag/gpudiag/internal/fabricsim"
	"github.com/gpudiag/gpudiag/internal/kubelettest"
	"github.com/gpudiag/gpudiag/jobdiag"
	"github.com/gpudiag/gpudiag/sample"
)

// traceGPUs returns the GPU UUIDs of a trace's first GPU reading.
func traceGPUs(t *testing.T, path string) []string {
	t.Helper()
	for _, f := range readTrace(t, path) {
		if f.Collector != sample.GPUKey.Name() {
			continue
		}
		var s sample.GPUs
		if err := json.Unmarshal(f.Sample, &s); err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, d := range s.Devices {
			out = append(out, d.UUID)
		}
		return out
	}
	t.Fatalf("%s has no GPU reading", path)
	return nil
}

// Two training jobs on eleven nodes scraped by one real Prometheus with the
// shipped rules (time compressed as in TestEndToEnd): "llama", 8 nodes
// over InfiniBand whose node 3 has a port trained down to half rate, and
// "bert", 3 healthy nodes. Each node is a daemon replaying its simulated
// trace (cmd/fabricsim over the real 2×H200 all-reduce: docs/simulation.md)
// with its podresources collector live against a kubelet stand-in (a real
// gRPC server with the kubelet's API), so the job identity Prometheus joins
// on comes from the Kubernetes path. The training-job rules and
// GPUDiagJobStragglerNode name node 3 and nothing else; `gpudiag job`
// names node 3 and its port, and blames nothing in bert.
func TestTrainingJobAcrossNodes(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end test skipped in -short mode")
	}
	prometheus := binary(t, "prometheus")
	goTool := binary(t, "go")
	dir := t.TempDir()
	sockDir := kubelettest.SocketDir(t)

	daemon := filepath.Join(dir, "gpudiag")
	buildCtx, cancelBuild := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancelBuild()
	if out, err := exec.CommandContext(buildCtx, goTool, "build", "-o", daemon, "../cmd/exporter").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()

	type node struct {
		job, pod, trace, addr string
	}
	var nodes []node
	for _, sc := range []struct{ file, job string }{{"job8_port_half_rate.json", "llama"}, {"job3_healthy.json", "bert"}} {
		s, err := fabricsim.Load(filepath.Join("testdata", sc.file))
		if err != nil {
			t.Fatal(err)
		}
		paths, err := fabricsim.WriteTraces(s, dir)
		if err != nil {
			t.Fatal(err)
		}
		for i, p := range paths {
			nodes = append(nodes, node{job: sc.job, pod: fmt.Sprintf("%s-worker-%d", sc.job, i), trace: p})
		}
	}
	const slowNode = 3 // the node of llama whose port trained down (job8_port_half_rate.json)

	var targets []string
	for i := range nodes {
		n := &nodes[i]
		n.addr = freeAddr(t)
		socket := filepath.Join(sockDir, n.pod+".sock")
		kubelettest.Serve(t, socket, &kubelettest.Kubelet{Resp: kubelettest.Pod("research", n.pod, "trainer", traceGPUs(t, n.trace)...)})
		start(t, dir, n.pod, daemon, "--web.listen-address="+n.addr, "--replay="+n.trace, "--replay.loop", "--replay.speed=1",
			"--sample.interval=30s", "--replay.live-collector=podresources", "--collector.podresources.socket="+socket,
			"--collector.podresources.interval=1s")
		targets = append(targets, fmt.Sprintf("%q", n.addr))
	}

	ruleDir := compressedRules(t, dir)
	promAddr := freeAddr(t)
	api := startPrometheus(ctx, t, prometheus, dir, promAddr, fmt.Sprintf(`global:
  scrape_interval: 1s
  scrape_timeout: 1s
  evaluation_interval: 1s
rule_files:
  - %s/*.yml
scrape_configs:
  - job_name: gpudiag
    static_configs:
      - targets: [%s]
`, ruleDir, strings.Join(targets, ", ")))

	// Wait for the straggler alert to fire for llama (the compressed for:
	// and 30 s rates: about a minute).
	var firing []vectorSample
	for {
		firing = api.query(`ALERTS{alertname="GPUDiagJobStragglerNode", alertstate="firing"}`)
		if len(firing) > 0 {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("GPUDiagJobStragglerNode never fired; straggler series %s, job GPUs %s",
				resultString(api.query(`instance_training_job:gpudiag_node_straggler:bool`)),
				resultString(api.query(`training_job:gpudiag_gpus:count`)))
		case <-time.After(2 * time.Second):
		}
	}
	// Let the other causes and any wrong blame show too: 5 s at least,
	// and until port_degraded is among the causes, which a loaded machine
	// (slow scrapes, late rule evaluations) may take longer over; only a
	// cause that never shows meets ctx's end.
	causes := map[string]bool{}
	blamed := map[string]bool{} // wrong blames reported
	for settle := time.After(5 * time.Second); ; {
		clear(causes)
		for _, a := range api.query(`ALERTS{alertname="GPUDiagJobStragglerNode"}`) {
			causes[a.Metric["cause"]] = true
			if a.Metric["job_id"] != "llama" || a.Metric["job_source"] != "kubernetes" || a.Metric["instance"] != nodes[slowNode].addr {
				if m := fmt.Sprint(a.Metric); !blamed[m] {
					blamed[m] = true
					t.Errorf("GPUDiagJobStragglerNode blames %v; only llama's node %s (%s) is slow", a.Metric, nodes[slowNode].pod, nodes[slowNode].addr)
				}
			}
		}
		if settle == nil && causes["port_degraded"] {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the straggler alert's causes are %v; want port_degraded among them", causes)
		case <-settle:
			settle = nil
			continue
		case <-time.After(time.Second):
		}
	}
	if got := api.query(`training_job:gpudiag_nodes:count{job_id="llama"}`); len(got) != 1 || fmt.Sprint(got[0].Value[1]) != "8" {
		t.Errorf("llama's node count %s; want 8", resultString(got))
	}
	if got := api.query(`training_job:gpudiag_nodes:count{job_id="bert"}`); len(got) != 1 || fmt.Sprint(got[0].Value[1]) != "3" {
		t.Errorf("bert's node count %s; want 3", resultString(got))
	}
	// The replayed all-reduce idles for a few seconds at every loop seam,
	// so the class share is judged over the last 30 s, not at one instant.
	if got := api.query(`avg_over_time(training_job:gpudiag_gpus_by_class:ratio{job_id="llama", class="communication"}[30s]) >= 0.5`); len(got) != 1 {
		t.Errorf("llama's GPUs were not mostly communication-bound over the last 30 s: %s",
			resultString(api.query(`avg_over_time(training_job:gpudiag_gpus_by_class:ratio{job_id="llama"}[30s])`)))
	}
	for _, a := range api.query(`ALERTS{alertname=~"GPUDiagJob.*", job_id="bert"}`) {
		t.Errorf("bert is healthy but %s fires for it: %v", a.Metric["alertname"], a.Metric)
	}

	// The job dashboard (and every dashboard query that reads the job
	// identity, which TestEndToEnd's traces lack) on llama: each query
	// parses, returns data and reads only exported or recorded names; the
	// variables select series.
	names := map[string]bool{}
	for _, n := range api.labelValues("__name__") {
		names[n] = true
	}
	llamaVars := map[string]string{"job_id": "llama", "job_source": "kubernetes"}
	jobQueries := dashboardQueries(t, needsJobIdentity)
	if len(jobQueries) == 0 {
		t.Errorf("no dashboard query reads the training-job identity; %s has none", jobDashboard)
	}
	checkDashboardQueries(t, api, jobQueries, time.Now(), llamaVars, names)
	checkVariables(t, api, jobDashboard, loadDashboards(t)[jobDashboard], llamaVars)

	// The on-call engineer's command, against the same Prometheus.
	jobCmd := func(args ...string) (jobdiag.Report, int) {
		cmd := exec.CommandContext(ctx, daemon, append([]string{"job", "--prometheus.url=http://" + promAddr, "--window=30s", "--format=json"}, args...)...)
		out, err := cmd.Output()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatalf("gpudiag job %v: %v", args, err)
		}
		var r jobdiag.Report
		if err := json.Unmarshal(out, &r); err != nil {
			t.Fatalf("gpudiag job %v (exit %d): %v\n%s", args, code, err, out)
		}
		return r, code
	}
	llama, code := jobCmd("--job-id=llama")
	if code != 3 || llama.Class != "communication" || llama.SubKind != "infiniband" || len(llama.Nodes) != 8 || llama.GPUs != 16 {
		t.Errorf("gpudiag job llama: exit %d, %s/%s on %d nodes, %d GPUs", code, llama.Class, llama.SubKind, len(llama.Nodes), llama.GPUs)
	}
	if len(llama.Outliers) == 0 || llama.Outliers[0].Instance != nodes[slowNode].addr || llama.Outliers[0].Cause != "port_degraded" || llama.Outliers[0].Port != "mlx5_1/1" {
		t.Errorf("gpudiag job llama names %+v; want %s port mlx5_1/1 trained down", llama.Outliers, nodes[slowNode].addr)
	}
	for _, o := range llama.Outliers {
		if o.Instance != nodes[slowNode].addr {
			t.Errorf("gpudiag job llama also blames %+v", o)
		}
	}
	byPod, _ := jobCmd("--pod=research/llama-worker-5")
	if byPod.JobID != "llama" || len(byPod.Nodes) != 8 {
		t.Errorf("gpudiag job --pod research/llama-worker-5: job %q on %d nodes", byPod.JobID, len(byPod.Nodes))
	}
	bert, _ := jobCmd("--job-id=bert")
	if len(bert.Outliers) != 0 || len(bert.Nodes) != 3 {
		t.Errorf("gpudiag job bert blames %+v on %d nodes; it is healthy", bert.Outliers, len(bert.Nodes))
	}
	var text strings.Builder
	cmd := exec.CommandContext(ctx, daemon, "job", "--prometheus.url=http://"+promAddr, "--window=30s", "--job-id=llama")
	cmd.Stdout = &text
	_ = cmd.Run()
	t.Logf("gpudiag job --job-id=llama:\n%s", text.String())
	if out, err := exec.CommandContext(ctx, daemon, "job", "--prometheus.url=http://"+promAddr, "--job-id=gone").CombinedOutput(); err == nil ||
		!strings.Contains(string(out), "no gpudiag_gpu_job_info for job gone") {
		t.Errorf("an unknown job: %v\n%s", err, out)
	}
}
