package diagnose

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/gpudiag/gpudiag/analyzers"
	"github.com/gpudiag/gpudiag/sample"
)

// expectedFormat is the representation a request asks for: ?format= when
// it names one, else the Accept header, else text.
func expectedFormat(q url.Values, accept string) string {
	switch f := q.Get("format"); f {
	case "json", "text", "html":
		return f
	}
	switch {
	case strings.Contains(accept, "text/html"):
		return "html"
	case strings.Contains(accept, "application/json"):
		return "json"
	}
	return "text"
}

// FuzzQuery sends /diagnose any query string and Accept header, against a
// runner over a real window of samples. A valid ?window= (1s up to the
// window kept) or none gets 200 in the format asked for, a ?window= over
// exactly that span when given; anything else gets a short 400 naming the
// parameter. Never a 500 or a panic.
func FuzzQuery(f *testing.F) {
	for _, q := range []string{"", "window=30s", "window=5m&format=json", "format=html", "window=abc", "window=10ms",
		"window=1h", "format=text&window=1s", "window=%zz&format=json", "window=9999999999h", "window=1s;format=json",
		"window=" + strings.Repeat("9", 1000)} {
		f.Add(q, "")
	}
	f.Add("", "text/html,application/xhtml+xml")
	f.Add("format=xml", "application/json")
	const maxSpan = 10 * time.Minute
	r, now := runnerWith(30, func(i int) *sample.GPUs { return gpuSample(float64(i%3)/3, float64(i)*1e9) })
	h := r.Handler(HandlerOptions{MaxSpan: maxSpan, Now: func() time.Time { return now }})
	f.Fuzz(func(t *testing.T, query, accept string) {
		req := httptest.NewRequest("GET", "/diagnose", nil)
		req.URL.RawQuery = query
		req.Header.Set("Accept", accept)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		body := w.Body.String()

		q, _ := url.ParseQuery(query) // as the handler reads it: malformed pairs dropped
		window := q.Get("window")
		span, err := time.ParseDuration(window)
		valid := window == "" || err == nil && span >= time.Second && span <= maxSpan
		if !valid {
			const maxErrorBody = 512
			if w.Code != http.StatusBadRequest || !strings.HasPrefix(body, "window=") || len(body) > maxErrorBody {
				t.Fatalf("window=%q: %d, %d bytes: %.200q; want a short 400 naming window=", window, w.Code, len(body), body)
			}
			return
		}
		if w.Code != http.StatusOK {
			t.Fatalf("query %q: %d %.200q; want 200", query, w.Code, body)
		}
		ct := w.Header().Get("Content-Type")
		switch format := expectedFormat(q, accept); format {
		case "json":
			var d analyzers.Diagnosis
			if err := json.Unmarshal([]byte(body), &d); err != nil || ct != "application/json" {
				t.Fatalf("query %q: %s %v", query, ct, err)
			}
			if window != "" && d.SpanSeconds != span.Seconds() {
				t.Fatalf("window=%s analyzed %gs", window, d.SpanSeconds)
			}
		case "html":
			if !strings.HasPrefix(ct, "text/html") || !strings.Contains(body, `<h1 id="verdict">`) {
				t.Fatalf("query %q: %s %.200q", query, ct, body)
			}
		default:
			if !strings.HasPrefix(ct, "text/plain") || !strings.HasPrefix(body, "gpudiag diagnosis at ") {
				t.Fatalf("query %q: %s %.200q", query, ct, body)
			}
		}
	})
}
