package jobdiag

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	v1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"
)

// A hostile or broken Prometheus, as `gpudiag job` meets it: every answer
// is bounded in size and time, and every error says what was wrong. The
// deadlines of these tests guard against a hang; none asserts how fast
// anything is.

// countingTransport counts the body bytes the client read.
type countingTransport struct{ read atomic.Int64 }

func (c *countingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := http.DefaultTransport.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	resp.Body = countingBody{ReadCloser: resp.Body, n: &c.read}
	return resp, nil
}

type countingBody struct {
	io.ReadCloser
	n *atomic.Int64
}

func (b countingBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.n.Add(int64(n))
	return n, err
}

// streamForever answers a vector that never ends: series after series
// until the client hangs up.
func streamForever(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	_, _ = io.WriteString(w, `{"status":"success","data":{"resultType":"vector","result":[`)
	row := []byte(`{"metric":{"__name__":"gpudiag_gpu_job_info","job_id":"7","instance":"` + strings.Repeat("n", 200) + `"},"value":[1,"1"]},`)
	for r.Context().Err() == nil {
		if _, err := w.Write(row); err != nil {
			return
		}
	}
}

func newTestAPI(t *testing.T, h http.Handler, o ClientOptions) (v1.API, *httptest.Server) {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	api, err := NewAPI(srv.URL, o)
	if err != nil {
		t.Fatal(err)
	}
	return api, srv
}

// Before, the client read any answer whole: 1.48 GB of memory for a 420 MB
// answer, and an endless one until the deadline. Now it stops one byte
// past the limit.
func TestHugeAnswerStopsAtTheLimit(t *testing.T) {
	const limit = 1 << 20
	counter := &countingTransport{}
	api, srv := newTestAPI(t, http.HandlerFunc(streamForever),
		ClientOptions{MaxResponseBytes: limit, QueryTimeout: time.Minute, Transport: counter})
	_, err := Query(t.Context(), api, Selector{JobID: "7"}, time.Now(), 5*time.Minute)
	var tooLarge *ResponseTooLargeError
	if !errors.As(err, &tooLarge) {
		t.Fatalf("an endless answer: %v, want a ResponseTooLargeError", err)
	}
	want := fmt.Sprintf("answer from %s/api/v1/query exceeds %d bytes (--max-response-bytes)", srv.URL, limit)
	if !strings.Contains(err.Error(), want) {
		t.Errorf("error %q lacks %q", err, want)
	}
	if read := counter.read.Load(); read > limit+1 {
		t.Errorf("read %d bytes of the answer, limit %d", read, limit)
	}
}

// An answer that announces its length past the limit is refused before a
// byte of it is read.
func TestAnnouncedHugeAnswerRefusedUnread(t *testing.T) {
	counter := &countingTransport{}
	api, _ := newTestAPI(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "2000000")
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write(make([]byte, 2_000_000))
	}), ClientOptions{MaxResponseBytes: 1 << 20, QueryTimeout: time.Minute, Transport: counter})
	_, err := Query(t.Context(), api, Selector{JobID: "7"}, time.Now(), 5*time.Minute)
	var tooLarge *ResponseTooLargeError
	if !errors.As(err, &tooLarge) || counter.read.Load() != 0 {
		t.Errorf("announced 2 MB against 1 MiB: %v after reading %d bytes", err, counter.read.Load())
	}
}

// An answer of exactly the limit is read.
func TestAnswerAtTheLimitRead(t *testing.T) {
	body := `{"status":"success","data":{"resultType":"vector","result":[]}}`
	api, _ := newTestAPI(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		// Chunked, no Content-Length: the body reader alone judges.
		_, _ = io.WriteString(w, body[:10])
		w.(http.Flusher).Flush()
		_, _ = io.WriteString(w, body[10:])
	}), ClientOptions{MaxResponseBytes: int64(len(body))})
	v, _, err := api.Query(t.Context(), "up", time.Now())
	if err != nil || v.Type() != model.ValVector {
		t.Errorf("an answer of exactly the limit: %v, %v", v, err)
	}
}

