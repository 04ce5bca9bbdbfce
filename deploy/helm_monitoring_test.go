// The chart's monitoring values: the scrape object (ServiceMonitor or
// PodMonitor) with its relabelings, metric relabelings and honorLabels, the
// dashboards' ConfigMaps, and the copies of dashboards/*.json the chart and
// the kustomize base carry.
package deploy

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// The copies of dashboards/*.json: Helm and kustomize read nothing outside
// their directories.
var dashboardCopies = []string{"helm/gpudiag/files/dashboards", "kubernetes/dashboards"}

// The chart's and the base's copies of the dashboards are dashboards/*.json
// byte for byte, the same files and no others; -update copies them.
func TestDashboardCopiesMatch(t *testing.T) {
	files, err := filepath.Glob("../dashboards/*.json")
	if err != nil || len(files) == 0 {
		t.Fatalf("no dashboards: %v", err)
	}
	for _, dir := range dashboardCopies {
		if *update {
			old, _ := filepath.Glob(filepath.Join(dir, "*.json"))
			for _, f := range old {
				if err := os.Remove(f); err != nil {
					t.Fatal(err)
				}
			}
			for _, f := range files {
				b, err := os.ReadFile(f)
				if err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(dir, filepath.Base(f)), b, 0o644); err != nil {
					t.Fatal(err)
				}
			}
		}
		copies, _ := filepath.Glob(filepath.Join(dir, "*.json"))
		var want, got []string
		for _, f := range files {
			want = append(want, filepath.Base(f))
		}
		for _, f := range copies {
			got = append(got, filepath.Base(f))
		}
		sort.Strings(want)
		sort.Strings(got)
		if !slices.Equal(want, got) {
			t.Errorf("%s holds %v; dashboards/ holds %v; copy them with: go test ./deploy -run TestDashboardCopiesMatch -update", dir, got, want)
			continue
		}
		for _, f := range files {
			a, _ := os.ReadFile(f)
			b, _ := os.ReadFile(filepath.Join(dir, filepath.Base(f)))
			if !bytes.Equal(a, b) {
				t.Errorf("%s/%s differs from %s; copy it with: go test ./deploy -run TestDashboardCopiesMatch -update", dir, filepath.Base(f), f)
			}
		}
	}
}

// The base's kustomization generates one ConfigMap per copied dashboard,
// without a name hash (the names stay those the chart gives).
func TestKustomizationGeneratesEveryDashboard(t *testing.T) {
	k := loadManifests(t).kustomization
	copies, _ := filepath.Glob("kubernetes/dashboards/*.json")
	var listed []string
	for _, g := range k.ConfigMapGenerator {
		listed = append(listed, g.Files...)
	}
	for _, f := range copies {
		if rel := "dashboards/" + filepath.Base(f); !slices.Contains(listed, rel) {
			t.Errorf("kustomization.yaml's configMapGenerator does not list %s", rel)
		}
	}
	if !k.GeneratorOptions.DisableNameSuffixHash {
		t.Error("generated ConfigMaps must keep their names (disableNameSuffixHash): Helm's have none")
	}
}

// Both renderings hold every dashboard, labelled for Grafana's sidecar.
func TestHelmDashboards(t *testing.T) {
	r := renderChart(t, release, "")
	checkDashboardConfigMaps(t, "helm template", r.configMaps, "gpudiag-dashboard-")
	for _, cm := range r.configMaps {
		if cm.Namespace != namespace {
			t.Errorf("ConfigMap %s in %q; want the release's namespace", cm.Name, cm.Namespace)
		}
	}

	// Another namespace (Grafana's), another label, a folder annotation.
	r = renderChart(t, "monitoring", `dashboards:
  namespace: grafana
  labels: {grafana_dashboard: null, example.com/dashboard: gpu}
  annotations: {grafana_folder: GPU}
`)
	if len(r.configMaps) != len(dashboardFiles(t)) {
		t.Fatalf("%d ConfigMaps; want one per dashboard", len(r.configMaps))
	}
	for _, cm := range r.configMaps {
		if cm.Namespace != "grafana" || cm.Labels["example.com/dashboard"] != "gpu" || cm.Labels["grafana_dashboard"] != "" ||
			cm.Annotations["grafana_folder"] != "GPU" || !strings.HasPrefix(cm.Name, "monitoring-gpudiag-dashboard-") {
			t.Errorf("ConfigMap %s/%s labels %v annotations %v", cm.Namespace, cm.Name, cm.Labels, cm.Annotations)
		}
	}
}

