package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"
)

const (
	dashboardDir = "../dashboards"
	rulesDir     = "../alerts"
	// The training-job dashboard: its variables are job_source and job_id.
	jobDashboard = "gpudiag-job.json"
)

// The parts of Grafana's dashboard model these tests read.
type dashboard struct {
	UID           string                    `json:"uid"`
	Title         string                    `json:"title"`
	SchemaVersion int                       `json:"schemaVersion"`
	Panels        []panel                   `json:"panels"`
	Templating    struct{ List []variable } `json:"templating"`
}

type panel struct {
	ID         int                       `json:"id"`
	Type       string                    `json:"type"`
	Title      string                    `json:"title"`
	Datasource *datasourceRef            `json:"datasource"`
	GridPos    *struct{ H, W, X, Y int } `json:"gridPos"`
	Targets    []target                  `json:"targets"`
	Panels     []panel                   `json:"panels"` // a collapsed row's panels
}

type target struct {
	RefID      string         `json:"refId"`
	Expr       string         `json:"expr"`
	Datasource *datasourceRef `json:"datasource"`
}

type datasourceRef struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

type variable struct {
	Name       string          `json:"name"`
	Type       string          `json:"type"`
	Query      json.RawMessage `json:"query"`
	Datasource *datasourceRef  `json:"datasource"`
	IncludeAll bool            `json:"includeAll"`
	AllValue   string          `json:"allValue"`
}

// query returns the variable's query text, which Grafana stores as a string
// or, since Grafana 10, as an object with a query field.
func (v variable) query() string {
	var s string
	if json.Unmarshal(v.Query, &s) == nil {
		return s
	}
	var o struct{ Query string }
	_ = json.Unmarshal(v.Query, &o)
	return o.Query
}

// dashboardQuery is one panel target.
type dashboardQuery struct {
	Dashboard, Panel, Expr string
}

func loadDashboards(t *testing.T) map[string]dashboard {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dashboardDir, "*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no dashboards in %s: %v", dashboardDir, err)
	}
	out := map[string]dashboard{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var d dashboard
		if err := json.Unmarshal(b, &d); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		out[filepath.Base(f)] = d
	}
	return out
}

// allPanels flattens rows.
func allPanels(ps []panel) []panel {
	var out []panel
	for _, p := range ps {
		out = append(out, p)
		out = append(out, allPanels(p.Panels)...)
	}
	return out
}

// dashboardQueries returns the panel targets for which keep is true.
func dashboardQueries(t *testing.T, keep func(dashboardQuery) bool) []dashboardQuery {
	t.Helper()
	var out []dashboardQuery
	for file, d := range loadDashboards(t) {
		for _, p := range allPanels(d.Panels) {
			for _, tg := range p.Targets {
				if q := (dashboardQuery{Dashboard: file, Panel: p.Title, Expr: tg.Expr}); keep(q) {
					out = append(out, q)
				}
			}
		}
	}
	sort.Slice(out, func(i, j int) bool {
		return out[i].Dashboard+out[i].Panel+out[i].Expr < out[j].Dashboard+out[j].Panel+out[j].Expr
	})
	return out
}

var (
	// A PromQL string literal, so that label values are not taken for names.
	stringLiteral = regexp.MustCompile("\"(?:[^\"\\\\]|\\\\.)*\"|'(?:[^'\\\\]|\\\\.)*'|`[^`]*`")
	identifier    = regexp.MustCompile(`[A-Za-z_:][A-Za-z0-9_:]*`)
	templateVar   = regexp.MustCompile(`\$\{?([A-Za-z_][A-Za-z0-9_]*)\}?`)
	// A range or subquery selector ([5m], [$__range:1m]), whose colon is
	// no recording rule's.
	rangeSelector = regexp.MustCompile(`\[[^\]]*\]`)
)

// metricNames returns the gpudiag metric and recording-rule names an
// expression reads: identifiers starting with gpudiag_, or with a colon
// (level:metric:operations).
func metricNames(expr string) []string {
	seen := map[string]bool{}
	var out []string
	for _, id := range identifier.FindAllString(rangeSelector.ReplaceAllString(stringLiteral.ReplaceAllString(expr, `""`), "[]"), -1) {
		if (strings.HasPrefix(id, "gpudiag_") || strings.Contains(id, ":")) && !seen[id] {
			seen[id] = true
			out = append(out, id)
		}
	}
	return out
}

