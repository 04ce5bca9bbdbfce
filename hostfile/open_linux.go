//go:build linux

package hostfile

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Open opens a node file for reading: /proc and /sys attributes, and
// other files whose path no user controls. O_NONBLOCK makes the open of a
// FIFO return at once instead of waiting for a writer, O_NOCTTY keeps a
// terminal from becoming the daemon's; what is not a regular file is then
// refused (fs.PathError wrapping ErrNotRegular) before anything is read.
// The returned file is in blocking mode, as regular files always are.
//
// Only the type of what the path named at the open is checked: a device
// node planted in the tree still has its driver's open run. For paths a
// user names or can swap, use Untrusted or OpenInRoot.
func Open(path string) (*os.File, error) {
	fd, err := openRetry(path, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_NOCTTY|unix.O_CLOEXEC)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: path, Err: err}
	}
	return regularFile(fd, path, nil)
}

// Read reads the whole regular file at path, at most limit bytes: a
// longer file fails with a *LimitError. What is refused is what Open
// refuses. It reads the descriptor directly, in non-blocking mode, with no
// os.File around it: sysfs attributes are read by the hundred every
// second, and a driver that answers EAGAIN fails the read rather than
// making it wait.
func Read(path string, limit int64) ([]byte, error) {
	fd, err := openRetry(path, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_NOCTTY|unix.O_CLOEXEC)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: path, Err: err}
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, &fs.PathError{Op: "stat", Path: path, Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return nil, notRegular("open", path, modeOf(st.Mode))
	}
	return ReadAll(fdReader{fd: fd, path: path}, path, limit)
}

// ReadInto is Read into buf's storage (see ReadAllInto): the same checks
// and bound, no allocation when the file fits.
func ReadInto(path string, limit int64, buf []byte) ([]byte, error) {
	fd, err := openRetry(path, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_NOCTTY|unix.O_CLOEXEC)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: path, Err: err}
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, &fs.PathError{Op: "stat", Path: path, Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return nil, notRegular("open", path, modeOf(st.Mode))
	}
	return readFdInto(fd, limit, buf, false, func() string { return path })
}

// readFdInto is readBounded over a descriptor, without a reader (an
// fdReader in an io.Reader would be allocated on every read). On procfs
// (seqFile) a short read is the whole file, which saves the read that
// would return 0. path names the file in errors only, so that a caller
// holding a directory builds it on failure alone.
func readFdInto(fd int, limit int64, buf []byte, seqFile bool, path func() string) ([]byte, error) {
	return readBounded(limit, buf, path, func(p []byte, _ int) (int, bool, error) {
		for {
			n, err := unix.Read(fd, p)
			switch {
			case err == unix.EINTR:
				continue
			case err != nil:
				return 0, false, &fs.PathError{Op: "read", Path: path(), Err: err}
			}
			return n, n == 0 || seqFile && n < len(p), nil
		}
	})
}

// fdReader reads a descriptor with read(2).
type fdReader struct {
	fd   int
	path string
}

func (r fdReader) Read(p []byte) (int, error) {
	for {
		n, err := unix.Read(r.fd, p)
		switch {
		case err == unix.EINTR:
			continue
		case err != nil:
			return 0, &fs.PathError{Op: "read", Path: r.path, Err: err}
		case n == 0 && len(p) > 0:
			return 0, io.EOF
		}
		return n, nil
	}
}

// OpenInRoot opens name, a path inside root, for reading, where root is a
// process's root directory (/proc/<pid>/root) whose content that process's
// user controls. name is resolved as if root were "/": an absolute
// symlink, or "..", stays inside root (openat2 RESOLVE_IN_ROOT), and no
// /proc magic link is followed. Through plain path walking, a symlink
// /etc/hostname -> /etc/shadow inside a container would make the daemon
// read the host's /etc/shadow. The last element is opened with O_PATH
// first, which runs no driver and waits for no writer; only a regular
// file is then reopened for reading. Errors are fs.PathErrors naming
// root joined with name.
//
// Kernels before 5.6 have no openat2: there the path is walked one
// element at a time and any symlink is refused.
func OpenInRoot(root, name string) (*os.File, error) {
	display := filepath.Join(root, name)
	rootFd, err := openRetry(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: root, Err: err}
	}
	defer unix.Close(rootFd)
	fd, err := resolveInRoot(rootFd, name, unix.O_PATH|unix.O_CLOEXEC)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: display, Err: err}
	}
	return reopenRegular(fd, display)
}

