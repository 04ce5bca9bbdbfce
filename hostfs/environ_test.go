package hostfs

import (
	"bytes"
	"io"
	"reflect"
	"slices"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/gpudiag/gpudiag/internal/hosttest"
	"github.com/gpudiag/gpudiag/nccl"
)

// envKept is the allow-list the NCCL process collector scans with, so
// that the seeds (environments of NCCL jobs) keep what the collector keeps.
func envKept(name []byte) bool { return nccl.EnvPolicy(name) != nccl.EnvDrop }

func TestScanEnviron(t *testing.T) {
	allowAll := func(name []byte) bool { return !bytes.HasPrefix(name, []byte("SECRET")) }
	for _, tc := range []struct {
		name      string
		input     string
		bufSize   int
		limit     int
		reader    func(io.Reader) io.Reader
		want      []string
		truncated bool
	}{
		{"filtered", "A=1\x00SECRET=x\x00B=2\x00", 64, 1 << 20, nil, []string{"A=1", "B=2"}, false},
		{"entries across reads", "AA=11\x00SECRET=hunter2\x00BB=22\x00CC=33\x00", 8, 1 << 20, iotest.OneByteReader, []string{"AA=11", "BB=22", "CC=33"}, false},
		{"half reads", "AA=11\x00BB=22\x00", 8, 1 << 20, iotest.HalfReader, []string{"AA=11", "BB=22"}, false},
		{"entry longer than the buffer skipped", "A=1\x00LONG=0123456789abcdef\x00B=2\x00", 8, 1 << 20, nil, []string{"A=1", "B=2"}, false},
		{"last entry without NUL", "A=1\x00B=2", 64, 1 << 20, nil, []string{"A=1", "B=2"}, false},
		{"value with =", "A=x=y\x00", 64, 1 << 20, nil, []string{"A=x=y"}, false},
		{"no name or no =", "=1\x00NOEQUALS\x00\x00C=3\x00", 64, 1 << 20, nil, []string{"C=3"}, false},
		{"cut by the limit", "A=1\x00B=22222\x00", 64, 8, nil, []string{"A=1"}, true},
		{"ends at the limit", "A=1\x00B=2\x00", 64, 8, nil, []string{"A=1", "B=2"}, false},
		{"empty", "", 64, 1 << 20, nil, nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var r io.Reader = strings.NewReader(tc.input)
			if tc.reader != nil {
				r = tc.reader(r)
			}
			buf := make([]byte, tc.bufSize)
			var got []string
			truncated, err := ScanEnviron(r, buf, tc.limit, allowAll, func(name, value []byte) {
				got = append(got, string(name)+"="+string(value))
			})
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) || truncated != tc.truncated {
				t.Errorf("kept %q truncated %v; want %q %v", got, truncated, tc.want, tc.truncated)
			}
			if !bytes.Equal(buf, make([]byte, len(buf))) {
				t.Errorf("buffer not wiped: %q", buf)
			}
		})
	}
	if _, err := ScanEnviron(iotest.ErrReader(io.ErrUnexpectedEOF), make([]byte, 8), 64, allowAll, func(_, _ []byte) {}); err == nil {
		t.Error("read error not reported")
	}
}

// environReference is what ScanEnviron must keep of data: NUL-separated
// entries within limit (the one the limit cuts dropped), those that do not
// fit in a buffer of bufSize dropped, allow-listed names only.
func environReference(data []byte, bufSize, limit int) (kept []string, truncated bool) {
	if len(data) > limit {
		data, truncated = data[:limit], true
	}
	entries := bytes.Split(data, []byte{0})
	last := entries[len(entries)-1]
	entries = entries[:len(entries)-1]
	if !truncated && len(last) > 0 {
		entries = append(entries, last)
	}
	for _, e := range entries {
		name, _, ok := bytes.Cut(e, []byte("="))
		if len(e) < bufSize && ok && len(name) > 0 && envKept(name) {
			kept = append(kept, string(e))
		}
	}
	return kept, truncated
}

// countingReader counts the bytes read through it.
type countingReader struct {
	r *bytes.Reader
	n int
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += n
	return n, err
}

// FuzzScanEnviron checks the environment reader against a reference model,
// and its security properties: only allow-listed names reach keep, a
// planted secret never does, the buffer is wiped, and no more than limit+1
// bytes are read.
func FuzzScanEnviron(f *testing.F) {
	f.Add(hosttest.Seed(f, "proc/5151/environ"), uint8(255), uint16(65535), uint16(0))
	f.Add(hosttest.Seed(f, "proc/5252/environ"), uint8(16), uint16(200), uint16(3))
	f.Add([]byte("NCCL_ALGO=Ring\x00NCCL_ALGO=Tree\x00AWS_SECRET_ACCESS_KEY=x\x00NCCL_DEBUG=INFO"), uint8(8), uint16(40), uint16(15))
	f.Fuzz(func(t *testing.T, data []byte, bufSize uint8, limit uint16, plantAt uint16) {
		planted, secret := hosttest.PlantSecret(data, int(plantAt))
		buf := make([]byte, max(int(bufSize), 1))
		r := &countingReader{r: bytes.NewReader(planted)}
		var kept, notAllowed []string
		var truncated bool
		var err error
		hosttest.WithinHangLimit(t, func() {
			truncated, err = ScanEnviron(r, buf, int(limit), envKept, func(name, value []byte) {
				if !envKept(name) {
					notAllowed = append(notAllowed, string(name))
				}
				kept = append(kept, string(name)+"="+string(value))
			})
		})
		if err != nil {
			t.Fatal(err)
		}
		if len(notAllowed) > 0 {
			t.Fatalf("kept %q, not allow-listed", notAllowed)
		}
		for _, k := range kept {
			if strings.Contains(k, string(secret)) {
				t.Fatalf("planted secret kept in %q", k)
			}
		}
		if !bytes.Equal(buf, make([]byte, len(buf))) {
			t.Fatalf("buffer not wiped: %q", buf)
		}
		if r.n > int(limit)+1 {
			t.Fatalf("read %d bytes under a limit of %d", r.n, limit)
		}
		want, wantTruncated := environReference(planted, len(buf), int(limit))
		if !slices.Equal(kept, want) || truncated != wantTruncated {
			t.Fatalf("kept %q truncated %v; want %q %v", kept, truncated, want, wantTruncated)
		}
	})
}
