// The dashboards' links to a node's /diagnose, followed from a target as
// Prometheus labels it under the shipped ServiceMonitor (or the chart's
// PodMonitor): the monitor's relabelings are written into a scrape
// configuration as the Prometheus Operator writes them (operatorRelabelings,
// checked against the operator's own golden files), and applied to the
// target Kubernetes service discovery gives the DaemonSet's pod, with
// Prometheus' relabel package, as Prometheus' scrape manager applies them.
package deploy

import (
	"encoding/json"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/relabel"
	yamlv2 "go.yaml.in/yaml/v2"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
)

const goldenDir = "testdata/prometheus-operator/golden"

// sanitizeLabelName is the operator's: any character not valid in a label
// name becomes _, as Kubernetes service discovery names its meta labels.
var invalidLabelChar = regexp.MustCompile(`[^a-zA-Z0-9_]`)

func sanitizeLabelName(s string) string { return invalidLabelChar.ReplaceAllString(s, "_") }

// operatorRelabelings returns the relabel_configs the Prometheus Operator
// v0.93.0 writes for the first endpoint of a ServiceMonitor (role
// endpoints) or a PodMonitor (role pod): pkg/prometheus/promcfg.go,
// generateServiceMonitorConfig and generatePodMonitorConfig, for a
// Prometheus resource that adds nothing of its own (no scrape class, no
// enforced namespace label, no pod target labels), unsharded (the shard
// relabelings keep every target; $(SHARD) is 0, as the config reloader
// substitutes it). Only the fields gpudiag's monitors and the golden
// files use are written: a monitor with another field fails the test.
func operatorRelabelings(t *testing.T, m serviceMonitor) []map[string]any {
	t.Helper()
	eps := m.endpoints()
	if len(eps) != 1 {
		t.Fatalf("%s %s: %d endpoints", m.Kind, m.Name, len(eps))
	}
	ep := eps[0]
	if len(m.Spec.Selector.MatchExpressions) > 0 {
		t.Fatalf("%s %s: matchExpressions are not written here", m.Kind, m.Name)
	}
	pod := m.Kind == "PodMonitor"
	rs := []map[string]any{{"source_labels": []string{"job"}, "target_label": "__tmp_prometheus_job_name"}}
	running := map[string]any{"action": "drop", "source_labels": []string{"__meta_kubernetes_pod_phase"}, "regex": "(Failed|Succeeded)"}
	if pod {
		rs = append(rs, running)
	}
	metaPrefix := "__meta_kubernetes_service_"
	if pod {
		metaPrefix = "__meta_kubernetes_pod_"
	}
	keys := make([]string, 0, len(m.Spec.Selector.MatchLabels))
	for k := range m.Spec.Selector.MatchLabels {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		rs = append(rs, map[string]any{"action": "keep",
			"source_labels": []string{metaPrefix + "label_" + sanitizeLabelName(k), metaPrefix + "labelpresent_" + sanitizeLabelName(k)},
			"regex":         fmt.Sprintf("(%s);true", m.Spec.Selector.MatchLabels[k])})
	}
	if ep.Port == "" {
		t.Fatalf("%s %s: the endpoint names no port", m.Kind, m.Name)
	}
	portLabel := "__meta_kubernetes_endpoint_port_name"
	if pod {
		portLabel = "__meta_kubernetes_pod_container_port_name"
	}
	rs = append(rs, map[string]any{"action": "keep", "source_labels": []string{portLabel}, "regex": ep.Port})
	if pod {
		rs = append(rs,
			map[string]any{"source_labels": []string{"__meta_kubernetes_namespace"}, "target_label": "namespace"},
			map[string]any{"source_labels": []string{"__meta_kubernetes_pod_container_name"}, "target_label": "container"},
			map[string]any{"source_labels": []string{"__meta_kubernetes_pod_name"}, "target_label": "pod"})
	} else {
		kindName := []string{"__meta_kubernetes_endpoint_address_target_kind", "__meta_kubernetes_endpoint_address_target_name"}
		rs = append(rs,
			map[string]any{"source_labels": kindName, "separator": ";", "regex": "Node;(.*)", "replacement": "${1}", "target_label": "node"},
			map[string]any{"source_labels": kindName, "separator": ";", "regex": "Pod;(.*)", "replacement": "${1}", "target_label": "pod"},
			map[string]any{"source_labels": []string{"__meta_kubernetes_namespace"}, "target_label": "namespace"},
			map[string]any{"source_labels": []string{"__meta_kubernetes_service_name"}, "target_label": "service"},
			map[string]any{"source_labels": []string{"__meta_kubernetes_pod_name"}, "target_label": "pod"},
			map[string]any{"source_labels": []string{"__meta_kubernetes_pod_container_name"}, "target_label": "container"},
			running)
	}
	for _, l := range m.Spec.PodTargetLabels {
		rs = append(rs, map[string]any{"source_labels": []string{"__meta_kubernetes_pod_label_" + sanitizeLabelName(l)},
			"target_label": sanitizeLabelName(l), "regex": "(.+)", "replacement": "${1}"})
	}
	if pod {
		rs = append(rs, map[string]any{"target_label": "job", "replacement": m.Namespace + "/" + m.Name})
	} else {
		rs = append(rs, map[string]any{"source_labels": []string{"__meta_kubernetes_service_name"}, "target_label": "job", "replacement": "${1}"})
	}
	if m.Spec.JobLabel != "" {
		rs = append(rs, map[string]any{"source_labels": []string{metaPrefix + "label_" + sanitizeLabelName(m.Spec.JobLabel)},
			"target_label": "job", "regex": "(.+)", "replacement": "${1}"})
	}
	rs = append(rs, map[string]any{"target_label": "endpoint", "replacement": ep.Port})
	for _, r := range ep.Relabelings {
		rs = append(rs, operatorRelabelConfig(r))
	}
	return append(rs,
		map[string]any{"source_labels": []string{"__address__", "__tmp_hash"}, "target_label": "__tmp_hash", "regex": "(.+);", "replacement": "$1", "action": "replace"},
		map[string]any{"source_labels": []string{"__tmp_hash"}, "target_label": "__tmp_hash", "modulus": 1, "action": "hashmod"},
		map[string]any{"source_labels": []string{"__tmp_hash", "__tmp_disable_sharding"}, "regex": "0;|.+;.+", "action": "keep"})
}

