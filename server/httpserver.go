package server

import (
	"log/slog"
	"net/http"
	"time"
)

// HTTPOptions bound what one client can hold of the daemon's HTTP server.
type HTTPOptions struct {
	// ReadTimeout bounds reading a whole request, headers and body. A
	// client dribbling a body it announced otherwise holds its connection
	// for as long as it likes. 0: no bound.
	ReadTimeout time.Duration
	// WriteTimeout bounds writing a response, from the end of reading the
	// request. A client that stops reading loses its connection then
	// instead of holding a handler forever. Go's /debug/pprof/profile and
	// /trace add their ?seconds= to it. 0: no bound.
	WriteTimeout time.Duration
	// IdleTimeout closes a keep-alive connection that sends no next
	// request. 0 would fall back to ReadTimeout, and with that 0 too keep
	// idle connections forever.
	IdleTimeout time.Duration
	// Logger receives the server's own errors (TLS handshakes, accept
	// errors, handler panics), at most one line a minute per kind.
	Logger *slog.Logger
}

// readHeaderTimeout bounds reading a request's headers (and a TLS
// handshake): a connection that sends nothing is closed after it.
const readHeaderTimeout = 10 * time.Second

// maxHeaderBytes bounds a request's headers. Prometheus, curl, browsers and
// basic auth send well under 2 KiB; Go's default is 1 MiB per request.
const maxHeaderBytes = 16 << 10

// NewHTTPServer returns the server for h with every timeout set. The
// daemon's listeners and the health listener share it.
func NewHTTPServer(h http.Handler, o HTTPOptions) *http.Server {
	header := readHeaderTimeout
	if o.ReadTimeout > 0 && o.ReadTimeout < header {
		header = o.ReadTimeout
	}
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: header,
		ReadTimeout:       o.ReadTimeout,
		WriteTimeout:      o.WriteTimeout,
		IdleTimeout:       o.IdleTimeout,
		MaxHeaderBytes:    maxHeaderBytes,
	}
	if o.Logger != nil {
		srv.ErrorLog = NewHTTPErrorLog(o.Logger, time.Minute)
	}
	return srv
}

// Health answers liveness probes: ok while the daemon serves. A lost GPU or
// a failing collector is reported in the metrics, not by getting the pod
// restarted.
func Health() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write([]byte("ok\n"))
	})
}

// HealthOnly serves /healthz and nothing else: the handler of the
// unauthenticated health listener (--web.health-address), which must not
// leak metrics or diagnoses past the web config's auth.
func HealthOnly() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/healthz", Health())
	return withSecurityHeaders(mux)
}
