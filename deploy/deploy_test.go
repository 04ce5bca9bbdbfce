// Package deploy holds gpudiag's Kubernetes manifests (a kustomize base in
// kubernetes/, a Helm chart in helm/gpudiag, checked by helm_test.go) and its
// systemd unit (systemd/). This test parses every
// manifest strictly with the Kubernetes API types, keeps the PrometheusRule
// equal to alerts/*.yml, checks that the pieces fit together, and that the
// daemon accepts the arguments the manifests give it. dockerfile_test.go does
// the same for the Dockerfile and keeps its builder on go.mod's Go release.
package deploy

import (
	"bufio"
	"bytes"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/yaml"
)

var update = flag.Bool("update", false, "regenerate kubernetes/prometheusrule.yaml and the Helm chart's copies in helm/gpudiag/files from alerts/*.yml")

const (
	kustomizeDir = "kubernetes"
	ruleManifest = "kubernetes/prometheusrule.yaml"
	rulesGlob    = "../alerts/*.yml"
	systemdUnit  = "systemd/gpudiag.service"
	metricsPort  = 10910
)

// kustomization is the part of kustomize's Kustomization this base uses.
type kustomization struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Namespace  string `json:"namespace"`
	Labels     []struct {
		Pairs            map[string]string `json:"pairs"`
		IncludeSelectors bool              `json:"includeSelectors"`
		IncludeTemplates bool              `json:"includeTemplates,omitempty"`
	} `json:"labels"`
	Resources []string `json:"resources"`
	Images    []struct {
		Name    string `json:"name"`
		NewName string `json:"newName,omitempty"`
		NewTag  string `json:"newTag,omitempty"`
		Digest  string `json:"digest,omitempty"`
	} `json:"images"`
	ConfigMapGenerator []struct {
		Name  string   `json:"name"`
		Files []string `json:"files"`
	} `json:"configMapGenerator"`
	GeneratorOptions struct {
		DisableNameSuffixHash bool              `json:"disableNameSuffixHash"`
		Labels                map[string]string `json:"labels"`
	} `json:"generatorOptions"`
}

// The Prometheus Operator's ServiceMonitor, PodMonitor and PrometheusRule,
// as strict structs of the fields gpudiag uses (monitoring.coreos.com/v1).
// The operator's Go types pull in controller-runtime; these follow its
// CRDs, against which schema_test.go validates every rendered object.
type serviceMonitor struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		JobLabel        string               `json:"jobLabel,omitempty"`
		PodTargetLabels []string             `json:"podTargetLabels,omitempty"`
		Selector        metav1.LabelSelector `json:"selector"`
		Endpoints       []endpoint           `json:"endpoints,omitempty"`
		// A PodMonitor's endpoints: the same fields gpudiag uses.
		PodMetricsEndpoints []endpoint `json:"podMetricsEndpoints,omitempty"`
	} `json:"spec"`
}

// endpoints returns the monitor's endpoints, a ServiceMonitor's or a
// PodMonitor's.
func (m *serviceMonitor) endpoints() []endpoint {
	if m.Kind == "PodMonitor" {
		return m.Spec.PodMetricsEndpoints
	}
	return m.Spec.Endpoints
}

type endpoint struct {
	Port          string `json:"port"`
	Path          string `json:"path,omitempty"`
	Interval      string `json:"interval,omitempty"`
	ScrapeTimeout string `json:"scrapeTimeout,omitempty"`
	Scheme        string `json:"scheme,omitempty"`
	HonorLabels   bool   `json:"honorLabels,omitempty"`
	// SafeTLSConfig and BasicAuth, as the Helm chart's values give them.
	TLSConfig         map[string]any  `json:"tlsConfig,omitempty"`
	BasicAuth         map[string]any  `json:"basicAuth,omitempty"`
	Relabelings       []relabelConfig `json:"relabelings,omitempty"`
	MetricRelabelings []relabelConfig `json:"metricRelabelings,omitempty"`
}

