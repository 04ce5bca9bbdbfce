package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"sigs.k8s.io/yaml"
)

// The shipped PrometheusRule: go test ./deploy proves kustomize builds it
// from this resource and the Helm chart renders the same groups.
const prometheusRule = "../deploy/kubernetes/prometheusrule.yaml"

// The PrometheusRule's groups load in a real Prometheus as the Prometheus
// Operator hands them over, all in one rule file: /api/v1/rules lists every
// group of spec.groups, with its rules, once, and each rule evaluates
// without error. Prometheus refuses a file that repeats a group name
// whole, so one shared name (the recording and the alerting
// gpudiag.training_job once were) would load none of gpudiag's rules.
func TestPrometheusRuleLoadsInPrometheus(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end test skipped in -short mode")
	}
	prometheus := binary(t, "prometheus")
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	b, err := os.ReadFile(prometheusRule)
	if err != nil {
		t.Fatal(err)
	}
	var pr struct {
		Kind string `json:"kind"`
		Spec struct {
			Groups []struct {
				Name  string `json:"name"`
				Rules []any  `json:"rules"`
			} `json:"groups"`
		} `json:"spec"`
	}
	if err := yaml.Unmarshal(b, &pr); err != nil || pr.Kind != "PrometheusRule" || len(pr.Spec.Groups) == 0 {
		t.Fatalf("%s: %v (kind %q, %d groups)", prometheusRule, err, pr.Kind, len(pr.Spec.Groups))
	}
	var raw struct {
		Spec struct {
			Groups any `json:"groups"`
		} `json:"spec"`
	}
	if err := yaml.Unmarshal(b, &raw); err != nil {
		t.Fatal(err)
	}
	rules, err := yaml.Marshal(map[string]any{"groups": raw.Spec.Groups})
	if err != nil {
		t.Fatal(err)
	}
	ruleFile := filepath.Join(dir, "gpudiag-gpudiag.yaml")
	writeFile(t, ruleFile, string(rules))

	promAddr := freeAddr(t)
	api := startPrometheus(ctx, t, prometheus, dir, promAddr,
		fmt.Sprintf("global:\n  evaluation_interval: 1s\nrule_files:\n  - %s\n", ruleFile))

	type ruleStatus struct {
		Name      string `json:"name"`
		Health    string `json:"health"`
		LastError string `json:"lastError"`
	}
	// Every rule has been evaluated once the health of each is known; the
	// groups evaluate every second.
	for {
		loaded := map[string]int{}
		unknown, bad := 0, []string{}
		for _, g := range api.rules() {
			loaded[g.Name]++
			for _, r := range g.Rules {
				var s ruleStatus
				if err := json.Unmarshal(r, &s); err != nil {
					t.Fatal(err)
				}
				switch s.Health {
				case "ok":
				case "unknown":
					unknown++
				default:
					bad = append(bad, fmt.Sprintf("%s/%s: %s %s", g.Name, s.Name, s.Health, s.LastError))
				}
			}
			for _, want := range pr.Spec.Groups {
				if want.Name == g.Name && len(want.Rules) != len(g.Rules) {
					t.Errorf("group %s: %d rules loaded; the PrometheusRule has %d", g.Name, len(g.Rules), len(want.Rules))
				}
			}
		}
		if unknown > 0 && ctx.Err() == nil {
			time.Sleep(500 * time.Millisecond)
			continue
		}
		for _, g := range pr.Spec.Groups {
			if loaded[g.Name] != 1 {
				t.Errorf("group %s loaded %d times; want once", g.Name, loaded[g.Name])
			}
		}
		if len(loaded) != len(pr.Spec.Groups) {
			t.Errorf("Prometheus loaded %d groups; the PrometheusRule has %d", len(loaded), len(pr.Spec.Groups))
		}
		if unknown > 0 || len(bad) > 0 {
			t.Errorf("%d rules never evaluated; rules in error: %v", unknown, bad)
		}
		t.Logf("%d groups of %s loaded from one rule file and evaluated", len(loaded), prometheusRule)
		return
	}
}
