package diagnose

import (
	"unicode/utf8"

	"github.com/gpudiag/gpudiag/analyzers"
	"github.com/gpudiag/gpudiag/engine"
)

// maxErrorBytes bounds a collector's error in /diagnose: an error can quote
// a file's content, and the page must stay small.
const maxErrorBytes = 256

// CollectorHealth turns the engine's collector statuses into the diagnosis's
// collectors section.
func CollectorHealth(statuses []engine.Status) []analyzers.CollectorHealth {
	out := make([]analyzers.CollectorHealth, 0, len(statuses))
	for _, st := range statuses {
		h := analyzers.CollectorHealth{Collector: st.Name, OK: st.Success, Failures: st.Failures}
		switch {
		case st.LastAttempt.IsZero():
			h.LastError = "not sampled yet"
		case !st.Success:
			h.LastError = truncateUTF8(st.LastError, maxErrorBytes)
		}
		if !st.LastSuccess.IsZero() {
			t := st.LastSuccess
			h.LastSuccess = &t
		}
		out = append(out, h)
	}
	return out
}

// failingCollectors is the part of the section the text and HTML detail.
func failingCollectors(hs []analyzers.CollectorHealth) []analyzers.CollectorHealth {
	var out []analyzers.CollectorHealth
	for _, h := range hs {
		if !h.OK {
			out = append(out, h)
		}
	}
	return out
}

// truncateUTF8 cuts s to at most n bytes without splitting a character.
func truncateUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	const ellipsis = "…"
	cut := n - len(ellipsis)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + ellipsis
}
