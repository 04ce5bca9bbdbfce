package hostfs

import (
	"errors"
	"sync"
	"syscall"
	"time"

	"github.com/gpudiag/gpudiag/hostfile"
)

// Held files: a collector that reads the same host files every second
// (/proc/stat, /proc/diskstats, the pressure files, an interface's
// counters, a NUMA node's vmstat) keeps them open and reads each again from
// its start: procfs and sysfs generate a file afresh on a read at offset 0,
// and the open and the close cost more than the read (on the benchmark's
// VM, /proc/<pid>/stat: 8.1 µs opened each time, 2.8 µs held).
//
// A held file whose read says it is gone is closed and opened again once
// by its path:
// a network interface removed and another made under its name (sysfs then
// answers ENODEV through the old descriptor) reads as the new one. Each held
// file keeps its kernel buffer (a page, more for a long /proc/stat),
// charged to the daemon's cgroup.

// maxHeldFiles bounds the files one FS holds; past it a read opens its
// file as without holding. A collector names a few dozen.
const maxHeldFiles = 256

type heldFiles struct {
	mu    sync.Mutex
	files map[string]*heldFile
	reads uint64
}

type heldFile struct {
	file *hostfile.Held
	buf  []byte
	at   time.Time // last read
}

// heldIdle is how long a held file may go unread before it is closed (a
// removed interface's counters, a node taken offline), checked every
// heldSweepReads reads.
const (
	heldIdle       = 2 * time.Minute
	heldSweepReads = 512
)

// Holding returns f with held files of its own, for one collector: the
// files read through it whole (readWhole: the /proc files, the sysfs
// attributes) are held open from one read to the next. CloseHeld closes
// them.
func (f FS) Holding() FS {
	f.held = &heldFiles{files: map[string]*heldFile{}}
	return f
}

// CloseHeld closes the files f holds; later reads open them again.
func (f FS) CloseHeld() {
	if f.held == nil {
		return
	}
	// A read left hanging by a sample the engine gave up on holds the
	// lock: the daemon is closing, and its descriptors go with it.
	if !f.held.mu.TryLock() {
		return
	}
	defer f.held.mu.Unlock()
	for path, h := range f.held.files {
		h.file.Close()
		delete(f.held.files, path)
	}
}

// HeldFiles is how many files f holds open.
func (f FS) HeldFiles() int {
	if f.held == nil {
		return 0
	}
	f.held.mu.Lock()
	defer f.held.mu.Unlock()
	return len(f.held.files)
}

// readWhole reads the file at path whole, at most limit bytes, through its
// held descriptor when f holds files. The bytes are valid until the next
// read of the same path through f.
func (f FS) readWhole(path string, limit int64) ([]byte, error) {
	if f.held == nil {
		return hostfile.Read(path, limit)
	}
	return f.held.read(path, limit)
}

func (h *heldFiles) read(path string, limit int64) ([]byte, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	now := time.Now()
	if h.reads++; h.reads%heldSweepReads == 0 {
		h.sweep(now)
	}
	if e := h.files[path]; e != nil {
		b, err := e.file.ReadInto(limit, e.buf)
		if err == nil {
			e.buf, e.at = b, now
			return b, nil
		}
		if !fileGone(err) {
			// A file that answers an error while it is there (the
			// carrier and speed of a link that is down: EINVAL)
			// stays held.
			e.at = now
			return nil, err
		}
		// Gone or replaced: the path may name another file now.
		e.file.Close()
		delete(h.files, path)
	}
	if len(h.files) >= maxHeldFiles {
		return hostfile.Read(path, limit)
	}
	file, err := hostfile.OpenHeld(path)
	if err != nil {
		return nil, err
	}
	b, err := file.ReadInto(limit, nil)
	if err != nil && (fileGone(err) || errors.Is(err, hostfile.ErrTooLarge)) {
		file.Close()
		return nil, err
	}
	h.files[path] = &heldFile{file: file, buf: b, at: now}
	return b, err
}

// sweep closes the files not read for heldIdle.
func (h *heldFiles) sweep(now time.Time) {
	for path, e := range h.files {
		if now.Sub(e.at) > heldIdle {
			e.file.Close()
			delete(h.files, path)
		}
	}
}

// fileGone tells a read through a held descriptor whose file is gone:
// sysfs answers ENODEV once its node is removed, procfs ESRCH or ENOENT
// once its process is, a network file system ESTALE.
func fileGone(err error) bool {
	return errors.Is(err, syscall.ENODEV) || errors.Is(err, syscall.ESTALE) || Vanished(err)
}
