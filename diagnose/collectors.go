package diagnose

import (
	"fmt"
	"time"
	"unicode/utf8"

	"github.com/gpudiag/gpudiag/engine"
	"github.com/gpudiag/gpudiag/safetext"
)

// maxErrorBytes bounds a collector's error in /diagnose: an error can quote
// a file's content, and the page must stay small.
const maxErrorBytes = 256

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
	// Unmeasured names what the latest sample could not read, a line or
	// file the host lacks ("meminfo MemAvailable"): the collector still
	// succeeds, and those fields' series are left out. At most
	// maxUnmeasured names, each bounded, then how many more.
	Unmeasured []string `json:"unmeasured,omitempty"`
}

// maxUnmeasured bounds the names of a collector's unmeasured fields: a
// node may list thousands of interfaces, each its own name.
const (
	maxUnmeasured      = 16
	maxUnmeasuredBytes = 128
)

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
		h.Unmeasured = boundedNames(st.Unmeasured)
		out = append(out, h)
	}
	return out
}

// boundedNames keeps the first maxUnmeasured names, each cut to
// maxUnmeasuredBytes, and says how many were left out.
func boundedNames(names []string) []string {
	if len(names) == 0 {
		return nil
	}
	out := make([]string, 0, min(len(names), maxUnmeasured)+1)
	for _, n := range names[:min(len(names), maxUnmeasured)] {
		out = append(out, safetext.Cut(n, maxUnmeasuredBytes))
	}
	if more := len(names) - maxUnmeasured; more > 0 {
		out = append(out, fmt.Sprintf("and %d more", more))
	}
	return out
}

// partialCollectors are the collectors that succeed without some of
// their fields, which the text and HTML name.
func partialCollectors(hs []CollectorHealth) []CollectorHealth {
	var out []CollectorHealth
	for _, h := range hs {
		if len(h.Unmeasured) > 0 {
			out = append(out, h)
		}
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
