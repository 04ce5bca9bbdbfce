package server

import (
	"crypto/sha256"
	"encoding/base64"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// Every response of the daemon's server carries the security headers, and
// every HTML page a policy that allows its own inline style by hash and
// nothing else: no script, no 'unsafe-inline', no framing. Before, none
// was sent: a page could be framed (clickjacking) and a browser could
// sniff a text answer quoting a parameter as HTML.
func TestEveryResponseCarriesSecurityHeaders(t *testing.T) {
	page := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// /diagnose as the server sees it: a page that sets its own policy.
		w.Header().Set("Content-Security-Policy", StylePolicy("p{}"))
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		_, _ = io.WriteString(w, "<html><style>p{}</style><p>verdict</p></html>")
	})
	h, err := New(Options{TelemetryPath: "/metrics", Gatherer: prometheus.NewRegistry(),
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Diagnose: page, Pprof: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		handler http.Handler
		path    string
		html    bool
	}{
		{h, "/", true},
		{h, "/diagnose", true},
		{h, "/debug/pprof/", true},
		{h, "/metrics", false},
		{h, "/healthz", false},
		{h, "/debug/pprof/goroutine?debug=1", false},
		{h, "/no-such-page", false},
		{HealthOnly(), "/healthz", false},
		{HealthOnly(), "/metrics", false},
	} {
		rec := httptest.NewRecorder()
		tc.handler.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, tc.path, nil))
		checkSecurityHeaders(t, tc.path, rec.Result().Header, rec.Body.String(), tc.html)
	}
}

// checkSecurityHeaders fails unless header holds the daemon's security
// headers and, for an HTML page, a policy under which the page's every
// inline style applies and nothing else could.
func checkSecurityHeaders(t *testing.T, path string, header http.Header, body string, html bool) {
	t.Helper()
	for name, want := range map[string]string{"X-Content-Type-Options": "nosniff", "X-Frame-Options": "DENY", "Referrer-Policy": "no-referrer"} {
		if got := header.Get(name); got != want {
			t.Errorf("%s: %s %q, want %q", path, name, got, want)
		}
	}
	csp := header.Get("Content-Security-Policy")
	for _, want := range []string{"default-src 'none'", "frame-ancestors 'none'", "base-uri 'none'"} {
		if !strings.Contains(csp, want) {
			t.Errorf("%s: Content-Security-Policy %q lacks %q", path, csp, want)
		}
	}
	if strings.Contains(csp, "unsafe") || strings.Contains(csp, "script-src") {
		t.Errorf("%s: Content-Security-Policy %q allows more than styles", path, csp)
	}
	if !html {
		if csp != DefaultContentSecurityPolicy {
			t.Errorf("%s: Content-Security-Policy %q, want the default", path, csp)
		}
		return
	}
	if ct := header.Get("Content-Type"); !strings.HasPrefix(ct, "text/html") {
		t.Errorf("%s: Content-Type %q, want a page", path, ct)
	}
	styles := InlineStyles([]byte(body))
	if len(styles) == 0 {
		t.Errorf("%s: no inline style found in the page", path)
	}
	for _, s := range styles {
		sum := sha256.Sum256([]byte(s))
		if hash := "'sha256-" + base64.StdEncoding.EncodeToString(sum[:]) + "'"; !strings.Contains(csp, hash) {
			t.Errorf("%s: the page's <style> (%d bytes) is not allowed by %q", path, len(s), csp)
		}
	}
	if strings.Contains(body, "<script") || strings.Contains(body, " style=") {
		t.Errorf("%s: the page has a script or a style attribute, which the policy blocks", path)
	}
}

func TestInlineStylesAndPolicy(t *testing.T) {
	styles := InlineStyles([]byte("<style>a{}</style><p>x</p><style>\nb{}\n</style><style>unclosed"))
	if len(styles) != 2 || styles[0] != "a{}" || styles[1] != "\nb{}\n" {
		t.Errorf("InlineStyles: %q", styles)
	}
	// The hash a browser computes for <style>a{}</style>, as
	// `printf 'a{}' | openssl dgst -sha256 -binary | base64` gives it.
	if got, want := StylePolicy("a{}"), "default-src 'none'; style-src 'sha256-X1RutGBrXCt9KkSaXMK7tHftWiRscFHOhxsS8tv8hBk='; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"; got != want {
		t.Errorf("StylePolicy:\n got %s\nwant %s", got, want)
	}
	if got := StylePolicy(); !strings.Contains(got, "style-src 'none'") {
		t.Errorf("no style: %s", got)
	}
}
