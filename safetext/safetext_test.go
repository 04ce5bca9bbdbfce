package safetext

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestCut(t *testing.T) {
	long := strings.Repeat("é", 200) // 400 bytes, every character two
	for _, tc := range []struct {
		name, in string
		max      int
		want     string
	}{
		{"short kept", "train-7", 253, "train-7"},
		{"no limit", long, 0, long},
		{"cut inside a character backs off", "aé", 4, "aé"},
		{"cut with marker at a boundary", "abcdefgh", 6, "abc" + Marker},
		{"marker never splits a character", "aéééé", 7, "aé" + Marker},
		{"invalid bytes replaced", "a\xffb", 10, "a\uFFFDb"},
		{"no room for the marker", "abcdef", 2, "ab"},
		{"no room, no split", "éé", 2, "é"},
		{"room for the marker alone", "éé", 3, Marker},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Cut(tc.in, tc.max); got != tc.want {
				t.Errorf("Cut(%q, %d) = %q, want %q", tc.in, tc.max, got, tc.want)
			}
		})
	}
	// The pod-name crash: a 253-byte cut inside a two-byte character.
	got := Label("p" + long)
	if !utf8.ValidString(got) || len(got) > LabelMaxBytes || !strings.HasSuffix(got, Marker) {
		t.Errorf("Label of a 401-byte name = %d bytes, valid %v", len(got), utf8.ValidString(got))
	}
}

func TestTerminal(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"plain text, ünïcode, 中文", "plain text, ünïcode, 中文"},
		{"\x1b[2J\x1b[H", `\x1b[2J\x1b[H`},                     // clear screen, cursor home
		{"\x1b]0;owned\x07", `\x1b]0;owned\x07`},               // OSC window title
		{"job\r\nfake row", `job\r\nfake row`},                 // a forged table line
		{"a\u009b31mred", `a\x9b31mred`},                       // C1 CSI
		{"evil\u202etxt.exe", `evil\u202etxt.exe`},             // right-to-left override
		{"tab\there", `tab\there`},                             // tabs break columns
		{"bad\xffbyte", "bad\uFFFDbyte"},                       // invalid UTF-8
		{"kept \uFFFD replacement", "kept \uFFFD replacement"}, // a real U+FFFD is text
		{"del\x7f", `del\x7f`},
	} {
		if got := Terminal(tc.in); got != tc.want {
			t.Errorf("Terminal(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestNothingToDoAllocatesNothing(t *testing.T) {
	s := strings.Repeat("gpu-node-17/train ", 10)
	if n := testing.AllocsPerRun(100, func() { _ = Terminal(s); _ = Cut(s, 1000) }); n != 0 {
		t.Errorf("clean text allocated %v times", n)
	}
}

// FuzzBoundary: whatever comes in, what leaves is valid UTF-8 within its
// bound, and Terminal's output holds no character a terminal acts on.
func FuzzBoundary(f *testing.F) {
	for _, s := range []string{"", "abc", "é", "\x1b]0;t\x07", "a\xff\xfe", "\u202e", strings.Repeat("é", 130), "\u0085"} {
		f.Add(s, 253)
	}
	f.Fuzz(func(t *testing.T, s string, max int) {
		max %= 1 << 12
		c := Cut(s, max)
		if !utf8.ValidString(c) {
			t.Fatalf("Cut(%q, %d) invalid: %q", s, max, c)
		}
		if max > 0 && len(c) > max {
			t.Fatalf("Cut(%q, %d) = %d bytes", s, max, len(c))
		}
		if max <= 0 || len(s) <= max && utf8.ValidString(s) {
			if utf8.ValidString(s) && c != s {
				t.Fatalf("Cut changed a value within bounds: %q -> %q", s, c)
			}
		}
		l := Line(s, max)
		if !utf8.ValidString(l) {
			t.Fatalf("Line(%q) invalid: %q", s, l)
		}
		for _, r := range l {
			if unsafeRune(r) {
				t.Fatalf("Line(%q) = %q keeps %U", s, l, r)
			}
		}
	})
}

// FuzzJSON: JSON of what encoding/json wrote is still valid JSON, decodes
// to the same value, and holds no character a terminal acts on.
func FuzzJSON(f *testing.F) {
	for _, s := range []string{"", "abc", "\u009b31m", "a\u202eb", "\x1b[2J", "é\u0085\u2028", "\x7f", "a\xff"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		raw, err := json.Marshal(map[string][]string{"k\u202e": {s, "x"}})
		if err != nil {
			t.Fatal(err)
		}
		safe := JSON(string(raw))
		if !json.Valid([]byte(safe)) {
			t.Fatalf("JSON(%q) = %q is not JSON", raw, safe)
		}
		for _, r := range safe {
			if unsafeRune(r) {
				t.Fatalf("JSON(%q) = %q keeps %U", raw, safe, r)
			}
		}
		var before, after any
		if json.Unmarshal(raw, &before) != nil || json.Unmarshal([]byte(safe), &after) != nil || !reflect.DeepEqual(before, after) {
			t.Fatalf("JSON changed the value: %v -> %v", before, after)
		}
	})
}

func TestJSONEscapesWhatEncodingJSONLeaves(t *testing.T) {
	raw, _ := json.Marshal("ls\u009b2J\u202egnp.exe\x7f")
	if got, want := JSON(string(raw)), `"ls\u009b2J\u202egnp.exe\u007f"`; got != want {
		t.Fatalf("JSON(%s) = %s; want %s", raw, got, want)
	}
}