// relabelConfig is the operator's RelabelConfig.
type relabelConfig struct {
	SourceLabels []string `json:"sourceLabels,omitempty"`
	Separator    *string  `json:"separator,omitempty"`
	TargetLabel  string   `json:"targetLabel,omitempty"`
	Regex        string   `json:"regex,omitempty"`
	Modulus      uint64   `json:"modulus,omitempty"`
	Replacement  *string  `json:"replacement,omitempty"`
	Action       string   `json:"action,omitempty"`
}

type prometheusRule struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		Groups []ruleGroup `json:"groups"`
	} `json:"spec"`
}

type ruleGroup struct {
	Name     string `json:"name"`
	Interval string `json:"interval,omitempty"`
	Rules    []struct {
		Record      string            `json:"record,omitempty"`
		Alert       string            `json:"alert,omitempty"`
		Expr        string            `json:"expr"`
		For         string            `json:"for,omitempty"`
		Labels      map[string]string `json:"labels,omitempty"`
		Annotations map[string]string `json:"annotations,omitempty"`
	} `json:"rules"`
}

// manifests holds every object of the base, decoded strictly by kind.
type manifests struct {
	kustomization  kustomization
	namespace      corev1.Namespace
	serviceAccount corev1.ServiceAccount
	daemonSet      appsv1.DaemonSet
	service        corev1.Service
	serviceMonitor serviceMonitor
	prometheusRule prometheusRule
}

