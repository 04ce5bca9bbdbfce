package server

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// The landing page links Go's profiles only when they are served: with
// --web.enable-pprof off, a link would lead to a 404.
func TestLandingPageLinksProfilesOnlyWhenServed(t *testing.T) {
	for _, pprofOn := range []bool{false, true} {
		h, err := New(Options{TelemetryPath: "/metrics", Gatherer: prometheus.NewRegistry(),
			Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Pprof: pprofOn})
		if err != nil {
			t.Fatal(err)
		}
		srv := httptest.NewServer(h)
		body := get(t, srv.URL+"/", http.StatusOK)
		linked := strings.Contains(body, "debug/pprof/")
		if linked != pprofOn {
			t.Errorf("pprof %v: landing page links /debug/pprof: %v", pprofOn, linked)
		}
		want := http.StatusNotFound
		if pprofOn {
			want = http.StatusOK
		}
		get(t, srv.URL+"/debug/pprof/heap", want)
		srv.Close()
	}
}

func get(t *testing.T, url string, wantCode int) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != wantCode {
		t.Errorf("GET %s: %d; want %d", url, resp.StatusCode, wantCode)
	}
	return string(body)
}
