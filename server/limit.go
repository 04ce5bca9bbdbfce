package server

import (
	"bytes"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"sync"
)

// limitRendering bounds how many responses next renders at once, like
// promhttp's MaxRequestsInFlight, but holds a slot only while the response
// is rendered into memory, not while it is written to the client.
//
// promhttp holds its slot until the last byte is written. A client that
// pipelines requests and never reads (a tiny receive window) blocks the
// handler in a write, so 45 such clients held 39 of the 40 slots and real
// scrapes got 503 (issue 15). Here the slot bounds the CPU of gathering and
// encoding, as it was meant to; a stalled write holds only its connection
// and its rendered body, until the server's write timeout closes it.
func limitRendering(max int, next http.Handler) http.Handler {
	var sem chan struct{}
	if max > 0 {
		sem = make(chan struct{}, max)
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if sem != nil {
			select {
			case sem <- struct{}{}:
			default:
				http.Error(w, fmt.Sprintf("Limit of concurrent requests reached (%d), try again later.", max),
					http.StatusServiceUnavailable)
				return
			}
		}
		buf := bufferPool.Get().(*bufferedResponse)
		buf.reset()
		next.ServeHTTP(buf, r)
		if sem != nil {
			<-sem
		}
		buf.copyTo(w)
		if buf.body.Cap() <= maxPooledBody {
			bufferPool.Put(buf)
		}
	})
}

// maxPooledBody keeps an unusually large body's buffer out of the pool, so
// one huge response does not stay allocated for good.
const maxPooledBody = 4 << 20

var bufferPool = sync.Pool{New: func() any { return &bufferedResponse{header: http.Header{}} }}

// bufferedResponse is an http.ResponseWriter that keeps the response.
type bufferedResponse struct {
	header http.Header
	code   int
	body   bytes.Buffer
}

func (b *bufferedResponse) reset() {
	clear(b.header)
	b.code = 0
	b.body.Reset()
}

func (b *bufferedResponse) Header() http.Header { return b.header }

func (b *bufferedResponse) WriteHeader(code int) {
	if b.code == 0 {
		b.code = code
	}
}

func (b *bufferedResponse) Write(p []byte) (int, error) {
	if b.code == 0 {
		b.code = http.StatusOK
	}
	return b.body.Write(p)
}

// copyTo sends the kept response. A failed write (the client went away, or
// the write timeout passed) is the server's to handle: it closes the
// connection.
func (b *bufferedResponse) copyTo(w http.ResponseWriter) {
	h := w.Header()
	for k, v := range b.header {
		h[k] = slices.Clone(v) // b and its header go back to the pool
	}
	code := b.code
	if code == 0 {
		code = http.StatusOK
	}
	h.Set("Content-Length", strconv.Itoa(b.body.Len()))
	w.WriteHeader(code)
	_, _ = w.Write(b.body.Bytes())
}