// operatorRelabelConfig is the operator's generateRelabelConfig for one of
// the monitor's own relabelings: the action lower-cased, unset fields left
// to Prometheus' defaults.
func operatorRelabelConfig(r relabelConfig) map[string]any {
	out := map[string]any{}
	if len(r.SourceLabels) > 0 {
		out["source_labels"] = r.SourceLabels
	}
	if r.Separator != nil {
		out["separator"] = *r.Separator
	}
	if r.TargetLabel != "" {
		out["target_label"] = r.TargetLabel
	}
	if r.Regex != "" {
		out["regex"] = r.Regex
	}
	if r.Modulus != 0 {
		out["modulus"] = r.Modulus
	}
	if r.Replacement != nil {
		out["replacement"] = *r.Replacement
	}
	if r.Action != "" {
		out["action"] = strings.ToLower(r.Action)
	}
	return out
}

// prometheusRelabelConfigs decodes relabel_configs as Prometheus decodes
// its configuration file, defaults included, and validates them.
func prometheusRelabelConfigs(t *testing.T, in any) []*relabel.Config {
	t.Helper()
	b, err := yamlv2.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	var cfgs []*relabel.Config
	if err := yamlv2.UnmarshalStrict(b, &cfgs); err != nil {
		t.Fatalf("relabel_configs: %v\n%s", err, b)
	}
	for _, c := range cfgs {
		if err := c.Validate(model.UTF8Validation); err != nil {
			t.Fatalf("relabel config %+v: %v", c, err)
		}
	}
	return cfgs
}

