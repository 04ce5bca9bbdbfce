package server

import (
	"compress/gzip"
	"net/http"
	"strconv"
	"strings"
	"sync"
)

// gzipPool holds writers at BestSpeed. promhttp compresses at gzip's default
// level; on an 8-GPU exposition that made compression most of a scrape's
// cost, while BestSpeed trades a few KB of a ~7 KB body for about half of it
// (docs/performance.md).
var gzipPool = sync.Pool{New: func() any {
	w, _ := gzip.NewWriterLevel(nil, gzip.BestSpeed)
	return w
}}

type gzipResponseWriter struct {
	http.ResponseWriter
	zw *gzip.Writer
}

func (g gzipResponseWriter) Write(b []byte) (int, error) { return g.zw.Write(b) }

// fastGzip compresses responses for clients that accept gzip, as Prometheus
// does; others get the plain body.
func fastGzip(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !acceptsGzip(r.Header.Get("Accept-Encoding")) {
			next.ServeHTTP(w, r)
			return
		}
		zw := gzipPool.Get().(*gzip.Writer)
		zw.Reset(w)
		defer func() {
			_ = zw.Close()
			gzipPool.Put(zw)
		}()
		w.Header().Set("Content-Encoding", "gzip")
		w.Header().Add("Vary", "Accept-Encoding")
		next.ServeHTTP(gzipResponseWriter{ResponseWriter: w, zw: zw}, r)
	})
}

// acceptsGzip reads Accept-Encoding: gzip with a quality above zero.
func acceptsGzip(header string) bool {
	for _, part := range strings.Split(header, ",") {
		enc, params, _ := strings.Cut(strings.TrimSpace(part), ";")
		if !strings.EqualFold(strings.TrimSpace(enc), "gzip") {
			continue
		}
		q := 1.0
		if k, v, ok := strings.Cut(strings.TrimSpace(params), "="); ok && strings.TrimSpace(k) == "q" {
			if f, err := strconv.ParseFloat(strings.TrimSpace(v), 64); err == nil {
				q = f
			}
		}
		return q > 0
	}
	return false
}