// Untrusted opens a path that a user named (NCCL_DEBUG_FILE of a process
// in the daemon's own mount namespace): like OpenInRoot with "/" as the
// root, so that the type is checked before any driver's open and no /proc
// magic link (/proc/self/fd/N, /proc/<pid>/root) is followed.
func Untrusted(path string) (*os.File, error) {
	if !filepath.IsAbs(path) {
		abs, err := filepath.Abs(path)
		if err != nil {
			return nil, &fs.PathError{Op: "open", Path: path, Err: err}
		}
		path = abs
	}
	f, err := OpenInRoot("/", path)
	if err != nil {
		var pe *fs.PathError
		if errors.As(err, &pe) {
			pe.Path = path
		}
		return nil, err
	}
	return f, nil
}

// OpenTyped opens a path in a directory users may write to, named by the
// operator (a log glob's match): resolved as any path is, magic links
// included (a glob through /proc/<pid>/root), but its type is checked
// through O_PATH before it is opened for reading, so that a FIFO or device
// a user put there runs no driver and stalls nothing.
func OpenTyped(path string) (*os.File, error) {
	fd, err := openRetry(path, unix.O_PATH|unix.O_CLOEXEC)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: path, Err: err}
	}
	return reopenRegular(fd, path)
}

// OpenDir opens a directory for listing; O_DIRECTORY fails on anything
// else (a FIFO where a directory was expected) before a driver's open
// runs or a writer is waited for.
func OpenDir(path string) (*os.File, error) {
	fd, err := openRetry(path, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NONBLOCK|unix.O_CLOEXEC)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: path, Err: err}
	}
	return os.NewFile(uintptr(fd), path), nil
}

// OpenDirInRoot opens the directory name inside root for listing, resolved
// as OpenInRoot resolves. O_DIRECTORY fails on anything else before a
// driver's open runs.
func OpenDirInRoot(root, name string) (*os.File, error) {
	display := filepath.Join(root, name)
	rootFd, err := openRetry(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: root, Err: err}
	}
	defer unix.Close(rootFd)
	fd, err := resolveInRoot(rootFd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NONBLOCK|unix.O_CLOEXEC)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: display, Err: err}
	}
	return os.NewFile(uintptr(fd), display), nil
}

// noOpenat2 is set once openat2 answered ENOSYS (kernels before 5.6), or
// EPERM (a seccomp profile that predates it).
var noOpenat2 atomic.Bool

// resolveInRoot opens name below the directory rootFd with flags, every
// element resolved inside rootFd.
func resolveInRoot(rootFd int, name string, flags int) (int, error) {
	// Relative to the root; "/.." is "/" and cannot climb out of it.
	rel := strings.TrimPrefix(filepath.Clean("/"+name), "/")
	if rel == "" {
		rel = "."
	}
	if !noOpenat2.Load() {
		how := unix.OpenHow{Flags: uint64(flags), Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS}
		for {
			fd, err := unix.Openat2(rootFd, rel, &how)
			switch {
			case err == unix.EINTR || err == unix.EAGAIN:
				// EAGAIN: a concurrent rename raced the lookup.
				continue
			case err == unix.ENOSYS || err == unix.EPERM:
				noOpenat2.Store(true)
			default:
				return fd, err
			}
			break
		}
	}
	return walkInRoot(rootFd, rel, flags)
}

// errSymlinkRefused: without openat2 a symlink cannot be followed safely.
var errSymlinkRefused = errors.New("symbolic link refused (kernel without openat2, which would keep it inside the root)")

// walkInRoot opens rel one element at a time with O_NOFOLLOW, refusing
// symlinks: the fallback without openat2.
func walkInRoot(rootFd int, rel string, flags int) (int, error) {
	dir, err := unix.Dup(rootFd)
	if err != nil {
		return -1, err
	}
	elems := strings.Split(rel, "/")
	for i, e := range elems {
		last := i == len(elems)-1
		f := unix.O_PATH | unix.O_NOFOLLOW | unix.O_CLOEXEC
		if last {
			f = flags | unix.O_NOFOLLOW
		}
		fd, err := openatRetry(dir, e, f)
		unix.Close(dir)
		if err != nil {
			if err == unix.ELOOP {
				err = errSymlinkRefused
			}
			return -1, err
		}
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			unix.Close(fd)
			return -1, err
		}
		if st.Mode&unix.S_IFMT == unix.S_IFLNK {
			unix.Close(fd)
			return -1, errSymlinkRefused
		}
		dir = fd
	}
	return dir, nil
}

