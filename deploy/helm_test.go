// The Helm chart in helm/gpudiag, rendered by `helm template` and parsed
// with the Kubernetes types as deploy_test.go parses the kustomize base:
// with its default values it renders the base's objects, and its values land
// where they should without touching the pod's privileges.
//
// There is no helm binary in the repository's toolchain and helm is not in
// go.mod: the tests `go install helm.sh/helm/v3/cmd/helm@<helmVersion>`
// once per test binary into a temporary directory (TestMain removes it),
// which downloads and builds helm through the Go module proxy the first
// time (about 2 minutes on 2 shared CPUs) and then links it from the build
// cache, and run that binary for every render. A `go run` per render spent
// seconds checking helm's build each time (10 s on a loaded machine): the
// renders alone ran past the package's 10-minute timeout.
package deploy

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/yaml"
)

const (
	chartDir   = "helm/gpudiag"
	chartRules = "helm/gpudiag/files"
	// A helm release whose go.mod builds with go.mod's Go (1.26).
	helmVersion = "v3.19.0"
	helmPackage = "helm.sh/helm/v3/cmd/helm@" + helmVersion
	// The first `go run` downloads helm's modules and builds it.
	helmBuildTimeout  = 8 * time.Minute
	helmRenderTimeout = 2 * time.Minute
	// The release and namespace of `helm install gpudiag deploy/helm/gpudiag
	// -n gpudiag`: the chart then names its objects as the base does.
	release   = "gpudiag"
	namespace = "gpudiag"
)

// The labels the chart adds to what the base carries (after kustomize adds
// the kustomization's app.kubernetes.io/name and part-of): the release
// (instance, also in the selectors, so that two releases select their own
// pods), the app version, the manager and the chart.
var helmOnlyLabels = []string{
	"app.kubernetes.io/instance", "app.kubernetes.io/version",
	"app.kubernetes.io/managed-by", "helm.sh/chart",
}

// rendered holds the objects of one `helm template` or `kustomize build`,
// decoded strictly (decodeObject).
type rendered struct {
	objects        []object
	kinds          []string // each kind rendered, once, sorted
	namespace      corev1.Namespace
	serviceAccount corev1.ServiceAccount
	daemonSet      appsv1.DaemonSet
	service        corev1.Service
	serviceMonitor serviceMonitor // a ServiceMonitor or a PodMonitor
	prometheusRule prometheusRule
	secret         corev1.Secret
	configMaps     []corev1.ConfigMap
}

func (r *rendered) has(kind string) bool { return slices.Contains(r.kinds, kind) }

var (
	helmBuild     sync.Once
	helmBuildErr  error
	helmBuildTime time.Duration
	// helmBinDir holds the helm binary built once per test binary
	// (helmBin); TestMain removes it.
	helmBinDir, helmBin string
)

// installHelm builds helm at helmVersion into helmBinDir, with the module
// proxy allowed to fetch helm's modules.
func installHelm(ctx context.Context) error {
	dir, err := os.MkdirTemp("", "gpudiag-test-helm-")
	if err != nil {
		return err
	}
	helmBinDir = dir
	cmd := exec.CommandContext(ctx, "go", "install", helmPackage)
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOWORK=off", "GOBIN="+dir)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%v\n%s", err, out)
	}
	helmBin = filepath.Join(dir, "helm")
	return nil
}

// helmCommand returns `helm args...`, helm as installHelm built it, with
// helm's homes in a temporary directory.
func helmCommand(ctx context.Context, t *testing.T, args ...string) *exec.Cmd {
	home := t.TempDir()
	cmd := exec.CommandContext(ctx, helmBin, args...)
	cmd.Env = append(os.Environ(),
		"HELM_CACHE_HOME="+filepath.Join(home, "cache"),
		"HELM_CONFIG_HOME="+filepath.Join(home, "config"),
		"HELM_DATA_HOME="+filepath.Join(home, "data"),
	)
	return cmd
}

