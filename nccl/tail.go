package nccl

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gpudiag/gpudiag/hostfile"
	"github.com/gpudiag/gpudiag/sample"
)

// DefaultMaxLineBytes bounds a buffered partial line. NCCL's own lines stay
// under ~1 KiB; a longer run without a newline is not NCCL's (or is a hole
// of NUL bytes left by copytruncate) and is dropped.
const DefaultMaxLineBytes = 64 << 10

const readChunk = 64 << 10

var chunkPool = sync.Pool{New: func() any { b := make([]byte, readChunk); return &b }}

// ResetReason says why the content a tailer follows started over.
type ResetReason int

const (
	// ResetRotated: the path now names another file (rotated by rename, or
	// deleted and created again).
	ResetRotated ResetReason = iota + 1
	// ResetTruncated: the file shrank below the offset already read.
	ResetTruncated
)

func (r ResetReason) String() string {
	switch r {
	case ResetRotated:
		return "rotated"
	case ResetTruncated:
		return "truncated"
	}
	return "none"
}

// PollResult says what one Poll did.
type PollResult struct {
	// Exists is whether the path names a file after the poll.
	Exists bool
	// Bytes and Lines were read and delivered; Dropped counts lines over
	// the line limit that were discarded whole.
	Bytes   int
	Lines   int
	Dropped int
	// More is set when the poll stopped at its byte budget with data left.
	More bool
	// ModTime is the file's modification time as of the poll's start.
	ModTime time.Time
}

// Tailer follows one file across polls: new complete lines since the last
// poll, rotation (the path names another inode: the old file is read to its
// end, then the new one from 0), truncation (size below the offset: restart
// at 0), a file that appears late or disappears. It holds no goroutine; the
// caller polls. It is not safe for concurrent use.
type Tailer struct {
	path         string
	maxLineBytes int
	open         Opener

	f       *os.File
	info    os.FileInfo // of f, at open: identifies the inode
	offset  int64
	opened  bool // a file was opened before, so new content is a reset
	pending []byte
	// skipping discards the rest of a line that already overflowed.
	skipping bool
}

// Opener opens the followed path for reading. It must refuse what is not
// a regular file without waiting (a FIFO's open waits for a writer) and
// may refuse more.
type Opener func(path string) (*os.File, error)

// NewTailer follows path from offset (0: the whole file). maxLineBytes <= 0
// means DefaultMaxLineBytes. The path is opened with hostfile.OpenTyped,
// which refuses a FIFO or device before opening it for reading: logs lie
// in directories users write to. WithOpener sets a stricter opener for
// paths users name.
func NewTailer(path string, offset int64, maxLineBytes int) *Tailer {
	if maxLineBytes <= 0 {
		maxLineBytes = DefaultMaxLineBytes
	}
	return &Tailer{path: path, offset: max(offset, 0), maxLineBytes: maxLineBytes, open: hostfile.OpenTyped}
}

// WithOpener makes the tailer open its path with open instead.
func (t *Tailer) WithOpener(open Opener) *Tailer {
	t.open = open
	return t
}

// Path is the followed path.
func (t *Tailer) Path() string { return t.path }

// Offset is the position read up to in the current file.
func (t *Tailer) Offset() int64 { return t.offset }

// Close releases the open file, if any.
func (t *Tailer) Close() error {
	if t.f == nil {
		return nil
	}
	err := t.f.Close()
	t.f = nil
	return err
}

// Poll reads at most budget bytes and calls line for each complete line
// (without its newline; the slice is valid only during the call). When the
// content started over, reset is called before the first line of the new
// content so the caller can drop what it built from the old one.
func (t *Tailer) Poll(budget int, line func([]byte), reset func(ResetReason)) (PollResult, error) {
	var res PollResult
	// What the path names now is found by opening it, not by a stat: the
	// opener's checks (a regular file, and whatever else it requires)
	// then apply to it before anything is read. It is the next file to
	// read when it is not the one open.
	next, cur, openErr := t.openPath()
	if openErr != nil && t.f == nil {
		if errors.Is(openErr, fs.ErrNotExist) {
			return res, nil
		}
		return res, openErr
	}
	if t.f != nil {
		if cur != nil && os.SameFile(cur, t.info) {
			next.Close()
			fi, err := t.f.Stat()
			if err != nil {
				return res, err
			}
			if fi.Size() < t.offset {
				t.restart()
				reset(ResetTruncated)
			}
			res.Exists, res.ModTime = true, fi.ModTime()
			err = t.read(&budget, &res, line)
			return res, err
		}
		// Rotated, gone or refused: finish the old file first; its writer
		// may have added lines before the switch.
		if err := t.read(&budget, &res, line); err != nil || res.More {
			res.Exists = cur != nil
			if next != nil {
				next.Close() // opened again on the next poll
			}
			return res, err
		}
		t.Close()
		t.pending, t.skipping = t.pending[:0], false
	}
	if openErr != nil {
		if errors.Is(openErr, fs.ErrNotExist) {
			return res, nil
		}
		return res, openErr
	}
	f, fi := next, cur
	if t.opened {
		t.offset = 0
		reset(ResetRotated)
	} else if fi.Size() < t.offset {
		t.offset = 0
	}
	t.f, t.info, t.opened = f, fi, true
	res.Exists, res.ModTime = true, fi.ModTime()
	err := t.read(&budget, &res, line)
	return res, err
}