// reopenRegular takes an O_PATH descriptor, checks that it is a regular
// file and opens that very file for reading through /proc/self/fd: the
// path cannot be swapped between the check and the open. The O_PATH
// descriptor is closed.
func reopenRegular(pathFd int, display string) (*os.File, error) {
	defer unix.Close(pathFd)
	var st unix.Stat_t
	if err := unix.Fstat(pathFd, &st); err != nil {
		return nil, &fs.PathError{Op: "stat", Path: display, Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return nil, notRegular("open", display, modeOf(st.Mode))
	}
	fd, err := openRetry("/proc/self/fd/"+strconv.Itoa(pathFd), unix.O_RDONLY|unix.O_NONBLOCK|unix.O_NOCTTY|unix.O_CLOEXEC)
	if err != nil {
		// Not wrapped: a daemon without its own /proc must not read as
		// a file that is absent.
		return nil, &fs.PathError{Op: "open", Path: display, Err: fmt.Errorf("reopening through /proc/self/fd: %v", err)}
	}
	return regularFile(fd, display, &st)
}

// regularFile checks that fd is a regular file (the same one as want, when
// set), puts it back in blocking mode and wraps it; fd is closed on error.
func regularFile(fd int, path string, want *unix.Stat_t) (*os.File, error) {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, &fs.PathError{Op: "stat", Path: path, Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		unix.Close(fd)
		return nil, notRegular("open", path, modeOf(st.Mode))
	}
	if want != nil && (st.Dev != want.Dev || st.Ino != want.Ino) {
		unix.Close(fd)
		return nil, &fs.PathError{Op: "open", Path: path, Err: errors.New("file changed while being opened")}
	}
	// A regular file never blocks; in blocking mode os.File reads it with
	// plain read(2), an EAGAIN a driver returns included, instead of
	// handing it to the poller.
	if err := unix.SetNonblock(fd, false); err != nil {
		unix.Close(fd)
		return nil, &fs.PathError{Op: "fcntl", Path: path, Err: err}
	}
	return os.NewFile(uintptr(fd), path), nil
}

func modeOf(m uint32) fs.FileMode {
	switch m & unix.S_IFMT {
	case unix.S_IFIFO:
		return fs.ModeNamedPipe
	case unix.S_IFSOCK:
		return fs.ModeSocket
	case unix.S_IFCHR:
		return fs.ModeDevice | fs.ModeCharDevice
	case unix.S_IFBLK:
		return fs.ModeDevice
	case unix.S_IFDIR:
		return fs.ModeDir
	case unix.S_IFLNK:
		return fs.ModeSymlink
	}
	return fs.ModeIrregular
}

func openRetry(path string, flags int) (int, error) {
	for {
		fd, err := unix.Open(path, flags, 0)
		if err != unix.EINTR {
			return fd, err
		}
	}
}

func openatRetry(dir int, name string, flags int) (int, error) {
	for {
		fd, err := unix.Openat(dir, name, flags, 0)
		if err != unix.EINTR {
			return fd, err
		}
	}
}

// ListNumeric appends to dst the names of the directory at path that are
// decimal numbers (the PIDs in /proc, the TIDs in /proc/<pid>/task), at
// most max of them, reading the directory with getdents64 through buf:
// no allocation per entry. It returns dst and buf, grown if it was
// smaller than a page.
func ListNumeric(path string, buf []byte, dst []int, max int) ([]int, []byte, error) {
	fd, err := openRetry(path, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NONBLOCK|unix.O_CLOEXEC)
	if err != nil {
		return dst, buf, &fs.PathError{Op: "open", Path: path, Err: err}
	}
	defer unix.Close(fd)
	return listNumericFd(fd, path, buf, dst, max)
}

func listNumericFd(fd int, path string, buf []byte, dst []int, max int) ([]int, []byte, error) {
	if len(buf) < 4096 {
		buf = make([]byte, 8192)
	}
	for n := 0; ; {
		got, err := unix.Getdents(fd, buf)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return dst, buf, &fs.PathError{Op: "getdents", Path: path, Err: err}
		}
		if got == 0 {
			return dst, buf, nil
		}
		for off := 0; off+19 < got; {
			// struct linux_dirent64: ino u64, off s64, reclen u16,
			// type u8, name NUL-terminated.
			reclen := int(buf[off+16]) | int(buf[off+17])<<8
			if reclen == 0 || off+reclen > got {
				break
			}
			v, ok, name := 0, true, buf[off+19:off+reclen]
			i := 0
			for ; i < len(name) && name[i] != 0; i++ {
				c := name[i]
				if c < '0' || c > '9' || v > 1<<40 {
					ok = false
					break
				}
				v = v*10 + int(c-'0')
			}
			off += reclen
			if !ok || i == 0 {
				continue
			}
			if n >= max {
				return dst, buf, nil
			}
			dst = append(dst, v)
			n++
		}
	}
}

