package diagnose

import (
	"time"
	"unicode/utf8"

	"github.com/gpudiag/gpudiag/analyzers"
	"github.com/gpudiag/gpudiag/engine"
)

// maxErrorBytes bounds a collector's error in /diagnose: an error can quote
// a file's content, and the page must stay small.
const maxErrorBytes = 256

// Report is a diagnosis as it is served (/diagnose, the diagnose command):
// the analyzers' Diagnosis and the health of every collector when it was
// served, so a verdict made without a failing collector's samples says so.
// Its JSON is the Diagnosis's members, then collectors.
type Report struct {
	analyzers.Diagnosis
	Collectors []CollectorHealth `json:"collectors,omitempty"`
}

// CollectorHealth is one collector's state: whether its last sample
// succeeded and, when not, why.
type CollectorHealth struct {
	Collector string `json:"collector"`
	OK        bool   `json:"ok"`
	// LastError is the last failed sample's error (a panic reads "panic:
	// …"), bounded in length.
	LastError string `json:"last_error,omitempty"`
	// Failures counts failed, timed-out and skipped samples since start.
	Failures    uint64     `json:"failures"`
	LastSuccess *time.Time `json:"last_success,omitempty"`
}

// Health turns the engine's collector statuses into the report's
// collectors section.
func Health(statuses []engine.Status) []CollectorHealth {
	out := make([]CollectorHealth, 0, len(statuses))
	for _, st := range statuses {
		h := CollectorHealth{Collector: st.Name, OK: st.Success, Failures: st.Failures}
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
func failingCollectors(hs []CollectorHealth) []CollectorHealth {
	var out []CollectorHealth
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
