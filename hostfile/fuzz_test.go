package hostfile

import (
	"bytes"
	"errors"
	"io"
	"testing"
)

// chunkReader returns data in reads of the sizes steps cycles through
// (drivers and pipes answer short reads).
type chunkReader struct {
	data  []byte
	steps []byte
	i     int
}

func (c *chunkReader) Read(p []byte) (int, error) {
	if len(c.data) == 0 {
		return 0, io.EOF
	}
	n := len(p)
	if len(c.steps) > 0 {
		n = min(n, int(c.steps[c.i%len(c.steps)])+1)
		c.i++
	}
	n = copy(p, c.data[:min(n, len(c.data))])
	c.data = c.data[n:]
	return n, nil
}

// FuzzReadAll: whatever the sizes of the reads, ReadAll and Limit pass a
// file of at most limit bytes whole and fail a longer one with a
// LimitError, never returning more than limit bytes.
func FuzzReadAll(f *testing.F) {
	f.Add([]byte(""), []byte{}, uint16(0))
	f.Add([]byte("abc"), []byte{0}, uint16(3))
	f.Add([]byte("abcd"), []byte{0, 5}, uint16(3))
	f.Add(bytes.Repeat([]byte("x"), 513), []byte{255}, uint16(512))
	f.Add(bytes.Repeat([]byte("x"), 4097), []byte{7, 200}, uint16(4096))
	f.Fuzz(func(t *testing.T, data, steps []byte, limit uint16) {
		over := len(data) > int(limit)
		got, err := ReadAll(&chunkReader{data: data, steps: steps}, "f", int64(limit))
		switch {
		case over && (!errors.Is(err, ErrTooLarge) || got != nil):
			t.Fatalf("%d bytes at bound %d: %d read, %v; want ErrTooLarge", len(data), limit, len(got), err)
		case !over && (err != nil || !bytes.Equal(got, data)):
			t.Fatalf("%d bytes at bound %d: %d read, %v; want all of it", len(data), limit, len(got), err)
		}
		got, err = io.ReadAll(Limit(&chunkReader{data: data, steps: steps}, "f", int64(limit)))
		switch {
		case len(got) > int(limit) || !bytes.Equal(got, data[:len(got)]):
			t.Fatalf("Limit passed %d bytes at bound %d, not the file's first", len(got), limit)
		case over != errors.Is(err, ErrTooLarge):
			t.Fatalf("Limit: %d bytes at bound %d: %v", len(data), limit, err)
		case !over && err != nil:
			t.Fatalf("Limit: %v", err)
		}
	})
}
