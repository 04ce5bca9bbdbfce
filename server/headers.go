package server

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"net/http"
	"strings"
)

// DefaultContentSecurityPolicy is the policy of every response that sets
// none of its own: nothing may load, run or frame it. A browser that opens
// /metrics, /healthz, an error or a JSON answer as a page runs nothing in
// it, whatever a label value or a quoted parameter holds.
const DefaultContentSecurityPolicy = "default-src 'none'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// StylePolicy is the Content-Security-Policy of an HTML page whose only
// active content is the given inline <style> elements' text: each is
// allowed by its SHA-256, so no other style, no script (inline or not), no
// image, font or frame loads, and no site may frame the page.
func StylePolicy(styles ...string) string {
	var b strings.Builder
	b.WriteString("default-src 'none'; style-src")
	if len(styles) == 0 {
		b.WriteString(" 'none'")
	}
	for _, s := range styles {
		sum := sha256.Sum256([]byte(s))
		b.WriteString(" 'sha256-" + base64.StdEncoding.EncodeToString(sum[:]) + "'")
	}
	b.WriteString("; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
	return b.String()
}

// InlineStyles returns the text of each <style> element of an HTML page,
// as a browser hashes it for the policy.
func InlineStyles(page []byte) []string {
	var styles []string
	for {
		_, after, ok := bytes.Cut(page, []byte("<style>"))
		if !ok {
			return styles
		}
		style, rest, ok := bytes.Cut(after, []byte("</style>"))
		if !ok {
			return styles
		}
		styles = append(styles, string(style))
		page = rest
	}
}

// withSecurityHeaders sets on every response what keeps a browser from
// reading it as anything but what it says, from framing it and from
// sending its address on: nosniff, X-Frame-Options DENY, Referrer-Policy
// no-referrer, and DefaultContentSecurityPolicy, which a handler that
// serves a page replaces with the page's own (StylePolicy).
func withSecurityHeaders(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", DefaultContentSecurityPolicy)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Referrer-Policy", "no-referrer")
		next.ServeHTTP(w, r)
	})
}

// staticPage serves the HTML page of fixed styles at probe's path with its
// policy: rendered once here to learn its <style> elements, which do not
// change between requests. Other paths of the handler (a 404, a profile)
// keep the default policy.
func staticPage(page http.Handler, probe *http.Request) http.Handler {
	rendered := &bufferedResponse{header: http.Header{}}
	page.ServeHTTP(rendered, probe)
	policy := StylePolicy(InlineStyles(rendered.body.Bytes())...)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == probe.URL.Path {
			w.Header().Set("Content-Security-Policy", policy)
		}
		page.ServeHTTP(w, r)
	})
}
