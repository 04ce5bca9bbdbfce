package diagnose

import (
	"bytes"
	"embed"
	"encoding/json"
	"fmt"
	"html/template"
	"io"
	"net/http"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/gpudiag/gpudiag/analyzers"
	"github.com/gpudiag/gpudiag/engine"
	"github.com/gpudiag/gpudiag/safetext"
	"github.com/gpudiag/gpudiag/sample"
	"github.com/gpudiag/gpudiag/server"
)

//go:embed page.html.tmpl
var pageFS embed.FS

// pageStyle is the page's one stylesheet, inline so that the page is one
// request. It is a file of its own, not template text, so that the
// policy's hash of it is known before a page is rendered (html/template
// would drop its comments).
//
//go:embed page.css
var pageStyle string

// pagePolicy allows the page its stylesheet and nothing else: no script
// (the page has none and needs none), no image, no other style, no frame.
var pagePolicy = server.StylePolicy(pageStyle)

var page = template.Must(template.New("page.html.tmpl").Funcs(template.FuncMap{
	"style":   func() template.CSS { return template.CSS(pageStyle) },
	"pct":     func(x float64) string { return fmt.Sprintf("%.0f%%", x*100) },
	"value":   formatValue,
	"label":   signalLabel,
	"ts":      func(t time.Time) string { return t.UTC().Format(time.RFC3339) },
	"failing": failingCollectors,
	"partial": partialCollectors,
	"hm":      func(t time.Time) string { return t.UTC().Format("15:04:05") },
	"classes": func() []analyzers.Class { return analyzers.Classes },
	"gpuList": gpuList,
}).ParseFS(pageFS, "page.html.tmpl"))

// HandlerOptions configure /diagnose.
type HandlerOptions struct {
	// MaxSpan bounds ?window= (the sample window's duration).
	MaxSpan time.Duration
	// RatePerSecond and Burst bound each client's requests (token bucket):
	// a client is a remote IP, or behind a TrustedProxies proxy the
	// client X-Forwarded-For names. RatePerSecond 0: no per-client limit.
	RatePerSecond float64
	Burst         int
	// GlobalRatePerSecond and GlobalBurst bound all clients together, so
	// /diagnose cannot be used to load the node during an incident.
	// GlobalRatePerSecond 0: no ceiling.
	GlobalRatePerSecond float64
	GlobalBurst         int
	// TrustedProxies are the reverse proxies whose X-Forwarded-For is
	// believed; no one's by default.
	TrustedProxies []netip.Prefix
	// MaxClients bounds the per-client table; 0 means 4096.
	MaxClients int
	// Now is the samples' clock: the end of an analyzed span. While a trace
	// is replayed it is the trace's time.
	Now func() time.Time
	// RateClock paces the rate limit. It is wall time (nil) because the
	// limit protects the node's CPU, and a replayed trace's clock runs fast
	// or stops at its end; tests replace it.
	RateClock func() time.Time
	// Hostname names the node on the page; os.Hostname() when empty.
	Hostname string
	// GrafanaURL, when set, is the Grafana the page links to (the node
	// dashboard, uid gpudiag-node, with var-instance set).
	GrafanaURL string
	// MetricsPath is the metrics endpoint the page links to; /metrics when
	// empty.
	MetricsPath string
	// RefreshSeconds is how often the page reloads itself; 0 means 15 s.
	// The reader stops it with ?refresh=0.
	RefreshSeconds int
}

