package diagnose

import (
	"cmp"
	"fmt"
	"math"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gpudiag/gpudiag/analyzers"
)

// defaultRefreshSeconds is how often the page reloads itself unless the
// reader stops it (?refresh=0).
const defaultRefreshSeconds = 15

// pageData is what page.html.tmpl renders: the report and what the page
// adds to it (who the node is, the verdicts' history, per-GPU context).
type pageData struct {
	*Report
	Host     string
	Instance string
	Now      time.Time
	NodeAge  string
	Timeline timeline
	Groups   []verdictGroup
	GPUCards []gpuCard
	Findings []findingGroup
	Links    pageLinks
	// Refresh is the reload period in seconds; 0: no reload.
	Refresh int
}

type pageLinks struct {
	JSON, Text, Metrics, Grafana, StopRefresh, StartRefresh string
}

// verdictGroup is GPUs sharing one verdict (class, sub-kind and fix): the
// fix is said once for all of them.
type verdictGroup struct {
	GPUs    string
	Count   int
	Class   analyzers.Class
	SubKind string
	Summary string
	Fix     string
	// FixAbove: the fix is the node's, said once above.
	FixAbove bool
}

type gpuCard struct {
	analyzers.GPUVerdict
	Model     string
	Age       string
	Job       string
	Processes []string
	Transport string
	Sparks    []Sparkline
}

// findingGroup is the findings of one check and severity.
type findingGroup struct {
	Check    string
	Severity analyzers.Severity
	Count    int
	Where    string
	Summary  string
	Fix      string
}

// timeline is the node's and each GPU's class over the kept window, as
// bands of an inline SVG (x in 0–1000 of the span).
type timeline struct {
	Start, End time.Time
	Span       string
	Rows       []timelineRow
}

type timelineRow struct {
	Label string
	Segs  []timelineSeg
}

type timelineSeg struct {
	X, W     float64
	Class    analyzers.Class
	From, To string
}

func buildPage(rep *Report, o HandlerOptions, req *pageRequest) *pageData {
	now := rep.Served
	p := &pageData{Report: rep, Host: o.Hostname, Instance: req.host, Now: now}
	p.NodeAge = age(now, rep.Node.Since)
	p.Timeline = buildTimeline(rep.History, rep.GPUs, rep.TimelineStart, now)
	p.Groups = groupVerdicts(rep.GPUs)
	for i := range p.Groups {
		if g := &p.Groups[i]; g.Fix != "" && g.Fix == rep.Node.Fix {
			g.Fix, g.FixAbove = "", true
		}
	}
	p.Findings = groupFindings(rep.Findings)
	jobs := map[int]analyzers.GPUJob{}
	for _, j := range rep.Jobs {
		jobs[j.GPU] = j
	}
	for _, g := range rep.GPUs {
		ctx := rep.GPUContext[g.GPU]
		c := gpuCard{GPUVerdict: g, Model: ctx.Model, Age: age(now, g.Since),
			Processes: ctx.Processes, Transport: ctx.Transport, Sparks: ctx.Sparks}
		if j, ok := jobs[g.GPU]; ok {
			c.Job = jobText(j)
		}
		p.GPUCards = append(p.GPUCards, c)
	}

	p.Refresh = defaultRefreshSeconds
	if o.RefreshSeconds != 0 {
		p.Refresh = o.RefreshSeconds
	}
	if s := req.query.Get("refresh"); s != "" {
		if n, err := strconv.Atoi(s); err == nil && n >= 0 {
			p.Refresh = min(max(n, 0), 3600)
			if n > 0 && n < 2 {
				p.Refresh = 2
			}
		}
	}
	p.Links = pageLinks{
		JSON:         withQuery(req.query, "format", "json"),
		Text:         withQuery(req.query, "format", "text"),
		StopRefresh:  withQuery(req.query, "refresh", "0"),
		StartRefresh: withQuery(req.query, "refresh", strconv.Itoa(defaultRefreshSeconds)),
		Metrics:      cmp.Or(o.MetricsPath, "/metrics"),
	}
	if o.GrafanaURL != "" && p.Instance != "" {
		p.Links.Grafana = strings.TrimRight(o.GrafanaURL, "/") + "/d/gpudiag-node/gpudiag-node?var-instance=" + url.QueryEscape(p.Instance)
	}
	return p
}