// Dir is a directory held open to read many small files below it by
// name relative to it: a thread's stat under /proc/<pid>/task, read for
// every thread of a process, is opened without walking /proc/<pid>/task
// again. On procfs (checked once, by fstatfs) the files are the kernel's:
// each is read without the per-file type check, and a read that returns
// less than was asked is the whole file (procfs's seq files hand out all
// they generated), which saves the read that would see the end.
type Dir struct {
	fd     int
	path   string
	procfs bool
	listed bool   // listed before: the next listing starts over
	name   []byte // NUL-terminated name being opened
}

// OpenDirFd opens the directory at path as a Dir.
func OpenDirFd(path string) (*Dir, error) {
	fd, err := openRetry(path, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NONBLOCK|unix.O_CLOEXEC)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: path, Err: err}
	}
	d := &Dir{fd: fd, path: path}
	var sfs unix.Statfs_t
	if err := unix.Fstatfs(fd, &sfs); err == nil && sfs.Type == unix.PROC_SUPER_MAGIC {
		d.procfs = true
	}
	return d, nil
}

// Close closes the directory.
func (d *Dir) Close() error { return unix.Close(d.fd) }

// ListNumeric is ListNumeric of the directory, from its start each time:
// a directory held open lists what it holds now (procfs generates a
// listing afresh), without the open and close.
func (d *Dir) ListNumeric(buf []byte, dst []int, max int) ([]int, []byte, error) {
	if d.listed {
		if _, err := unix.Seek(d.fd, 0, io.SeekStart); err != nil {
			return dst, buf, &fs.PathError{Op: "seek", Path: d.path, Err: err}
		}
	}
	d.listed = true
	return listNumericFd(d.fd, d.path, buf, dst, max)
}

// DescriptorCount is, for a process's descriptor directory
// (/proc/<pid>/fd) held open, how many descriptors the process has open
// now: the directory's size, which procfs reports since Linux 6.2 at the
// cost of one fstat (a listing costs a getdents per 100-odd entries and
// the kernel's formatting of each). known is false where the size says
// nothing: an older kernel (0), a directory not on procfs (a test tree),
// or a process with no descriptors. A process reaped since the directory
// was opened answers an error wrapping fs.ErrNotExist.
func (d *Dir) DescriptorCount() (n int64, known bool, err error) {
	if !d.procfs {
		return 0, false, nil
	}
	var st unix.Stat_t
	if err := unix.Fstat(d.fd, &st); err != nil {
		return 0, false, &fs.PathError{Op: "stat", Path: d.path, Err: err}
	}
	return st.Size, st.Size > 0, nil
}

// Link targets: a descriptor's path is printed into one page, 4 KiB on
// x86 and 64 KiB on some arm64 kernels; the buffer starts at the first and
// grows up to the second.
const (
	linkTargetBytes    = 4 << 10
	maxLinkTargetBytes = 64 << 10
)

// Readlink reads the target of the link name (relative to the directory)
// into buf's storage: readlinkat on the directory, one path component for
// the kernel to resolve instead of a whole /proc/<pid>/fd/<n> path, and no
// allocation once buf is large enough.
func (d *Dir) Readlink(name []byte, buf []byte) ([]byte, error) {
	if cap(buf) < linkTargetBytes {
		buf = make([]byte, linkTargetBytes)
	}
	buf = buf[:cap(buf)]
	d.name = append(append(d.name[:0], name...), 0)
	for {
		r, _, errno := unix.Syscall6(unix.SYS_READLINKAT, uintptr(d.fd), uintptr(unsafe.Pointer(&d.name[0])),
			uintptr(unsafe.Pointer(&buf[0])), uintptr(len(buf)), 0, 0)
		switch {
		case errno == unix.EINTR:
			continue
		case errno != 0:
			return buf[:0], &fs.PathError{Op: "readlink", Path: d.path + "/" + string(name), Err: errno}
		case int(r) >= len(buf) && len(buf) < maxLinkTargetBytes:
			// Filled: the target may have been cut; again, larger.
			buf = make([]byte, min(4*len(buf), maxLinkTargetBytes))
			continue
		case int(r) >= len(buf):
			return buf[:0], &fs.PathError{Op: "readlink", Path: d.path + "/" + string(name), Err: unix.ENAMETOOLONG}
		}
		return buf[:r], nil
	}
}