// Handler serves /diagnose: JSON for programs, HTML for browsers, plain text
// for curl. ?format=json|text|html overrides the Accept header; ?window=30s
// analyzes that span instead of returning the latest diagnosis.
func (r *Runner) Handler(o HandlerOptions) http.Handler {
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.RateClock == nil {
		o.RateClock = time.Now
	}
	if o.Hostname == "" {
		o.Hostname, _ = os.Hostname()
	}
	lim := newRateLimiter(o)
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if ok, refusedBy, retry := lim.allow(req); !ok {
			after := retryAfter(retry)
			w.Header().Set("Retry-After", strconv.Itoa(after))
			who := "from this client"
			if refusedBy == refusedGlobal {
				who = "from all clients together"
			}
			http.Error(w, fmt.Sprintf("too many /diagnose requests %s; retry in %d s", who, after), http.StatusTooManyRequests)
			return
		}
		statuses := r.collectorStatuses()
		d, err := r.forRequest(req, o, statuses)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		var health []CollectorHealth
		if statuses != nil {
			health = Health(statuses)
		}
		rep := newReport(d, health, o.Now())
		switch format(req) {
		case "json":
			w.Header().Set("Content-Type", "application/json")
			_ = WriteJSON(w, rep)
		case "html":
			w.Header().Set("Content-Type", "text/html; charset=utf-8")
			w.Header().Set("Content-Security-Policy", pagePolicy)
			r.addHistory(rep)
			r.addGPUContext(rep)
			// Rendered whole before a byte is sent: a template error is a
			// 500, not a page cut short.
			var buf bytes.Buffer
			if err := page.Execute(&buf, buildPage(rep, o, &pageRequest{host: req.Host, query: req.URL.Query()})); err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
			_, _ = w.Write(buf.Bytes())
		default:
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			r.addHistory(rep)
			writeText(w, rep)
		}
	})
}

func (r *Runner) forRequest(req *http.Request, o HandlerOptions, statuses []engine.Status) (*analyzers.Diagnosis, error) {
	if s := req.URL.Query().Get("window"); s != "" {
		span, err := time.ParseDuration(s)
		if err != nil || span < time.Second {
			return nil, fmt.Errorf("window=%s: want a duration of at least 1s, like 30s or 5m", quoteParameter(s))
		}
		if o.MaxSpan > 0 && span > o.MaxSpan {
			return nil, fmt.Errorf("window=%s is longer than the %s of samples kept (--window.duration)", span, o.MaxSpan)
		}
		d := r.Over(o.Now(), span)
		return &d, nil
	}
	// The latest diagnosis is stale when the GPU collector has failed for
	// a span and no other collector's sample refreshed it (none runs).
	if d := r.Latest(); d != nil && !(triggerFailedForSpan(statuses, o.Now(), r.span()) && o.Now().Sub(d.Time) > r.span()) {
		return d, nil
	}
	d := r.Over(o.Now(), r.span())
	return &d, nil
}

// maxQuotedParameter bounds what of a bad parameter an error quotes back:
// a query string may be as long as the server's header limit.
const maxQuotedParameter = 64

func quoteParameter(s string) string {
	if len(s) > maxQuotedParameter {
		return strconv.Quote(s[:maxQuotedParameter]) + "..."
	}
	return strconv.Quote(s)
}

func format(req *http.Request) string {
	switch f := req.URL.Query().Get("format"); f {
	case "json", "text", "html":
		return f
	}
	accept := req.Header.Get("Accept")
	switch {
	case strings.Contains(accept, "text/html"):
		return "html"
	case strings.Contains(accept, "application/json"):
		return "json"
	}
	return "text"
}

// writeJobs lists the node's jobs (groups of GPUs), the headline first,
// and the GPUs free.
func writeJobs(w io.Writer, d *Report) {
	if len(d.Diagnosis.Groups) == 0 {
		return
	}
	fmt.Fprintf(w, "\nJOBS (%d; %d of %d GPUs free)\n", len(d.Diagnosis.Groups), d.FreeGPUs, len(d.GPUs))
	for _, g := range d.Diagnosis.Groups {
		kind := string(g.Class)
		if g.SubKind != "" {
			kind += "/" + g.SubKind
		}
		who := "GPU "
		if len(g.GPUs) > 1 {
			who = "GPUs "
		}
		fmt.Fprintf(w, "  %s%s (by %s): %s, costs %.2f GPUs\n", who, gpuList(g.GPUs), g.By, safetext.Terminal(kind), g.Cost)
	}
}

// WriteText renders a report for a terminal.
func WriteText(w io.Writer, d *Report) { writeText(w, d) }

// WriteTextTimeline renders a report for a terminal with the timeline of
// its verdicts over the history (Runner.History), as the page shows it.
func WriteTextTimeline(w io.Writer, d *Report, hist []HistoryEntry) {
	withHistory := *d
	withHistory.History = hist
	writeText(w, &withHistory)
}