// A Prometheus that does not answer, or answers a byte at a time, is named
// slow once the query's deadline passes; the total deadline is the
// caller's, and says so.
func TestSlowPrometheusHitsTheQueryTimeout(t *testing.T) {
	for name, h := range map[string]func(release <-chan struct{}) http.HandlerFunc{
		"silent": func(release <-chan struct{}) http.HandlerFunc {
			return func(w http.ResponseWriter, r *http.Request) { waitForHangUp(r, release) }
		},
		"dribbling": func(release <-chan struct{}) http.HandlerFunc {
			return func(w http.ResponseWriter, r *http.Request) {
				_, _ = io.Copy(io.Discard, r.Body)
				w.Header().Set("Content-Type", "application/json")
				for _, c := range []byte(`{"status":"success","data":{"resultType":"vector","result":[`) {
					if _, err := w.Write([]byte{c}); err != nil {
						return
					}
					w.(http.Flusher).Flush()
					select {
					case <-r.Context().Done():
						return
					case <-release:
						return
					case <-time.After(20 * time.Millisecond):
					}
				}
				waitForHangUp(r, release)
			}
		},
	} {
		t.Run(name, func(t *testing.T) {
			release := make(chan struct{})
			api, srv := newTestAPI(t, h(release), ClientOptions{QueryTimeout: 100 * time.Millisecond})
			releaseBeforeClose(t, release)
			_, err := Query(t.Context(), api, Selector{JobID: "7"}, time.Now(), 5*time.Minute)
			want := fmt.Sprintf("Prometheus at %s did not answer within 100ms (--query-timeout)", srv.URL)
			if err == nil || !strings.Contains(err.Error(), want) || !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("%s Prometheus: %v, want %q", name, err, want)
			}
		})
	}
}

// The caller's deadline (--timeout) ends the queries, and its cause is
// the error.
func TestTotalDeadlineEndsTheQueries(t *testing.T) {
	release := make(chan struct{})
	api, srv := newTestAPI(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { waitForHangUp(r, release) }),
		ClientOptions{QueryTimeout: time.Hour})
	releaseBeforeClose(t, release)
	total := errors.New("no diagnosis within --timeout 50ms")
	ctx, cancel := context.WithTimeoutCause(t.Context(), 50*time.Millisecond, total)
	defer cancel()
	_, err := Query(ctx, api, Selector{JobID: "7"}, time.Now(), 5*time.Minute)
	if !errors.Is(err, total) || !strings.Contains(err.Error(), "stopped waiting for Prometheus at "+srv.URL) {
		t.Errorf("total deadline: %v", err)
	}
}

// releaseBeforeClose closes release when the test ends, before the test
// server made before it closes (which waits for its handlers).
func releaseBeforeClose(t *testing.T, release chan struct{}) {
	t.Cleanup(func() { close(release) })
}

// waitForHangUp holds a request unanswered until the client hangs up or
// the test ends. The body is read first: only then does the server watch
// the connection and cancel the request's context when it closes.
func waitForHangUp(r *http.Request, release <-chan struct{}) {
	_, _ = io.Copy(io.Discard, r.Body)
	select {
	case <-r.Context().Done():
	case <-release:
	}
}

// What is not a Prometheus answer, or one of the wrong shape, or an error
// Prometheus gives, is said plainly, and its text reaches the error only
// escaped.
func TestMalformedAnswersExplained(t *testing.T) {
	for _, tc := range []struct {
		name   string
		status int
		body   string
		want   string
	}{
		{"HTML page", 200, "<html><body>\x1b[2Jlogin</body></html>", "answered what is not its API's JSON (is the URL Prometheus'?)"},
		{"empty", 200, "", "answered what is not its API's JSON"},
		{"cut short", 200, `{"status":"success","data":{"resultType":"vector","result":[{"metric":{}`, "answered what is not its API's JSON"},
		{"result of the wrong type", 200, `{"status":"success","data":{"resultType":"string","result":[1,"x"]}}`, `reading the answer of Prometheus at`},
		{"result of the wrong shape", 200, `{"status":"success","data":{"resultType":"vector","result":{"a":1}}}`, `reading the answer of Prometheus at`},
		{"a matrix", 200, `{"status":"success","data":{"resultType":"matrix","result":[]}}`, "answered a matrix, not a vector"},
		{"query refused", 400, `{"status":"error","errorType":"bad_data","error":"parse error \u001b]0;owned\u0007"}`, `refused the query: bad_data: parse error \x1b]0;owned\x07`},
		{"overloaded", 503, "too many queries\x1b[31m\r\nfake", `answered server error: 503: too many queries\x1b[31m\r\nfake`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			api, _ := newTestAPI(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.WriteHeader(tc.status)
				_, _ = io.WriteString(w, tc.body)
			}), ClientOptions{QueryTimeout: time.Minute})
			_, err := Query(t.Context(), api, Selector{JobID: "7"}, time.Now(), 5*time.Minute)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("%v, want %q", err, tc.want)
			}
			if strings.ContainsAny(err.Error(), "\x1b\x07\r\n") {
				t.Errorf("error carries control characters: %q", err)
			}
		})
	}
}

// hostile is what a workload can make a job ID (SLURM_JOB_ID is kept
// verbatim) and a hostile Prometheus any label: clear the screen, set the
// terminal's title, then forge a row of the table.
const hostile = "\x1b[2J\x1b]0;x\x07\r\nfake"