// The relabelings operatorRelabelings writes are those the operator's own
// tests expect, for their ServiceMonitor (selector, port, relabelings of
// every kind) and PodMonitor (pod target labels).
func TestOperatorRelabelingsMatchGolden(t *testing.T) {
	for golden, monitor := range map[string]string{
		"GenerateRelabelConfig.golden": `apiVersion: monitoring.coreos.com/v1
kind: ServiceMonitor
metadata: {name: test, namespace: default}
spec:
  selector: {matchLabels: {foo: bar}}
  endpoints:
    - port: https-metrics
      interval: 30s
      metricRelabelings:
        - {action: Drop, regex: container_fs*, sourceLabels: [__name__]}
        - {action: Replace, replacement: "", targetLabel: job}
      relabelings:
        - {action: Uppercase, sourceLabels: [instance], targetLabel: instance}
        - {action: Replace, regex: "(.+)(?::d+)", replacement: "$1:9537", sourceLabels: [__address__], targetLabel: __address__}
        - {action: Replace, replacement: crio, targetLabel: job}
        - {action: Replace, replacement: "", targetLabel: job}
`,
		"PodTargetLabelsFromPodMonitor.golden": `apiVersion: monitoring.coreos.com/v1
kind: PodMonitor
metadata: {name: testpodmonitor1, namespace: default, labels: {group: group1}}
spec:
  podTargetLabels: [example, env]
  selector: {}
  podMetricsEndpoints:
    - {port: web, interval: 30s}
`,
	} {
		var m serviceMonitor
		strict(t, golden+"'s input", []byte(monitor), &m)
		validateCustomResource(t, golden+"'s input", []byte(monitor))
		b, err := os.ReadFile(filepath.Join(goldenDir, golden))
		if err != nil {
			t.Fatal(err)
		}
		var cfg struct {
			ScrapeConfigs []struct {
				RelabelConfigs []map[string]any `yaml:"relabel_configs"`
			} `yaml:"scrape_configs"`
		}
		if err := yamlv2.Unmarshal(b, &cfg); err != nil || len(cfg.ScrapeConfigs) != 1 {
			t.Fatalf("%s: %v (%d scrape configs)", golden, err, len(cfg.ScrapeConfigs))
		}
		want := cfg.ScrapeConfigs[0].RelabelConfigs
		for _, r := range want {
			if re, ok := r["regex"].(string); ok {
				r["regex"] = strings.ReplaceAll(re, "$(SHARD)", "0")
			}
		}
		a, _ := yamlv2.Marshal(prometheusRelabelConfigs(t, want))
		g, _ := yamlv2.Marshal(prometheusRelabelConfigs(t, operatorRelabelings(t, m)))
		if string(a) != string(g) {
			t.Errorf("%s: operatorRelabelings writes\n%s\nthe operator writes\n%s", golden, g, a)
		}
	}
}