// writeText renders a report; with a history, it adds a timeline line per
// GPU and the node, over the history up to when it was served (its
// diagnosis's time when not said). Every string of the report
// is written through safetext.Terminal: summaries quote process names
// (comm, which a workload sets), NCCL's interfaces and devices, and
// collectors' errors, any of which could otherwise clear the terminal,
// set its title or forge lines of the report.
func writeText(w io.Writer, d *Report) {
	fmt.Fprintf(w, "gpudiag diagnosis at %s over %.0fs\n\n", d.Time.UTC().Format(time.RFC3339), d.SpanSeconds)
	now := d.Served
	if now.IsZero() {
		now = d.Time
	}
	writeVerdict(w, "NODE", d.Node, "", now)
	writeJobs(w, d)
	if len(d.GPUs) > 0 {
		fmt.Fprintf(w, "\nGPUS (%d) BY VERDICT\n", len(d.GPUs))
	}
	for _, g := range groupVerdicts(d.GPUs) {
		kind := string(g.Class)
		if g.SubKind != "" {
			kind += "/" + g.SubKind
		}
		who := "GPU " + g.GPUs
		if g.Count > 1 {
			who = fmt.Sprintf("GPUs %s (%d)", g.GPUs, g.Count)
		}
		fmt.Fprintf(w, "%s: %s\n", who, safetext.Terminal(kind))
		for _, v := range d.GPUs {
			if v.Class != g.Class || v.SubKind != g.SubKind || v.Fix != g.Fix {
				continue
			}
			v.Fix = "" // said once, below
			writeVerdict(w, fmt.Sprintf("GPU %d", v.GPU), v.Verdict, "  ", now)
		}
		switch {
		case g.Fix == "":
		case g.Fix == d.Node.Fix:
			fmt.Fprintf(w, "  fix: the node's, above\n")
		default:
			fmt.Fprintf(w, "  fix: %s\n", safetext.Terminal(g.Fix))
		}
	}
	if len(d.History) > 0 {
		writeTimeline(w, d.History, d.GPUs, now)
	}
	if len(d.Stragglers) > 0 {
		fmt.Fprintln(w, "\nSTRAGGLERS")
		for _, s := range d.Stragglers {
			fmt.Fprintf(w, "  GPU %d: SM active %.2f vs peers' median %.2f\n", s.GPU, s.SMActive, s.PeerSMActive)
		}
	}
	groups := groupFindings(d.Findings)
	fmt.Fprintf(w, "\nFINDINGS (%d in %d checks)\n", len(d.Findings), len(groups))
	for _, f := range groups {
		where := ""
		if f.Where != "" {
			where = " " + safetext.Terminal(f.Where)
		}
		count := ""
		if f.Count > 1 {
			count = fmt.Sprintf(" ×%d", f.Count)
		}
		fmt.Fprintf(w, "  [%s] %s%s%s: %s\n      fix: %s\n", safetext.Terminal(string(f.Severity)), safetext.Terminal(f.Check), count, where,
			safetext.Terminal(f.Summary), safetext.Terminal(f.Fix))
	}
	fmt.Fprintf(w, "\ninputs: %d GPU samples, activity source %q, host evidence %v\n",
		d.Inputs.GPUSamples, d.Inputs.ActivitySource, d.Inputs.HostEvidence)
	writeCollectors(w, d.Collectors)
}

// timelineSlots is the number of characters of a text timeline line.
const timelineSlots = 60

// writeTimeline writes one line per row, one character per time slot: the
// class at the slot's end (C compute, M communication, I io, H host, .
// idle, ? unknown or not analyzed).
func writeTimeline(w io.Writer, hist []HistoryEntry, cur []analyzers.GPUVerdict, now time.Time) {
	start := hist[0].Start
	if !now.After(start) {
		return
	}
	// Whole seconds per slot, so the slots' edges read easily.
	slot := (now.Sub(start)/timelineSlots + time.Second - 1).Truncate(time.Second)
	if slot < time.Second {
		slot = time.Second
	}
	n := int((now.Sub(start) + slot - 1) / slot)
	fmt.Fprintf(w, "\nTIMELINE from %s to %s, one character per %s (C compute, M communication, I io, H host, . idle, ? unknown)\n",
		start.UTC().Format("15:04:05"), now.UTC().Format("15:04:05 UTC"), slot)
	line := func(label string, class func(*HistoryEntry) analyzers.Class) {
		b := make([]byte, n)
		j := 0
		for i := range b {
			at := start.Add(time.Duration(i+1) * slot)
			for j+1 < len(hist) && !hist[j+1].Start.After(at) {
				j++
			}
			b[i] = classLetter(class(&hist[j]))
		}
		fmt.Fprintf(w, "  %-7s %s\n", label, b)
	}
	line("node", func(e *HistoryEntry) analyzers.Class { return e.Node })
	for _, g := range cur {
		line(fmt.Sprintf("GPU %d", g.GPU), func(e *HistoryEntry) analyzers.Class { return e.Class(g.GPU) })
	}
}