// helm runs helm with args, building it first; it skips the test where there
// is no go command, and fails it where helm cannot be built or fails.
func helm(t *testing.T, args ...string) []byte {
	t.Helper()
	if testing.Short() {
		t.Skip("builds helm with go run")
	}
	if _, err := exec.LookPath("go"); err != nil {
		t.Skipf("no go command to build helm with (%v)", err)
	}
	helmBuild.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), helmBuildTimeout)
		defer cancel()
		start := time.Now()
		if err := installHelm(ctx); err != nil {
			helmBuildErr = fmt.Errorf("go install %s (%v): %v", helmPackage, time.Since(start).Round(time.Second), err)
			return
		}
		out, err := helmCommand(ctx, t, "version", "--short").CombinedOutput()
		helmBuildTime = time.Since(start)
		if err != nil {
			helmBuildErr = fmt.Errorf("%s version (%v): %v\n%s", helmBin, helmBuildTime.Round(time.Second), err, out)
			return
		}
		t.Logf("helm %s built (or found in the build cache) in %v", strings.TrimSpace(string(lastLine(out))), helmBuildTime.Round(100*time.Millisecond))
	})
	if helmBuildErr != nil {
		t.Fatal(helmBuildErr)
	}
	ctx, cancel := context.WithTimeout(context.Background(), helmRenderTimeout)
	defer cancel()
	var stdout, stderr bytes.Buffer
	cmd := helmCommand(ctx, t, args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	if err := cmd.Run(); err != nil {
		t.Fatalf("helm %s: %v\n%s", strings.Join(args, " "), err, stderr.Bytes())
	}
	t.Logf("helm %s: %v", args[0], time.Since(start).Round(10*time.Millisecond))
	return stdout.Bytes()
}

func lastLine(b []byte) []byte {
	lines := bytes.Split(bytes.TrimSpace(b), []byte("\n"))
	return lines[len(lines)-1]
}

// renderChart runs helm template on the chart with the given values (YAML,
// empty for the defaults), on a cluster that serves the Prometheus
// Operator's API, and decodes every object strictly by kind.
func renderChart(t *testing.T, releaseName, values string) *rendered {
	t.Helper()
	return decodeRendered(t, "helm template", helmTemplate(t, releaseName, values, "--api-versions", operatorAPI))
}

var (
	templateMu    sync.Mutex
	templateCache = map[string][]byte{}
)

// helmTemplate runs helm template on the chart with the given values and
// extra arguments. A render is the same whenever it is asked (the chart
// does not change while the tests run), so each is made once.
func helmTemplate(t *testing.T, releaseName, values string, extra ...string) []byte {
	t.Helper()
	key := strings.Join(append([]string{releaseName, values}, extra...), "\x00")
	templateMu.Lock()
	defer templateMu.Unlock()
	if out, ok := templateCache[key]; ok {
		return out
	}
	args := []string{"template", releaseName, chartDir, "--namespace", namespace}
	if values != "" {
		f := filepath.Join(t.TempDir(), "values.yaml")
		if err := os.WriteFile(f, []byte(values), 0o600); err != nil {
			t.Fatal(err)
		}
		args = append(args, "--values", f)
	}
	out := helm(t, append(args, extra...)...)
	templateCache[key] = out
	return out
}

// decodeRendered decodes every object of a rendered stream strictly; a kind
// other than ConfigMap may appear once.
func decodeRendered(t *testing.T, what string, stream []byte) *rendered {
	t.Helper()
	r := &rendered{objects: splitObjects(t, what, stream)}
	for _, o := range r.objects {
		if r.has(o.Kind) && o.Kind != "ConfigMap" {
			t.Fatalf("%s renders a second %s", what, o.Kind)
		}
		if !r.has(o.Kind) {
			r.kinds = append(r.kinds, o.Kind)
		}
		var into any
		switch o.Kind {
		case "Namespace":
			into = &r.namespace
		case "ServiceAccount":
			into = &r.serviceAccount
		case "DaemonSet":
			into = &r.daemonSet
		case "Service":
			into = &r.service
		case "ServiceMonitor", "PodMonitor":
			if r.has("ServiceMonitor") && r.has("PodMonitor") {
				t.Fatalf("%s renders both a ServiceMonitor and a PodMonitor: every node would be scraped twice", what)
			}
			into = &r.serviceMonitor
		case "PrometheusRule":
			into = &r.prometheusRule
		case "Secret":
			into = &r.secret
		case "ConfigMap":
			r.configMaps = append(r.configMaps, corev1.ConfigMap{})
			into = &r.configMaps[len(r.configMaps)-1]
		}
		decodeObject(t, what, o, into)
	}
	sort.Strings(r.kinds)
	return r
}