// discoveredTarget is the target Kubernetes service discovery gives for the
// DaemonSet's pod on a node (role endpoints through the Service for a
// ServiceMonitor, role pod for a PodMonitor): the pod uses the node's
// network, so its IP is the node's.
func discoveredTarget(kind string, ds appsv1.DaemonSet, svc corev1.Service, nodeName, nodeIP string) labels.Labels {
	c := ds.Spec.Template.Spec.Containers[0]
	port := c.Ports[0]
	podName := ds.Name + "-x7k2p"
	l := map[string]string{
		"__address__":                                   net.JoinHostPort(nodeIP, strconv.Itoa(int(port.ContainerPort))),
		"__meta_kubernetes_namespace":                   ds.Namespace,
		"__meta_kubernetes_pod_name":                    podName,
		"__meta_kubernetes_pod_ip":                      nodeIP,
		"__meta_kubernetes_pod_host_ip":                 nodeIP,
		"__meta_kubernetes_pod_node_name":               nodeName,
		"__meta_kubernetes_pod_phase":                   "Running",
		"__meta_kubernetes_pod_ready":                   "true",
		"__meta_kubernetes_pod_controller_kind":         "DaemonSet",
		"__meta_kubernetes_pod_controller_name":         ds.Name,
		"__meta_kubernetes_pod_container_name":          c.Name,
		"__meta_kubernetes_pod_container_port_name":     port.Name,
		"__meta_kubernetes_pod_container_port_number":   strconv.Itoa(int(port.ContainerPort)),
		"__meta_kubernetes_pod_container_port_protocol": string(port.Protocol),
	}
	for k, v := range ds.Spec.Template.Labels {
		l["__meta_kubernetes_pod_label_"+sanitizeLabelName(k)] = v
		l["__meta_kubernetes_pod_labelpresent_"+sanitizeLabelName(k)] = "true"
	}
	if kind == "ServiceMonitor" {
		l["__meta_kubernetes_service_name"] = svc.Name
		for k, v := range svc.Labels {
			l["__meta_kubernetes_service_label_"+sanitizeLabelName(k)] = v
			l["__meta_kubernetes_service_labelpresent_"+sanitizeLabelName(k)] = "true"
		}
		l["__meta_kubernetes_endpoint_port_name"] = svc.Spec.Ports[0].Name
		l["__meta_kubernetes_endpoint_port_protocol"] = string(svc.Spec.Ports[0].Protocol)
		l["__meta_kubernetes_endpoint_ready"] = "true"
		l["__meta_kubernetes_endpoint_address_target_kind"] = "Pod"
		l["__meta_kubernetes_endpoint_address_target_name"] = podName
		l["__meta_kubernetes_endpoint_node_name"] = nodeName
	}
	return labels.FromMap(l)
}

// targetLabels labels a discovered target as Prometheus' scrape manager
// does (scrape.PopulateLabels, v0.313.5): the scrape configuration's job,
// scheme, path, interval and timeout where discovery set none, the
// relabelings, then instance defaulted to the address; the labels a series
// gets are those not starting with __.
func targetLabels(t *testing.T, m serviceMonitor, target labels.Labels) (labels.Labels, bool) {
	t.Helper()
	ep := m.endpoints()[0]
	lb := labels.NewBuilder(target)
	jobName := fmt.Sprintf("%s/%s/%s/0", map[string]string{"ServiceMonitor": "serviceMonitor", "PodMonitor": "podMonitor"}[m.Kind], m.Namespace, m.Name)
	scheme := ep.Scheme
	if scheme == "" {
		scheme = "http"
	}
	for k, v := range map[string]string{"job": jobName, "__scheme__": scheme, "__metrics_path__": ep.Path,
		"__scrape_interval__": ep.Interval, "__scrape_timeout__": ep.ScrapeTimeout} {
		if lb.Get(k) == "" {
			lb.Set(k, v)
		}
	}
	if !relabel.ProcessBuilder(lb, prometheusRelabelConfigs(t, operatorRelabelings(t, m))...) {
		return labels.EmptyLabels(), false
	}
	if lb.Get("instance") == "" {
		lb.Set("instance", lb.Get("__address__"))
	}
	out := labels.NewBuilder(labels.EmptyLabels())
	lb.Labels().Range(func(l labels.Label) {
		if !strings.HasPrefix(l.Name, "__") {
			out.Set(l.Name, l.Value)
		}
	})
	return out.Labels(), true
}

// diagnoseLinks returns every link of the dashboards that opens /diagnose,
// by dashboard file: panel data links and dashboard links alike.
func diagnoseLinks(t *testing.T) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	for _, f := range dashboardFiles(t) {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var d any
		if err := json.Unmarshal(b, &d); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		var walk func(any)
		walk = func(v any) {
			switch v := v.(type) {
			case map[string]any:
				if u, ok := v["url"].(string); ok && strings.Contains(u, "/diagnose") {
					out[filepath.Base(f)] = append(out[filepath.Base(f)], u)
				}
				for _, x := range v {
					walk(x)
				}
			case []any:
				for _, x := range v {
					walk(x)
				}
			}
		}
		walk(d)
	}
	return out
}