// ReadInto reads the file name (a path relative to the directory) into
// buf's storage, at most limit bytes, as ReadInto does.
func (d *Dir) ReadInto(name []byte, limit int64, buf []byte) ([]byte, error) {
	d.name = append(append(d.name[:0], name...), 0)
	var fd int
	for {
		r, _, errno := unix.Syscall6(unix.SYS_OPENAT, uintptr(d.fd), uintptr(unsafe.Pointer(&d.name[0])),
			uintptr(unix.O_RDONLY|unix.O_NONBLOCK|unix.O_NOCTTY|unix.O_CLOEXEC), 0, 0, 0)
		if errno == unix.EINTR {
			continue
		}
		if errno != 0 {
			return nil, &fs.PathError{Op: "open", Path: d.path + "/" + string(name), Err: errno}
		}
		fd = int(r)
		break
	}
	defer unix.Close(fd)
	if !d.procfs {
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			return nil, &fs.PathError{Op: "stat", Path: d.path + "/" + string(name), Err: err}
		}
		if st.Mode&unix.S_IFMT != unix.S_IFREG {
			return nil, notRegular("open", d.path+"/"+string(name), modeOf(st.Mode))
		}
	}
	return readFdInto(fd, limit, buf, d.procfs, func() string { return d.path + "/" + string(name) })
}

// Held is a file kept open to be read again from its start: on procfs
// and sysfs a read at offset 0 generates the file afresh, so a reader that
// samples the same file every cycle saves the open and the close, which
// cost more than the read (see hostfs.ProcessFiles). Only a file of the
// kernel's (procfs, sysfs, cgroupfs) is held: elsewhere (a fixture tree, a
// copy of /proc) a file may be replaced under its name, and each read opens
// the path again. A kernel file follows its object, not its name: a
// process's answers ESRCH once the process is reaped, a device's ENODEV
// once the device is removed, and a renamed network interface's goes on
// reading it under its new name (netdev drops its held files when the
// interface names change).
type Held struct {
	fd   int // -1: not held
	path string
}

// OpenHeld opens path for reading as ReadInto does: without waiting (a
// FIFO put in its place blocks nothing), and only a regular file.
func OpenHeld(path string) (*Held, error) {
	fd, err := openRetry(path, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_NOCTTY|unix.O_CLOEXEC)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: path, Err: err}
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, &fs.PathError{Op: "stat", Path: path, Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		unix.Close(fd)
		return nil, notRegular("open", path, modeOf(st.Mode))
	}
	var sfs unix.Statfs_t
	if err := unix.Fstatfs(fd, &sfs); err != nil || !kernelFS(int64(sfs.Type)) {
		unix.Close(fd)
		fd = -1
	}
	return &Held{fd: fd, path: path}, nil
}

// kernelFS tells the file systems whose files the kernel generates on
// each read.
func kernelFS(magic int64) bool {
	switch magic {
	case unix.PROC_SUPER_MAGIC, unix.SYSFS_MAGIC, unix.CGROUP2_SUPER_MAGIC, unix.CGROUP_SUPER_MAGIC:
		return true
	}
	return false
}

// Kept tells whether the descriptor is held (a kernel file).
func (h *Held) Kept() bool { return h.fd >= 0 }

// ReadInto reads the whole file into buf's storage, at most limit bytes:
// pread from offset 0 until a read returns nothing. A seq file of many
// records (/proc/diskstats, /proc/vmstat) hands out one page per read
// whatever the buffer, so a short read is not its end; reads at
// consecutive offsets continue the generation the first one started.
func (h *Held) ReadInto(limit int64, buf []byte) ([]byte, error) {
	if h.fd < 0 {
		return ReadInto(h.path, limit, buf)
	}
	return readBounded(limit, buf, func() string { return h.path }, func(p []byte, off int) (int, bool, error) {
		for {
			n, err := unix.Pread(h.fd, p, int64(off))
			switch {
			case err == unix.EINTR:
				continue
			case err != nil:
				return 0, false, &fs.PathError{Op: "read", Path: h.path, Err: err}
			}
			return n, n == 0, nil
		}
	})
}

// Close closes the file.
func (h *Held) Close() error {
	if h.fd < 0 {
		return nil
	}
	fd := h.fd
	h.fd = -1
	return unix.Close(fd)
}