// withoutHelmLabels drops helmOnlyLabels from m.
func withoutHelmLabels(m map[string]string) {
	for _, l := range helmOnlyLabels {
		delete(m, l)
	}
}

// sameYAML fails when a and b marshal differently, showing both.
func sameYAML(t *testing.T, what string, want, got any) {
	t.Helper()
	a, err := yaml.Marshal(want)
	if err != nil {
		t.Fatal(err)
	}
	b, err := yaml.Marshal(got)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a, b) {
		t.Errorf("%s: the chart renders\n%s\nthe kustomize base has\n%s", what, b, a)
	}
}

// chartDaemonSetLikeBase undoes on the chart's DaemonSet the differences the
// chart is allowed: helmOnlyLabels (metadata, selector, pod template), the
// part-of label on the pod template, and an explicit imagePullPolicy (IfNotPresent, the default for a tag other than
// latest, which the base leaves unset).
func chartDaemonSetLikeBase(ds appsv1.DaemonSet) appsv1.DaemonSet {
	ds = *ds.DeepCopy()
	withoutHelmLabels(ds.Labels)
	withoutHelmLabels(ds.Spec.Selector.MatchLabels)
	withoutHelmLabels(ds.Spec.Template.Labels)
	// The chart labels its pods with all its labels; kustomize's labels
	// reach only the objects' metadata (includeTemplates is false).
	delete(ds.Spec.Template.Labels, "app.kubernetes.io/part-of")
	for i := range ds.Spec.Template.Spec.Containers {
		if ds.Spec.Template.Spec.Containers[i].ImagePullPolicy == corev1.PullIfNotPresent {
			ds.Spec.Template.Spec.Containers[i].ImagePullPolicy = ""
		}
	}
	return ds
}