// linkVariable is a Grafana variable or field reference in a link.
var linkVariable = regexp.MustCompile(`\$\{([^}]+)\}`)

// resolveLink fills a link's variables from a series' labels, as Grafana
// does for ${instance} (the dashboard variable holding the instance label),
// ${__field.labels.X} and ${__data.fields.X}.
func resolveLink(t *testing.T, link string, series labels.Labels) string {
	t.Helper()
	return linkVariable.ReplaceAllStringFunc(link, func(v string) string {
		name := linkVariable.FindStringSubmatch(v)[1]
		name = strings.TrimPrefix(strings.TrimPrefix(name, "__field.labels."), "__data.fields.")
		val := series.Get(name)
		if val == "" {
			t.Errorf("link %s: the series has no %s label", link, name)
		}
		return val
	})
}

// Every dashboard link to /diagnose, filled from a node's series as
// Prometheus labels them under the shipped ServiceMonitor (kustomize and
// Helm) and the chart's PodMonitor, opens the address Prometheus scrapes:
// the node's IP and the daemon's port, where /diagnose is served. The
// target also carries the node's name (node) and the gpudiag job. Under the
// old relabeling (instance = node name) the links lost the port.
func TestDiagnoseLinksFromScrapedTargets(t *testing.T) {
	const nodeName, nodeIP = "gpu-node-7", "10.0.3.17"
	links := diagnoseLinks(t)
	total := 0
	for _, l := range links {
		total += len(l)
	}
	if total < 10 {
		t.Fatalf("only %d links to /diagnose in the dashboards: %v", total, links)
	}
	cases := map[string]*rendered{
		"kustomize build":                    kustomizeRendered(t),
		"helm template":                      renderChart(t, release, ""),
		"helm template (PodMonitor)":         renderChart(t, release, "serviceMonitor: {kind: PodMonitor}\n"),
		"helm template (scrape values)":      renderChart(t, "monitoring", scrapeValues),
		"helm template (web config: https)":  renderChart(t, release, webConfigValues),
		"helm template (release monitoring)": renderChart(t, "monitoring", ""),
	}
	for what, r := range cases {
		m := r.serviceMonitor
		ds := r.daemonSet
		port := ds.Spec.Template.Spec.Containers[0].Ports[0].ContainerPort
		if !slices.Contains(ds.Spec.Template.Spec.Containers[0].Args, fmt.Sprintf("--web.listen-address=:%d", port)) {
			t.Errorf("%s: the daemon does not listen on its container port %d", what, port)
		}
		series, kept := targetLabels(t, m, discoveredTarget(m.Kind, ds, r.service, nodeName, nodeIP))
		if !kept {
			t.Errorf("%s: the %s's relabelings drop the DaemonSet's pod", what, m.Kind)
			continue
		}
		addr := net.JoinHostPort(nodeIP, strconv.Itoa(int(port)))
		if got := series.Get("instance"); got != addr {
			t.Errorf("%s: instance=%q; want the scraped address %s", what, got, addr)
		}
		if got := series.Get("node"); got != nodeName {
			t.Errorf("%s: node=%q; want %s", what, got, nodeName)
		}
		if got := series.Get("job"); got != "gpudiag" {
			t.Errorf("%s: job=%q; want gpudiag (GPUDiagExporterDown selects job=~\".*gpudiag.*\")", what, got)
		}
		// A GPU's series: the target's labels and the gpu.
		gpuSeries := labels.NewBuilder(series).Set("gpu", "3").Labels()
		for file, ls := range links {
			for _, l := range ls {
				resolved := resolveLink(t, l, gpuSeries)
				u, err := url.Parse(resolved)
				if err != nil || u.Host != addr || u.Path != "/diagnose" {
					t.Errorf("%s: %s link %s opens %q; want %s/diagnose on the scraped address %s", what, file, l, resolved, u.Scheme+"://"+addr, addr)
				}
			}
		}
		t.Logf("%s: %s", what, series)
	}
}