// promAnswering answers each query with the vector named by the query's
// first metric name, as Prometheus' HTTP API would.
func promAnswering(t *testing.T, answers map[string]model.Vector) v1.API {
	t.Helper()
	api, _ := newTestAPI(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		q := strings.TrimLeft(r.FormValue("query"), "( \n\t")
		q = strings.TrimPrefix(strings.TrimPrefix(q, "sum_over_time("), "rate(")
		result := model.Vector{}
		for prefix, v := range answers {
			if strings.HasPrefix(q, prefix) {
				result = v
			}
		}
		data, err := json.Marshal(result)
		if err != nil {
			t.Error(err)
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"status":"success","data":{"resultType":"vector","result":%s}}`, data)
	}), ClientOptions{QueryTimeout: time.Minute})
	return api
}

// Before, the label values were printed raw: the ESC sequences reached
// the terminal and CR LF added a row. Now each prints escaped, and the
// table has one line per node.
func TestHostileLabelsPrintEscaped(t *testing.T) {
	gpu := func(v float64, inst string, extra ...string) *model.Sample {
		return sampleOf(v, append([]string{"instance", inst, "job", "gpudiag", "gpu", "0", "job_id", hostile, "job_source", "slurm" + hostile}, extra...)...)
	}
	nodes := []string{"n1" + hostile, "n2\t\u009b31m"}
	api := promAnswering(t, map[string]model.Vector{
		"gpudiag_gpu_job_info{":        {gpu(1, nodes[0], "k8s_pod", hostile), gpu(1, nodes[1])},
		"gpudiag_gpu_bottleneck_info":  {gpu(60, nodes[0], "class", "communication", "sub_kind", hostile), gpu(60, nodes[1], "class", "compute"+hostile)},
		"gpudiag_gpu_sm_active":        {gpu(0.5, nodes[0]), gpu(0.4, nodes[1])},
		"gpudiag_infiniband_port_data": {sampleOf(0.7, "instance", nodes[0], "job", "gpudiag", "device", "mlx5_0"+hostile, "port", "1")},
		"gpudiag_infiniband_rate":      {sampleOf(5e10, "instance", nodes[0], "job", "gpudiag", "device", "mlx5_0"+hostile, "port", "1")},
		"gpudiag_infiniband_port_rate": {sampleOf(1, "instance", nodes[0], "job", "gpudiag", "device", "mlx5_0"+hostile, "port", "1")},
		"gpudiag_finding{":             {sampleOf(1, "instance", nodes[1], "job", "gpudiag", "check", "nccl"+hostile, "severity", "warning", "kind", hostile)},
	})
	r, err := Query(t.Context(), api, Selector{JobID: hostile}, time.Now(), 5*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if r.JobID != hostile || len(r.Nodes) != 2 {
		t.Fatalf("job %q with %d nodes", r.JobID, len(r.Nodes))
	}
	var text strings.Builder
	if err := r.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	out := text.String()
	if strings.ContainsFunc(out, func(r rune) bool { return r < 0x20 && r != '\n' || r == 0x7f || r >= 0x80 && r <= 0x9f }) {
		t.Errorf("control characters reach the terminal:\n%q", out)
	}
	for _, want := range []string{`slurm\x1b[2J\x1b]0;x\x07\r\nfake job \x1b[2J\x1b]0;x\x07\r\nfake: 2 GPUs on 2 nodes`, `n2\t\x9b31m`} {
		if !strings.Contains(out, want) {
			t.Errorf("text lacks %q:\n%s", want, out)
		}
	}
	// The job line, the verdict, who holds it back and the fix, the
	// busiest port, a blank line, the table's header and its two rows, a
	// blank line, the findings' title and its one finding.
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if len(lines) != 12 || !strings.HasPrefix(lines[4], "Busiest port: ") || !strings.HasPrefix(lines[7], "n1") ||
		!strings.HasPrefix(lines[8], "n2") || !strings.HasPrefix(lines[11], "  warning n2") {
		t.Errorf("%d lines, want 12 with a row per node:\n%s", len(lines), out)
	}

	var js strings.Builder
	if err := r.WriteJSON(&js); err != nil {
		t.Fatal(err)
	}
	if strings.ContainsAny(js.String(), "\x1b\x07\r\u009b") {
		t.Errorf("JSON carries control characters: %q", js.String())
	}
	var back Report
	if err := json.Unmarshal([]byte(js.String()), &back); err != nil || back.JobID != hostile || back.Nodes[1].Instance != nodes[1] {
		t.Errorf("the escaped JSON does not decode to the same values: %v, %+v", err, back.Nodes)
	}
}
