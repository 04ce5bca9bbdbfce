package nccl

import (
	"bytes"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"
)

// In plain `go test` these run their seed corpus (testdata/fuzz/<name>/ and
// the f.Add calls); `go test -fuzz=FuzzParseLine ./nccl` explores further.

func FuzzParseLine(f *testing.F) {
	f.Add([]byte("vm:908:908 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] [send] via NET/Socket/0"))
	f.Add([]byte("\n[2026-11-21 10:11:12] h:1:2 [3] net_ib.cc:1 (f) NCCL WARN x"))
	f.Add([]byte("NCCL version 2.28.9+cuda13.0"))
	f.Add([]byte("  | 2025-05-16T16:39:51.208-07:00ip-10-36-29-253:79:79 [0] NCCL INFO Bootstrap : Using eth0:10.36.29.253<0> | ip-10-36-29-253:79:79 [0] NCCL INFO x"))
	f.Add([]byte("[1,0]<stdout>:NCCL version 2.5.6+cuda10.2"))
	f.Add([]byte(" [0] NCCL INFO Ring 00 : 6 -> 2 [receive] via NET/IB/0"))
	f.Add([]byte("h:1:1 [0] NCCL INFO NET/IB : Using [0]={[0] mlx5_2:1/RoCE, [1] mlx5_3:1/RoCE} [RO]; OOB bond0:10.0.0.1<0>"))
	f.Fuzz(func(t *testing.T, b []byte) {
		l, ok := ParseLine(b)
		if !ok {
			return
		}
		if !utf8.ValidString(l.Message) || len(l.Message) > MaxMessageBytes {
			t.Fatalf("message %q", l.Message)
		}
		// A process is host:pid, or no prefix at all (a pasted log whose
		// prefix was cut away): never half of one.
		named := l.PID > 0 && l.Host != "" && utf8.ValidString(l.Host) && !strings.ContainsAny(l.Host, ": \t|")
		anonymous := l.PID == 0 && l.TID == 0 && l.Host == ""
		if l.Level != LevelVersion && !named && !anonymous {
			t.Fatalf("prefix %+v", l)
		}
		// Whatever the line, the state machine takes it and what it reports
		// is well formed: label values and JSON come from here.
		log := NewLog()
		log.Feed(b)
		log.Feed(b)
		for _, s := range log.Summaries() {
			for _, e := range s.Env {
				if !isEnvName(e.Name) || !utf8.ValidString(e.Value) || len(e.Value) > MaxEnvValueBytes {
					t.Fatalf("env %+v", e)
				}
			}
			for _, v := range s.Versions {
				if versionOf("NCCL version "+v) != v {
					t.Fatalf("version %q", v)
				}
			}
			for _, w := range s.Warnings {
				if !utf8.ValidString(w.Message) || len(w.Message) > MaxWarningBytes {
					t.Fatalf("warning %q", w.Message)
				}
			}
			for _, fb := range s.Fallbacks(func(string, int) bool { return true }) {
				if fb.Kind == "" || fb.Expected == "" || !utf8.ValidString(fb.Evidence) {
					t.Fatalf("fallback %+v", fb)
				}
			}
		}
		// The whole log's report `gpudiag nccl` prints is as well formed.
		r := Analyze(log)
		if r.GDR != GDRUsed && r.GDR != GDRNotUsed && r.GDR != GDRUnknown {
			t.Fatalf("gdr %q", r.GDR)
		}
		for _, n := range append(append(r.NICs, r.Versions...), r.Network) {
			if !utf8.ValidString(n) {
				t.Fatalf("report %+v", r)
			}
		}
	})
}

// FuzzTailer writes data to a file in three appends, polling with a small
// budget and line limit in between, and checks the tailer delivers exactly
// the complete lines a plain split would give: NULs removed, lines over the
// limit dropped and counted, the trailing partial line held back.
func FuzzTailer(f *testing.F) {
	f.Add([]byte("a\nbb\n\x00\x00ccc\nddddddddddddd\npartial"), uint16(3), uint16(17))
	f.Add([]byte("vm:1:1 [0] NCCL INFO x\r\nvm:1:1 [0] NCCL WARN y\n"), uint16(0), uint16(40))
	f.Fuzz(func(t *testing.T, data []byte, cut1, cut2 uint16) {
		const maxLine, budget = 8, 7
		path := filepath.Join(t.TempDir(), "log")
		a := min(int(cut1), len(data))
		b := min(max(int(cut2), a), len(data))
		tl := NewTailer(path, 0, maxLine)
		defer tl.Close()
		var got []string
		dropped, total := 0, 0
		pollAll := func() {
			for {
				res, err := tl.Poll(budget, func(l []byte) {
					if bytes.IndexByte(l, '\n') >= 0 || len(l) > maxLine {
						t.Fatalf("line %q", l)
					}
					got = append(got, string(l))
				}, func(why ResetReason) { t.Fatalf("reset %v on an append-only file", why) })
				if err != nil {
					t.Fatal(err)
				}
				dropped += res.Dropped
				total += res.Bytes
				if !res.More {
					return
				}
			}
		}
		for _, part := range [][]byte{data[:a], data[a:b], data[b:]} {
			fh, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
			if err != nil {
				t.Fatal(err)
			}
			fh.Write(part)
			fh.Close()
			pollAll()
		}
		if total != len(data) {
			t.Fatalf("read %d bytes of %d", total, len(data))
		}
		segs := strings.Split(strings.ReplaceAll(string(data), "\x00", ""), "\n")
		var want []string
		wantDropped := 0
		for i, s := range segs {
			switch {
			case len(s) > maxLine:
				wantDropped++
			case i < len(segs)-1:
				want = append(want, s)
			}
		}
		if !reflect.DeepEqual(got, want) && (len(got) != 0 || len(want) != 0) || dropped != wantDropped {
			t.Fatalf("lines %q dropped %d; want %q dropped %d", got, dropped, want, wantDropped)
		}
	})
}
