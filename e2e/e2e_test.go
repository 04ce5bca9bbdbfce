// Package e2e runs gpudiag end to end without a GPU: daemons replaying
// traces recorded on a real H200, a real Prometheus evaluating alerts/ with
// the dashboards' queries, and a real Alertmanager delivering to a webhook
// served by the test. Everything listens on loopback, and every process and
// temporary file is gone when the test ends.
package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"
)

const (
	tracesDir = "../testdata/traces"
	fixture   = "../hostfs/testdata/host"
	ncclLog   = "../nccl/testdata/nccl_p2pdisabled.log"

	// The test runs the rules as shipped with time compressed: every for:
	// becomes testFor, and every range window and offset in minutes is
	// divided by timeScale (a 5m rate becomes a 30s one). A replayed trace
	// lasts about 30 s, and Prometheus' rate() divides by the whole window,
	// so a 5-minute rate over 30 s of activity reads a tenth of it.
	testFor   = "10s"
	timeScale = 10
	// alertTimeout bounds the wait for the expected alerts from the
	// daemons' start: the traces last about 30 s, the verdicts settle
	// within 12 s, and the shortened for: adds 10 s.
	alertTimeout = 100 * time.Second
	// staleAfter is the age at which GPUDiagExporterStale calls a
	// collector stale (alerts/gpudiag.alerts.yml).
	staleAfter = 5 * time.Minute
)

var (
	forLine     = regexp.MustCompile(`(?m)^(\s+for:\s*)\S+\s*$`)
	minutesExpr = regexp.MustCompile(`(\[|offset )(\d+)m\b`)
)

// compressedRules writes the shipped rule files, time compressed, into a
// new directory under dir and returns it.
func compressedRules(t *testing.T, dir string) string {
	t.Helper()
	ruleDir := filepath.Join(dir, "rules")
	if err := os.MkdirAll(ruleDir, 0o755); err != nil {
		t.Fatal(err)
	}
	ruleFiles, _ := filepath.Glob(filepath.Join(rulesDir, "*.yml"))
	for _, f := range ruleFiles {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if !minutesExpr.Match(b) && !forLine.Match(b) {
			t.Fatalf("%s: nothing to compress; the rewrite no longer matches the rules", f)
		}
		writeFile(t, filepath.Join(ruleDir, filepath.Base(f)), compressTime(string(b)))
	}
	return ruleDir
}

// compressTime rewrites a rule file as described at testFor.
func compressTime(rules string) string {
	rules = forLine.ReplaceAllString(rules, "${1}"+testFor)
	return minutesExpr.ReplaceAllStringFunc(rules, func(m string) string {
		sub := minutesExpr.FindStringSubmatch(m)
		var n int
		fmt.Sscan(sub[2], &n)
		return fmt.Sprintf("%s%ds", sub[1], n*60/timeScale)
	})
}

// scrapeTarget is one daemon Prometheus scrapes, in a job of its own so
// alerts can be told apart by job.
type scrapeTarget struct {
	job  string
	addr string
	args []string
}

// received is an alert as Alertmanager's webhook delivered it.
type received struct {
	Status      string            `json:"status"`
	Labels      map[string]string `json:"labels"`
	Annotations map[string]string `json:"annotations"`
}

type webhook struct {
	mu     sync.Mutex
	alerts []received
}

func (w *webhook) ServeHTTP(rw http.ResponseWriter, r *http.Request) {
	var msg struct {
		Alerts []received `json:"alerts"`
	}
	if err := json.NewDecoder(r.Body).Decode(&msg); err != nil {
		http.Error(rw, err.Error(), http.StatusBadRequest)
		return
	}
	w.mu.Lock()
	w.alerts = append(w.alerts, msg.Alerts...)
	w.mu.Unlock()
}

func (w *webhook) snapshot() []received {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]received(nil), w.alerts...)
}

