// Package hostfile is the one way gpudiag opens and reads the node's files:
// /proc and /sys attributes, files under other processes' roots
// (/proc/<pid>/root/...), and NCCL logs whose paths processes name. None
// of them may stall the daemon or exhaust its memory, whoever put them
// there.
//
//   - A file is opened without waiting: a FIFO, a device or a socket where
//     a regular file belongs is refused, never read. A blocking open of a
//     FIFO waits for a writer that may never come, in the kernel, where no
//     context deadline reaches; a device's open runs its driver
//     (/dev/watchdog arms the watchdog). procfs and sysfs attributes are
//     regular files.
//   - A whole-file read takes a bound fit for the file and fails with
//     ErrTooLarge past it; nothing is cut silently, since a cut file parses
//     as a different, smaller one.
//   - A path under another process's root (OpenInRoot) is resolved inside
//     that root, symlinks included, and its last element's type is checked
//     before it is opened for reading (Untrusted), so that no path a user
//     controls reaches a device's driver or escapes to the host's files.
//
// Kernel files that prometheus/procfs opens itself are checked with Check
// first where a tree other than the kernel's could hold something else.
package hostfile

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
)

var (
	// ErrNotRegular: the path names a FIFO, device, socket or directory
	// where a regular file was expected.
	ErrNotRegular = errors.New("not a regular file")
	// ErrTooLarge: the file holds more than the bound its reader allows.
	ErrTooLarge = errors.New("larger than its read bound")
)

// LimitError is the error of a file over its read bound; it matches
// ErrTooLarge.
type LimitError struct {
	Path  string
	Limit int64
}

func (e *LimitError) Error() string {
	return fmt.Sprintf("%s: larger than %s, the most read of this file (not what the kernel writes there)", e.Path, Size(e.Limit))
}

// Is makes errors.Is(err, ErrTooLarge) true.
func (e *LimitError) Is(target error) bool { return target == ErrTooLarge }

// Size formats a byte count for messages and documents: 4 MiB, 256 B.
func Size(n int64) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d B", n)
}

// fileKind names a file type for an ErrNotRegular message.
func fileKind(m fs.FileMode) string {
	switch {
	case m&fs.ModeNamedPipe != 0:
		return "a FIFO"
	case m&fs.ModeSocket != 0:
		return "a socket"
	case m&fs.ModeCharDevice != 0:
		return "a character device"
	case m&fs.ModeDevice != 0:
		return "a block device"
	case m.IsDir():
		return "a directory"
	case m&fs.ModeSymlink != 0:
		return "a symbolic link"
	}
	return "not a regular file"
}

// notRegular is the error for a path whose type was checked and refused.
func notRegular(op, path string, m fs.FileMode) error {
	return &fs.PathError{Op: op, Path: path, Err: fmt.Errorf("%w: %s", ErrNotRegular, fileKind(m))}
}

// ReadInRoot is Read for a file under another process's root; see
// OpenInRoot.
func ReadInRoot(root, name string, limit int64) ([]byte, error) {
	f, err := OpenInRoot(root, name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return ReadAll(f, f.Name(), limit)
}

// ReadAll reads r to its end, at most limit bytes; more fails with a
// *LimitError naming path. The buffer grows with what is read: procfs
// files report a size of 0 and sysfs attributes one of 4096 whatever they
// hold, so the size cannot be trusted either way.
func ReadAll(r io.Reader, path string, limit int64) ([]byte, error) {
	return ReadAllInto(r, path, limit, nil)
}

// ReadAllInto is ReadAll into buf's storage, grown (up to limit+1 bytes)
// when the file does not fit: for files read by the thousand every
// sample, whose reader keeps the returned slice for the next read. What
// buf held is overwritten; on error nothing is returned.
func ReadAllInto(r io.Reader, path string, limit int64, buf []byte) ([]byte, error) {
	return readBounded(limit, buf, func() string { return path }, func(p []byte, _ int) (int, bool, error) {
		n, err := r.Read(p)
		if err == io.EOF {
			return n, true, nil
		}
		return n, false, err
	})
}

// readBounded is the loop of every whole-file read: it calls read for the
// next part of the file, at offset off, into buf's storage, grown up to
// limit+1 bytes (one more than is allowed tells a file of exactly limit
// bytes from a longer one). read says how many bytes it put in p and
// whether the file ended there. path names the file in a *LimitError
// only, so that a caller builds it on failure alone.
func readBounded(limit int64, buf []byte, path func() string, read func(p []byte, off int) (n int, end bool, err error)) ([]byte, error) {
	if limit < 0 {
		limit = 0
	}
	b := buf[:0]
	if cap(b) == 0 {
		b = make([]byte, 0, min(limit+1, 512))
	} else if int64(cap(b)) > limit+1 {
		b = b[: 0 : limit+1]
	}
	for {
		if len(b) == cap(b) {
			if int64(len(b)) > limit {
				return nil, &LimitError{Path: path(), Limit: limit}
			}
			nb := make([]byte, len(b), min(2*int64(cap(b)), limit+1))
			copy(nb, b)
			b = nb
		}
		n, end, err := read(b[len(b):cap(b)], len(b))
		b = b[:len(b)+n]
		if int64(len(b)) > limit {
			return nil, &LimitError{Path: path(), Limit: limit}
		}
		if err != nil {
			return nil, err
		}
		if end {
			return b, nil
		}
	}
}

// Limit returns a reader of r that fails with a *LimitError naming path
// once more than limit bytes come: for files parsed as a stream, where a
// silent cut would parse as a smaller file.
func Limit(r io.Reader, path string, limit int64) io.Reader {
	return &limitReader{r: r, path: path, left: limit, limit: limit}
}

type limitReader struct {
	r           io.Reader
	path        string
	left, limit int64
}

func (l *limitReader) Read(p []byte) (int, error) {
	if l.left < 0 {
		return 0, &LimitError{Path: l.path, Limit: l.limit}
	}
	// One byte more than is left tells a file of exactly limit bytes
	// from a longer one.
	if int64(len(p)) > l.left+1 {
		p = p[:l.left+1]
	}
	n, err := l.r.Read(p)
	l.left -= int64(n)
	if l.left < 0 {
		return n - 1, &LimitError{Path: l.path, Limit: l.limit}
	}
	return n, err
}

// Check is for files another library opens by path (prometheus/procfs):
// it fails unless path names a regular file (following symlinks) whose
// size, where the filesystem knows it, is at most limit. procfs and sysfs
// report 0 and 4096, so on the kernel's trees only the type is checked;
// in a copy of them (--path.procfs pointing at a directory of files) the
// size is real. The file could change between the check and the library's
// open: use Check only where no user can replace the file (kernel files,
// the operator's trees), and Open or OpenInRoot anywhere else.
func Check(path string, limit int64) error {
	fi, err := os.Stat(path)
	if err != nil {
		return err
	}
	if !fi.Mode().IsRegular() {
		return notRegular("stat", path, fi.Mode())
	}
	if fi.Size() > limit {
		return &LimitError{Path: path, Limit: limit}
	}
	return nil
}