// openPath opens what the path names now. The error wraps fs.ErrNotExist
// when it names nothing.
func (t *Tailer) openPath() (*os.File, os.FileInfo, error) {
	f, err := t.open(t.path)
	if err != nil {
		return nil, nil, err
	}
	fi, err := f.Stat()
	if err == nil && !fi.Mode().IsRegular() {
		// The opener's contract, checked again: nothing but a regular
		// file is ever read.
		err = fmt.Errorf("%s: not a regular file", t.path)
	}
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	return f, fi, nil
}

func (t *Tailer) restart() {
	t.offset = 0
	t.pending, t.skipping = t.pending[:0], false
}

func (t *Tailer) read(budget *int, res *PollResult, line func([]byte)) error {
	bp := chunkPool.Get().(*[]byte)
	defer chunkPool.Put(bp)
	buf := *bp
	for {
		if *budget <= 0 {
			// Only a read can tell whether data is left; one byte will do.
			var probe [1]byte
			n, _ := t.f.ReadAt(probe[:], t.offset)
			res.More = n > 0
			return nil
		}
		n, err := t.f.ReadAt(buf[:min(len(buf), *budget)], t.offset)
		if n > 0 {
			t.offset += int64(n)
			*budget -= n
			res.Bytes += n
			t.split(buf[:n], res, line)
		}
		if err == io.EOF || n == 0 && err == nil {
			return nil
		}
		if err != nil {
			return fmt.Errorf("%s: %w", t.path, err)
		}
	}
}

// split delivers the complete lines of chunk, keeping a trailing partial
// line for the next read and dropping lines over the limit. NUL bytes are
// removed first: NCCL never writes them, and a writer without O_APPEND that
// outlives a copytruncate leaves a hole of them before its next line.
func (t *Tailer) split(chunk []byte, res *PollResult, line func([]byte)) {
	if bytes.IndexByte(chunk, 0) >= 0 {
		kept := chunk[:0]
		for _, c := range chunk {
			if c != 0 {
				kept = append(kept, c)
			}
		}
		chunk = kept
	}
	for len(chunk) > 0 {
		nl := bytes.IndexByte(chunk, '\n')
		if t.skipping {
			if nl < 0 {
				return
			}
			t.skipping = false
			chunk = chunk[nl+1:]
			continue
		}
		if nl < 0 {
			if len(t.pending)+len(chunk) > t.maxLineBytes {
				res.Dropped++
				t.pending, t.skipping = t.pending[:0], true
				return
			}
			t.pending = append(t.pending, chunk...)
			return
		}
		seg := chunk[:nl]
		chunk = chunk[nl+1:]
		if len(t.pending) > 0 {
			if len(t.pending)+len(seg) > t.maxLineBytes {
				res.Dropped++
				t.pending = t.pending[:0]
				continue
			}
			t.pending = append(t.pending, seg...)
			seg = t.pending
		} else if len(seg) > t.maxLineBytes {
			res.Dropped++
			continue
		}
		res.Lines++
		line(seg)
		t.pending = t.pending[:0]
	}
}

// ExpandDebugFile expands an NCCL_DEBUG_FILE value the way NCCL does:
// %h is the host name (cut at the first dot, '%' and '/' replaced by '-'),
// %p the process ID, %% a percent sign; any other %x stays as written.
func ExpandDebugFile(pattern, hostname string, pid int) string {
	host := sample.LogHostname(hostname)
	var b strings.Builder
	for i := 0; i < len(pattern); i++ {
		c := pattern[i]
		if c != '%' {
			b.WriteByte(c)
			continue
		}
		if i+1 >= len(pattern) {
			// NCCL reads the terminating NUL as the directive and writes
			// "%" followed by nothing.
			b.WriteByte('%')
			break
		}
		i++
		switch pattern[i] {
		case '%':
			b.WriteByte('%')
		case 'h':
			b.WriteString(host)
		case 'p':
			b.WriteString(strconv.Itoa(pid))
		default:
			b.WriteByte('%')
			b.WriteByte(pattern[i])
		}
	}
	return b.String()
}