// With its default values the chart renders the objects `kustomize build`
// makes of the base, but the Namespace: `helm install -n gpudiag
// --create-namespace` creates it (without the base's Pod Security labels;
// the README says so). The only other differences are the labels Helm adds
// (helmOnlyLabels, also in the selectors; part-of on the pod template too)
// and the explicit imagePullPolicy.
func TestHelmDefaultsMatchKustomizeBase(t *testing.T) {
	base := kustomizeRendered(t)
	r := renderChart(t, release, "")
	var baseObjects, chartObjects []string
	for _, o := range base.objects {
		if o.Kind != "Namespace" {
			baseObjects = append(baseObjects, o.String())
		}
	}
	for _, o := range r.objects {
		chartObjects = append(chartObjects, o.String())
	}
	slices.Sort(baseObjects)
	slices.Sort(chartObjects)
	if !slices.Equal(baseObjects, chartObjects) {
		t.Fatalf("the chart renders %v; kustomize builds %v (and the Namespace)", chartObjects, baseObjects)
	}

	// The dashboards' ConfigMaps: names, labels and data.
	for _, cm := range r.configMaps {
		cm := *cm.DeepCopy()
		withoutHelmLabels(cm.Labels)
		i := slices.IndexFunc(base.configMaps, func(b corev1.ConfigMap) bool { return b.Name == cm.Name })
		sameYAML(t, "ConfigMap "+cm.Name, base.configMaps[i], cm)
	}

	sa := *r.serviceAccount.DeepCopy()
	withoutHelmLabels(sa.Labels)
	sameYAML(t, "ServiceAccount", base.serviceAccount, sa)

	// The whole DaemonSet: containers, args, env, securityContext and
	// capabilities, volumes and mounts, probes, ports, resources, node
	// selector, tolerations, runtime class, host namespaces.
	sameYAML(t, "DaemonSet", base.daemonSet, chartDaemonSetLikeBase(r.daemonSet))
	if got, want := r.daemonSet.Spec.Template.Spec.Containers[0].ImagePullPolicy, corev1.PullIfNotPresent; got != want {
		t.Errorf("imagePullPolicy %q; want %q", got, want)
	}

	svc := *r.service.DeepCopy()
	withoutHelmLabels(svc.Labels)
	withoutHelmLabels(svc.Spec.Selector)
	sameYAML(t, "Service", base.service, svc)

	sm := r.serviceMonitor
	withoutHelmLabels(sm.Labels)
	withoutHelmLabels(sm.Spec.Selector.MatchLabels)
	sameYAML(t, "ServiceMonitor", base.serviceMonitor, sm)

	pr := r.prometheusRule
	withoutHelmLabels(pr.Labels)
	sameYAML(t, "PrometheusRule", base.prometheusRule, pr)
	sameYAML(t, "PrometheusRule groups against alerts/*.yml", alertGroups(t), r.prometheusRule.Spec.Groups)

	// What the selectors select, with Helm's labels in place.
	ds := r.daemonSet
	sel, err := metav1.LabelSelectorAsSelector(ds.Spec.Selector)
	if err != nil {
		t.Fatal(err)
	}
	if !sel.Matches(labels.Set(ds.Spec.Template.Labels)) {
		t.Error("the DaemonSet's selector does not match its pod template")
	}
	if !labels.SelectorFromSet(r.service.Spec.Selector).Matches(labels.Set(ds.Spec.Template.Labels)) {
		t.Error("the Service does not select the DaemonSet's pods")
	}
	smSel, err := metav1.LabelSelectorAsSelector(&r.serviceMonitor.Spec.Selector)
	if err != nil {
		t.Fatal(err)
	}
	if !smSel.Matches(labels.Set(r.service.Labels)) {
		t.Error("the ServiceMonitor does not select the Service")
	}
	if job := r.service.Labels[r.serviceMonitor.Spec.JobLabel]; job != "gpudiag" {
		t.Errorf("job label %q; want gpudiag (GPUDiagExporterDown selects job=~\".*gpudiag.*\")", job)
	}
	for what, meta := range map[string]metav1.ObjectMeta{"ServiceAccount": r.serviceAccount.ObjectMeta,
		"DaemonSet": ds.ObjectMeta, "Service": r.service.ObjectMeta, "ServiceMonitor": r.serviceMonitor.ObjectMeta,
		"PrometheusRule": r.prometheusRule.ObjectMeta} {
		if meta.Namespace != namespace {
			t.Errorf("%s in namespace %q; want the release's, %q", what, meta.Namespace, namespace)
		}
	}
	if img, want := ds.Spec.Template.Spec.Containers[0].Image, "gpudiag:"+chartAppVersion(t); img != want {
		t.Errorf("image %q; want %q (the chart's appVersion)", img, want)
	}
}

func chartAppVersion(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(chartDir, "Chart.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var c struct {
		APIVersion string `json:"apiVersion"`
		Name       string `json:"name"`
		AppVersion string `json:"appVersion"`
		Version    string `json:"version"`
	}
	if err := yaml.Unmarshal(b, &c); err != nil {
		t.Fatal(err)
	}
	if c.APIVersion != "v2" || c.Name != "gpudiag" || c.Version == "" || c.AppVersion == "" {
		t.Fatalf("Chart.yaml: apiVersion %q, name %q, version %q, appVersion %q", c.APIVersion, c.Name, c.Version, c.AppVersion)
	}
	return c.AppVersion
}

// alertGroups decodes the groups of alerts/*.yml, in file order.
func alertGroups(t *testing.T) []ruleGroup {
	t.Helper()
	files, _ := filepath.Glob(rulesGlob)
	sort.Strings(files)
	var groups []ruleGroup
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var rf struct {
			Groups []ruleGroup `json:"groups"`
		}
		strict(t, f, b, &rf)
		groups = append(groups, rf.Groups...)
	}
	if len(groups) == 0 {
		t.Fatalf("no rule groups in %s", rulesGlob)
	}
	return groups
}

