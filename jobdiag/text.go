package jobdiag

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// WriteText prints the report for a person: what bounds the job, which
// node holds it back and why, the fix, then every node with its evidence
// and /diagnose page.
func (r *Report) WriteText(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "%s job %s: %d GPUs on %d nodes, at %s\n", r.JobSource, r.JobID, r.GPUs, len(r.Nodes), r.Time.UTC().Format(time.RFC3339))
	verdict := r.Class
	if r.SubKind != "" {
		verdict += "/" + r.SubKind
	}
	if verdict == "" {
		verdict = "not classified (no verdict series)"
	}
	fmt.Fprintf(&b, "Bound by: %s (%d of %d GPUs)", verdict, r.Classes[r.Class+"/"+r.SubKind], r.GPUs)
	if len(r.Classes) > 1 {
		var others []string
		for _, k := range sortedKeys(r.Classes) {
			if k != r.Class+"/"+r.SubKind {
				others = append(others, fmt.Sprintf("%d %s", r.Classes[k], k))
			}
		}
		fmt.Fprintf(&b, "; the others: %s", strings.Join(others, ", "))
	}
	b.WriteString("\n")
	switch {
	case len(r.Outliers) > 0:
		o := r.Outliers[0]
		fmt.Fprintf(&b, "Held back by: %s (%s): %s\n", o.Instance, o.Cause, o.Summary)
		fmt.Fprintf(&b, "Fix: %s\n", o.Fix)
		for _, o := range r.Outliers[1:] {
			fmt.Fprintf(&b, "Also: %s (%s): %s\n", o.Instance, o.Cause, o.Summary)
		}
	default:
		b.WriteString("Held back by: no node stands out from the job's others\n")
	}
	if g := r.SlowestGPU; g != nil {
		fmt.Fprintf(&b, "Slowest GPU: %s GPU %s at SM activity %.2f, against the job's median GPU at %.2f\n", g.Instance, g.GPU, g.SMActive, g.Median)
	}
	if p := r.WorstPort; p != nil {
		fmt.Fprintf(&b, "Busiest port: %s %s at %.0f%% of %.0f Gb/s", p.Instance, p.Port, p.Use*100, p.RateBytesPerSecond*8/1e9)
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
			vs = append(vs, fmt.Sprintf("%d %s", verdicts[k], k))
		}
		port, use := "-", "-"
		if p := n.BusiestPort; p != nil {
			port, use = p.Port, percent(p.Use)
			if p.Degraded {
				port += " (down-trained)"
			}
		}
		name := n.Instance
		if outlier[n.Instance] {
			name += " *"
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\t%s\n", name, len(n.GPUs), strings.Join(vs, ", "), ratio(float64(n.SMActive)), port, use, n.Diagnose)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(r.Findings) > 0 {
		b.WriteString("\nFindings on the job's nodes:\n")
		for _, f := range r.Findings {
			about := ""
			if f.GPU != "" {
				about += " GPU " + f.GPU
			}
			if f.Device != "" {
				about += " " + f.Device
			}
			if f.Kind != "" {
				about += " (" + f.Kind + ")"
			}
			fmt.Fprintf(&b, "  %s %s %s%s\n", f.Severity, f.Instance, f.Check, about)
		}
	}
	for _, warn := range r.Warnings {
		fmt.Fprintf(&b, "Note: %s\n", warn)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

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
