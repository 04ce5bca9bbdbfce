package engine

import (
	"sync"
	"time"

	"github.com/gpudiag/gpudiag/sample"
)

// Entry is one sample in the window.
type Entry struct {
	Time   time.Time
	Sample any
	size   int
}

// Window keeps the recent samples of every collector for the analyzers. It is
// bounded twice: by age (MaxAge) and by memory (MaxBytes, shared evenly
// between the collectors), so that a node with 64 GPUs keeps a shorter span
// instead of more memory. Span reports the span actually held.
type Window struct {
	maxAge   time.Duration
	maxBytes int

	mu     sync.RWMutex
	series map[string]*ring
}

// NewWindow returns a window holding at most maxAge of samples and about
// maxBytes in all.
func NewWindow(maxAge time.Duration, maxBytes int) *Window {
	return &Window{maxAge: maxAge, maxBytes: maxBytes, series: map[string]*ring{}}
}

// MaxAge is the longest span of samples the window keeps
// (--window.duration).
func (w *Window) MaxAge() time.Duration { return w.maxAge }

// ring is a FIFO of entries: append at the tail, evict at the head.
type ring struct {
	entries []Entry
	head    int
	bytes   int
}

func (r *ring) live() []Entry { return r.entries[r.head:] }

func (r *ring) popFront() {
	r.bytes -= r.entries[r.head].size
	r.entries[r.head] = Entry{} // drop the reference for the GC
	r.head++
	// Compact once the dead prefix is as long as the live part, so the
	// backing array does not grow without bound.
	if r.head > 0 && r.head >= len(r.entries)-r.head {
		n := copy(r.entries, r.entries[r.head:])
		clear(r.entries[n:])
		r.entries = r.entries[:n]
		r.head = 0
	}
}

// Register reserves a share of the memory budget for a collector. Collectors
// must be registered before samples are added.
func (w *Window) Register(name string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if _, ok := w.series[name]; !ok {
		w.series[name] = &ring{}
	}
}

// CollectorBytes is the share of the memory budget each collector's samples
// may hold: the budget split evenly between the registered collectors. A
// collector keeps its newest sample even when that alone is larger, so a
// source that cannot be trusted to be small (a replayed trace) is held to
// samples within it.
func (w *Window) CollectorBytes() int {
	w.mu.RLock()
	defer w.mu.RUnlock()
	return w.share()
}

func (w *Window) share() int { return w.maxBytes / max(len(w.series), 1) }

// Add appends a sample and evicts what is too old or over budget.
func (w *Window) Add(name string, t time.Time, s any) {
	w.mu.Lock()
	defer w.mu.Unlock()
	r, ok := w.series[name]
	if !ok {
		r = &ring{}
		w.series[name] = r
	}
	e := Entry{Time: t, Sample: s, size: sizeOf(s)}
	r.entries = append(r.entries, e)
	r.bytes += e.size
	budget := w.share()
	cutoff := t.Add(-w.maxAge)
	for len(r.live()) > 1 && (r.entries[r.head].Time.Before(cutoff) || r.bytes > budget) {
		r.popFront()
	}
}

// Range returns the samples of the collector with key k taken at or after
// since, oldest first. The slice is a copy; the samples are shared and must
// not be changed.
func Range[S any](w *Window, k sample.Key[S], since time.Time) []sample.Timed[*S] {
	var out []sample.Timed[*S]
	w.eachSince(k.Name(), since, func(es []Entry) {
		out = make([]sample.Timed[*S], 0, len(es))
		for _, e := range es {
			if s, ok := e.Sample.(*S); ok {
				out = append(out, sample.Timed[*S]{Time: e.Time, Sample: s})
			}
		}
	})
	return out
}

// Latest returns the newest sample of the collector with key k.
func Latest[S any](w *Window, k sample.Key[S]) (sample.Timed[*S], bool) {
	return typed[S](w.latest(k.Name()))
}

// Before returns the newest sample of the collector with key k taken before
// t, false when the window holds none (none was taken, or it was evicted).
// The Input builder reads it to tell an entity first met in a span from one
// met before it.
func Before[S any](w *Window, k sample.Key[S], t time.Time) (sample.Timed[*S], bool) {
	return typed[S](w.before(k.Name(), t))
}

func typed[S any](e Entry, ok bool) (sample.Timed[*S], bool) {
	if !ok {
		return sample.Timed[*S]{}, false
	}
	s, ok := e.Sample.(*S)
	if !ok {
		return sample.Timed[*S]{}, false
	}
	return sample.Timed[*S]{Time: e.Time, Sample: s}, true
}

// eachSince calls fn, under the window's read lock, with the collector's
// entries taken at or after since, oldest first: the window's own storage,
// for fn to copy what it keeps (Range copies them once, typed, instead of
// a copy of the entries and then a typed copy). fn is not called when the
// window holds no series by that name; it must not call the window.
func (w *Window) eachSince(name string, since time.Time, fn func([]Entry)) {
	w.mu.RLock()
	defer w.mu.RUnlock()
	r, ok := w.series[name]
	if !ok {
		return
	}
	live := r.live()
	i := len(live)
	for i > 0 && !live[i-1].Time.Before(since) {
		i--
	}
	fn(live[i:])
}

// before returns the collector's newest sample taken before t.
func (w *Window) before(name string, t time.Time) (Entry, bool) {
	w.mu.RLock()
	defer w.mu.RUnlock()
	r, ok := w.series[name]
	if !ok {
		return Entry{}, false
	}
	live := r.live()
	i := len(live)
	for i > 0 && !live[i-1].Time.Before(t) {
		i--
	}
	if i == 0 {
		return Entry{}, false
	}
	return live[i-1], true
}

// latest returns the collector's newest sample.
func (w *Window) latest(name string) (Entry, bool) {
	w.mu.RLock()
	defer w.mu.RUnlock()
	r, ok := w.series[name]
	if !ok || len(r.live()) == 0 {
		return Entry{}, false
	}
	live := r.live()
	return live[len(live)-1], true
}

// Stats reports, per collector, how many samples and bytes the window holds
// and the span from the oldest to the newest.
func (w *Window) Stats() map[string]WindowStats {
	w.mu.RLock()
	defer w.mu.RUnlock()
	out := make(map[string]WindowStats, len(w.series))
	for name, r := range w.series {
		live := r.live()
		st := WindowStats{Samples: len(live), Bytes: r.bytes}
		if len(live) > 1 {
			st.Span = live[len(live)-1].Time.Sub(live[0].Time)
		}
		out[name] = st
	}
	return out
}

// WindowStats describes what the window holds for one collector.
type WindowStats struct {
	Samples int
	Bytes   int
	Span    time.Duration
}