// Helm reads nothing outside the chart (and helm package refuses symlinks):
// the chart carries copies of alerts/*.yml, which must be byte-identical to
// them, the same files and no others. -update copies them.
func TestHelmChartRulesMatchAlerts(t *testing.T) {
	files, err := filepath.Glob(rulesGlob)
	if err != nil || len(files) == 0 {
		t.Fatalf("no rule files at %s: %v", rulesGlob, err)
	}
	if *update {
		old, _ := filepath.Glob(filepath.Join(chartRules, "*.yml"))
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
			if err := os.WriteFile(filepath.Join(chartRules, filepath.Base(f)), b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	copies, _ := filepath.Glob(filepath.Join(chartRules, "*.yml"))
	base := func(paths []string) []string {
		var out []string
		for _, p := range paths {
			out = append(out, filepath.Base(p))
		}
		sort.Strings(out)
		return out
	}
	if a, b := base(files), base(copies); !slices.Equal(a, b) {
		t.Fatalf("%s holds %v; alerts/ holds %v; copy them with: go test ./deploy -run TestHelmChartRulesMatchAlerts -update", chartRules, b, a)
	}
	for _, f := range files {
		want, _ := os.ReadFile(f)
		got, err := os.ReadFile(filepath.Join(chartRules, filepath.Base(f)))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s/%s differs from %s; copy it with: go test ./deploy -run TestHelmChartRulesMatchAlerts -update", chartRules, filepath.Base(f), f)
		}
	}
}

// webConfigValues turns on TLS (from an existing Secret) and basic auth, and
// scrapes over them.
const webConfigValues = `
webConfig:
  config:
    tls_server_config:
      cert_file: /etc/gpudiag/tls/tls.crt
      key_file: /etc/gpudiag/tls/tls.key
    basic_auth_users:
      prometheus: $2y$10$2b2cU8CPhOTaGrs1HRQuAueS7JTT5ZHsHSzYiFPm1leZck7Mc8T4W
  tlsSecret: gpudiag-tls
serviceMonitor:
  tlsConfig:
    ca: {secret: {name: gpudiag-tls, key: ca.crt}}
    serverName: gpudiag
  basicAuth:
    username: {name: gpudiag-scrape, key: username}
    password: {name: gpudiag-scrape, key: password}
extraArgs: [--no-collector.tcp, --collector.nccl.max-files=64]
`

// With a web config the chart renders it into a Secret, mounts it read-only,
// passes --web.config.file to the daemon and scrapes over https with basic
// auth; the probes still go to the plain health listener on the node's
// loopback, and nothing else about the pod changes.
func TestHelmWebConfig(t *testing.T) {
	r := renderChart(t, release, webConfigValues)
	if !r.has("Secret") {
		t.Fatal("no Secret for the web config")
	}
	pod := r.daemonSet.Spec.Template.Spec
	c := pod.Containers[0]

	var fileArg string
	for _, a := range c.Args {
		if v, ok := strings.CutPrefix(a, "--web.config.file="); ok {
			fileArg = v
		}
	}
	if fileArg == "" {
		t.Fatalf("no --web.config.file in %v", c.Args)
	}
	var volName string
	for _, v := range pod.Volumes {
		if v.Secret != nil && v.Secret.SecretName == r.secret.Name {
			volName = v.Name
		}
	}
	if volName == "" {
		t.Fatalf("no volume of the Secret %s", r.secret.Name)
	}
	var mount *corev1.VolumeMount
	for i, vm := range c.VolumeMounts {
		if vm.Name == volName {
			mount = &c.VolumeMounts[i]
		}
	}
	if mount == nil || !mount.ReadOnly {
		t.Fatalf("the Secret's volume is not mounted read-only: %+v", mount)
	}
	key, ok := strings.CutPrefix(fileArg, mount.MountPath+"/")
	if !ok || strings.Contains(key, "/") {
		t.Fatalf("--web.config.file=%s is not a file in the Secret's mount at %s", fileArg, mount.MountPath)
	}
	content, ok := r.secret.Data[key]
	if !ok {
		t.Fatalf("the Secret has no key %q for --web.config.file", key)
	}
	var got, want map[string]any
	if err := yaml.Unmarshal(content, &got); err != nil {
		t.Fatal(err)
	}
	var values struct {
		WebConfig struct {
			Config map[string]any `json:"config"`
		} `json:"webConfig"`
	}
	if err := yaml.Unmarshal([]byte(webConfigValues), &values); err != nil {
		t.Fatal(err)
	}
	want = values.WebConfig.Config
	sameYAML(t, "the web config file", want, got)
	tlsMounted := false
	for _, vm := range c.VolumeMounts {
		if vm.MountPath == "/etc/gpudiag/tls" && vm.ReadOnly {
			for _, v := range pod.Volumes {
				tlsMounted = tlsMounted || v.Name == vm.Name && v.Secret != nil && v.Secret.SecretName == "gpudiag-tls"
			}
		}
	}
	if !tlsMounted {
		t.Error("webConfig.tlsSecret is not mounted read-only at /etc/gpudiag/tls")
	}
	if pod := r.daemonSet.Spec.Template; pod.Annotations["checksum/web-config"] == "" {
		t.Error("no checksum/web-config annotation: pods would keep an old web config")
	}

	// The probes: plain HTTP, no credentials, the health listener on the
	// node's loopback, not the metrics port the web config now guards.
	assertProbesOnHealthListener(t, c)

	// The scrape: https with the given tlsConfig and basicAuth.
	ep := r.serviceMonitor.Spec.Endpoints[0]
	if ep.Scheme != "https" || ep.TLSConfig["serverName"] != "gpudiag" || ep.BasicAuth == nil {
		t.Errorf("the ServiceMonitor scrapes with scheme %q, tlsConfig %v, basicAuth %v; want https with both", ep.Scheme, ep.TLSConfig, ep.BasicAuth)
	}

	// Nothing else changes: without the web config's Secret volumes and
	// mounts, its argument, annotation and the extra arguments, the
	// DaemonSet is the default one.
	def := renderChart(t, release, "")
	ds := *r.daemonSet.DeepCopy()
	spec := &ds.Spec.Template.Spec
	spec.Volumes = slices.DeleteFunc(spec.Volumes, func(v corev1.Volume) bool { return v.Secret != nil })
	cc := &spec.Containers[0]
	cc.VolumeMounts = slices.DeleteFunc(cc.VolumeMounts, func(vm corev1.VolumeMount) bool {
		return vm.Name == volName || vm.MountPath == "/etc/gpudiag/tls"
	})
	cc.Args = slices.DeleteFunc(cc.Args, func(a string) bool {
		return strings.HasPrefix(a, "--web.config.file=") || a == "--no-collector.tcp" || a == "--collector.nccl.max-files=64"
	})
	ds.Spec.Template.Annotations = nil
	sameYAML(t, "the DaemonSet with webConfig, less the web config", def.daemonSet, ds)
}

// assertProbesOnHealthListener checks that both probes are plain HTTP GETs of
// /healthz, without headers, on the health listener the arguments bind to the
// node's loopback, apart from the metrics port.
func assertProbesOnHealthListener(t *testing.T, c corev1.Container) {
	t.Helper()
	var health string
	for _, a := range c.Args {
		if v, ok := strings.CutPrefix(a, "--web.health-address="); ok {
			health = v
		}
	}
	if health != "127.0.0.1:10911" {
		t.Fatalf("--web.health-address=%q; want 127.0.0.1:10911", health)
	}
	for what, p := range map[string]*corev1.Probe{"liveness": c.LivenessProbe, "readiness": c.ReadinessProbe} {
		if p == nil || p.HTTPGet == nil {
			t.Errorf("%s probe: want an httpGet", what)
			continue
		}
		g := p.HTTPGet
		addr := fmt.Sprintf("%s:%d", g.Host, g.Port.IntVal)
		if addr != health || g.Path != "/healthz" || (g.Scheme != "" && g.Scheme != corev1.URISchemeHTTP) || len(g.HTTPHeaders) != 0 {
			t.Errorf("%s probe %s %s%s (headers %v); want plain HTTP to the health listener %s/healthz", what, g.Scheme, addr, g.Path, g.HTTPHeaders, health)
		}
		for _, port := range c.Ports {
			if g.Port.IntVal == port.ContainerPort || g.Port.StrVal == port.Name {
				t.Errorf("%s probe on the metrics port %s", what, port.Name)
			}
		}
	}
}

// With serviceMonitor.enabled, prometheusRule.enabled or dashboards.enabled
// false, those objects are not rendered; the rest is. On a cluster without
// the Prometheus Operator's API the monitor and the rules are left out
// whatever the values say (an install would fail on their kinds), the
// dashboards stay.
func TestHelmMonitoringObjectsOptional(t *testing.T) {
	for _, c := range []struct {
		values string
		extra  []string
		want   []string
	}{
		{"serviceMonitor: {enabled: false}\nprometheusRule: {enabled: false}\n", []string{"--api-versions", operatorAPI},
			[]string{"ConfigMap", "DaemonSet", "Service", "ServiceAccount"}},
		{"dashboards: {enabled: false}\n", []string{"--api-versions", operatorAPI},
			[]string{"DaemonSet", "PrometheusRule", "Service", "ServiceAccount", "ServiceMonitor"}},
		{"", nil, []string{"ConfigMap", "DaemonSet", "Service", "ServiceAccount"}},
		{"serviceMonitor: {kind: PodMonitor}\n", nil, []string{"ConfigMap", "DaemonSet", "Service", "ServiceAccount"}},
	} {
		r := decodeRendered(t, "helm template", helmTemplate(t, release, c.values, c.extra...))
		if !slices.Equal(r.kinds, c.want) {
			t.Errorf("values %q, %v: the chart renders %v; want %v", c.values, c.extra, r.kinds, c.want)
		}
	}
}

// customValues sets every value that places the pod or names the objects.
const customValues = `
fullnameOverride: ""
image: {repository: registry.example.com/gpudiag, tag: v1.2.3, pullPolicy: Always}
imagePullSecrets: [{name: registry-creds}]
nodeSelector:
  nvidia.com/gpu.present: null
  node.example.com/accelerator: h200
tolerations:
  - {key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}
affinity:
  nodeAffinity:
    requiredDuringSchedulingIgnoredDuringExecution:
      nodeSelectorTerms:
        - matchExpressions: [{key: kubernetes.io/arch, operator: In, values: [amd64]}]
priorityClassName: system-node-critical
resources: {requests: {cpu: 50m, memory: 128Mi}, limits: {memory: 512Mi}}
podAnnotations: {example.com/team: gpu-infra}
podLabels: {example.com/tier: monitoring}
serviceMonitor: {labels: {release: kube-prometheus-stack}, interval: 30s}
prometheusRule: {labels: {release: kube-prometheus-stack}}
`

// Each value lands where it should, in a release named otherwise.
func TestHelmValues(t *testing.T) {
	r := renderChart(t, "monitoring", customValues)
	pod := r.daemonSet.Spec.Template
	c := pod.Spec.Containers[0]
	if c.Image != "registry.example.com/gpudiag:v1.2.3" || c.ImagePullPolicy != corev1.PullAlways {
		t.Errorf("image %q, pull policy %q", c.Image, c.ImagePullPolicy)
	}
	if len(pod.Spec.ImagePullSecrets) != 1 || pod.Spec.ImagePullSecrets[0].Name != "registry-creds" {
		t.Errorf("imagePullSecrets %v", pod.Spec.ImagePullSecrets)
	}
	if want := map[string]string{"node.example.com/accelerator": "h200"}; !mapsEqual(pod.Spec.NodeSelector, want) {
		t.Errorf("nodeSelector %v; want %v (a key set to null drops the default)", pod.Spec.NodeSelector, want)
	}
	if want := []corev1.Toleration{{Key: "nvidia.com/gpu", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}}; !slices.Equal(pod.Spec.Tolerations, want) {
		t.Errorf("tolerations %v; want %v", pod.Spec.Tolerations, want)
	}
	if a := pod.Spec.Affinity; a == nil || a.NodeAffinity == nil || a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		t.Errorf("affinity %v", a)
	}
	if pod.Spec.PriorityClassName != "system-node-critical" {
		t.Errorf("priorityClassName %q", pod.Spec.PriorityClassName)
	}
	if got := c.Resources.Limits.Memory().String(); got != "512Mi" {
		t.Errorf("memory limit %s; want 512Mi", got)
	}
	if got := c.Resources.Requests.Cpu().String(); got != "50m" {
		t.Errorf("cpu request %s; want 50m", got)
	}
	if pod.Annotations["example.com/team"] != "gpu-infra" || pod.Labels["example.com/tier"] != "monitoring" {
		t.Errorf("pod annotations %v, labels %v", pod.Annotations, pod.Labels)
	}
	if r.serviceMonitor.Labels["release"] != "kube-prometheus-stack" || r.prometheusRule.Labels["release"] != "kube-prometheus-stack" {
		t.Errorf("ServiceMonitor labels %v, PrometheusRule labels %v", r.serviceMonitor.Labels, r.prometheusRule.Labels)
	}
	if iv := r.serviceMonitor.Spec.Endpoints[0].Interval; iv != "30s" {
		t.Errorf("scrape interval %q; want 30s", iv)
	}
	// Names from the release, and the pieces still refer to each other.
	for what, name := range map[string]string{"ServiceAccount": r.serviceAccount.Name, "DaemonSet": r.daemonSet.Name,
		"Service": r.service.Name, "ServiceMonitor": r.serviceMonitor.Name, "PrometheusRule": r.prometheusRule.Name} {
		if name != "monitoring-gpudiag" {
			t.Errorf("%s named %q; want monitoring-gpudiag", what, name)
		}
	}
	if pod.Spec.ServiceAccountName != r.serviceAccount.Name {
		t.Errorf("the pod runs as %q, the chart's ServiceAccount is %q", pod.Spec.ServiceAccountName, r.serviceAccount.Name)
	}
	if !labels.SelectorFromSet(r.service.Spec.Selector).Matches(labels.Set(pod.Labels)) {
		t.Error("the Service does not select the pods")
	}
	// None of it touches the privileges.
	def := renderChart(t, release, "")
	sameYAML(t, "securityContext", def.daemonSet.Spec.Template.Spec.Containers[0].SecurityContext, c.SecurityContext)
	sameYAML(t, "volumes", def.daemonSet.Spec.Template.Spec.Volumes, pod.Spec.Volumes)
	sameYAML(t, "volume mounts", def.daemonSet.Spec.Template.Spec.Containers[0].VolumeMounts, c.VolumeMounts)
	sameYAML(t, "args", def.daemonSet.Spec.Template.Spec.Containers[0].Args, c.Args)
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// helm lint --strict passes with the defaults and with a web config, and
// helm package packs the chart with its copies of the rule files (helm
// package refuses what a symlink would have been).
func TestHelmLintAndPackage(t *testing.T) {
	helm(t, "lint", "--strict", chartDir)
	dir := t.TempDir()
	f := filepath.Join(dir, "values.yaml")
	if err := os.WriteFile(f, []byte(webConfigValues), 0o600); err != nil {
		t.Fatal(err)
	}
	helm(t, "lint", "--strict", chartDir, "--values", f)
	if err := os.WriteFile(f, []byte(scrapeValues+"  kind: PodMonitor\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	helm(t, "lint", "--strict", chartDir, "--values", f)

	helm(t, "package", chartDir, "--destination", dir)
	pkgs, _ := filepath.Glob(filepath.Join(dir, "gpudiag-*.tgz"))
	if len(pkgs) != 1 {
		t.Fatalf("helm package made %v", pkgs)
	}
	names := tgzNames(t, pkgs[0])
	for _, want := range []string{"gpudiag/Chart.yaml", "gpudiag/values.yaml", "gpudiag/templates/daemonset.yaml",
		"gpudiag/files/gpudiag.alerts.yml", "gpudiag/files/gpudiag.rules.yml"} {
		if !slices.Contains(names, want) {
			t.Errorf("the packaged chart lacks %s: %v", want, names)
		}
	}
}

// tgzNames lists the files of a gzipped tar.
func tgzNames(t *testing.T, path string) []string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(zr)
	var names []string
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return names
		}
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, h.Name)
	}
}

// helmArgs is the daemon's arguments the chart renders with the defaults and
// with a web config and extra arguments, for TestDaemonAcceptsManifestArguments.
func helmArgs(t *testing.T) map[string][]string {
	t.Helper()
	return map[string][]string{
		"Helm chart (defaults)":                 renderChart(t, release, "").daemonSet.Spec.Template.Spec.Containers[0].Args,
		"Helm chart (webConfig, extraArgs)":     renderChart(t, release, webConfigValues).daemonSet.Spec.Template.Spec.Containers[0].Args,
		"Helm chart (values of TestHelmValues)": renderChart(t, "monitoring", customValues).daemonSet.Spec.Template.Spec.Containers[0].Args,
	}
}