// writeCollectors says whether every collector samples, and why the failing
// ones do not.
func writeCollectors(w io.Writer, hs []CollectorHealth) {
	if len(hs) == 0 {
		return
	}
	failing := failingCollectors(hs)
	if len(failing) == 0 {
		fmt.Fprintf(w, "collectors: all %d ok\n", len(hs))
	} else {
		fmt.Fprintf(w, "collectors: %d of %d failing\n", len(failing), len(hs))
	}
	for _, h := range failing {
		last := "never"
		if h.LastSuccess != nil {
			last = h.LastSuccess.UTC().Format(time.RFC3339)
		}
		fmt.Fprintf(w, "  %s: %s (%d failures, last success %s)\n", safetext.Terminal(h.Collector), safetext.Terminal(h.LastError), h.Failures, last)
	}
	for _, h := range partialCollectors(hs) {
		fmt.Fprintf(w, "  %s: unmeasured: %s\n", safetext.Terminal(h.Collector), safetext.Terminal(strings.Join(h.Unmeasured, ", ")))
	}
}

func writeVerdict(w io.Writer, who string, v analyzers.Verdict, indent string, now time.Time) {
	kind := string(v.Class)
	if v.SubKind != "" {
		kind += "/" + v.SubKind
	}
	since := "since " + v.Since.UTC().Format(time.RFC3339)
	if a := age(now, v.Since); a != "" {
		since = a + ", " + since
	}
	fmt.Fprintf(w, "%s%s: %s (confidence %.2f) %s\n", indent, who, safetext.Terminal(kind), v.Confidence, since)
	if v.Pending != "" {
		fmt.Fprintf(w, "%s  changing to %s if the next sample agrees\n", indent, safetext.Terminal(string(v.Pending)))
	}
	fmt.Fprintf(w, "%s  %s\n", indent, safetext.Terminal(v.Summary))
	for _, e := range v.Evidence {
		signal, value := safetext.Terminal(signalLabel(e.Signal)), safetext.Terminal(formatValue(e.Value, e.Unit))
		if e.Op == "info" {
			fmt.Fprintf(w, "%s  - %s = %s\n", indent, signal, value)
			continue
		}
		fmt.Fprintf(w, "%s  - %s = %s (%s %s)\n", indent, signal, value, safetext.Terminal(e.Op), safetext.Terminal(formatValue(e.Threshold, e.Unit)))
	}
	if v.Fix != "" {
		fmt.Fprintf(w, "%s  fix: %s\n", indent, safetext.Terminal(v.Fix))
	}
}

// WriteJSON writes the report as /diagnose's JSON: JSONSafe, indented, and
// safe to print on a terminal (safetext.JSON: a process name is the
// workload's, and `curl | cat` at 3 a.m. must not let it drive the screen).
func WriteJSON(w io.Writer, rep *Report) error {
	b, err := json.MarshalIndent(JSONSafe(rep), "", "  ")
	if err != nil {
		return err
	}
	_, err = io.WriteString(w, safetext.JSON(string(b))+"\n")
	return err
}

// JSONSafe drops evidence whose value or threshold was not measured
// (sample.Measured): an unmeasured signal is left out rather than faked.
func JSONSafe(d *Report) *Report {
	c := *d
	clean := func(es []analyzers.Evidence) []analyzers.Evidence {
		out := make([]analyzers.Evidence, 0, len(es))
		for _, e := range es {
			if !sample.Measured(e.Value) || !sample.Measured(e.Threshold) {
				continue
			}
			out = append(out, e)
		}
		return out
	}
	c.Node.Evidence = clean(c.Node.Evidence)
	c.GPUs = make([]analyzers.GPUVerdict, len(d.GPUs))
	for i, g := range d.GPUs {
		g.Evidence = clean(g.Evidence)
		c.GPUs[i] = g
	}
	return &c
}
