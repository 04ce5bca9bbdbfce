//go:build !linux

package hostfile

import (
	"io/fs"
	"os"
	"path/filepath"
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
