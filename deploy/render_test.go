// The objects as a cluster receives them: the kustomize base built by
// kustomize itself and the chart rendered by helm template, each object
// checked against its schema (schema_test.go), each PrometheusRule's groups
// loaded by promtool as Prometheus loads them (one rule file per
// PrometheusRule, as the Prometheus Operator writes it), and the promtool
// unit tests of alerts/tests run against those rendered rules.
//
// kustomize is not in go.mod, nor on a fresh machine (Debian's
// kubernetes-client is kubectl 1.20, whose kustomize predates the base's
// `labels` field): the tests run `go run
// sigs.k8s.io/kustomize/kustomize/v5@<kustomizeVersion>`, as they run helm.
package deploy

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

const (
	// The newest kustomize whose go.mod builds with go.mod's Go (1.26):
	// v5.8.3 asks for Go 1.27.
	kustomizeVersion = "v5.8.2"
	kustomizePackage = "sigs.k8s.io/kustomize/kustomize/v5@" + kustomizeVersion
	alertTestsGlob   = "../alerts/tests/*.yml"
	// The API the chart's Prometheus Operator objects need; helm template
	// is told the cluster serves it, as a cluster with the operator would.
	operatorAPI = "monitoring.coreos.com/v1"
)

var (
	kustomizeOnce sync.Once
	kustomizeOut  []byte
	kustomizeErr  error
)

// goTool runs `go run pkg args...` with the module proxy allowed to fetch
// the tool's modules; it skips the test in -short mode and without a go
// command.
func goTool(ctx context.Context, t *testing.T, pkg string, args ...string) *exec.Cmd {
	t.Helper()
	if testing.Short() {
		t.Skipf("builds %s with go run", pkg)
	}
	if _, err := exec.LookPath("go"); err != nil {
		t.Skipf("no go command to build %s with (%v)", pkg, err)
	}
	cmd := exec.CommandContext(ctx, "go", append([]string{"run", pkg}, args...)...)
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOWORK=off")
	return cmd
}

// kustomizeBuild returns `kustomize build kubernetes`, built once per test
// binary (the first go run downloads and builds kustomize: about 2 minutes
// on 2 shared CPUs).
func kustomizeBuild(t *testing.T) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), helmBuildTimeout)
	defer cancel()
	cmd := goTool(ctx, t, kustomizePackage, "build", kustomizeDir)
	kustomizeOnce.Do(func() {
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		start := time.Now()
		kustomizeOut, kustomizeErr = cmd.Output()
		if kustomizeErr != nil {
			kustomizeErr = fmt.Errorf("go run %s build %s (%v): %v\n%s", kustomizePackage, kustomizeDir,
				time.Since(start).Round(time.Second), kustomizeErr, stderr.Bytes())
			return
		}
		t.Logf("kustomize %s build: %v (the first run builds it)", kustomizeVersion, time.Since(start).Round(100*time.Millisecond))
	})
	if kustomizeErr != nil {
		t.Fatal(kustomizeErr)
	}
	return kustomizeOut
}

// object is one rendered manifest: its identity and its YAML.
type object struct {
	metav1.TypeMeta
	Name, Namespace string
	doc             []byte
}

func (o object) String() string { return o.Kind + "/" + o.Name }

// splitObjects splits a multi-document YAML stream into its objects, as
// kubectl apply reads it; documents of comments alone are skipped.
func splitObjects(t *testing.T, what string, stream []byte) []object {
	t.Helper()
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(stream)))
	var out []object
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		var head struct {
			metav1.TypeMeta `json:",inline"`
			Metadata        struct {
				Name      string `json:"name"`
				Namespace string `json:"namespace"`
			} `json:"metadata"`
		}
		if err := yaml.Unmarshal(doc, &head); err != nil {
			t.Fatalf("%s: %v\n%s", what, err, doc)
		}
		if head.Kind == "" {
			continue
		}
		out = append(out, object{TypeMeta: head.TypeMeta, Name: head.Metadata.Name, Namespace: head.Metadata.Namespace, doc: doc})
	}
}

