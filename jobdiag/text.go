package jobdiag

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/gpudiag/gpudiag/safetext"
)

// WriteText prints the report for a person: what bounds the job, which
// node holds it back and why, the fix, then every node with its evidence
// and /diagnose page. Every string from Prometheus is printed through
// field or sentence: a label value is whatever a workload or a hostile
// Prometheus made it (SLURM_JOB_ID becomes job_id), and raw it could clear
// the screen, set the terminal's title or add rows to the table.
func (r *Report) WriteText(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "%s job %s: %d GPUs on %d nodes, at %s\n", field(r.JobSource), field(r.JobID), r.GPUs, len(r.Nodes), r.Time.UTC().Format(time.RFC3339))
	verdict := r.Class
	if r.SubKind != "" {
		verdict += "/" + r.SubKind
	}
	if verdict == "" {
		verdict = "not classified (no verdict series)"
	}
	fmt.Fprintf(&b, "Bound by: %s (%d of %d GPUs)", field(verdict), r.Classes[r.Class+"/"+r.SubKind], r.GPUs)
	if len(r.Classes) > 1 {
		var others []string
		for _, k := range sortedKeys(r.Classes) {
			if k != r.Class+"/"+r.SubKind {
				others = append(others, fmt.Sprintf("%d %s", r.Classes[k], field(k)))
			}
		}
		fmt.Fprintf(&b, "; the others: %s", strings.Join(others, ", "))
	}
	b.WriteString("\n")
	if l := r.Life; l != nil {
		fmt.Fprintf(&b, "Over its life (since %s, %.2f GPU-hours): %s\n", l.Since.Format(time.RFC3339), l.GPUSeconds/3600, l.SplitLine())
		for _, f := range l.Findings {
			kind := ""
			if f.Kind != "" {
				kind = " (" + field(f.Kind) + ")"
			}
			fmt.Fprintf(&b, "  under %s%s: %s\n", field(f.Check), kind, gpuHours(f.GPUSeconds))
		}
		for _, e := range l.Estimates {
			fmt.Fprintf(&b, "  a fix of %s could give back about %s (estimate: %s)\n", field(e.Cause), gpuHours(e.GPUSeconds), sentence(e.Basis))
		}
	}
	switch {
	case len(r.Outliers) > 0:
		o := r.Outliers[0]
		fmt.Fprintf(&b, "Held back by: %s (%s): %s\n", field(o.Instance), field(o.Cause), sentence(o.Summary))
		fmt.Fprintf(&b, "Fix: %s\n", sentence(o.Fix))
		for _, o := range r.Outliers[1:] {
			fmt.Fprintf(&b, "Also: %s (%s): %s\n", field(o.Instance), field(o.Cause), sentence(o.Summary))
		}
	default:
		b.WriteString("Held back by: no node stands out from the job's others\n")
	}
	if g := r.SlowestGPU; g != nil {
		fmt.Fprintf(&b, "Slowest GPU: %s GPU %s at SM activity %.2f, against the job's median GPU at %.2f\n", field(g.Instance), field(g.GPU), g.SMActive, g.Median)
	}
	if p := r.WorstPort; p != nil {
		fmt.Fprintf(&b, "Busiest port: %s %s at %.0f%% of %.0f Gb/s", field(p.Instance), field(p.Port), p.Use*100, p.RateBytesPerSecond*8/1e9)
		if p.Degraded {
			b.WriteString(" (trained down)")
		}
		fmt.Fprintf(&b, "; median node %s\n", percent(float64(r.Medians.NodePortUse)))
	}
	b.WriteString("\n")
	tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tGPUS\tVERDICTS\tSM\tBUSIEST PORT\tUSE\t/DIAGNOSE")
	outlier := map[string]bool{}
	for _, o := range r.Outliers {
		outlier[o.Instance] = true
	}
	for _, n := range r.Nodes {
		verdicts := map[string]int{}
		for _, g := range n.GPUs {
			verdicts[g.Class+"/"+g.SubKind]++
		}
		var vs []string
		for _, k := range sortedKeys(verdicts) {
			vs = append(vs, fmt.Sprintf("%d %s", verdicts[k], field(k)))
		}
		port, use := "-", "-"
		if p := n.BusiestPort; p != nil {
			port, use = field(p.Port), percent(p.Use)
			if p.Degraded {
				port += " (down-trained)"
			}
		}
		name := field(n.Instance)
		if outlier[n.Instance] {
			name += " *"
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\t%s\n", name, len(n.GPUs), strings.Join(vs, ", "), ratio(float64(n.SMActive)), port, use, field(n.Diagnose))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(r.Findings) > 0 {
		b.WriteString("\nFindings on the job's nodes:\n")
		for _, f := range r.Findings {
			about := ""
			if f.GPU != "" {
				about += " GPU " + field(f.GPU)
			}
			if f.Device != "" {
				about += " " + field(f.Device)
			}
			if f.Kind != "" {
				about += " (" + field(f.Kind) + ")"
			}
			fmt.Fprintf(&b, "  %s %s %s%s\n", field(f.Severity), field(f.Instance), field(f.Check), about)
		}
	}
	for _, warn := range r.Warnings {
		fmt.Fprintf(&b, "Note: %s\n", sentence(warn))
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// WriteJSON prints the report as indented JSON that is as safe on a
// terminal as WriteText: encoding/json escapes C0 controls and the line
// separators, and WriteJSON also the characters it leaves raw that a
// terminal acts on (DEL, C1 controls, bidirectional overrides), as \u
// escapes that decode to the same string.
func (r *Report) WriteJSON(w io.Writer) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	_, err = io.WriteString(w, safetext.JSON(string(b))+"\n")
	return err
}

// field is a label value as the text prints it: one line of at most
// safetext.LabelMaxBytes (before escaping), every control character
// escaped, so it stays in its column.
func field(s string) string { return safetext.Line(s, safetext.LabelMaxBytes) }

// sentence is a line gpudiag wrote that quotes label values.
func sentence(s string) string { return safetext.Line(s, 4*safetext.LabelMaxBytes) }

func percent(x float64) string {
	if math.IsNaN(x) {
		return "-"
	}
	return fmt.Sprintf("%.0f%%", x*100)
}

func ratio(x float64) string {
	if math.IsNaN(x) {
		return "-"
	}
	return fmt.Sprintf("%.2f", x)
}

func sortedKeys(m map[string]int) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