// needsJobIdentity reports whether a query reads the training-job identity
// (gpudiag_gpu_job_info, the gpudiag.training_job rules, or the
// gpudiag.namespace rules, which group by the namespace of the pod on each
// GPU): it returns data only where GPUs are labelled with a job, in
// TestTrainingJobAcrossNodes (Kubernetes pods of namespace research), not
// in TestEndToEnd's traces. Every query of the job dashboard does.
func needsJobIdentity(q dashboardQuery) bool {
	if q.Dashboard == jobDashboard {
		return true
	}
	for _, n := range metricNames(q.Expr) {
		if n == "gpudiag_gpu_job_info" || strings.Contains(n, "training_job:") ||
			strings.HasPrefix(n, "namespace:") || strings.Contains(n, "_namespace:") {
			return true
		}
	}
	return false
}

// substituteWith replaces Grafana's variables with what Grafana would send
// with every value selected (label matchers use =~, so ".*" selects all),
// except those given values (a single-value variable such as the job
// dashboard's job_id).
func substituteWith(expr string, values map[string]string) string {
	return templateVar.ReplaceAllStringFunc(expr, func(v string) string {
		name := templateVar.FindStringSubmatch(v)[1]
		if val, ok := values[name]; ok {
			return val
		}
		switch name {
		case "__rate_interval":
			return "30s"
		case "__interval":
			return "15s"
		case "__range":
			return "2m"
		}
		return ".*"
	})
}

// The rule files, for the names of the recording rules.
type ruleFile struct {
	Groups []struct {
		Name  string `json:"name"`
		Rules []struct {
			Record string `json:"record"`
			Alert  string `json:"alert"`
			Expr   string `json:"expr"`
			For    string `json:"for"`
		} `json:"rules"`
	} `json:"groups"`
}

func loadRules(t *testing.T) (records map[string]bool, exprs []string) {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(rulesDir, "*.yml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no rule files in %s: %v", rulesDir, err)
	}
	records = map[string]bool{}
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
					records[r.Record] = true
				}
				exprs = append(exprs, r.Expr)
			}
		}
	}
	return records, exprs
}

// The dashboards' structure, without Prometheus: the datasource is the
// ${datasource} variable everywhere, the node and GPU dashboards have the
// instance and gpu variables, the job dashboard job_source and job_id
// (every one of its queries selects the job), every variable a query uses
// is defined, every panel has a query, and queries read only gpudiag
// metrics or recording rules. Whether each query parses and returns data is checked against a
// real Prometheus in TestEndToEnd, and for the queries that read the
// training-job identity in TestTrainingJobAcrossNodes.
func TestDashboards(t *testing.T) {
	records, _ := loadRules(t)
	uids := map[string]string{}
	for file, d := range loadDashboards(t) {
		if d.UID == "" || d.Title == "" || d.SchemaVersion == 0 {
			t.Errorf("%s: uid, title and schemaVersion are required", file)
		}
		if other, dup := uids[d.UID]; dup {
			t.Errorf("%s: uid %q also used by %s", file, d.UID, other)
		}
		uids[d.UID] = file
		vars := map[string]variable{}
		for _, v := range d.Templating.List {
			vars[v.Name] = v
			if v.Type == "query" {
				if v.Datasource == nil || v.Datasource.UID != "${datasource}" {
					t.Errorf("%s: variable %s: datasource must be ${datasource}", file, v.Name)
				}
				if v.IncludeAll && v.AllValue != ".*" {
					t.Errorf("%s: variable %s: allValue must be .* (queries match with =~)", file, v.Name)
				}
				for _, name := range metricNames(v.query()) {
					if !strings.HasPrefix(name, "gpudiag_") && !records[name] {
						t.Errorf("%s: variable %s reads %s, neither a gpudiag metric nor a recording rule", file, v.Name, name)
					}
				}
			}
		}
		if ds, ok := vars["datasource"]; !ok || ds.Type != "datasource" || ds.query() != "prometheus" {
			t.Errorf("%s: needs a datasource variable named datasource of type prometheus", file)
		}
		required := []string{"instance", "gpu"}
		switch file {
		case "gpudiag-fleet.json":
			required = nil
		case jobDashboard:
			required = []string{"job_source", "job_id"}
		}
		for _, name := range required {
			if _, ok := vars[name]; !ok {
				t.Errorf("%s: needs the %s variable", file, name)
			}
		}
		ids := map[int]bool{}
		for _, p := range allPanels(d.Panels) {
			if ids[p.ID] {
				t.Errorf("%s: panel id %d used twice", file, p.ID)
			}
			ids[p.ID] = true
			if p.GridPos == nil {
				t.Errorf("%s: panel %q has no gridPos", file, p.Title)
			}
			if p.Type == "row" || p.Type == "text" {
				continue
			}
			if p.Datasource == nil || p.Datasource.UID != "${datasource}" {
				t.Errorf("%s: panel %q: datasource must be ${datasource}", file, p.Title)
			}
			if len(p.Targets) == 0 {
				t.Errorf("%s: panel %q has no query", file, p.Title)
			}
			for _, tg := range p.Targets {
				if tg.Datasource != nil && tg.Datasource.UID != "${datasource}" {
					t.Errorf("%s: panel %q target %s: datasource must be ${datasource}", file, p.Title, tg.RefID)
				}
				names := metricNames(tg.Expr)
				if len(names) == 0 {
					t.Errorf("%s: panel %q: query %q reads no gpudiag metric", file, p.Title, tg.Expr)
				}
				for _, name := range names {
					if !strings.HasPrefix(name, "gpudiag_") && !records[name] {
						t.Errorf("%s: panel %q reads %s, neither a gpudiag metric nor a recording rule", file, p.Title, name)
					}
				}
				if file == jobDashboard && (!strings.Contains(tg.Expr, `job_id="$job_id"`) || !strings.Contains(tg.Expr, `job_source="$job_source"`)) {
					t.Errorf("%s: panel %q: query %q must select the job (job_id=\"$job_id\", job_source=\"$job_source\")", file, p.Title, tg.Expr)
				}
				for _, m := range templateVar.FindAllStringSubmatch(tg.Expr, -1) {
					if _, ok := vars[m[1]]; !ok && !strings.HasPrefix(m[1], "__") {
						t.Errorf("%s: panel %q uses undefined variable $%s", file, p.Title, m[1])
					}
				}
			}
		}
	}
}

