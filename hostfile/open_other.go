//go:build !linux

package hostfile

import (
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
)

// The daemon runs on Linux; elsewhere (building the pure-Go packages,
// reading recorded samples) a file is opened without waiting and its type
// checked after the open, and a path under a root is joined, not resolved
// inside it.

// Read: see the Linux implementation.
func Read(path string, limit int64) ([]byte, error) {
	f, err := Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return ReadAll(f, path, limit)
}

// DescriptorCount: see the Linux implementation; never known elsewhere.
func (d *Dir) DescriptorCount() (n int64, known bool, err error) { return 0, false, nil }

// ReadInto: see the Linux implementation.
func ReadInto(path string, limit int64, buf []byte) ([]byte, error) {
	f, err := Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return ReadAllInto(f, path, limit, buf)
}

// Open: see the Linux implementation.
func Open(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOCTTY, 0)
	if err != nil {
		return nil, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		f.Close()
		return nil, notRegular("open", path, fi.Mode())
	}
	return f, nil
}

// OpenInRoot: see the Linux implementation.
func OpenInRoot(root, name string) (*os.File, error) { return Open(filepath.Join(root, name)) }

// OpenTyped: see the Linux implementation.
func OpenTyped(path string) (*os.File, error) { return Open(path) }

// Untrusted: see the Linux implementation.
func Untrusted(path string) (*os.File, error) { return Open(path) }

// OpenDirInRoot: see the Linux implementation.
func OpenDirInRoot(root, name string) (*os.File, error) { return OpenDir(filepath.Join(root, name)) }

// OpenDir: see the Linux implementation.
func OpenDir(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	if !fi.IsDir() {
		f.Close()
		return nil, &fs.PathError{Op: "open", Path: path, Err: syscall.ENOTDIR}
	}
	return f, nil
}

// ListNumeric: see the Linux implementation.
func ListNumeric(path string, buf []byte, dst []int, max int) ([]int, []byte, error) {
	d, err := OpenDir(path)
	if err != nil {
		return dst, buf, err
	}
	defer d.Close()
	names, err := d.Readdirnames(max)
	for _, name := range names {
		if v, perr := strconv.Atoi(name); perr == nil && v >= 0 && name[0] != '+' {
			dst = append(dst, v)
		}
	}
	if err == io.EOF {
		err = nil
	}
	return dst, buf, err
}

// Dir: see the Linux implementation.
type Dir struct{ path string }

// OpenDirFd: see the Linux implementation.
func OpenDirFd(path string) (*Dir, error) {
	d, err := OpenDir(path)
	if err != nil {
		return nil, err
	}
	d.Close()
	return &Dir{path: path}, nil
}

// Close: see the Linux implementation.
func (d *Dir) Close() error { return nil }

// ListNumeric: see the Linux implementation.
func (d *Dir) ListNumeric(buf []byte, dst []int, max int) ([]int, []byte, error) {
	return ListNumeric(d.path, buf, dst, max)
}

// ReadInto: see the Linux implementation.
func (d *Dir) ReadInto(name []byte, limit int64, buf []byte) ([]byte, error) {
	return ReadInto(filepath.Join(d.path, string(name)), limit, buf)
}

// Readlink: see the Linux implementation.
func (d *Dir) Readlink(name []byte, buf []byte) ([]byte, error) {
	target, err := os.Readlink(filepath.Join(d.path, string(name)))
	return append(buf[:0], target...), err
}

// Held: see the Linux implementation; elsewhere the file is opened for
// each read.
type Held struct{ path string }

// OpenHeld: see the Linux implementation.
func OpenHeld(path string) (*Held, error) {
	f, err := Open(path)
	if err != nil {
		return nil, err
	}
	f.Close()
	return &Held{path: path}, nil
}

// ReadInto: see the Linux implementation.
func (h *Held) ReadInto(limit int64, buf []byte) ([]byte, error) { return ReadInto(h.path, limit, buf) }

// Kept: see the Linux implementation.
func (h *Held) Kept() bool { return false }

// Close: see the Linux implementation.
func (h *Held) Close() error { return nil }
