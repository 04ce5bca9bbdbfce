package record

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/gpudiag/gpudiag/sample"
)

// FuzzReader: whatever bytes follow the magic, reading never panics, never
// allocates beyond the frame limit, and stops with EOF or an error.
func FuzzReader(f *testing.F) {
	path := filepath.Join(f.TempDir(), "seed.gdrec")
	w, err := Create(path)
	if err != nil {
		f.Fatal(err)
	}
	w.Write("gpu", time.Unix(1, 0), &sample.GPUs{Backend: "nvml"})
	w.Write("pressure", time.Unix(2, 0), &sample.Pressure{IntervalSeconds: 1})
	w.Close()
	seed, _ := os.ReadFile(path)
	f.Add(seed)
	f.Add(seed[:len(seed)-3])
	f.Add([]byte(Magic))
	f.Add([]byte(Magic + "\x05\x00\x00\x00\x00\x00\x00\x00abcde"))
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := NewReader(bytes.NewReader(data))
		if err != nil {
			return
		}
		for i := 0; i < 1000; i++ {
			if _, err := r.Next(); err != nil {
				if err != io.EOF && r.Offset() > int64(len(data)) {
					t.Fatalf("offset %d past the end of %d bytes", r.Offset(), len(data))
				}
				return
			}
		}
	})
}