// expectation is an alert that must reach the webhook: its name, its job
// and labels it must carry.
type expectation struct {
	alertname, job string
	labels         map[string]string
}

func (e expectation) matches(a received) bool {
	if a.Labels["alertname"] != e.alertname || a.Labels["job"] != e.job || a.Status != "firing" {
		return false
	}
	for k, v := range e.labels {
		if a.Labels[k] != v {
			return false
		}
	}
	return a.Annotations["summary"] != "" && a.Annotations["description"] != "" &&
		a.Annotations["runbook_url"] == "https://github.com/gpudiag/gpudiag/blob/main/docs/runbooks/"+e.alertname+".md"
}

func TestEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end test skipped in -short mode")
	}
	prometheus := binary(t, "prometheus")
	alertmanager := binary(t, "prometheus-alertmanager", "alertmanager")
	goTool := binary(t, "go")
	dir := t.TempDir()

	// The daemon, built as `make build` builds it (from the build cache when
	// the packages were compiled before).
	daemon := filepath.Join(dir, "gpudiag")
	buildCtx, cancelBuild := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancelBuild()
	build := exec.CommandContext(buildCtx, goTool, "build", "-o", daemon, "../cmd/exporter")
	build.Env = append(os.Environ(), "CGO_ENABLED=1")
	if os.Getenv("CGO_CFLAGS") == "" {
		build.Env = append(build.Env, "CGO_CFLAGS=-O2 -g -Wno-deprecated-declarations")
	}
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	// Everything after the build: about a minute, bounded at two and a half.
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Second)
	defer cancel()

	// Traces: three situations recorded on a real H200, shifted to start now
	// so that the daemon's clock is the wall clock; an 8-GPU node made from
	// the GEMM trace; and the idle trace left at the time it was recorded.
	shiftedTrace := func(name, out string, edit func(string, time.Duration, json.RawMessage) any) (string, time.Duration) {
		frames := readTrace(t, filepath.Join(tracesDir, name+".gdrec"))
		out = filepath.Join(dir, out+".gdrec")
		writeTrace(t, out, frames, time.Since(frames[0].Time()), edit)
		return out, frames[len(frames)-1].Time().Sub(frames[0].Time())
	}
	spans := map[string]time.Duration{}
	trace := func(name, out string, edit func(string, time.Duration, json.RawMessage) any) string {
		path, span := shiftedTrace(name, out, edit)
		spans[out] = span
		return path
	}
	hostBound := trace("python_input_pipeline", "host-bound", nil)
	ioBound := trace("disk_reader", "io-bound", nil)
	healthy := trace("bf16_gemm", "healthy", nil)
	gemm := readTrace(t, filepath.Join(tracesDir, "bf16_gemm.gdrec"))
	fake8 := trace("bf16_gemm", "fake8", fakeEightGPUNode(t, gemm))
	// All-reduce between the two NVLink-connected H200s of one node, with
	// NCCL's logs: over NVLink (communication-bound on the right path), with
	// NCCL_P2P_DISABLE=1 (shared memory) and over sockets.
	nvlink := trace("allreduce_nvlink_nccl_log", "nvlink", nil)
	shm := trace("allreduce_p2p_disabled_nccl_log", "shm-fallback", nil)
	sockets := trace("allreduce_sockets_nccl_log", "sockets", nil)
	var longest time.Duration
	for _, d := range spans {
		longest = max(longest, d)
	}
	oldTrace := filepath.Join(tracesDir, "idle.gdrec")
	oldFrames := readTrace(t, oldTrace)
	oldAge := time.Since(oldFrames[len(oldFrames)-1].Time())

	ncclDir := filepath.Join(dir, "nccl")
	if err := os.MkdirAll(ncclDir, 0o755); err != nil {
		t.Fatal(err)
	}
	logText, err := os.ReadFile(ncclLog)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ncclDir, "job.log"), logText, 0o644); err != nil {
		t.Fatal(err)
	}
	fixtureAbs, err := filepath.Abs(fixture)
	if err != nil {
		t.Fatal(err)
	}

	// A replayed collector is served while fresh by the engine's interval
	// (--sample.interval), not the interval it was recorded at, so without
	// --sample.interval=30s the gpuprocess (5 s) and tuning (30 s) metrics
	// of a replay would drop out between their samples.
	replay := func(trace string) []string {
		return []string{"--replay=" + trace, "--replay.speed=1", "--sample.interval=30s"}
	}
	targets := []scrapeTarget{
		{job: "gpudiag-host-bound", args: replay(hostBound)},
		{job: "gpudiag-io-bound", args: replay(ioBound)},
		// Three healthy nodes in one job: the fleet rules compare them.
		{job: "gpudiag-healthy", args: replay(healthy)},
		{job: "gpudiag-healthy", args: replay(healthy)},
		{job: "gpudiag-healthy", args: replay(healthy)},
		{job: "gpudiag-fake8", args: replay(fake8)},
		{job: "gpudiag-nvlink", args: replay(nvlink)},
		{job: "gpudiag-shm-fallback", args: replay(shm)},
		{job: "gpudiag-sockets", args: replay(sockets)},
		{job: "gpudiag-recorded-time", args: replay(oldTrace)},
		// Live collectors on the reference host's fixture tree (8-GPU
		// two-socket node, InfiniBand and RoCE HCAs) with a real NCCL log of
		// an all-reduce run with NCCL_P2P_DISABLE=1; no GPU backend.
		{job: "gpudiag-fixture", args: []string{
			"--path.procfs=" + filepath.Join(fixtureAbs, "proc"), "--path.sysfs=" + filepath.Join(fixtureAbs, "sys"),
			"--collector.gpu.backend=none", "--collector.nccl.log-glob=" + filepath.Join(ncclDir, "*.log")}},
	}

	hook := &webhook{}
	hookSrv := httptest.NewServer(hook)
	t.Cleanup(hookSrv.Close)

	amAddr := freeAddr(t)
	amConfig := filepath.Join(dir, "alertmanager.yml")
	writeFile(t, amConfig, fmt.Sprintf(`route:
  receiver: test
  group_by: [alertname, job, instance]
  group_wait: 1s
  group_interval: 1s
  repeat_interval: 1h
receivers:
  - name: test
    webhook_configs:
      - url: %s/hook
        send_resolved: false
`, hookSrv.URL))
	am := start(t, dir, "alertmanager", alertmanager, "--config.file="+amConfig,
		"--storage.path="+filepath.Join(dir, "am-data"), "--web.listen-address="+amAddr,
		"--cluster.listen-address=")

	// The rules as shipped, with time compressed.
	ruleDir := compressedRules(t, dir)

	started := time.Now()
	var daemons []*process
	for i := range targets {
		targets[i].addr = freeAddr(t)
		args := append([]string{"--web.listen-address=" + targets[i].addr}, targets[i].args...)
		daemons = append(daemons, start(t, dir, fmt.Sprintf("%s-%d", targets[i].job, i), daemon, args...))
	}

	var scrape strings.Builder
	var jobs []string
	addrs := map[string][]string{}
	for _, tg := range targets {
		if addrs[tg.job] == nil {
			jobs = append(jobs, tg.job)
		}
		addrs[tg.job] = append(addrs[tg.job], fmt.Sprintf("%q", tg.addr))
	}
	// And a target where nothing listens: a node whose daemon is down.
	jobs = append(jobs, "gpudiag-down")
	addrs["gpudiag-down"] = []string{fmt.Sprintf("%q", freeAddr(t))}
	for _, job := range jobs {
		fmt.Fprintf(&scrape, "  - job_name: %s\n    static_configs:\n      - targets: [%s]\n", job, strings.Join(addrs[job], ", "))
	}
	promAddr := freeAddr(t)
	api := startPrometheus(ctx, t, prometheus, dir, promAddr, fmt.Sprintf(`global:
  scrape_interval: 1s
  scrape_timeout: 1s
  evaluation_interval: 1s
rule_files:
  - %s/*.yml
alerting:
  alertmanagers:
    - static_configs:
        - targets: [%q]
scrape_configs:
%s`, ruleDir, amAddr, scrape.String()))
	for i, d := range daemons {
		waitHTTP(ctx, t, d, "http://"+targets[i].addr+"/healthz")
	}
	waitHTTP(ctx, t, am, "http://"+amAddr+"/-/ready")
	rulesLoaded := 0
	for _, g := range api.rules() {
		rulesLoaded += len(g.Rules)
	}
	if rulesLoaded == 0 {
		t.Fatal("Prometheus loaded no rules")
	}
	t.Logf("Prometheus %s, Alertmanager %s, %d rules, %d daemons; traces last up to %v", promAddr, amAddr,
		rulesLoaded, len(daemons), longest.Round(time.Second))

	expected := []expectation{
		{"GPUDiagGPUsStarved", "gpudiag-host-bound", map[string]string{"class": "host", "severity": "warning"}},
		{"GPUDiagGPUsStarved", "gpudiag-io-bound", map[string]string{"class": "io", "severity": "warning"}},
		{"GPUDiagStraggler", "gpudiag-fake8", map[string]string{"gpu": fmt.Sprint(fakeStragglerGPU), "scope": "node", "severity": "warning"}},
		{"GPUDiagStraggler", "gpudiag-fake8", map[string]string{"gpu": fmt.Sprint(fakeStragglerGPU), "scope": "job", "severity": "warning"}},
		{"GPUDiagXIDError", "gpudiag-fake8", map[string]string{"gpu": fmt.Sprint(fakeXIDGPU), "xid": fmt.Sprint(fakeXID), "severity": "warning"}},
		{"GPUDiagNVLinkErrors", "gpudiag-fake8", map[string]string{"gpu": fmt.Sprint(fakeNVLinkErrorGPU), "kind": "replay", "severity": "warning"}},
		// One NCCL fallback alert per cause and node (issue 37), listing its GPUs.
		{"GPUDiagNCCLFallback", "gpudiag-fixture", map[string]string{"kind": "p2p_disabled", "severity": "warning"}},
		{"GPUDiagExporterDown", "gpudiag-down", map[string]string{"severity": "warning"}},
		{"GPUDiagCommunicationBoundFallback", "gpudiag-shm-fallback", map[string]string{"class": "communication", "severity": "warning"}},
		{"GPUDiagNCCLFallback", "gpudiag-shm-fallback", map[string]string{"kind": "p2p_disabled", "severity": "warning"}},
		{"GPUDiagCommunicationBoundFallback", "gpudiag-sockets", map[string]string{"class": "communication", "severity": "warning"}},
		// Sockets on a node without an RDMA device: the causes are P2P and
		// shared memory disabled, not "sockets instead of InfiniBand".
		{"GPUDiagNCCLFallback", "gpudiag-sockets", map[string]string{"kind": "shm_disabled", "severity": "warning"}},
	}
	// Jobs whose traces are healthy: no alert may fire, or even be pending.
	silent := []string{"gpudiag-healthy", "gpudiag-nvlink"}
	if oldAge > staleAfter+time.Minute {
		expected = append(expected, expectation{"GPUDiagExporterStale", "gpudiag-recorded-time",
			map[string]string{"collector": "gpu", "severity": "warning"}})
	} else {
		t.Logf("idle trace recorded %v ago, under the stale threshold: GPUDiagExporterStale not expected", oldAge.Round(time.Second))
	}

	// Wait for every expected alert at the webhook, and for the healthy
	// traces to have been replayed whole and held as long as a for: window
	// after: they had every chance to fire.
	healthyUntil := started.Add(longest + 2*time.Second + mustDuration(t, testFor) + 5*time.Second)
	alertDeadline := started.Add(alertTimeout)
	var missing []expectation
	for {
		missing = missing[:0]
		got := hook.snapshot()
		for _, e := range expected {
			found := false
			for _, a := range got {
				if e.matches(a) {
					found = true
					break
				}
			}
			if !found {
				missing = append(missing, e)
			}
		}
		if len(missing) == 0 && time.Now().After(healthyUntil) {
			break
		}
		if time.Now().After(alertDeadline) {
			t.Fatalf("alerts not delivered within %v: %+v\nreceived:\n%s\nin Prometheus: %s\n%s\n%s", alertTimeout, missing,
				describe(got), resultString(api.query(`ALERTS`)), resultString(api.query(`instance_gpu:gpudiag_gpu_sm_active_seconds:rate5m_working`)),
				resultString(api.query(`job:gpudiag_gpu_sm_active_seconds:median_rate5m_working`)))
		}
		time.Sleep(500 * time.Millisecond)
	}
	t.Logf("every expected alert reached the webhook %v after the daemons started", time.Since(started).Round(time.Second))
	for _, a := range hook.snapshot() {
		t.Logf("delivered: %s", describe([]received{a}))
		if slices.Contains(silent, a.Labels["job"]) {
			t.Errorf("a healthy trace raised %s", describe([]received{a}))
		}
	}
	// Not even pending at any moment: ALERTS keeps pending alerts too. A
	// pending GPUDiagExporterDown is a 1 s scrape that timed out on this
	// shared machine, not something the trace raised; firing it would be.
	window := fmt.Sprintf("%ds", int(time.Since(started).Seconds())+5)
	if res := api.query(`count_over_time(ALERTS{job=~"` + strings.Join(silent, "|") + `", alertname!="GPUDiagExporterDown"}[` + window + `]) or count_over_time(ALERTS{job=~"` + strings.Join(silent, "|") + `", alertstate="firing"}[` + window + `])`); len(res) > 0 {
		t.Errorf("alerts pending or firing for a healthy trace: %s", resultString(res))
	}

	// Every dashboard query is valid PromQL and returns data from these
	// daemons, and reads only names they export or the rules record. The
	// queries are evaluated at the end of the replays, when the (compressed)
	// rate windows of the rules and the panels cover the traces' activity.
	at := started.Add(spans["healthy"])
	records, ruleExprs := loadRules(t)
	names := map[string]bool{}
	for _, n := range api.labelValues("__name__") {
		names[n] = true
	}
	// The job dashboard and the queries that read the training-job identity
	// have no job to show in these traces: TestTrainingJobAcrossNodes runs
	// them; nor have they a finding that costs a GPU time:
	// TestGPUHoursSplitOfAJob runs those.
	checkDashboardQueries(t, api, dashboardQueries(t, func(q dashboardQuery) bool { return !needsJobIdentity(q) && !needsCostlyFinding(q) }), at, nil, names)
	for file, d := range loadDashboards(t) {
		if file != jobDashboard {
			checkVariables(t, api, file, d, nil)
		}
	}
	// The rules read only exported names or names other rules record (up
	// is Prometheus'). A recorded name counts even when it recorded
	// nothing here: the training-job rules have no job to join in these
	// traces (TestTrainingJobAcrossNodes runs them).
	for _, e := range ruleExprs {
		for _, n := range metricNames(e) {
			if !names[n] && !records[n] {
				t.Errorf("rule expression reads %s, which no daemon exported:\n%s", n, e)
			}
		}
	}
	for r := range records {
		if !names[r] {
			t.Logf("recording rule %s recorded nothing (no input in these traces)", r)
		}
	}

	// Series per node, for docs/fleet.md.
	for _, res := range api.queryAt(`scrape_samples_scraped > 0`, at) {
		gd := api.queryAt(fmt.Sprintf(`count({instance=%q, __name__=~"gpudiag_.+"})`, res.Metric["instance"]), at)
		n := "?"
		if len(gd) == 1 {
			n = gd[0].Value[1].(string)
		}
		t.Logf("series per scrape: %-22s %s in all, %s gpudiag_*", res.Metric["job"], res.Value[1], n)
	}
}

