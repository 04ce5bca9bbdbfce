package nccl

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"
)

// recorder collects what a Tailer delivers.
type recorder struct {
	lines  []string
	resets []ResetReason
}

func (r *recorder) line(b []byte) { r.lines = append(r.lines, string(b)) }
func (r *recorder) reset(why ResetReason) {
	r.resets = append(r.resets, why)
	r.lines = append(r.lines, "<"+why.String()+">")
}

func (r *recorder) poll(t *testing.T, tl *Tailer, budget int) PollResult {
	t.Helper()
	res, err := tl.Poll(budget, r.line, r.reset)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func (r *recorder) take() []string {
	out := r.lines
	r.lines = nil
	return out
}

func appendFile(t *testing.T, path, s string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(s); err != nil {
		t.Fatal(err)
	}
	f.Close()
}

func TestTailerFollowsAndCompletesPartialLines(t *testing.T) {
	path := filepath.Join(t.TempDir(), "nccl.log")
	tl := NewTailer(path, 0, 0)
	defer tl.Close()
	var r recorder

	// Not there yet: nothing, no error.
	if res := r.poll(t, tl, 1<<20); res.Exists || res.Lines != 0 {
		t.Fatalf("missing file: %+v", res)
	}
	appendFile(t, path, "a\nb\nhalf")
	res := r.poll(t, tl, 1<<20)
	if got := r.take(); !reflect.DeepEqual(got, []string{"a", "b"}) || !res.Exists || res.Bytes != 8 || res.Lines != 2 {
		t.Fatalf("first poll %v %+v", got, res)
	}
	if res := r.poll(t, tl, 1<<20); res.Bytes != 0 || len(r.take()) != 0 {
		t.Fatalf("nothing new, yet %+v", res)
	}
	appendFile(t, path, " done\r\nc\n")
	r.poll(t, tl, 1<<20)
	// The partial line is completed by the next write; the CR stays for the
	// parser, which trims it.
	if got := r.take(); !reflect.DeepEqual(got, []string{"half done\r", "c"}) {
		t.Fatalf("completed %q", got)
	}
	if tl.Offset() != 17 {
		t.Fatalf("offset %d; want 17", tl.Offset())
	}
}

func TestTailerBudgetAndStartOffset(t *testing.T) {
	path := filepath.Join(t.TempDir(), "nccl.log")
	appendFile(t, path, "0123456789\nabcdefghij\nlast\n")
	tl := NewTailer(path, 0, 0)
	defer tl.Close()
	var r recorder
	if res := r.poll(t, tl, 15); !res.More || res.Bytes != 15 || !reflect.DeepEqual(r.take(), []string{"0123456789"}) {
		t.Fatalf("budgeted poll %+v", res)
	}
	if res := r.poll(t, tl, 100); res.More || !reflect.DeepEqual(r.take(), []string{"abcdefghij", "last"}) {
		t.Fatalf("rest %+v", res)
	}

	from := NewTailer(path, 11, 0)
	defer from.Close()
	r.poll(t, from, 100)
	if got := r.take(); !reflect.DeepEqual(got, []string{"abcdefghij", "last"}) {
		t.Fatalf("from offset 11: %q", got)
	}
	// An offset past the end is a file that shrank: start over at 0.
	past := NewTailer(path, 1000, 0)
	defer past.Close()
	r.poll(t, past, 100)
	if got := r.take(); len(got) != 3 {
		t.Fatalf("from past the end: %q", got)
	}
}

// logrotate's default: rename the file, create a new one. The old file's
// last lines are read before the new file, and the caller is told in between.
func TestTailerRotation(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "nccl.log")
	appendFile(t, path, "old 1\n")
	tl := NewTailer(path, 0, 0)
	defer tl.Close()
	var r recorder
	r.poll(t, tl, 1<<20)
	r.take()

	appendFile(t, path, "old 2\nold partial")
	if err := os.Rename(path, path+".1"); err != nil {
		t.Fatal(err)
	}
	appendFile(t, path, "new 1\n")
	r.poll(t, tl, 1<<20)
	if got := r.take(); !reflect.DeepEqual(got, []string{"old 2", "<rotated>", "new 1"}) {
		t.Fatalf("across rotation %q", got)
	}
	if tl.Offset() != 6 {
		t.Fatalf("offset in the new file %d; want 6", tl.Offset())
	}
}

// copytruncate: the same inode shrinks to 0 and refills.
func TestTailerTruncation(t *testing.T) {
	path := filepath.Join(t.TempDir(), "nccl.log")
	appendFile(t, path, "first job line one\nfirst job line two\n")
	tl := NewTailer(path, 0, 0)
	defer tl.Close()
	var r recorder
	r.poll(t, tl, 1<<20)
	r.take()
	if err := os.Truncate(path, 0); err != nil {
		t.Fatal(err)
	}
	appendFile(t, path, "second\n")
	r.poll(t, tl, 1<<20)
	if got := r.take(); !reflect.DeepEqual(got, []string{"<truncated>", "second"}) {
		t.Fatalf("after truncation %q", got)
	}
}