func strict(t *testing.T, what string, b []byte, into any) {
	t.Helper()
	if err := yaml.UnmarshalStrict(b, into); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

func loadManifests(t *testing.T) *manifests {
	t.Helper()
	m := &manifests{}
	b, err := os.ReadFile(filepath.Join(kustomizeDir, "kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	strict(t, "kustomization.yaml", b, &m.kustomization)
	seen := map[string]bool{}
	for _, res := range m.kustomization.Resources {
		b, err := os.ReadFile(filepath.Join(kustomizeDir, res))
		if err != nil {
			t.Fatalf("kustomization.yaml lists %s: %v", res, err)
		}
		var head metav1.TypeMeta
		if err := yaml.Unmarshal(b, &head); err != nil {
			t.Fatalf("%s: %v", res, err)
		}
		if seen[head.Kind] {
			t.Fatalf("%s: a second %s", res, head.Kind)
		}
		seen[head.Kind] = true
		var into any
		switch head.Kind {
		case "Namespace":
			into = &m.namespace
		case "ServiceAccount":
			into = &m.serviceAccount
		case "DaemonSet":
			into = &m.daemonSet
		case "Service":
			into = &m.service
		case "ServiceMonitor":
			into = &m.serviceMonitor
		case "PrometheusRule":
			into = &m.prometheusRule
		default:
			t.Fatalf("%s: unexpected kind %q", res, head.Kind)
		}
		strict(t, res, b, into)
	}
	for _, kind := range []string{"Namespace", "ServiceAccount", "DaemonSet", "Service", "ServiceMonitor", "PrometheusRule"} {
		if !seen[kind] {
			t.Errorf("the base has no %s", kind)
		}
	}
	files, _ := filepath.Glob(filepath.Join(kustomizeDir, "*.yaml"))
	for _, f := range files {
		if base := filepath.Base(f); base != "kustomization.yaml" && !slices.Contains(m.kustomization.Resources, base) {
			t.Errorf("%s is not listed in kustomization.yaml", f)
		}
	}
	return m
}

// The API versions and kinds are the served ones, and the pieces refer to
// each other consistently.
func TestManifests(t *testing.T) {
	m := loadManifests(t)
	for what, tm := range map[string]metav1.TypeMeta{
		"namespace": m.namespace.TypeMeta, "serviceaccount": m.serviceAccount.TypeMeta,
		"daemonset": m.daemonSet.TypeMeta, "service": m.service.TypeMeta,
		"servicemonitor": m.serviceMonitor.TypeMeta, "prometheusrule": m.prometheusRule.TypeMeta,
	} {
		want := map[string]string{"namespace": "v1", "serviceaccount": "v1", "daemonset": "apps/v1", "service": "v1",
			"servicemonitor": "monitoring.coreos.com/v1", "prometheusrule": "monitoring.coreos.com/v1"}[what]
		if tm.APIVersion != want {
			t.Errorf("%s: apiVersion %q; want %q", what, tm.APIVersion, want)
		}
	}
	k := m.kustomization
	if k.APIVersion != "kustomize.config.k8s.io/v1beta1" || k.Kind != "Kustomization" {
		t.Errorf("kustomization.yaml: %s %s", k.APIVersion, k.Kind)
	}
	if k.Namespace != m.namespace.Name {
		t.Errorf("kustomization namespace %q, Namespace object %q", k.Namespace, m.namespace.Name)
	}
	if m.namespace.Labels["pod-security.kubernetes.io/enforce"] != "privileged" {
		t.Error("the namespace must admit privileged pods (hostPID, hostNetwork, hostPath)")
	}

	ds := m.daemonSet
	pod := ds.Spec.Template.Spec
	sel, err := metav1.LabelSelectorAsSelector(ds.Spec.Selector)
	if err != nil {
		t.Fatal(err)
	}
	if !sel.Matches(labels.Set(ds.Spec.Template.Labels)) {
		t.Error("the DaemonSet's selector does not match its pod template")
	}
	if !pod.HostPID || !pod.HostNetwork || pod.DNSPolicy != corev1.DNSClusterFirstWithHostNet {
		t.Error("the pod needs hostPID, hostNetwork and dnsPolicy ClusterFirstWithHostNet")
	}
	if pod.RuntimeClassName == nil || *pod.RuntimeClassName != "nvidia" {
		t.Error("the pod needs runtimeClassName nvidia")
	}
	if pod.ServiceAccountName != m.serviceAccount.Name || pod.AutomountServiceAccountToken == nil || *pod.AutomountServiceAccountToken {
		t.Error("the pod must use the gpudiag service account without a token")
	}
	if len(pod.Containers) != 1 {
		t.Fatalf("%d containers; want 1", len(pod.Containers))
	}
	c := pod.Containers[0]
	sc := c.SecurityContext
	if sc == nil || sc.Capabilities == nil {
		t.Fatal("the container needs a securityContext with capabilities")
	}
	if !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) {
		t.Errorf("capabilities.drop %v; want [ALL]", sc.Capabilities.Drop)
	}
	add := append([]corev1.Capability(nil), sc.Capabilities.Add...)
	slices.Sort(add)
	if !slices.Equal(add, []corev1.Capability{"DAC_READ_SEARCH", "SYS_PTRACE"}) {
		t.Errorf("capabilities.add %v; want exactly DAC_READ_SEARCH and SYS_PTRACE", sc.Capabilities.Add)
	}
	if sc.Privileged != nil && *sc.Privileged || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
		sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
		t.Error("the container must be unprivileged, without privilege escalation, on a read-only root")
	}
	for name := range c.Resources.Requests {
		if strings.Contains(string(name), "nvidia.com") {
			t.Errorf("the container requests %s: the device plugin would take GPUs from jobs", name)
		}
	}
	if _, ok := c.Resources.Limits[corev1.ResourceCPU]; ok {
		t.Error("a CPU limit throttles sampling into missed deadlines")
	}
	if _, ok := c.Resources.Limits[corev1.ResourceMemory]; !ok {
		t.Error("the container needs a memory limit")
	}
	mounts := map[string]corev1.VolumeMount{}
	for _, vm := range c.VolumeMounts {
		mounts[vm.MountPath] = vm
	}
	hostPaths := map[string]string{}
	for _, v := range pod.Volumes {
		if v.HostPath != nil {
			hostPaths[v.Name] = v.HostPath.Path
		}
	}
	// The kubelet's PodResources socket (which pod holds which GPU), at the
	// path the daemon dials by default: docs/security.md.
	for host, inside := range map[string]string{"/proc": "/host/proc", "/sys": "/host/sys",
		"/var/lib/kubelet/pod-resources": "/var/lib/kubelet/pod-resources"} {
		vm, ok := mounts[inside]
		if !ok || !vm.ReadOnly || hostPaths[vm.Name] != host {
			t.Errorf("the host's %s must be mounted read-only at %s", host, inside)
		}
	}
	for _, arg := range []string{"--path.procfs=/host/proc", "--path.sysfs=/host/sys"} {
		if !slices.Contains(c.Args, arg) {
			t.Errorf("the daemon needs %s", arg)
		}
	}
	if len(c.Ports) != 1 || c.Ports[0].ContainerPort != metricsPort {
		t.Errorf("container ports %+v; want %d", c.Ports, metricsPort)
	}
	if !slices.Contains(c.Args, fmt.Sprintf("--web.listen-address=:%d", metricsPort)) {
		t.Errorf("the daemon must listen on :%d, the container port", metricsPort)
	}

	svc := m.service
	if svc.Spec.ClusterIP != corev1.ClusterIPNone {
		t.Error("the Service should be headless: each pod is scraped on its own")
	}
	if !labels.SelectorFromSet(svc.Spec.Selector).Matches(labels.Set(ds.Spec.Template.Labels)) {
		t.Error("the Service's selector does not select the DaemonSet's pods")
	}
	if len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].TargetPort.StrVal != c.Ports[0].Name {
		t.Errorf("the Service must target the container port %q", c.Ports[0].Name)
	}

	sm := m.serviceMonitor
	smSel, err := metav1.LabelSelectorAsSelector(&sm.Spec.Selector)
	if err != nil {
		t.Fatal(err)
	}
	if !smSel.Matches(labels.Set(svc.Labels)) {
		t.Error("the ServiceMonitor does not select the Service")
	}
	if len(sm.Spec.Endpoints) != 1 || sm.Spec.Endpoints[0].Port != svc.Spec.Ports[0].Name {
		t.Errorf("the ServiceMonitor must scrape the Service's port %q", svc.Spec.Ports[0].Name)
	}
	if job := svc.Labels[sm.Spec.JobLabel]; !strings.Contains(job, "gpudiag") {
		t.Errorf("the job label %q must contain gpudiag (GPUDiagExporterDown selects job=~\".*gpudiag.*\")", job)
	}
}