// decodeObject decodes a rendered object strictly: the Kubernetes kinds
// into their k8s.io/api types (a field the API does not have, or of the
// wrong type, fails, as kubectl apply --validate=strict fails), the
// Prometheus Operator's kinds against the operator's CRD schemas and then
// into this package's structs. into is the typed object, or nil to only
// validate.
func decodeObject(t *testing.T, what string, o object, into any) {
	t.Helper()
	want := map[string]string{"Namespace": "v1", "ServiceAccount": "v1", "Service": "v1", "ConfigMap": "v1",
		"Secret": "v1", "DaemonSet": "apps/v1", "ServiceMonitor": operatorAPI, "PodMonitor": operatorAPI,
		"PrometheusRule": operatorAPI}[o.Kind]
	if want == "" {
		t.Fatalf("%s: unexpected kind %s", what, o)
	}
	if o.APIVersion != want {
		t.Errorf("%s: %s has apiVersion %q; want %q", what, o, o.APIVersion, want)
	}
	if want == operatorAPI {
		validateCustomResource(t, what+" "+o.String(), o.doc)
	}
	if into == nil {
		switch o.Kind {
		case "Namespace":
			into = &corev1.Namespace{}
		case "ServiceAccount":
			into = &corev1.ServiceAccount{}
		case "Service":
			into = &corev1.Service{}
		case "ConfigMap":
			into = &corev1.ConfigMap{}
		case "Secret":
			into = &corev1.Secret{}
		case "DaemonSet":
			into = &appsv1.DaemonSet{}
		case "ServiceMonitor", "PodMonitor":
			into = &serviceMonitor{}
		case "PrometheusRule":
			into = &prometheusRule{}
		}
	}
	strict(t, what+" "+o.String(), o.doc, into)
}

// kustomizeRendered decodes `kustomize build` of the base.
func kustomizeRendered(t *testing.T) *rendered {
	t.Helper()
	return decodeRendered(t, "kustomize build", kustomizeBuild(t))
}

// The base as kustomize builds it: every object passes its schema, in the
// base's namespace, with the kustomization's labels; the dashboards are
// there as ConfigMaps for Grafana's sidecar.
func TestKustomizeBuild(t *testing.T) {
	r := kustomizeRendered(t)
	want := []string{"ConfigMap", "DaemonSet", "Namespace", "PrometheusRule",
		"Service", "ServiceAccount", "ServiceMonitor"}
	if got := r.kinds; !equalStrings(got, want) {
		t.Fatalf("kustomize renders %v; want %v", got, want)
	}
	for _, o := range r.objects {
		if o.Kind != "Namespace" && o.Namespace != "gpudiag" {
			t.Errorf("%s in namespace %q; want gpudiag", o, o.Namespace)
		}
	}
	checkDashboardConfigMaps(t, "kustomize build", r.configMaps, "gpudiag-dashboard-")
}

// checkDashboardConfigMaps checks that there is one ConfigMap per file of
// dashboards/, named prefix+<the file's name less gpudiag- and .json>,
// labelled for Grafana's sidecar, holding the file byte for byte.
func checkDashboardConfigMaps(t *testing.T, what string, cms []corev1.ConfigMap, prefix string) {
	t.Helper()
	files, err := filepath.Glob("../dashboards/*.json")
	if err != nil || len(files) == 0 {
		t.Fatalf("no dashboards: %v", err)
	}
	byName := map[string]corev1.ConfigMap{}
	for _, cm := range cms {
		byName[cm.Name] = cm
	}
	if len(cms) != len(files) {
		t.Errorf("%s: %d ConfigMaps for %d dashboards", what, len(cms), len(files))
	}
	for _, f := range files {
		base := filepath.Base(f)
		name := prefix + strings.TrimSuffix(strings.TrimPrefix(base, "gpudiag-"), ".json")
		cm, ok := byName[name]
		if !ok {
			t.Errorf("%s: no ConfigMap %s for %s", what, name, f)
			continue
		}
		if cm.Labels["grafana_dashboard"] != "1" {
			t.Errorf("%s: ConfigMap %s labels %v; want grafana_dashboard: \"1\" (the sidecar's default label)", what, name, cm.Labels)
		}
		want, _ := os.ReadFile(f)
		if got := cm.Data[base]; got != string(want) || len(cm.Data) != 1 {
			t.Errorf("%s: ConfigMap %s does not hold %s as it is (keys %d, %d bytes of %d)", what, name, f, len(cm.Data), len(got), len(want))
		}
	}
}

