// Package alerts holds gpudiag's Prometheus rule files (recording and
// alerting rules) and their promtool unit tests; this test runs promtool on
// them and checks the conventions every alert follows.
package alerts

import (
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// RunbookBase is where every alert's runbook_url points: the alert's name
// with .md appended, under docs/runbooks of the repository.
const RunbookBase = "https://github.com/gpudiag/gpudiag/blob/main/docs/runbooks/"

const runbookDir = "../docs/runbooks"

var severities = map[string]bool{"critical": true, "warning": true, "info": true}

// The rule file format, strictly: a misspelt key fails the test instead of
// being ignored by the YAML decoder.
type ruleFile struct {
	Groups []ruleGroup `json:"groups"`
}

type ruleGroup struct {
	Name     string `json:"name"`
	Interval string `json:"interval,omitempty"`
	Rules    []rule `json:"rules"`
}

type rule struct {
	Record      string            `json:"record,omitempty"`
	Alert       string            `json:"alert,omitempty"`
	Expr        string            `json:"expr"`
	For         string            `json:"for,omitempty"`
	Labels      map[string]string `json:"labels,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

// promtool's unit test format, the parts this test reads.
type testFile struct {
	RuleFiles          []string   `json:"rule_files"`
	EvaluationInterval string     `json:"evaluation_interval"`
	Tests              []testCase `json:"tests"`
}

type testCase struct {
	Interval       string           `json:"interval"`
	InputSeries    []map[string]any `json:"input_series"`
	AlertRuleTests []alertRuleTest  `json:"alert_rule_test"`
	PromQLTests    []map[string]any `json:"promql_expr_test"`
}

type alertRuleTest struct {
	EvalTime  string `json:"eval_time"`
	Alertname string `json:"alertname"`
	ExpAlerts []struct {
		ExpLabels      map[string]string `json:"exp_labels"`
		ExpAnnotations map[string]string `json:"exp_annotations"`
	} `json:"exp_alerts"`
}

func ruleFiles(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob("*.yml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no rule files in alerts/: %v", err)
	}
	return files
}

func testFiles(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob("tests/*.yml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no promtool unit tests in alerts/tests/: %v", err)
	}
	return files
}

func decodeStrict(t *testing.T, path string, into any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.UnmarshalStrict(b, into); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

// promtoolPath finds promtool; CI must have it (Debian's prometheus package),
// elsewhere the test skips without it.
func promtoolPath(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("promtool not installed; CI must install Debian's prometheus package")
		}
		t.Skip("promtool not installed")
	}
	return p
}

func TestPromtoolCheckRules(t *testing.T) {
	out, err := exec.Command(promtoolPath(t), append([]string{"check", "rules"}, ruleFiles(t)...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("promtool check rules: %v\n%s", err, out)
	}
	t.Logf("%s", out)
}

func TestPromtoolTestRules(t *testing.T) {
	out, err := exec.Command(promtoolPath(t), append([]string{"test", "rules"}, testFiles(t)...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("promtool test rules: %v\n%s", err, out)
	}
	if strings.Contains(string(out), "FAILED") || !strings.Contains(string(out), "SUCCESS") {
		t.Fatalf("promtool test rules:\n%s", out)
	}
}

// Every group name is used once across all the rule files: the
// PrometheusRule (deploy/) puts every file's groups into one rule file, and
// Prometheus refuses a file that repeats a group name, loading none of it.
func TestRuleGroupNamesUnique(t *testing.T) {
	seen := map[string]string{}
	for _, f := range ruleFiles(t) {
		var rf ruleFile
		decodeStrict(t, f, &rf)
		for _, g := range rf.Groups {
			if other, dup := seen[g.Name]; dup {
				t.Errorf("group %q is in %s and %s: one rule file of both would not load", g.Name, other, f)
			}
			seen[g.Name] = f
		}
	}
}

// alertRules returns every alerting rule; an alert may have several rules
// (one per severity).
func alertRules(t *testing.T) map[string][]rule {
	t.Helper()
	out := map[string][]rule{}
	for _, f := range ruleFiles(t) {
		var rf ruleFile
		decodeStrict(t, f, &rf)
		for _, g := range rf.Groups {
			for _, r := range g.Rules {
				if r.Alert != "" {
					out[r.Alert] = append(out[r.Alert], r)
				}
			}
		}
	}
	if len(out) == 0 {
		t.Fatal("no alerting rules found")
	}
	return out
}

// Every alert carries a severity, a summary and a description naming the node,
// and a runbook that exists.
func TestAlertConventions(t *testing.T) {
	for name, rules := range alertRules(t) {
		for _, r := range rules {
			if !severities[r.Labels["severity"]] {
				t.Errorf("%s: severity %q; want critical, warning or info", name, r.Labels["severity"])
			}
			for _, key := range []string{"summary", "description", "runbook_url"} {
				if r.Annotations[key] == "" {
					t.Errorf("%s: no %s annotation", name, key)
				}
			}
			for key, a := range r.Annotations {
				if key != "summary" && key != "description" && key != "runbook_url" {
					t.Errorf("%s: unexpected annotation %q", name, key)
				}
				if strings.HasSuffix(a, "\n") {
					t.Errorf("%s: annotation %s ends in a newline (use >- for folded text)", name, key)
				}
			}
			// Training-job alerts (one per job_id, job_source: the node
			// aggregated away) name the job; every other alert names the node.
			who, what := "$labels.instance", "the node"
			if strings.Contains(r.Expr, "training_job:") && !strings.Contains(r.Expr, "instance") {
				who, what = "$labels.job_id", "the training job"
			}
			if !strings.Contains(r.Annotations["summary"], who) ||
				!strings.Contains(r.Annotations["description"], who) {
				t.Errorf("%s: summary and description must name %s (%s)", name, what, who)
			}
			if want := RunbookBase + name + ".md"; r.Annotations["runbook_url"] != want {
				t.Errorf("%s: runbook_url %q; want %q", name, r.Annotations["runbook_url"], want)
			}
		}
		if _, err := os.Stat(filepath.Join(runbookDir, name+".md")); err != nil {
			t.Errorf("%s: runbook missing: %v", name, err)
		}
	}
}

// Every runbook belongs to an alert and says what the alert means, how to
// confirm it and how to fix it.
func TestRunbooks(t *testing.T) {
	alerts := alertRules(t)
	files, err := filepath.Glob(filepath.Join(runbookDir, "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		name := strings.TrimSuffix(filepath.Base(f), ".md")
		if name == "README" {
			continue
		}
		if _, ok := alerts[name]; !ok {
			t.Errorf("%s: no alert of that name", f)
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		text := string(b)
		if !strings.HasPrefix(text, "# "+name+"\n") {
			t.Errorf("%s: must start with the heading \"# %s\"", f, name)
		}
		for _, section := range []string{"\n## Meaning\n", "\n## Confirm\n", "\n## Fix\n"} {
			if !strings.Contains(text, section) {
				t.Errorf("%s: no %q section", f, strings.TrimSpace(section))
			}
		}
	}
}

// Every alert (every severity of it) is shown firing by a unit test, and not
// firing by another evaluation; GPU-level alerts name the GPU in the summary.
func TestEveryAlertTestedFiringAndNot(t *testing.T) {
	alerts := alertRules(t)
	firing := map[string]bool{} // alertname/severity
	silent := map[string]bool{}
	withGPU := map[string]bool{}
	for _, f := range testFiles(t) {
		var tf testFile
		decodeStrict(t, f, &tf)
		for _, tc := range tf.Tests {
			for _, at := range tc.AlertRuleTests {
				if _, ok := alerts[at.Alertname]; !ok {
					t.Errorf("%s: tests unknown alert %s", f, at.Alertname)
				}
				if len(at.ExpAlerts) == 0 {
					silent[at.Alertname] = true
				}
				for _, e := range at.ExpAlerts {
					firing[at.Alertname+"/"+e.ExpLabels["severity"]] = true
					if _, ok := e.ExpLabels["gpu"]; ok {
						withGPU[at.Alertname] = true
					}
				}
			}
		}
	}
	names := make([]string, 0, len(alerts))
	for n := range alerts {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, name := range names {
		for _, r := range alerts[name] {
			if !firing[name+"/"+r.Labels["severity"]] {
				t.Errorf("%s (severity %s): no unit test shows it firing", name, r.Labels["severity"])
			}
			if withGPU[name] && !strings.Contains(r.Annotations["summary"], "$labels.gpu") {
				t.Errorf("%s: fires per GPU but its summary does not name the GPU ($labels.gpu)", name)
			}
		}
		if !silent[name] {
			t.Errorf("%s: no unit test shows it not firing", name)
		}
	}
}