// renderPrometheusRule wraps alerts/*.yml, comments and all, into a
// PrometheusRule: the rule files stay the one source.
func renderPrometheusRule(t *testing.T) []byte {
	t.Helper()
	files, err := filepath.Glob(rulesGlob)
	if err != nil || len(files) == 0 {
		t.Fatalf("no rule files at %s: %v", rulesGlob, err)
	}
	sort.Strings(files)
	var names []string
	for _, f := range files {
		names = append(names, "alerts/"+filepath.Base(f))
	}
	var out bytes.Buffer
	fmt.Fprintf(&out, "# Generated by `go test ./deploy -update` from %s: edit those, not this.\n", strings.Join(names, " and "))
	out.WriteString("apiVersion: monitoring.coreos.com/v1\nkind: PrometheusRule\nmetadata:\n  name: gpudiag\n" +
		"  labels:\n    app.kubernetes.io/name: gpudiag\nspec:\n  groups:\n")
	for i, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&out, "    # %s\n", names[i])
		sc := bufio.NewScanner(bytes.NewReader(b))
		inGroups := false
		for sc.Scan() {
			line := sc.Text()
			if !inGroups {
				if line == "groups:" {
					inGroups = true
				}
				continue
			}
			if strings.TrimSpace(line) == "" {
				out.WriteString("\n")
				continue
			}
			out.WriteString("  " + line + "\n")
		}
		if !inGroups {
			t.Fatalf("%s: no top-level groups: line", f)
		}
	}
	return out.Bytes()
}