var labelValuesCall = regexp.MustCompile(`^label_values\((.+),\s*[A-Za-z_]+\)$`)

// checkDashboardQueries runs each query at a time, its variables
// substituted (values first, then as substitute does): each must parse,
// return data and read only names in names (exported or recorded) or
// recording rules of alerts/: a rule that recorded nothing in the test
// (namespace:gpudiag_findings:count where no GPU has a finding) is no
// misspelt name, and its query still has to return data.
func checkDashboardQueries(t *testing.T, api *promAPI, qs []dashboardQuery, at time.Time, values map[string]string, names map[string]bool) {
	t.Helper()
	records, _ := loadRules(t)
	for _, q := range qs {
		expr := substituteWith(q.Expr, values)
		res := api.queryAt(expr, at)
		if len(res) == 0 && needsRangeHistory(q) {
			// A subquery's steps fall on multiples of its step since the
			// epoch: [2m:1m] on whole minutes. A replay shorter than a
			// minute may have crossed none by at, so the query is taken
			// again at the next whole minute, whose step finds the newest
			// recorded sample (Prometheus looks back 5 minutes), as
			// Grafana's would once the minute turned.
			res = api.queryAt(expr, at.Truncate(time.Minute).Add(time.Minute))
		}
		if len(res) == 0 {
			t.Errorf("%s / %s: no data for %s", q.Dashboard, q.Panel, expr)
		}
		for _, n := range metricNames(q.Expr) {
			if !names[n] && !records[n] {
				t.Errorf("%s / %s: %s is neither exported by any daemon nor recorded", q.Dashboard, q.Panel, n)
			}
		}
	}
}

// checkVariables checks that each query variable of a dashboard is
// label_values(selector, label) and that its selector, variables
// substituted, selects series.
func checkVariables(t *testing.T, api *promAPI, file string, d dashboard, values map[string]string) {
	t.Helper()
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		if m := labelValuesCall.FindStringSubmatch(v.query()); m == nil {
			t.Errorf("%s: variable %s: query %q is not label_values(selector, label)", file, v.Name, v.query())
		} else if len(api.series(substituteWith(m[1], values))) == 0 {
			t.Errorf("%s: variable %s: %s selects no series", file, v.Name, substituteWith(m[1], values))
		}
	}
}
