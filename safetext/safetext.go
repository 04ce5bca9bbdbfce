// Package safetext is the one boundary every string leaving gpudiag passes:
// label values, /diagnose text and JSON, `gpudiag job` tables, log fields.
// The strings come from places an attacker can write: a workload's
// environment and log, a kubelet's pod names, a Prometheus answer, a trace.
// Invalid UTF-8 makes client_golang refuse (or, through MustNewConstMetric,
// panic on) a series; control characters clear a terminal, set its title,
// colour it or break a table's lines. Each function here returns its input
// unchanged, without allocating, when there is nothing to do, so it can sit on
// every path.
package safetext

import (
	"strings"
	"unicode/utf8"
)

// Marker ends a value Cut shortened, so a reader sees it was cut.
const Marker = "…"

// Cut returns s as valid UTF-8 of at most max bytes: each invalid byte
// becomes U+FFFD, and a longer value is cut at a character boundary and
// ends with Marker. max below len(Marker) cuts to nothing but the marker's
// room allows; max <= 0 means no length limit.
func Cut(s string, max int) string {
	if !utf8.ValidString(s) {
		s = strings.ToValidUTF8(s, "\uFFFD")
	}
	if max <= 0 || len(s) <= max {
		return s
	}
	cut := max - len(Marker)
	if cut < 0 {
		// No room for the marker: the longest valid prefix.
		cut = max
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		return s[:cut]
	}
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + Marker
}

// LabelMaxBytes bounds a label value gpudiag exports: a Kubernetes name is
// at most 253 bytes, a job ID far less; a longer value is no name.
const LabelMaxBytes = 253

// Label is a label value: Cut to LabelMaxBytes.
func Label(s string) string { return Cut(s, LabelMaxBytes) }

// Terminal returns s with every character that a terminal acts on written
// as a Go escape instead: C0 controls (ESC, CR, LF, BEL, backspace...),
// DEL, C1 controls (U+0080-U+009F, which some terminals take as CSI and
// OSC), the line and paragraph separators, and the bidirectional overrides
// and isolates that reorder what is shown ("Trojan Source"). Invalid UTF-8
// becomes U+FFFD. Printable text, tabs excepted, is kept as it is.
func Terminal(s string) string {
	if utf8.ValidString(s) && !strings.ContainsFunc(s, unsafeRune) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 8)
	for i, r := range s {
		switch {
		case r == utf8.RuneError && isInvalidAt(s, i):
			b.WriteRune(utf8.RuneError) // an invalid byte; a real U+FFFD is text
		case unsafeRune(r):
			b.WriteString(escape(r))
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// JSON escapes, inside JSON text that encoding/json wrote, every character
// Terminal would escape and encoding/json leaves raw (DEL, C1 controls, the
// bidirectional marks), as \u escapes that decode to the same string, so
// that `curl ... | cat` of a hostile process name neither drives the
// terminal nor reorders what it shows. Outside its strings such JSON is
// ASCII without controls, and encoding/json already escapes C0 controls and
// U+2028/9 inside them, so every rune left to escape is inside a string and
// in the Basic Multilingual Plane.
func JSON(s string) string {
	if !strings.ContainsFunc(s, unsafeRune) {
		return s
	}
	const hex = "0123456789abcdef"
	var b strings.Builder
	b.Grow(len(s) + 16)
	for _, r := range s {
		if r >= 0x7f && r <= 0xffff && unsafeRune(r) {
			b.WriteString(`\u`)
			b.WriteByte(hex[r>>12&0xf])
			b.WriteByte(hex[r>>8&0xf])
			b.WriteByte(hex[r>>4&0xf])
			b.WriteByte(hex[r&0xf])
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

// Line is Terminal of Cut: one bounded, printable line.
func Line(s string, max int) string { return Terminal(Cut(s, max)) }

func unsafeRune(r rune) bool {
	switch {
	case r < 0x20, r == 0x7f, r >= 0x80 && r <= 0x9f:
		return true
	case r == 0x2028, r == 0x2029: // line and paragraph separators
		return true
	case r >= 0x202a && r <= 0x202e, r >= 0x2066 && r <= 0x2069, r == 0x200e, r == 0x200f, r == 0x061c:
		return true // bidirectional marks, embeddings, overrides, isolates
	}
	return false
}

func isInvalidAt(s string, i int) bool {
	_, size := utf8.DecodeRuneInString(s[i:])
	return size == 1
}

func escape(r rune) string {
	switch r {
	case '\n':
		return `\n`
	case '\r':
		return `\r`
	case '\t':
		return `\t`
	}
	const hex = "0123456789abcdef"
	if r < 0x100 {
		return `\x` + string([]byte{hex[r>>4], hex[r&0xf]})
	}
	return `\u` + string([]byte{hex[r>>12&0xf], hex[r>>8&0xf], hex[r>>4&0xf], hex[r&0xf]})
}
