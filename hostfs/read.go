package hostfs

import (
	"io"

	"github.com/gpudiag/gpudiag/hostfile"
)

// The two ways a parser here gets its file, both through hostfile: whole,
// for files small enough to hold, or as a stream that fails past its
// bound, for the per-process files that grow with the process.

// readParsed reads the whole file at path, at most limit bytes (through
// its held descriptor when f holds files), and parses it.
func readParsed[T any](f FS, path string, limit int64, parse func(path string, b []byte) (T, error)) (T, error) {
	b, err := f.readWhole(path, limit)
	if err != nil {
		var zero T
		return zero, err
	}
	return parse(path, b)
}

// streamParsed parses the file at path as it is read; more than limit
// bytes fails the read, since a cut file would parse as a smaller one.
func streamParsed[T any](path string, limit int64, parse func(r io.Reader, path string) (T, error)) (T, error) {
	f, err := hostfile.Open(path)
	if err != nil {
		var zero T
		return zero, err
	}
	defer f.Close()
	return parse(hostfile.Limit(f, path, limit), path)
}