// pageRequest is what the page reads of the request.
type pageRequest struct {
	host  string
	query url.Values
}

func withQuery(q url.Values, k, v string) string {
	c := url.Values{}
	for name, vs := range q {
		c[name] = vs
	}
	c.Set(k, v)
	return "?" + c.Encode()
}

// age says how long ago t was, for a reader in an incident: "for 12 min".
func age(now, t time.Time) string {
	if t.IsZero() {
		return ""
	}
	d := now.Sub(t)
	switch {
	case d < 0:
		return "just now"
	case d < time.Minute:
		return fmt.Sprintf("for %d s", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("for %d min", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("for %d h %d min", int(d.Hours()), int(d.Minutes())%60)
	}
	return fmt.Sprintf("for %d days", int(d.Hours()/24))
}

// gpuList names GPUs compactly: "0–3, 5".
func gpuList(ids []int) string {
	slices.Sort(ids)
	var parts []string
	for i := 0; i < len(ids); {
		j := i
		for j+1 < len(ids) && ids[j+1] == ids[j]+1 {
			j++
		}
		switch {
		case j == i:
			parts = append(parts, strconv.Itoa(ids[i]))
		case j == i+1:
			parts = append(parts, strconv.Itoa(ids[i]), strconv.Itoa(ids[j]))
		default:
			parts = append(parts, fmt.Sprintf("%d–%d", ids[i], ids[j]))
		}
		i = j + 1
	}
	return strings.Join(parts, ", ")
}

// groupVerdicts puts GPUs with the same class, sub-kind and fix together,
// in the order of their first GPU.
func groupVerdicts(gs []analyzers.GPUVerdict) []verdictGroup {
	type key struct {
		class    analyzers.Class
		sub, fix string
	}
	var order []key
	ids := map[key][]int{}
	first := map[key]analyzers.GPUVerdict{}
	for _, g := range gs {
		k := key{g.Class, g.SubKind, g.Fix}
		if _, ok := ids[k]; !ok {
			order = append(order, k)
			first[k] = g
		}
		ids[k] = append(ids[k], g.GPU)
	}
	out := make([]verdictGroup, 0, len(order))
	for _, k := range order {
		summary := first[k].Summary
		if len(ids[k]) > 1 {
			summary = genericSummary(gs, ids[k], summary)
		}
		out = append(out, verdictGroup{GPUs: gpuList(ids[k]), Count: len(ids[k]), Class: k.class,
			SubKind: k.sub, Summary: summary, Fix: k.fix})
	}
	return out
}

// genericSummary is the group's summary: the GPUs' own when they all say
// the same, else the first one's and that the others differ in numbers.
func genericSummary(gs []analyzers.GPUVerdict, ids []int, first string) string {
	for _, g := range gs {
		if slices.Contains(ids, g.GPU) && g.Summary != first {
			return first + " (GPU " + strconv.Itoa(ids[0]) + "; the others' numbers below)"
		}
	}
	return first
}

var severityRank = map[analyzers.Severity]int{analyzers.SeverityCritical: 0, analyzers.SeverityWarning: 1, analyzers.SeverityInfo: 2}

// groupFindings groups the findings by check and severity, most severe
// first, then the most frequent.
func groupFindings(fs []analyzers.Finding) []findingGroup {
	type key struct {
		check string
		sev   analyzers.Severity
	}
	idx := map[key]int{}
	var out []findingGroup
	var gpus [][]int
	var devices [][]string
	for _, f := range fs {
		k := key{f.Check, f.Severity}
		i, ok := idx[k]
		if !ok {
			i = len(out)
			idx[k] = i
			out = append(out, findingGroup{Check: f.Check, Severity: f.Severity, Summary: f.Summary, Fix: f.Fix})
			gpus = append(gpus, nil)
			devices = append(devices, nil)
		}
		out[i].Count++
		for _, g := range append(slices.Clone(f.GPUs), derefGPU(f.GPU)...) {
			if !slices.Contains(gpus[i], g) {
				gpus[i] = append(gpus[i], g)
			}
		}
		if f.Device != "" && !slices.Contains(devices[i], f.Device) {
			devices[i] = append(devices[i], f.Device)
		}
	}
	for i := range out {
		var where []string
		if len(gpus[i]) == 1 {
			where = append(where, "GPU "+gpuList(gpus[i]))
		} else if len(gpus[i]) > 1 {
			where = append(where, "GPUs "+gpuList(gpus[i]))
		}
		where = append(where, devices[i]...)
		out[i].Where = strings.Join(where, ", ")
		if out[i].Count > 1 && len(gpus[i])+len(devices[i]) > 1 {
			out[i].Summary += " (first of " + strconv.Itoa(out[i].Count) + ")"
		}
	}
	slices.SortStableFunc(out, func(a, b findingGroup) int {
		return cmp.Or(cmp.Compare(severityRank[a.Severity], severityRank[b.Severity]), cmp.Compare(b.Count, a.Count))
	})
	return out
}

// buildTimeline turns the history into bands: one row for the node, one
// per GPU of the current diagnosis (and any GPU the history has seen).
func buildTimeline(hist []HistoryEntry, cur []analyzers.GPUVerdict, start, end time.Time) timeline {
	tl := timeline{Start: start, End: end, Span: shortDuration(end.Sub(start))}
	span := end.Sub(start).Seconds()
	if span <= 0 {
		span = 1
	}
	x := func(t time.Time) float64 {
		v := t.Sub(start).Seconds() / span * 1000
		return math.Round(min(max(v, 0), 1000)*10) / 10
	}
	row := func(label string, class func(e *HistoryEntry) analyzers.Class) timelineRow {
		r := timelineRow{Label: label}
		for i := range hist {
			e := &hist[i]
			to := e.End
			if i+1 < len(hist) {
				to = hist[i+1].Start
			} else if end.After(to) {
				to = end
			}
			if !to.After(start) {
				continue
			}
			c := class(e)
			from := e.Start
			if n := len(r.Segs); n > 0 && r.Segs[n-1].Class == c {
				s := &r.Segs[n-1]
				s.W = x(to) - s.X
				s.To = to.UTC().Format(time.RFC3339)
				continue
			}
			r.Segs = append(r.Segs, timelineSeg{X: x(from), W: x(to) - x(from), Class: c,
				From: from.UTC().Format(time.RFC3339), To: to.UTC().Format(time.RFC3339)})
		}
		return r
	}
	tl.Rows = append(tl.Rows, row("node", func(e *HistoryEntry) analyzers.Class { return e.Node }))
	var ids []int
	for _, g := range cur {
		ids = append(ids, g.GPU)
	}
	for i := range hist {
		for _, g := range hist[i].GPUs {
			if !slices.Contains(ids, g.GPU) {
				ids = append(ids, g.GPU)
			}
		}
	}
	slices.Sort(ids)
	for _, id := range ids {
		tl.Rows = append(tl.Rows, row("GPU "+strconv.Itoa(id), func(e *HistoryEntry) analyzers.Class { return e.Class(id) }))
	}
	return tl
}

func shortDuration(d time.Duration) string {
	switch {
	case d >= time.Hour:
		return fmt.Sprintf("%.1f h", d.Hours())
	case d >= time.Minute:
		return fmt.Sprintf("%.0f min", d.Minutes())
	}
	return fmt.Sprintf("%.0f s", d.Seconds())
}

func jobText(j analyzers.GPUJob) string {
	var parts []string
	if j.JobID != "" {
		parts = append(parts, j.Source+" job "+j.JobID)
	} else if j.Source == analyzers.JobSourceNone {
		parts = append(parts, "no job named")
	}
	if j.Pod != "" {
		pod := j.Namespace + "/" + j.Pod
		if j.Container != "" {
			pod += " (" + j.Container + ")"
		}
		parts = append(parts, "pod "+pod)
	}
	return strings.Join(parts, ", ")
}

// classLetter is a class's character in the text timeline.
func classLetter(c analyzers.Class) byte {
	switch c {
	case analyzers.ClassCompute:
		return 'C'
	case analyzers.ClassCommunication:
		return 'M'
	case analyzers.ClassIO:
		return 'I'
	case analyzers.ClassHost:
		return 'H'
	case analyzers.ClassIdle:
		return '.'
	}
	return '?'
}

// derefGPU is a finding's one GPU as a list (none when it has none): a
// finding of one cause for the node lists its GPUs in GPUs instead.
func derefGPU(g *int) []int {
	if g == nil {
		return nil
	}
	return []int{*g}
}
