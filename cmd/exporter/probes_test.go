package main

import (
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

const daemonSetManifest = "../../deploy/kubernetes/daemonset.yaml"

// The DaemonSet's liveness and readiness probes, exactly as the manifest
// writes them (port, host, path, scheme, headers), pass against the daemon
// run with the manifest's arguments and the documented web config (TLS and
// basic auth). The kubelet sends no credentials and does not verify
// certificates. Before, the probes went to the metrics port over plain
// HTTP: with the web config they got 400 and the pod restarted in a loop.
func TestDaemonSetProbesPassWithTLSAndAuth(t *testing.T) {
	b, err := os.ReadFile(daemonSetManifest)
	if err != nil {
		t.Fatal(err)
	}
	var ds appsv1.DaemonSet
	if err := yaml.UnmarshalStrict(b, &ds); err != nil {
		t.Fatal(err)
	}
	pod := ds.Spec.Template.Spec
	c := pod.Containers[0]

	// The daemon's listeners as the manifest configures them, each moved
	// to a free port of this host (the manifest's ports may be in use here).
	type listener struct {
		flag, host string
		local      string // where it listens in this test
	}
	byPort := map[int]*listener{}
	var args []string
	for _, a := range c.Args {
		flag, value, _ := strings.Cut(a, "=")
		switch flag {
		case "--web.listen-address", "--web.health-address":
			host, port, err := net.SplitHostPort(value)
			if err != nil {
				t.Fatalf("%s: %v", a, err)
			}
			p, _ := strconv.Atoi(port)
			l := &listener{flag: flag, host: host, local: freeAddr(t)}
			byPort[p] = l
			args = append(args, flag+"="+l.local)
		case "--path.procfs":
			args = append(args, flag+"="+filepath.Join(fixtureHost, "proc"))
		case "--path.sysfs":
			args = append(args, flag+"="+filepath.Join(fixtureHost, "sys"))
		default:
			args = append(args, a)
		}
	}
	cfg, pool := tlsAuthConfig(t)
	args = append(args, "--web.config.file="+cfg, "--collector.gpu.backend=none", "--sample.interval=200ms")
	logs := runDaemon(t, args)
	metricsPort := byPort[int(c.Ports[0].ContainerPort)]
	if metricsPort == nil || metricsPort.flag != "--web.listen-address" {
		t.Fatalf("the container port %d is not a --web.listen-address", c.Ports[0].ContainerPort)
	}
	waitTLS(t, metricsPort.local, pool, logs)

	// The kubelet's probe client: no certificate check, no redirects
	// followed off the probe's host. Its timeout stops only a daemon that
	// never answers (shortly before the test binary's -timeout): what is
	// judged is the answer, which a loaded machine gives slowly.
	kubelet := &http.Client{Timeout: requestWait(t), Transport: &http.Transport{
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, DisableKeepAlives: true}}
	for name, probe := range map[string]*corev1.Probe{"liveness": c.LivenessProbe, "readiness": c.ReadinessProbe} {
		if probe == nil || probe.HTTPGet == nil {
			t.Fatalf("the %s probe is not an httpGet probe", name)
		}
		g := probe.HTTPGet
		port := g.Port.IntValue()
		if g.Port.StrVal != "" {
			port = 0
			for _, cp := range c.Ports {
				if cp.Name == g.Port.StrVal {
					port = int(cp.ContainerPort)
				}
			}
		}
		l := byPort[port]
		if l == nil {
			t.Fatalf("the %s probe's port %s is no listener of the daemon's arguments %v", name, g.Port.String(), c.Args)
		}
		// Where the kubelet connects: the probe's host, else the pod's IP
		// (with hostNetwork, the node's). The listener must be bound there.
		switch {
		case g.Host != "" && l.host != "" && l.host != g.Host:
			t.Fatalf("the %s probe connects to %s; %s binds %s", name, g.Host, l.flag, l.host)
		case g.Host == "" && l.host != "" && l.host != "0.0.0.0" && l.host != "::":
			t.Fatalf("the %s probe connects to the pod IP; %s binds only %s", name, l.flag, l.host)
		case g.Host != "" && !pod.HostNetwork:
			t.Fatalf("the %s probe's host %s is the kubelet's; it reaches the pod's listener only with hostNetwork", name, g.Host)
		}
		scheme := "http"
		if g.Scheme == corev1.URISchemeHTTPS {
			scheme = "https"
		}
		req, _ := http.NewRequest("GET", fmt.Sprintf("%s://%s%s", scheme, l.local, g.Path), nil)
		req.Header.Set("User-Agent", "kube-probe/1.35")
		for _, h := range g.HTTPHeaders {
			req.Header.Set(h.Name, h.Value)
		}
		resp, err := kubelet.Do(req)
		if err != nil {
			t.Errorf("%s probe %s: %v", name, req.URL, err)
			continue
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || string(body) != "ok\n" {
			t.Errorf("%s probe %s (%s in the manifest): %d %q; want 200", name, req.URL, g.Port.String(), resp.StatusCode, body)
		}
	}

	// The web config still guards everything else: the metrics port wants
	// credentials, and the health listener serves /healthz alone.
	anon := &http.Client{Timeout: requestWait(t), Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	defer anon.CloseIdleConnections()
	for _, path := range []string{"/metrics", "/diagnose", "/healthz"} {
		resp, err := anon.Get("https://" + metricsPort.local + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("%s without credentials on the metrics port: %d; want 401", path, resp.StatusCode)
		}
	}
	for _, l := range byPort {
		if l.flag != "--web.health-address" {
			continue
		}
		for _, path := range []string{"/metrics", "/diagnose", "/", "/debug/pprof/"} {
			resp, err := kubelet.Get("http://" + l.local + path)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusNotFound {
				t.Errorf("%s on the unauthenticated health listener: %d; want 404", path, resp.StatusCode)
			}
		}
	}
}