// The PrometheusRule is alerts/*.yml, byte for byte inside its wrapper, and
// decodes to the same groups.
func TestPrometheusRuleMatchesAlerts(t *testing.T) {
	want := renderPrometheusRule(t)
	if *update {
		if err := os.WriteFile(ruleManifest, want, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(ruleManifest)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s differs from alerts/*.yml; regenerate it with: go test ./deploy -run TestPrometheusRuleMatchesAlerts -update", ruleManifest)
	}
	var pr prometheusRule
	strict(t, ruleManifest, got, &pr)
	var fromFiles []ruleGroup
	files, _ := filepath.Glob(rulesGlob)
	sort.Strings(files)
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var rf struct {
			Groups []ruleGroup `json:"groups"`
		}
		strict(t, f, b, &rf)
		fromFiles = append(fromFiles, rf.Groups...)
	}
	a, _ := yaml.Marshal(pr.Spec.Groups)
	b, _ := yaml.Marshal(fromFiles)
	if !bytes.Equal(a, b) || len(fromFiles) == 0 {
		t.Fatal("the PrometheusRule's groups decode differently from alerts/*.yml")
	}
}

// The systemd unit runs the daemon with the hardening it allows: only the
// two capabilities the per-process collectors need.
func TestSystemdUnit(t *testing.T) {
	sections := parseUnit(t, systemdUnit)
	svc := sections["Service"]
	for key, want := range map[string]string{
		"CapabilityBoundingSet": "CAP_SYS_PTRACE CAP_DAC_READ_SEARCH",
		"AmbientCapabilities":   "CAP_SYS_PTRACE CAP_DAC_READ_SEARCH",
		"NoNewPrivileges":       "yes",
		"ProtectSystem":         "strict",
	} {
		if got := strings.Join(svc[key], " "); got != want {
			t.Errorf("%s=%q; want %q", key, got, want)
		}
	}
	if len(sections["Install"]["WantedBy"]) == 0 {
		t.Error("the unit has no WantedBy")
	}
	if len(svc["ExecStart"]) != 1 {
		t.Fatalf("ExecStart %v", svc["ExecStart"])
	}
}

// parseUnit reads a systemd unit: section → key → values (a key may
// repeat). Unknown sections fail.
func parseUnit(t *testing.T, path string) map[string]map[string][]string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]map[string][]string{}
	section := ""
	var cont strings.Builder
	for i, raw := range strings.Split(string(b), "\n") {
		line := strings.TrimSpace(raw)
		if cont.Len() > 0 {
			line = cont.String() + line
			cont.Reset()
		}
		if strings.HasSuffix(line, "\\") {
			cont.WriteString(strings.TrimSuffix(line, "\\") + " ")
			continue
		}
		switch {
		case line == "" || strings.HasPrefix(line, "#") || strings.HasPrefix(line, ";"):
		case strings.HasPrefix(line, "[") && strings.HasSuffix(line, "]"):
			section = line[1 : len(line)-1]
			if !slices.Contains([]string{"Unit", "Service", "Install"}, section) {
				t.Fatalf("%s:%d: unexpected section %s", path, i+1, line)
			}
			out[section] = map[string][]string{}
		default:
			k, v, ok := strings.Cut(line, "=")
			if !ok || section == "" {
				t.Fatalf("%s:%d: not key=value in a section: %q", path, i+1, raw)
			}
			out[section][k] = append(out[section][k], v)
		}
	}
	return out
}

// The daemon accepts the arguments the DaemonSet, the Helm chart (helmArgs)
// and the systemd unit give it: kingpin rejects an unknown flag before it reaches --help.
func TestDaemonAcceptsManifestArguments(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the daemon")
	}
	bin := filepath.Join(t.TempDir(), "gpudiag")
	build := exec.Command("go", "build", "-o", bin, "../cmd/exporter")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	m := loadManifests(t)
	exec0 := parseUnit(t, systemdUnit)["Service"]["ExecStart"][0]
	unitArgs := strings.Fields(exec0)[1:]
	cases := map[string][]string{"DaemonSet": m.daemonSet.Spec.Template.Spec.Containers[0].Args, "systemd": unitArgs}
	for what, args := range helmArgs(t) {
		cases[what] = args
	}
	for what, args := range cases {
		var flags []string
		for _, a := range args {
			if !strings.HasPrefix(a, "$") { // an environment variable expanded by systemd
				flags = append(flags, a)
			}
		}
		out, err := exec.Command(bin, append(flags, "--help")...).CombinedOutput()
		if err != nil {
			t.Errorf("%s arguments %v: %v\n%s", what, flags, err, out)
		}
	}
}
