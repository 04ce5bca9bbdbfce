package server

import (
	"bytes"
	"compress/gzip"
	"io"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

func gaugeRegistry(names ...string) *prometheus.Registry {
	reg := prometheus.NewRegistry()
	for _, n := range names {
		g := prometheus.NewGauge(prometheus.GaugeOpts{Name: n, Help: "h"})
		reg.MustRegister(g)
	}
	return reg
}

func TestMergeSortsAndRejectsDuplicates(t *testing.T) {
	mfs, err := Merge(gaugeRegistry("b_x", "d_x"), gaugeRegistry("a_x", "c_x")).Gather()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, mf := range mfs {
		names = append(names, mf.GetName())
	}
	if got := strings.Join(names, ","); got != "a_x,b_x,c_x,d_x" {
		t.Fatalf("order %s", got)
	}
	if _, err := Merge(gaugeRegistry("a_x"), gaugeRegistry("a_x")).Gather(); err == nil || !strings.Contains(err.Error(), "a_x exported twice") {
		t.Fatalf("duplicate not reported: %v", err)
	}
}

func TestFastGzip(t *testing.T) {
	h, err := New(Options{TelemetryPath: "/metrics", Gatherer: gaugeRegistry("a_x", "b_x"), Logger: slog.Default()})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		accept string
		gzip   bool
	}{{"gzip", true}, {"deflate, gzip;q=0.8", true}, {"gzip;q=0", false}, {"", false}, {"identity", false}} {
		req := httptest.NewRequest("GET", "/metrics", nil)
		req.Header.Set("Accept-Encoding", tc.accept)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		body := w.Body.Bytes()
		if got := w.Header().Get("Content-Encoding") == "gzip"; got != tc.gzip {
			t.Fatalf("Accept-Encoding %q: gzip %v", tc.accept, got)
		}
		if tc.gzip {
			zr, err := gzip.NewReader(bytes.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			body, _ = io.ReadAll(zr)
		}
		if !strings.Contains(string(body), "a_x 0") || !strings.Contains(string(body), "b_x 0") {
			t.Fatalf("Accept-Encoding %q: body %q", tc.accept, body)
		}
	}
}
