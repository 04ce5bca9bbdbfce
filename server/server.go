// Package server wires the HTTP endpoints: the landing page, /metrics and
// /healthz. Handlers only read what the engine already prepared.
package server

import (
	"log/slog"
	"net/http"
	"net/http/pprof"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/common/version"
	"github.com/prometheus/exporter-toolkit/web"
)

// Options configure the handler.
type Options struct {
	TelemetryPath string
	// MaxRequests bounds how many /metrics responses are rendered at once;
	// 0 means no bound. Writing a rendered response to a slow client does
	// not count.
	MaxRequests int
	Gatherer    prometheus.Gatherer
	// Instrumenter registers promhttp's own metrics; nil skips them.
	Instrumenter prometheus.Registerer
	Logger       *slog.Logger
	// Diagnose serves /diagnose; nil leaves it out.
	Diagnose http.Handler
	// Pprof serves Go's profiles under /debug/pprof/ (--web.enable-pprof).
	// Like every endpoint it sits behind the web config's TLS and basic
	// auth; off, the paths do not exist.
	Pprof bool
}

// New returns the daemon's HTTP handler. Every response carries the
// security headers (withSecurityHeaders); the HTML pages (the landing page,
// /diagnose, the pprof index) each a Content-Security-Policy that allows
// their own inline style and nothing else.
func New(o Options) (http.Handler, error) {
	mux := http.NewServeMux()
	// The limit of parallel scrapes is limitRendering's, not promhttp's:
	// promhttp's holds a slot while a client reads, so clients that stop
	// reading take every slot.
	var metrics http.Handler = limitRendering(o.MaxRequests, fastGzip(promhttp.HandlerFor(o.Gatherer, promhttp.HandlerOpts{
		ErrorLog:           newScrapeErrorLog(o.Logger, time.Minute),
		ErrorHandling:      promhttp.ContinueOnError,
		DisableCompression: true, // fastGzip compresses, faster
	})))
	if o.Instrumenter != nil {
		metrics = promhttp.InstrumentMetricHandler(o.Instrumenter, metrics)
	}
	mux.Handle(o.TelemetryPath, metrics)
	mux.Handle("/healthz", Health())
	if o.Diagnose != nil {
		mux.Handle("/diagnose", o.Diagnose)
	}
	if o.Pprof {
		// The index is a page with a <style> of its own.
		mux.Handle("/debug/pprof/", staticPage(http.HandlerFunc(pprof.Index), probe("/debug/pprof/")))
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	if o.TelemetryPath != "/" {
		profiling := "false" // exporter-toolkit links /debug/pprof/* unless told not to
		if o.Pprof {
			profiling = "true"
		}
		landing, err := web.NewLandingPage(web.LandingConfig{
			Name:        "gpudiag",
			Profiling:   profiling,
			Description: "GPU node diagnostics: GPU activity (SM, tensor, DRAM), links, host and communication path, and what bounds each GPU.",
			Version:     version.Info(),
			Links: []web.LandingLinks{
				{Address: o.TelemetryPath, Text: "Metrics"},
				{Address: "/diagnose", Text: "Diagnosis: what bounds each GPU, and why"},
				{Address: "/healthz", Text: "Health"},
			},
		})
		if err != nil {
			return nil, err
		}
		mux.Handle("/", staticPage(landing, probe("/")))
	}
	return withSecurityHeaders(mux), nil
}

// probe is a request for path, to render a static page once.
func probe(path string) *http.Request {
	r, _ := http.NewRequest(http.MethodGet, path, nil)
	return r
}
