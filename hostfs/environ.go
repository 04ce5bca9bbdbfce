package hostfs

import (
	"bytes"
	"io"
	"unicode/utf8"

	"github.com/gpudiag/gpudiag/hostfile"
)

// EnvironSource scans one environment with ScanEnviron's contract, from
// wherever it comes: a process's environ file (FS.Environ) or a reader
// (EnvironOf).
type EnvironSource func(buf []byte, limit int, allowed func(name []byte) bool, keep func(name, value []byte)) (truncated bool, err error)

// Environ is the source of /proc/<pid>/environ. The file is the process's
// own secrets: it is opened only when the source is scanned, and read only
// through ScanEnviron's wiped buffer.
func (f FS) Environ(pid int) EnvironSource {
	path := f.pidPath(pid, "environ")
	return func(buf []byte, limit int, allowed func(name []byte) bool, keep func(name, value []byte)) (bool, error) {
		file, err := hostfile.Open(path)
		if err != nil {
			return false, err
		}
		defer file.Close()
		return ScanEnviron(file, buf, limit, allowed, keep)
	}
}

// EnvironOf is the source of an environ file's content read from r.
func EnvironOf(r io.Reader) EnvironSource {
	return func(buf []byte, limit int, allowed func(name []byte) bool, keep func(name, value []byte)) (bool, error) {
		return ScanEnviron(r, buf, limit, allowed, keep)
	}
}

// ScanEnviron reads NUL-separated NAME=value entries from r, at most limit
// bytes, through buf, and passes the entries whose name allowed accepts to
// keep (the slices are only valid during the call). Nothing else leaves
// buf, which is wiped before returning; no entry is held beyond the one
// being looked at. An entry longer than buf is skipped. truncated reports
// input past limit (the entry cut by the bound is dropped).
func ScanEnviron(r io.Reader, buf []byte, limit int, allowed func(name []byte) bool, keep func(name, value []byte)) (truncated bool, err error) {
	defer clear(buf)
	emit := func(entry []byte) {
		name, value, ok := bytes.Cut(entry, []byte{'='})
		if ok && len(name) > 0 && allowed(name) {
			keep(name, value)
		}
	}
	filled, total := 0, 0
	skipping := false // the entry being read did not fit in buf
	for {
		if filled == len(buf) {
			skipping, filled = true, 0
		}
		want := min(len(buf)-filled, limit-total)
		if want == 0 {
			var one [1]byte
			n, _ := io.ReadFull(r, one[:])
			clear(one[:])
			if n > 0 {
				return true, nil
			}
			break
		}
		n, rerr := r.Read(buf[filled : filled+want])
		total += n
		end, start := filled+n, 0
		for from := filled; ; {
			i := bytes.IndexByte(buf[from:end], 0)
			if i < 0 {
				break
			}
			nul := from + i
			if skipping {
				skipping = false
			} else {
				emit(buf[start:nul])
			}
			start, from = nul+1, nul+1
		}
		filled = copy(buf, buf[start:end])
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			return false, rerr
		}
	}
	if filled > 0 && !skipping {
		emit(buf[:filled]) // the last entry, without its NUL
	}
	return false, nil
}

// CutUTF8 cuts b to at most n bytes without splitting a character.
func CutUTF8(b []byte, n int) []byte {
	if len(b) <= n {
		return b
	}
	for n > 0 && !utf8.RuneStart(b[n]) {
		n--
	}
	return b[:n]
}