func TestTailerDisappearsAndReappears(t *testing.T) {
	path := filepath.Join(t.TempDir(), "nccl.log")
	appendFile(t, path, "one\n")
	tl := NewTailer(path, 0, 0)
	defer tl.Close()
	var r recorder
	r.poll(t, tl, 1<<20)
	appendFile(t, path, "two\n")
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	// Lines written before the unlink are still delivered.
	res := r.poll(t, tl, 1<<20)
	if got := r.take(); res.Exists || !reflect.DeepEqual(got, []string{"one", "two"}) {
		t.Fatalf("after removal %+v %q", res, got)
	}
	if res := r.poll(t, tl, 1<<20); res.Exists || res.Bytes != 0 {
		t.Fatalf("gone: %+v", res)
	}
	appendFile(t, path, "three\n")
	res = r.poll(t, tl, 1<<20)
	if got := r.take(); !res.Exists || !reflect.DeepEqual(got, []string{"<rotated>", "three"}) {
		t.Fatalf("reappeared %+v %q", res, got)
	}
}

func TestTailerDropsOverlongLines(t *testing.T) {
	path := filepath.Join(t.TempDir(), "nccl.log")
	tl := NewTailer(path, 0, 16)
	defer tl.Close()
	var r recorder
	// Overlong in one read, overlong across reads, then normal lines.
	appendFile(t, path, "short\n"+strings.Repeat("x", 40)+"\nok\n"+strings.Repeat("y", 10))
	res := r.poll(t, tl, 1<<20)
	appendFile(t, path, strings.Repeat("y", 10))
	res2 := r.poll(t, tl, 1<<20)
	appendFile(t, path, strings.Repeat("y", 100)+"\nafter\n")
	res3 := r.poll(t, tl, 1<<20)
	if got := r.take(); !reflect.DeepEqual(got, []string{"short", "ok", "after"}) {
		t.Fatalf("lines %q", got)
	}
	if res.Dropped+res2.Dropped+res3.Dropped != 2 {
		t.Fatalf("dropped %d+%d+%d; want 2", res.Dropped, res2.Dropped, res3.Dropped)
	}
	// A line of exactly the limit is kept.
	appendFile(t, path, strings.Repeat("z", 16)+"\n")
	r.poll(t, tl, 1<<20)
	if got := r.take(); len(got) != 1 || len(got[0]) != 16 {
		t.Fatalf("line at the limit %q", got)
	}
}

// Binary garbage and a copytruncate hole of NULs neither break the tailer
// nor the state machine behind it.
func TestTailerGarbageIntoLog(t *testing.T) {
	path := filepath.Join(t.TempDir(), "nccl.log")
	garbage := "\x00\x00\x00\xff\xfe\x01\x02\n\x00\x00vm:1:1 [0] NCCL INFO \xc3\n" + strings.Repeat("\x00", 100<<10) +
		"vm:586:586 [0] NCCL INFO NCCL version 2.28.9+cuda13.0\n"
	appendFile(t, path, garbage)
	tl := NewTailer(path, 0, 0)
	defer tl.Close()
	l := NewLog()
	res, err := tl.Poll(1<<20, l.Feed, func(ResetReason) { l.Reset() })
	if err != nil {
		t.Fatal(err)
	}
	if res.Dropped != 0 || res.Lines != 3 || res.Bytes != len(garbage) {
		t.Fatalf("%+v; want three lines, the NULs gone", res)
	}
	sums := l.Summaries()
	if len(sums) != 2 || sums[0].PID != 1 || sums[1].PID != 586 || sums[1].Versions[0] != "2.28.9+cuda13.0" {
		t.Fatalf("summaries %+v", sums)
	}
}

func TestTailerRefusesNonRegularFiles(t *testing.T) {
	dir := t.TempDir()
	if _, err := NewTailer(dir, 0, 0).Poll(100, func([]byte) {}, func(ResetReason) {}); err == nil {
		t.Fatal("a directory was tailed")
	}
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Skip("mkfifo:", err)
	}
	// Must return at once rather than wait for a writer.
	if _, err := NewTailer(fifo, 0, 0).Poll(100, func([]byte) {}, func(ResetReason) {}); err == nil {
		t.Fatal("a FIFO was tailed")
	}
}

func TestExpandDebugFile(t *testing.T) {
	for _, tc := range []struct {
		pattern, host string
		pid           int
		want          string
	}{
		{"/tmp/nccl.%h.%p.log", "gpu-node-7.cluster.local", 4242, "/tmp/nccl.gpu-node-7.4242.log"},
		{"/var/log/nccl/%h/%p", "vm", 586, "/var/log/nccl/vm/586"},
		{"nccl_%p_%%_%x.txt", "h", 1, "nccl_1_%_%x.txt"},
		{"/logs/%h.log", "we%ird/host", 1, "/logs/we-ird-host.log"},
		{"/logs/trailing%", "h", 1, "/logs/trailing%"},
		{"/plain/path", "h", 1, "/plain/path"},
	} {
		if got := ExpandDebugFile(tc.pattern, tc.host, tc.pid); got != tc.want {
			t.Errorf("ExpandDebugFile(%q, %q, %d) = %q; want %q", tc.pattern, tc.host, tc.pid, got, tc.want)
		}
	}
}
