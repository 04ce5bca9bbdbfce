package diagnose

import (
	"slices"
	"time"

	"github.com/gpudiag/gpudiag/analyzers"
)

// maxHistory bounds the kept verdict history by count whatever the window:
// a flapping verdict at a 100 ms interval over an hour would otherwise keep
// tens of thousands of entries. Each entry is a few dozen bytes per GPU.
const maxHistory = 2048

// GPUClass is one GPU's class in a history entry.
type GPUClass struct {
	GPU   int             `json:"gpu"`
	Class analyzers.Class `json:"class"`
}

// HistoryEntry is a run of analyses that reported the same classes: the
// node's and every GPU's, from Start to End (the time of the last analysis
// of the run, or the first of the next run).
type HistoryEntry struct {
	Start time.Time       `json:"start"`
	End   time.Time       `json:"end"`
	Node  analyzers.Class `json:"node"`
	GPUs  []GPUClass      `json:"gpus"`
}

// Class returns the GPU's class in the entry, unknown when it was not seen.
func (e *HistoryEntry) Class(gpu int) analyzers.Class {
	for _, g := range e.GPUs {
		if g.GPU == gpu {
			return g.Class
		}
	}
	return analyzers.ClassUnknown
}

func (e *HistoryEntry) same(node analyzers.Class, gpus []GPUClass) bool {
	return e.Node == node && slices.Equal(e.GPUs, gpus)
}

// history is the runner's record of past verdicts: one entry per run of
// equal classes, bounded by age (the window's duration) and by count.
type history struct {
	maxAge  time.Duration
	entries []HistoryEntry
}

// add records the diagnosis made at t.
func (h *history) add(d *analyzers.Diagnosis) {
	t := d.Time
	gpus := make([]GPUClass, len(d.GPUs))
	for i, g := range d.GPUs {
		gpus[i] = GPUClass{GPU: g.GPU, Class: g.Class}
	}
	if n := len(h.entries); n > 0 {
		last := &h.entries[n-1]
		if t.Before(last.End) {
			// The clock went back (a replay restarted): start over.
			h.entries = h.entries[:0]
		} else {
			last.End = t
			if last.same(d.Node.Class, gpus) {
				h.trim(t)
				return
			}
		}
	}
	h.entries = append(h.entries, HistoryEntry{Start: t, End: t, Node: d.Node.Class, GPUs: gpus})
	h.trim(t)
}

func (h *history) trim(now time.Time) {
	cut := 0
	if h.maxAge > 0 {
		for cut < len(h.entries)-1 && now.Sub(h.entries[cut].End) > h.maxAge {
			cut++
		}
	}
	if n := len(h.entries) - cut; n > maxHistory {
		cut += n - maxHistory
	}
	if cut > 0 {
		// Copy down so the backing array does not grow without bound.
		n := copy(h.entries, h.entries[cut:])
		clear(h.entries[n:])
		h.entries = h.entries[:n]
	}
}

// History returns the kept verdict history, oldest first: the node's and
// each GPU's class over the window, one entry per run of equal classes.
func (r *Runner) History() []HistoryEntry {
	r.mu.RLock()
	defer r.mu.RUnlock()
	out := make([]HistoryEntry, len(r.hist.entries))
	copy(out, r.hist.entries)
	return out
}

// HeldSince dates each verdict of d, the node's and every GPU's, from the
// history: since the start of the newest run of entries with its class. An
// analysis over a span (Runner.Over) has no previous verdict and so dates
// every verdict at its own end; the history says how long each held.
func HeldSince(d *analyzers.Diagnosis, hist []HistoryEntry) {
	held := func(v *analyzers.Verdict, class func(*HistoryEntry) analyzers.Class) {
		for i := len(hist) - 1; i >= 0 && class(&hist[i]) == v.Class; i-- {
			if hist[i].Start.Before(v.Since) {
				v.Since = hist[i].Start
			}
		}
	}
	held(&d.Node, func(e *HistoryEntry) analyzers.Class { return e.Node })
	for i := range d.GPUs {
		g := d.GPUs[i].GPU
		held(&d.GPUs[i].Verdict, func(e *HistoryEntry) analyzers.Class { return e.Class(g) })
	}
}
