package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// dataLinks returns each panel's field data links, by dashboard and panel
// title.
func dataLinks(t *testing.T, file string) map[string][]string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dashboardDir, file))
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Panels []linkPanel `json:"panels"`
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatal(err)
	}
	out := map[string][]string{}
	var walk func([]linkPanel)
	walk = func(ps []linkPanel) {
		for _, p := range ps {
			for _, l := range p.FieldConfig.Defaults.Links {
				out[p.Title] = append(out[p.Title], l.URL)
			}
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	return out
}

type linkPanel struct {
	Title       string `json:"title"`
	FieldConfig struct {
		Defaults struct {
			Links []struct {
				Title string `json:"title"`
				URL   string `json:"url"`
			} `json:"links"`
		} `json:"defaults"`
	} `json:"fieldConfig"`
	Panels []linkPanel `json:"panels"`
}

// Every panel of the node and fleet dashboards that shows a node's or a
// GPU's verdict, per node, links to that node's /diagnose. The fleet's
// per-class counts (job:gpudiag_*_by_class:sum) are summed over nodes and
// have no instance to link to.
func TestDashboardsVerdictPanelsLinkToDiagnose(t *testing.T) {
	// The raw per-node series, not recording rules named after them
	// (instance_gpu:gpudiag_gpu_straggler:job).
	verdict := regexp.MustCompile(`(^|[^:\w])(gpudiag_(node|gpu|group)_bottleneck\w*|gpudiag_finding|gpudiag_gpu_straggler)([^:\w]|$)`)
	diagnose := regexp.MustCompile(`^http://\$\{(__field\.labels\.instance|__data\.fields\.instance|instance)\}/diagnose(#[-a-z0-9${}_.]+)?$`)
	dash := loadDashboards(t)
	checked := 0
	for _, file := range []string{"gpudiag-node.json", "gpudiag-fleet.json"} {
		links := dataLinks(t, file)
		for _, p := range allPanels(dash[file].Panels) {
			exprs := ""
			for _, tg := range p.Targets {
				exprs += tg.Expr + "\n"
			}
			if !verdict.MatchString(exprs) {
				continue
			}
			checked++
			ok := false
			for _, u := range links[p.Title] {
				ok = ok || diagnose.MatchString(u)
			}
			if !ok {
				t.Errorf("%s: verdict panel %q has no data link to the node's /diagnose (links %v)", file, p.Title, links[p.Title])
			}
		}
	}
	if checked < 8 {
		t.Fatalf("only %d verdict panels found; the pattern no longer matches the dashboards", checked)
	}
}

// readmeMetricFamilies returns the metric families the README's tables list
// (the generated table, NCCL's and eBPF's), with their types.
func readmeMetricFamilies(t *testing.T) map[string]string {
	t.Helper()
	b, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	start, end := strings.Index(s, "\n## Metrics"), strings.Index(s, "\n## Alerts, dashboards")
	if start < 0 || end < start {
		t.Fatal("README.md: no Metrics section before Alerts, dashboards")
	}
	out := map[string]string{}
	for _, m := range regexp.MustCompile("(?m)^\\| `(gpudiag_[a-z0-9_]+)` \\| (\\w+) \\|").FindAllStringSubmatch(s[start:end], -1) {
		out[m[1]] = m[2]
	}
	if len(out) < 100 {
		t.Fatalf("only %d metric families in README.md's tables", len(out))
	}
	return out
}

// notOnDashboard returns the families docs/dashboards.md lists under
// "Metrics not on a dashboard, and why".
func notOnDashboard(t *testing.T) map[string]bool {
	t.Helper()
	b, err := os.ReadFile("../docs/dashboards.md")
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	i := strings.Index(s, "## Metrics not on a dashboard, and why")
	if i < 0 {
		t.Fatal(`docs/dashboards.md has no "Metrics not on a dashboard, and why" section`)
	}
	out := map[string]bool{}
	for _, line := range regexp.MustCompile(`(?m)^- .*$`).FindAllString(s[i:], -1) {
		for _, m := range regexp.MustCompile("`(gpudiag_[a-z0-9_]+)`").FindAllStringSubmatch(line, -1) {
			out[m[1]] = true
		}
	}
	return out
}

// Every exported metric family is drawn by some dashboard, directly or
// through the recording rules a dashboard reads, or is listed in
// docs/dashboards.md with the reason; nothing listed there is drawn or
// gone.
func TestDashboardsCoverEveryMetric(t *testing.T) {
	families := readmeMetricFamilies(t)
	listed := notOnDashboard(t)

	// What the dashboards read: panel targets and variable queries.
	drawn := map[string]bool{}
	for _, d := range loadDashboards(t) {
		for _, p := range allPanels(d.Panels) {
			for _, tg := range p.Targets {
				for _, n := range metricNames(tg.Expr) {
					drawn[n] = true
				}
			}
		}
		for _, v := range d.Templating.List {
			for _, n := range metricNames(v.query()) {
				drawn[n] = true
			}
		}
	}
	// Through recording rules, transitively.
	recordExprs := recordingRuleExprs(t)
	for changed := true; changed; {
		changed = false
		for rec, expr := range recordExprs {
			if !drawn[rec] {
				continue
			}
			for _, n := range metricNames(expr) {
				if !drawn[n] {
					drawn[n], changed = true, true
				}
			}
		}
	}
	isDrawn := func(name, typ string) bool {
		if typ == "histogram" || typ == "summary" {
			return drawn[name+"_bucket"] || drawn[name+"_sum"] || drawn[name+"_count"] || drawn[name]
		}
		return drawn[name]
	}
	for name, typ := range families {
		switch d := isDrawn(name, typ); {
		case !d && !listed[name]:
			t.Errorf("%s is on no dashboard and not listed in docs/dashboards.md \"Metrics not on a dashboard, and why\"", name)
		case d && listed[name]:
			t.Errorf("%s is listed in docs/dashboards.md as on no dashboard, but a dashboard draws it", name)
		}
	}
	for name := range listed {
		if _, ok := families[name]; !ok {
			t.Errorf("docs/dashboards.md lists %s, which README.md's metric tables do not", name)
		}
	}
}

// recordingRuleExprs maps each recording rule to its expression.
func recordingRuleExprs(t *testing.T) map[string]string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(rulesDir, "*.yml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no rule files in %s: %v", rulesDir, err)
	}
	out := map[string]string{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var rf ruleFile
		if err := yaml.Unmarshal(b, &rf); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		for _, g := range rf.Groups {
			for _, r := range g.Rules {
				if r.Record != "" {
					out[r.Record] += r.Expr + "\n"
				}
			}
		}
	}
	return out
}