func writeFile(t *testing.T, path, text string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}

func mustDuration(t *testing.T, s string) time.Duration {
	t.Helper()
	d, err := time.ParseDuration(s)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func describe(as []received) string {
	var out []string
	for _, a := range as {
		keys := make([]string, 0, len(a.Labels))
		for k := range a.Labels {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		var kv []string
		for _, k := range keys {
			kv = append(kv, k+"="+a.Labels[k])
		}
		out = append(out, a.Status+" {"+strings.Join(kv, ", ")+"}: "+a.Annotations["summary"])
	}
	return strings.Join(out, "\n")
}

// promAPI queries Prometheus' HTTP API; any error fails the test.
type promAPI struct {
	t    *testing.T
	ctx  context.Context
	base string
}

type vectorSample struct {
	Metric map[string]string `json:"metric"`
	Value  [2]any            `json:"value"`
}

func resultString(rs []vectorSample) string {
	b, _ := json.Marshal(rs)
	return string(b)
}

func (p *promAPI) get(path string, params url.Values, into any) {
	p.t.Helper()
	req, _ := http.NewRequestWithContext(p.ctx, http.MethodGet, p.base+path+"?"+params.Encode(), nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		p.t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var env struct {
		Status string          `json:"status"`
		Error  string          `json:"error"`
		Data   json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal(body, &env); err != nil || env.Status != "success" {
		p.t.Fatalf("GET %s %v: %s %s", path, params, resp.Status, body)
	}
	if err := json.Unmarshal(env.Data, into); err != nil {
		p.t.Fatalf("GET %s: %v", path, err)
	}
}

// query runs an instant query now.
func (p *promAPI) query(expr string) []vectorSample {
	p.t.Helper()
	return p.queryAt(expr, time.Now())
}

// queryAt runs an instant query at a time; an expression that does not
// parse fails the test with Prometheus' error.
func (p *promAPI) queryAt(expr string, at time.Time) []vectorSample {
	p.t.Helper()
	var data struct {
		ResultType string          `json:"resultType"`
		Result     json.RawMessage `json:"result"`
	}
	p.get("/api/v1/query", url.Values{"query": {expr}, "time": {fmt.Sprintf("%.3f", float64(at.UnixMilli())/1000)}}, &data)
	var out []vectorSample
	switch data.ResultType {
	case "vector":
		if err := json.Unmarshal(data.Result, &out); err != nil {
			p.t.Fatal(err)
		}
	case "scalar":
		var v [2]any
		if err := json.Unmarshal(data.Result, &v); err != nil {
			p.t.Fatal(err)
		}
		out = []vectorSample{{Value: v}}
	default:
		p.t.Fatalf("query %s: result type %s", expr, data.ResultType)
	}
	return out
}

func (p *promAPI) labelValues(label string) []string {
	p.t.Helper()
	var out []string
	p.get("/api/v1/label/"+label+"/values", nil, &out)
	return out
}

func (p *promAPI) series(match string) []map[string]string {
	p.t.Helper()
	var out []map[string]string
	p.get("/api/v1/series", url.Values{"match[]": {match}}, &out)
	return out
}

type ruleGroupStatus struct {
	Name  string            `json:"name"`
	Rules []json.RawMessage `json:"rules"`
}

func (p *promAPI) rules() []ruleGroupStatus {
	p.t.Helper()
	var out struct {
		Groups []ruleGroupStatus `json:"groups"`
	}
	p.get("/api/v1/rules", nil, &out)
	return out.Groups
}
