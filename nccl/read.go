package nccl

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
)

// ReadLimits bound what ReadLog reads of one log.
type ReadLimits struct {
	// MaxBytes is the most bytes read; the rest is left unread and the
	// result says Truncated. 0 means no limit.
	MaxBytes int64
	// MaxLineBytes drops longer lines (counted); 0 means
	// DefaultMaxLineBytes.
	MaxLineBytes int
}

// ReadStats says what ReadLog read.
type ReadStats struct {
	Bytes        int64
	Truncated    bool
	DroppedLines int
}

// ctxCheckLines is how many lines ReadLog reads between looks at ctx.
const ctxCheckLines = 4096

// ReadLog reads a saved log whole into a new Log, as the Tailer would
// deliver it: NUL bytes removed (copytruncate holes), lines over the limit
// dropped and counted, a last line without newline taken. It stops at
// MaxBytes (Truncated) and with ctx's error when ctx ends between lines;
// a Read that blocks (a pipe that never closes) is the caller's to bound.
func ReadLog(ctx context.Context, r io.Reader, lim ReadLimits) (*Log, ReadStats, error) {
	maxLine := lim.MaxLineBytes
	if maxLine <= 0 {
		maxLine = DefaultMaxLineBytes
	}
	var st ReadStats
	src := r
	if lim.MaxBytes > 0 {
		src = io.LimitReader(r, lim.MaxBytes)
	}
	br := bufio.NewReaderSize(src, 64<<10)
	l := NewLog()
	var line []byte
	dropping := false
	for n := 0; ; n++ {
		if n%ctxCheckLines == 0 {
			if err := ctx.Err(); err != nil {
				return l, st, err
			}
		}
		chunk, err := br.ReadSlice('\n')
		st.Bytes += int64(len(chunk))
		complete := len(chunk) > 0 && chunk[len(chunk)-1] == '\n'
		if !dropping {
			line = append(line, chunk...)
			if len(line) > maxLine+1 {
				// Over the limit: skip to the next newline.
				dropping, line = true, line[:0]
				st.DroppedLines++
			}
		}
		if complete || err == io.EOF && len(line) > 0 {
			if !dropping {
				l.Feed(bytes.ReplaceAll(bytes.TrimRight(line, "\n"), []byte{0}, nil))
			}
			dropping, line = false, line[:0]
		}
		switch {
		case err == nil, errors.Is(err, bufio.ErrBufferFull):
			continue
		case err == io.EOF:
			if lim.MaxBytes > 0 && st.Bytes >= lim.MaxBytes {
				// Is there more than the limit let through?
				var one [1]byte
				if k, _ := r.Read(one[:]); k > 0 {
					st.Truncated = true
				}
			}
			return l, st, nil
		default:
			return l, st, err
		}
	}
}