func dashboardFiles(t *testing.T) []string {
	t.Helper()
	files, _ := filepath.Glob("../dashboards/*.json")
	return files
}

// scrapeValues sets every scrape value the chart has beyond the defaults.
const scrapeValues = `
serviceMonitor:
  honorLabels: true
  relabelings:
    - {sourceLabels: [__meta_kubernetes_node_label_topology_kubernetes_io_zone], targetLabel: zone, action: replace}
  metricRelabelings:
    - {sourceLabels: [__name__], regex: gpudiag_process_.*, action: drop}
`

// The scrape values land on the monitor's endpoint, after the chart's own
// relabeling, for a ServiceMonitor and a PodMonitor alike; the PodMonitor
// selects the DaemonSet's pods by their port, and both pass the operator's
// CRD schemas (decodeRendered).
func TestHelmScrapeObject(t *testing.T) {
	for _, kind := range []string{"ServiceMonitor", "PodMonitor"} {
		r := renderChart(t, release, scrapeValues+"  kind: "+kind+"\n")
		if !r.has(kind) {
			t.Fatalf("kind %s: the chart renders %v", kind, r.kinds)
		}
		m := r.serviceMonitor
		eps := m.endpoints()
		if len(eps) != 1 {
			t.Fatalf("%s: %d endpoints", kind, len(eps))
		}
		ep := eps[0]
		if !ep.HonorLabels {
			t.Errorf("%s: honorLabels not set", kind)
		}
		if len(ep.Relabelings) != 2 || ep.Relabelings[0].TargetLabel != "node" || ep.Relabelings[1].TargetLabel != "zone" {
			t.Errorf("%s: relabelings %+v; want the chart's node, then the value's zone", kind, ep.Relabelings)
		}
		if len(ep.MetricRelabelings) != 1 || ep.MetricRelabelings[0].Action != "drop" {
			t.Errorf("%s: metricRelabelings %+v", kind, ep.MetricRelabelings)
		}
		sel, err := metav1.LabelSelectorAsSelector(&m.Spec.Selector)
		if err != nil {
			t.Fatal(err)
		}
		target := r.service.Labels
		if kind == "PodMonitor" {
			target = r.daemonSet.Spec.Template.Labels
			if ep.Port != r.daemonSet.Spec.Template.Spec.Containers[0].Ports[0].Name {
				t.Errorf("the PodMonitor scrapes port %q, not the container's", ep.Port)
			}
		}
		if !sel.Matches(labels.Set(target)) {
			t.Errorf("the %s does not select what it scrapes (labels %v)", kind, target)
		}
		if r.service.Name == "" {
			t.Errorf("%s: the Service is gone", kind)
		}
	}
	// The defaults: no honorLabels, the chart's relabeling alone.
	ep := renderChart(t, release, "").serviceMonitor.endpoints()[0]
	if ep.HonorLabels || len(ep.Relabelings) != 1 || len(ep.MetricRelabelings) != 0 {
		t.Errorf("default endpoint: honorLabels %v, relabelings %+v, metricRelabelings %+v", ep.HonorLabels, ep.Relabelings, ep.MetricRelabelings)
	}
}

// A kind other than ServiceMonitor or PodMonitor fails the render, naming
// the value.
func TestHelmScrapeObjectKindChecked(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), helmRenderTimeout)
	defer cancel()
	helm(t, "version", "--short") // builds helm, or skips
	f := filepath.Join(t.TempDir(), "values.yaml")
	if err := os.WriteFile(f, []byte("serviceMonitor: {kind: Probe}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := helmCommand(ctx, t, "template", release, chartDir, "--api-versions", operatorAPI, "--values", f).CombinedOutput()
	if err == nil || !strings.Contains(string(out), `serviceMonitor.kind is "Probe"`) {
		t.Errorf("kind Probe: %v\n%s", err, out)
	}
}

// The pod runs at system-node-critical by default, in the base and the
// chart; the value changes it, and "" leaves it out.
func TestPriorityClass(t *testing.T) {
	if got := loadManifests(t).daemonSet.Spec.Template.Spec.PriorityClassName; got != "system-node-critical" {
		t.Errorf("the base's priorityClassName %q; want system-node-critical", got)
	}
	if got := renderChart(t, release, "").daemonSet.Spec.Template.Spec.PriorityClassName; got != "system-node-critical" {
		t.Errorf("the chart's default priorityClassName %q; want system-node-critical", got)
	}
	if got := renderChart(t, release, "priorityClassName: \"\"\n").daemonSet.Spec.Template.Spec.PriorityClassName; got != "" {
		t.Errorf("priorityClassName \"\" renders %q", got)
	}
}
