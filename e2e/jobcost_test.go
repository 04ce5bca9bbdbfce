package e2e

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// What the training-job rules cost Prometheus, for docs/fleet.md: a real
// Prometheus with the shipped rules scrapes GPUDIAG_JOB_COST_NODES synthetic
// 8-GPU nodes (16-node jobs over InfiniBand, two ports a node, one node of
// each job with a port trained down) every 15 s for GPUDIAG_JOB_COST_MINUTES
// (default 6: the rules take 5-minute rates), and the test reads the rule groups' evaluation time and the
// series they record. Only the series the rules read are served (the
// verdicts, SM activity, ports, findings, job identity: 97 per node); a
// daemon's other series cost storage (docs/fleet.md, "What Prometheus pays
// per series") but no rule time. Opt-in:
//
//	GPUDIAG_JOB_COST_NODES=1000 go test ./e2e -run TestPrometheusCostOfJobRules -v -timeout 20m
func TestPrometheusCostOfJobRules(t *testing.T) {
	nodes, _ := strconv.Atoi(os.Getenv("GPUDIAG_JOB_COST_NODES"))
	if nodes <= 0 {
		t.Skip("set GPUDIAG_JOB_COST_NODES to measure")
	}
	minutes, _ := strconv.Atoi(os.Getenv("GPUDIAG_JOB_COST_MINUTES"))
	if minutes <= 0 {
		minutes = 6
	}
	prometheus := binary(t, "prometheus")
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(minutes+5)*time.Minute)
	defer cancel()
	dir := t.TempDir()

	started := time.Now()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		i, err := strconv.Atoi(strings.TrimPrefix(r.URL.Path, "/node/"))
		if err != nil {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		_, _ = w.Write([]byte(syntheticNode(i, time.Since(started).Seconds())))
	}))
	t.Cleanup(srv.Close)
	addr := strings.TrimPrefix(srv.URL, "http://")

	promAddr := freeAddr(t)
	var cfg strings.Builder
	fmt.Fprintf(&cfg, "global:\n  scrape_interval: 15s\n  scrape_timeout: 10s\n  evaluation_interval: 15s\nrule_files:\n  - %s/*.yml\nscrape_configs:\n  - job_name: prometheus\n    static_configs:\n      - targets: [%q]\n  - job_name: gpudiag\n    static_configs:\n", rulesDirAbs(t), promAddr)
	for i := 0; i < nodes; i++ {
		fmt.Fprintf(&cfg, "      - targets: [%q]\n        labels: {instance: node-%05d, __metrics_path__: /node/%d}\n", addr, i, i)
	}
	api := startPrometheus(ctx, t, prometheus, dir, promAddr, cfg.String())
	select {
	case <-time.After(time.Duration(minutes) * time.Minute):
	case <-ctx.Done():
		t.Fatal(ctx.Err())
	}
	value := func(expr string) string {
		res := api.query(expr)
		if len(res) == 0 {
			return "none"
		}
		return fmt.Sprint(res[0].Value[1])
	}
	// The training-job figures are the sum of its recording group and its
	// alerts' group (gpudiag.training_job.alerts).
	t.Logf("%d nodes (%d GPUs, %d jobs) after %d min at 15 s", nodes, nodes*8, (nodes+15)/16, minutes)
	t.Logf("head series: %s; scraped per round: %s", value(`prometheus_tsdb_head_series`), value(`sum(scrape_samples_scraped)`))
	for _, g := range []string{"gpudiag.training_job", "gpudiag.straggler", "gpudiag.gpu", "gpudiag.node", "gpudiag.job"} {
		sel := fmt.Sprintf(`{rule_group=~".*;%s(\\.alerts)?"}`, g)
		t.Logf("group %-22s last evaluation %ss, %s samples, rules %s", g,
			value(`sum(max_over_time(prometheus_rule_group_last_duration_seconds`+sel+`[1m]))`), value(`sum(prometheus_rule_group_last_evaluation_samples`+sel+`)`),
			value(`sum(prometheus_rule_group_rules`+sel+`)`))
	}
	t.Logf("training-job series recorded: %s; stragglers named: %s (want %d)", value(`count({__name__=~"(instance_gpu|instance_training_job|training_job):.*"})`),
		value(`count(count by (instance) (instance_training_job:gpudiag_node_straggler:bool))`), (nodes+15)/16)
	if self := scrapeText(ctx, t, "http://"+promAddr+"/metrics"); self["process_cpu_seconds_total"] > 0 {
		t.Logf("Prometheus process: %.1f s CPU over %.0f s (%.2f cores), %.0f MiB resident", self["process_cpu_seconds_total"],
			time.Since(started).Seconds(), self["process_cpu_seconds_total"]/time.Since(started).Seconds(), self["process_resident_memory_bytes"]/(1<<20))
	}
}

// syntheticNode is node i's scrape at t seconds: 8 GPUs of a 16-node job
// (job i/16), communication-bound over InfiniBand at half their line rate,
// except node 3 of each job, whose second port trained down to 200 Gb/s
// and runs at 97% of it.
func syntheticNode(i int, t float64) string {
	var b strings.Builder
	job := i / 16
	slow := i%16 == 3
	for g := 0; g < 8; g++ {
		fmt.Fprintf(&b, "gpudiag_gpu_job_info{gpu=\"%d\",job_id=\"job-%d\",job_source=\"kubernetes\",k8s_namespace=\"research\",k8s_pod=\"job-%d-worker-%d\",k8s_container=\"trainer\"} 1\n", g, job, job, i%16)
		for _, c := range []string{"compute", "communication", "io", "host", "idle", "unknown"} {
			fmt.Fprintf(&b, "gpudiag_gpu_bottleneck{gpu=\"%d\",class=%q} %d\n", g, c, boolInt(c == "communication"))
		}
		fmt.Fprintf(&b, "gpudiag_gpu_bottleneck_info{gpu=\"%d\",class=\"communication\",sub_kind=\"infiniband\"} 1\n", g)
		fmt.Fprintf(&b, "gpudiag_gpu_sm_active_seconds_total{gpu=\"%d\"} %g\n", g, 0.03*t)
		fmt.Fprintf(&b, "gpudiag_gpu_nvlink_capacity_bytes_per_second{gpu=\"%d\"} 4.5e+11\n", g)
		fmt.Fprintf(&b, "gpudiag_finding{check=\"nccl_env_override\",severity=\"info\",gpu=\"%d\",device=\"\",kind=\"\"} 1\n", g)
	}
	for port := 0; port < 2; port++ {
		rate, use, degraded := 5e10, 0.48, 0
		if slow && port == 1 {
			rate, use, degraded = 2.5e10, 0.97, 1
		}
		labels := fmt.Sprintf("device=\"mlx5_%d\",port=\"1\"", port)
		fmt.Fprintf(&b, "gpudiag_infiniband_rate_bytes_per_second{%s} %g\n", labels, rate)
		fmt.Fprintf(&b, "gpudiag_infiniband_port_rate_degraded{%s} %d\n", labels, degraded)
		fmt.Fprintf(&b, "gpudiag_infiniband_port_data_transmitted_bytes_total{%s} %g\n", labels, rate*use*t)
		fmt.Fprintf(&b, "gpudiag_infiniband_port_data_received_bytes_total{%s} %g\n", labels, rate*use*0.9*t)
	}
	b.WriteString("gpudiag_build_info{version=\"synthetic\"} 1\n")
	return b.String()
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

func rulesDirAbs(t *testing.T) string {
	t.Helper()
	d, err := filepath.Abs(rulesDir)
	if err != nil {
		t.Fatal(err)
	}
	return d
}
