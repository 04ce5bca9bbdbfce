package engine

import (
	"testing"
	"time"
)

type sized int

func (s sized) SizeBytes() int { return int(s) }

func TestWindowEvictsByAge(t *testing.T) {
	w := NewWindow(10*time.Second, 1<<20)
	w.Register("a")
	t0 := time.Unix(0, 0)
	for i := 0; i < 30; i++ {
		w.Add("a", t0.Add(time.Duration(i)*time.Second), sized(10))
	}
	got := w.entries("a", time.Time{})
	if len(got) != 11 || !got[0].Time.Equal(t0.Add(19*time.Second)) {
		t.Fatalf("kept %d samples from %v; want 11 from 19s", len(got), got[0].Time)
	}
	if st := w.Stats()["a"]; st.Span != 10*time.Second || st.Bytes != 110 {
		t.Fatalf("stats %+v", st)
	}
}

// The memory bound holds whatever the sample size: bigger samples (more GPUs)
// mean a shorter span, not more memory.
func TestWindowEvictsByBytesSharedBetweenCollectors(t *testing.T) {
	w := NewWindow(time.Hour, 1000)
	w.Register("big")
	w.Register("small")
	t0 := time.Unix(0, 0)
	for i := 0; i < 100; i++ {
		w.Add("big", t0.Add(time.Duration(i)*time.Second), sized(100))
		w.Add("small", t0.Add(time.Duration(i)*time.Second), sized(10))
	}
	st := w.Stats()
	if st["big"].Bytes > 500 || st["big"].Samples != 5 {
		t.Fatalf("big: %+v; want 5 samples within its 500-byte share", st["big"])
	}
	if st["small"].Samples != 50 {
		t.Fatalf("small: %+v; want 50 samples", st["small"])
	}
	if e, ok := w.latest("big"); !ok || !e.Time.Equal(t0.Add(99*time.Second)) {
		t.Fatalf("latest %v %v", e.Time, ok)
	}
}

func TestWindowAlwaysKeepsNewest(t *testing.T) {
	w := NewWindow(time.Second, 10)
	w.Register("a")
	w.Add("a", time.Unix(0, 0), sized(1000))
	if _, ok := w.latest("a"); !ok {
		t.Fatal("a sample larger than the budget must still be kept as the latest")
	}
}

func TestWindowRangeSince(t *testing.T) {
	w := NewWindow(time.Hour, 1<<20)
	w.Register("a")
	t0 := time.Unix(0, 0)
	for i := 0; i < 10; i++ {
		w.Add("a", t0.Add(time.Duration(i)*time.Second), sized(1))
	}
	if got := w.entries("a", t0.Add(7*time.Second)); len(got) != 3 {
		t.Fatalf("got %d; want 3", len(got))
	}
	if got := w.entries("missing", t0); got != nil {
		t.Fatalf("unknown collector: %v", got)
	}
}

// Before is the newest sample strictly before a time, and nothing once the
// window no longer holds one.
func TestWindowBefore(t *testing.T) {
	w := NewWindow(10*time.Second, 1<<20)
	t0 := time.Unix(0, 0)
	for i := 0; i < 30; i += 2 {
		w.Add("a", t0.Add(time.Duration(i)*time.Second), sized(10))
	}
	for _, tc := range []struct {
		at, want int // seconds; want -1: none
	}{{25, 24}, {24, 22}, {100, 28}, {20, 18}, {18, -1}, {3, -1}} {
		e, ok := w.before("a", t0.Add(time.Duration(tc.at)*time.Second))
		if tc.want < 0 {
			if ok {
				t.Errorf("before %ds: got the sample at %v; want none (kept from 18s)", tc.at, e.Time.Sub(t0))
			}
			continue
		}
		if !ok || !e.Time.Equal(t0.Add(time.Duration(tc.want)*time.Second)) {
			t.Errorf("before %ds: %v, %v; want the sample at %ds", tc.at, e.Time.Sub(t0), ok, tc.want)
		}
	}
	if _, ok := w.before("unknown", t0.Add(time.Hour)); ok {
		t.Error("a collector without samples has one before")
	}
}

// entries returns the collector's samples taken at or after since, oldest
// first.
func (w *Window) entries(name string, since time.Time) (out []Entry) {
	w.eachSince(name, since, func(es []Entry) { out = append([]Entry(nil), es...) })
	return out
}
