package jobdiag

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/prometheus/client_golang/api"
	v1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"

	"github.com/gpudiag/gpudiag/safetext"
)

// DefaultMaxResponseBytes bounds one answer of Prometheus. The largest
// answer `gpudiag job` asks for, the job's GPUs' verdict series, is about
// 1 KB a GPU: 32 MiB holds a job of tens of thousands of GPUs, while an
// answer without a bound was read whole (1.48 GB of memory for a 420 MB
// answer).
const DefaultMaxResponseBytes = 32 << 20

// DefaultQueryTimeout bounds one query; `gpudiag job` asks eight at most,
// each an instant query over the job's nodes.
const DefaultQueryTimeout = 10 * time.Second

// ClientOptions bound what `gpudiag job` takes from a Prometheus, which may
// be slow, overloaded, or not Prometheus at all.
type ClientOptions struct {
	// MaxResponseBytes bounds one answer's body; 0 means
	// DefaultMaxResponseBytes.
	MaxResponseBytes int64
	// QueryTimeout bounds one query, the body read included; 0 means
	// DefaultQueryTimeout.
	QueryTimeout time.Duration
	// Transport carries the requests; nil means a clone of
	// http.DefaultTransport.
	Transport http.RoundTripper
}

// ResponseTooLargeError is returned when an answer is longer than
// ClientOptions.MaxResponseBytes: which answer, and the bound.
type ResponseTooLargeError struct {
	URL   string
	Limit int64
}

func (e *ResponseTooLargeError) Error() string {
	return fmt.Sprintf("answer from %s exceeds %d bytes (--max-response-bytes)", e.URL, e.Limit)
}

// NewAPI returns the Prometheus HTTP API at address with every answer
// bounded in size and every query in time, and errors that say what was
// wrong with an answer: too large, too slow, not Prometheus' JSON, or a
// query Prometheus refused. Error texts quote the answer only through
// safetext, since a hostile Prometheus writes them.
func NewAPI(address string, o ClientOptions) (v1.API, error) {
	if o.MaxResponseBytes <= 0 {
		o.MaxResponseBytes = DefaultMaxResponseBytes
	}
	if o.QueryTimeout <= 0 {
		o.QueryTimeout = DefaultQueryTimeout
	}
	next := o.Transport
	if next == nil {
		next = http.DefaultTransport.(*http.Transport).Clone()
	}
	client, err := api.NewClient(api.Config{Address: address,
		Client: &http.Client{Transport: boundedTransport{next: next, limit: o.MaxResponseBytes}}})
	if err != nil {
		return nil, err
	}
	return boundedAPI{API: v1.NewAPI(client), address: address, timeout: o.QueryTimeout}, nil
}

// boundedTransport fails an answer longer than limit: at once when its
// Content-Length says so, else at the first byte past the limit, so a
// streamed answer of any length costs at most limit bytes of memory.
type boundedTransport struct {
	next  http.RoundTripper
	limit int64
}

func (t boundedTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.next.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	tooLarge := &ResponseTooLargeError{URL: req.URL.Redacted(), Limit: t.limit}
	if resp.ContentLength > t.limit {
		resp.Body.Close()
		return nil, tooLarge
	}
	resp.Body = &limitedBody{body: resp.Body, left: t.limit, tooLarge: tooLarge}
	return resp, nil
}

// limitedBody reads at most left bytes of body and fails past them.
type limitedBody struct {
	body     io.ReadCloser
	left     int64
	tooLarge error
}

func (b *limitedBody) Read(p []byte) (int, error) {
	if b.left < 0 {
		return 0, b.tooLarge
	}
	// One byte more than allowed tells an answer of exactly the limit
	// from a longer one.
	if int64(len(p)) > b.left+1 {
		p = p[:b.left+1]
	}
	n, err := b.body.Read(p)
	b.left -= int64(n)
	if b.left < 0 {
		return n + int(b.left), b.tooLarge
	}
	return n, err
}

func (b *limitedBody) Close() error { return b.body.Close() }

// boundedAPI gives each query its own deadline and says what went wrong.
type boundedAPI struct {
	v1.API
	address string
	timeout time.Duration
}

// maxQuoted bounds how much of Prometheus' own error text an error quotes.
const maxQuoted = 200

func (a boundedAPI) Query(ctx context.Context, query string, ts time.Time, opts ...v1.Option) (model.Value, v1.Warnings, error) {
	qctx, cancel := context.WithTimeout(ctx, a.timeout)
	defer cancel()
	v, warnings, err := a.API.Query(qctx, query, ts, opts...)
	if err == nil {
		return v, warnings, nil
	}
	return nil, warnings, a.explain(ctx, qctx, err)
}

// explain turns the client's error into one that says what Prometheus did.
func (a boundedAPI) explain(ctx, qctx context.Context, err error) error {
	var tooLarge *ResponseTooLargeError
	var apiErr *v1.Error
	var urlErr *url.Error
	switch {
	case errors.As(err, &tooLarge):
		return tooLarge
	case ctx.Err() != nil:
		// The caller's deadline (--timeout) or cancellation, not this
		// query's.
		return fmt.Errorf("stopped waiting for Prometheus at %s: %w", a.address, context.Cause(ctx))
	case errors.Is(qctx.Err(), context.DeadlineExceeded):
		return fmt.Errorf("Prometheus at %s did not answer within %s (--query-timeout): it is overloaded or the query is too heavy for it: %w",
			a.address, a.timeout, context.DeadlineExceeded)
	case errors.As(err, &apiErr):
		return a.explainAPIError(apiErr)
	case errors.As(err, &urlErr):
		return err // the request failed: no connection, a refused one, TLS
	}
	// The answer was cut short or its result has the wrong shape:
	// client_golang returns both bare.
	return fmt.Errorf("reading the answer of Prometheus at %s: %s", a.address, quote(err.Error()))
}

func (a boundedAPI) explainAPIError(e *v1.Error) error {
	switch e.Type {
	case v1.ErrBadResponse:
		return fmt.Errorf("Prometheus at %s answered what is not its API's JSON (is the URL Prometheus'?): %s", a.address, quote(e.Msg))
	case v1.ErrServer, v1.ErrClient:
		detail := ""
		if d := strings.TrimSpace(e.Detail); d != "" {
			detail = ": " + quote(d)
		}
		return fmt.Errorf("Prometheus at %s answered %s%s", a.address, quote(e.Msg), detail)
	}
	// status "error": Prometheus refused or failed the query itself.
	return fmt.Errorf("Prometheus at %s refused the query: %s: %s", a.address, quote(string(e.Type)), quote(e.Msg))
}

// quote makes text Prometheus wrote safe to print: one bounded line.
func quote(s string) string { return safetext.Line(s, maxQuoted) }
