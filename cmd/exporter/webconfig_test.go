package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"
)

// writeSelfSigned writes a certificate and key for 127.0.0.1 and returns
// their paths and a pool that trusts the certificate.
func writeSelfSigned(t *testing.T, dir string) (certPath, keyPath string, pool *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "gpudiag-test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, _ := x509.MarshalECPrivateKey(key)
	certPath, keyPath = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	os.WriteFile(certPath, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600)
	os.WriteFile(keyPath, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600)
	cert, _ := x509.ParseCertificate(der)
	pool = x509.NewCertPool()
	pool.AddCert(cert)
	return certPath, keyPath, pool
}

// TLS and basic auth come from exporter-toolkit's web config file and cover
// every endpoint, /diagnose and (when enabled) /debug/pprof included.
func TestWebConfigTLSAndBasicAuth(t *testing.T) {
	dir := t.TempDir()
	certPath, keyPath, pool := writeSelfSigned(t, dir)
	hash, err := bcrypt.GenerateFromPassword([]byte("s3cret"), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(dir, "web.yml")
	os.WriteFile(cfg, []byte("tls_server_config:\n  cert_file: "+certPath+"\n  key_file: "+keyPath+
		"\nbasic_auth_users:\n  oncall: "+string(hash)+"\n"), 0o600)

	addr := freeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := run(ctx, []string{"--web.listen-address=" + addr, "--web.config.file=" + cfg, "--web.enable-pprof",
			"--collector.gpu.backend=none", "--sample.interval=200ms"}, io.Discard, io.Discard, nil)
		done <- err
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	// The waits stop only a daemon that never answers: a loaded machine
	// (-race, TLS, bcrypt) answers slowly, and speed is not judged here.
	client := &http.Client{Timeout: requestWait(t), Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	defer client.CloseIdleConnections()
	base := "https://" + addr
	var resp *http.Response
	for deadline := time.Now().Add(requestWait(t)); ; {
		resp, err = client.Get(base + "/metrics")
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("TLS endpoint never came up: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("no credentials: %d; want 401", resp.StatusCode)
	}
	for path, user := range map[string]string{"/metrics": "s3cret", "/diagnose": "s3cret", "/healthz": "s3cret", "/debug/pprof/": "s3cret"} {
		req, _ := http.NewRequest("GET", base+path, nil)
		req.SetBasicAuth("oncall", user)
		r, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		r.Body.Close()
		if r.StatusCode != http.StatusOK {
			t.Errorf("%s with credentials: %d", path, r.StatusCode)
		}
		req.SetBasicAuth("oncall", "wrong")
		r, _ = client.Do(req)
		r.Body.Close()
		if r.StatusCode != http.StatusUnauthorized {
			t.Errorf("%s with a wrong password: %d", path, r.StatusCode)
		}
	}
	// Plain HTTP is refused on a TLS listener.
	if r, err := (&http.Client{Timeout: requestWait(t)}).Get("http://" + addr + "/metrics"); err == nil {
		r.Body.Close()
		if r.StatusCode == http.StatusOK {
			t.Fatal("plain HTTP served metrics on a TLS listener")
		}
	}
}

// tlsAuthConfig writes the documented web config, TLS and basic auth
// (user oncall, password s3cret), and returns its path and a pool trusting
// its certificate.
func tlsAuthConfig(t *testing.T) (string, *x509.CertPool) {
	t.Helper()
	dir := t.TempDir()
	certPath, keyPath, pool := writeSelfSigned(t, dir)
	hash, err := bcrypt.GenerateFromPassword([]byte("s3cret"), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(dir, "web.yml")
	if err := os.WriteFile(cfg, []byte("tls_server_config:\n  cert_file: "+certPath+"\n  key_file: "+keyPath+
		"\nbasic_auth_users:\n  oncall: "+string(hash)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return cfg, pool
}

// runDaemon runs the serve command with args until the test ends.
func runDaemon(t *testing.T, args []string) *syncBuffer {
	t.Helper()
	logs := &syncBuffer{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := run(ctx, args, io.Discard, logs, nil)
		done <- err
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("daemon: %v\n%s", err, logs.String())
		}
	})
	return logs
}

// waitTLS waits until the TLS listener at addr answers an authenticated
// /healthz.
func waitTLS(t *testing.T, addr string, pool *x509.CertPool, logs *syncBuffer) {
	t.Helper()
	client := &http.Client{Timeout: requestWait(t), Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	defer client.CloseIdleConnections()
	for deadline := time.Now().Add(requestWait(t)); ; time.Sleep(50 * time.Millisecond) {
		req, _ := http.NewRequest("GET", "https://"+addr+"/healthz", nil)
		req.SetBasicAuth("oncall", "s3cret")
		if resp, err := client.Do(req); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the daemon's TLS listener never came up; logs:\n%s", logs.String())
		}
	}
}

// A client failing the TLS handshake (here plain HTTP to the TLS port) is
// logged by the daemon's logger, in its format (JSON here), not by net/http
// straight to stderr.
func TestTLSHandshakeErrorsInDaemonLog(t *testing.T) {
	cfg, pool := tlsAuthConfig(t)
	addr := freeAddr(t)
	logs := runDaemon(t, []string{"--web.listen-address=" + addr, "--web.config.file=" + cfg, "--log.format=json",
		"--collector.gpu.backend=none", "--sample.interval=200ms",
		"--path.procfs=" + filepath.Join(fixtureHost, "proc"), "--path.sysfs=" + filepath.Join(fixtureHost, "sys")})
	waitTLS(t, addr, pool, logs)
	for range 3 {
		if resp, err := (&http.Client{Timeout: 10 * time.Second}).Get("http://" + addr + "/metrics"); err == nil {
			resp.Body.Close()
		}
	}
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	conn.Write([]byte("not a TLS hello\r\n\r\n"))
	conn.Close()
	want := `"msg":"HTTP client failed the TLS handshake"`
	for deadline := time.Now().Add(requestWait(t)); !strings.Contains(logs.String(), want); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no %s line in the daemon's log:\n%s", want, logs.String())
		}
	}
	// Bounded: one line, the rest counted in the next one a minute later.
	if n := strings.Count(logs.String(), want); n != 1 {
		t.Errorf("%d handshake lines for a burst of failures; want 1 a minute", n)
	}
}