// ruleFileOf writes a PrometheusRule's groups into a rule file, as the
// Prometheus Operator writes each PrometheusRule into one file of the
// Prometheus' rules directory, and returns its path.
func ruleFileOf(t *testing.T, dir string, pr object) string {
	t.Helper()
	var obj struct {
		Spec struct {
			Groups []any `json:"groups"`
		} `json:"spec"`
	}
	if err := yaml.Unmarshal(pr.doc, &obj); err != nil {
		t.Fatal(err)
	}
	if len(obj.Spec.Groups) == 0 {
		t.Fatalf("%s has no groups", pr)
	}
	b, err := yaml.Marshal(map[string]any{"groups": obj.Spec.Groups})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, pr.Namespace+"-"+pr.Name+".yaml")
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// promtoolPath finds promtool (Debian's prometheus package); CI must have
// it, elsewhere the test skips without it.
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

var ruleFilesBlock = regexp.MustCompile(`(?m)^rule_files:\n(?:[ \t]+- .*\n)+`)

// checkRenderedRules loads the rendered PrometheusRule as Prometheus would
// (promtool check rules: a group name repeated in the file fails it, as it
// fails Prometheus' load of the whole file) and runs every unit test of
// alerts/tests against it instead of alerts/*.yml.
func checkRenderedRules(t *testing.T, what string, objs []object) {
	t.Helper()
	promtool := promtoolPath(t)
	var rules []object
	for _, o := range objs {
		if o.Kind == "PrometheusRule" {
			rules = append(rules, o)
		}
	}
	if len(rules) != 1 {
		t.Fatalf("%s: %d PrometheusRules; want 1", what, len(rules))
	}
	dir := t.TempDir()
	file := ruleFileOf(t, dir, rules[0])
	if out, err := exec.Command(promtool, "check", "rules", file).CombinedOutput(); err != nil {
		t.Fatalf("%s: promtool check rules on %s's groups: %v\n%s", what, rules[0], err, out)
	}
	tests, err := filepath.Glob(alertTestsGlob)
	if err != nil || len(tests) == 0 {
		t.Fatalf("no promtool unit tests at %s: %v", alertTestsGlob, err)
	}
	sort.Strings(tests)
	var args []string
	for _, f := range tests {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if !ruleFilesBlock.Match(b) {
			t.Fatalf("%s: no rule_files list to point at the rendered rules", f)
		}
		b = ruleFilesBlock.ReplaceAll(b, []byte("rule_files:\n  - "+file+"\n"))
		out := filepath.Join(dir, "test-"+filepath.Base(f))
		if err := os.WriteFile(out, b, 0o644); err != nil {
			t.Fatal(err)
		}
		args = append(args, out)
	}
	out, err := exec.Command(promtool, append([]string{"test", "rules"}, args...)...).CombinedOutput()
	if err != nil || bytes.Contains(out, []byte("FAILED")) || !bytes.Contains(out, []byte("SUCCESS")) {
		t.Fatalf("%s: promtool test rules against the rendered rules: %v\n%s", what, err, out)
	}
	t.Logf("%s: %s's groups pass promtool check rules and the %d unit test files", what, rules[0], len(tests))
}

func TestKustomizeRulesLoad(t *testing.T) {
	checkRenderedRules(t, "kustomize build", kustomizeRendered(t).objects)
}

func TestHelmRulesLoad(t *testing.T) {
	checkRenderedRules(t, "helm template", renderChart(t, release, "").objects)
}

func equalStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// scripts/test.sh builds helm and kustomize before the tests, at the
// versions the tests run.
func TestScriptBuildsRenderTools(t *testing.T) {
	b, err := os.ReadFile("../scripts/test.sh")
	if err != nil {
		t.Fatal(err)
	}
	for _, pkg := range []string{helmPackage, kustomizePackage} {
		if !bytes.Contains(b, []byte("go install "+pkg+"\n")) {
			t.Errorf("scripts/test.sh does not build %s before the tests", pkg)
		}
	}
}
