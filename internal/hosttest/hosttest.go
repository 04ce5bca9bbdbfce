// Package hosttest holds what the tests of the host-file parsers (hostfs,
// collectors) share: the fuzz targets' bound on one parse's time, errors
// that name their file and stay short, seeds from the fixture host tree, a
// planted secret for the environment readers, and files written into a
// test's own tree. It is imported by tests only.
package hosttest

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// HangLimit bounds one parse. Go's fuzzing engine has no per-input time
// limit: a worker stuck on an input stalls until -fuzztime runs out, and
// the run passes. A parse takes microseconds; the limit turns a loop that
// never ends, or an input that costs seconds, into a reported failure.
const HangLimit = 10 * time.Second

// WithinHangLimit runs parse, failing the input if it has not returned
// within HangLimit. parse must not call t's Fatal methods.
func WithinHangLimit(t *testing.T, parse func()) {
	t.Helper()
	Within(t, HangLimit, "input being parsed", parse)
}

// Within runs f and fails the test if it has not returned within limit:
// for what must not wait (a FIFO's open, a parse). The goroutine of a hung
// call is left behind; the test binary exits anyway. f must not call t's
// Fatal methods.
func Within(t *testing.T, limit time.Duration, what string, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		f()
	}()
	select {
	case <-done:
	case <-time.After(limit):
		t.Fatalf("%s still blocked after %s", what, limit)
	}
}

// HostTree is the fixture host tree (a /proc and a /sys) the seeds come
// from, relative to this module's root.
const HostTree = "hostfs/testdata/host"

// Seed returns a file of the fixture host tree as a seed, for a test
// whose package sits one level below the module's root (hostfs,
// collectors).
func Seed(f *testing.F, rel string) []byte {
	f.Helper()
	b, err := os.ReadFile(filepath.Join("..", HostTree, rel))
	if err != nil {
		f.Fatal(err)
	}
	return b
}

// CheckError asserts that a parse error names the file and stays short
// whatever the input (see hostfs.Quote).
func CheckError(t *testing.T, err error, name string) {
	t.Helper()
	const maxErrorBytes = 1024
	if !strings.HasPrefix(err.Error(), name) || len(err.Error()) > len(name)+maxErrorBytes {
		t.Fatalf("error %.600q: want one naming %s, at most %d bytes after the name", err, name, maxErrorBytes)
	}
}

// PlantSecret inserts a variable that is not allow-listed, with a value
// found nowhere in data, as an entry of its own at offset at.
func PlantSecret(data []byte, at int) (planted, secret []byte) {
	secret = []byte("s3cr3t")
	for bytes.Contains(data, secret) {
		secret = append(secret, 'x')
	}
	at = min(at, len(data))
	return slices.Concat(data[:at], []byte("\x00GPUDIAG_PLANTED="), secret, []byte("\x00"), data[at:]), secret
}

// WriteFile writes text at path, making its directories.
func WriteFile(t testing.TB, path, text string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}
