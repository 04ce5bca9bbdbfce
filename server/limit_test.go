package server

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// blockingWriter is a client that stops reading: Write blocks until the
// test lets it go.
type blockingWriter struct {
	header  http.Header
	code    int
	writing chan struct{} // closed when Write is entered
	release chan struct{}
}

func (b *blockingWriter) Header() http.Header  { return b.header }
func (b *blockingWriter) WriteHeader(code int) { b.code = code }
func (b *blockingWriter) Write(p []byte) (int, error) {
	close(b.writing)
	<-b.release
	return len(p), nil
}

// A response stuck in its write holds no rendering slot: with one slot, a
// second request is served while the first still writes. promhttp's own
// limit held the slot through the write and answered 503.
func TestStalledWriteHoldsNoSlot(t *testing.T) {
	h := limitRendering(1, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		_, _ = w.Write([]byte("a_x 1\n"))
	}))
	stuck := &blockingWriter{header: http.Header{}, writing: make(chan struct{}), release: make(chan struct{})}
	done := make(chan struct{})
	go func() {
		h.ServeHTTP(stuck, httptest.NewRequest("GET", "/metrics", nil))
		close(done)
	}()
	select {
	case <-stuck.writing:
	case <-time.After(30 * time.Second):
		t.Fatal("the first response never reached its write")
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest("GET", "/metrics", nil))
	if w.Code != http.StatusOK || w.Body.String() != "a_x 1\n" {
		t.Fatalf("second request while the first writes: %d %q; want 200", w.Code, w.Body.String())
	}
	close(stuck.release)
	<-done
	if stuck.code != http.StatusOK || stuck.header.Get("Content-Type") != "text/plain" || stuck.header.Get("Content-Length") != "6" {
		t.Fatalf("the kept response lost its status or headers: %d %v", stuck.code, stuck.header)
	}
}

// The limit still bounds rendering: a request arriving while every slot
// renders gets 503, and the status and headers a handler sets come through.
func TestRenderingLimit(t *testing.T) {
	rendering, finish := make(chan struct{}), make(chan struct{})
	h := limitRendering(1, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("slow") != "" {
			close(rendering)
			<-finish
		}
		w.Header().Set("X-Test", "kept")
		w.WriteHeader(http.StatusTeapot)
		_, _ = w.Write([]byte("body"))
	}))
	first := httptest.NewRecorder()
	done := make(chan struct{})
	go func() {
		h.ServeHTTP(first, httptest.NewRequest("GET", "/metrics?slow=1", nil))
		close(done)
	}()
	<-rendering
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest("GET", "/metrics", nil))
	if w.Code != http.StatusServiceUnavailable {
		t.Fatalf("request while the only slot renders: %d; want 503", w.Code)
	}
	close(finish)
	<-done
	if first.Code != http.StatusTeapot || first.Header().Get("X-Test") != "kept" || first.Body.String() != "body" {
		t.Fatalf("rendered response: %d %v %q", first.Code, first.Header(), first.Body.String())
	}
	w = httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest("GET", "/metrics", nil))
	if w.Code != http.StatusTeapot {
		t.Fatalf("after the slot freed: %d", w.Code)
	}
}
