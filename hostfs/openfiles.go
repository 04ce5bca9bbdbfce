package hostfs

import (
	"bytes"
	"strconv"
	"strings"
	"time"

	"github.com/gpudiag/gpudiag/hostfile"
)

// OpenFile is a regular file a process holds open.
type OpenFile struct {
	// Path is the descriptor's link target, as the kernel prints it
	// (relative to the process's mount namespace's root).
	Path string
	// MountID is the mount the file was opened through, the first
	// field of the process's mountinfo (fdinfo's mnt_id, 3.15+);
	// HasMountID is false when fdinfo did not say (older kernels, a copy
	// of /proc, a descriptor closed meanwhile).
	MountID    int
	HasMountID bool
	// Written is whether the descriptor was opened for writing (fdinfo's
	// flags: O_WRONLY or O_RDWR): a log, a checkpoint or an output file,
	// not data the process reads. False when fdinfo did not say.
	Written bool
}

// procFDInfoBytes bounds /proc/<pid>/fdinfo/<fd> of a file: pos, flags,
// mnt_id, ino and perhaps a lock line.
const procFDInfoBytes = 16 << 10

// fdinfoField returns the value of an fdinfo line "name:\tvalue", trimmed.
func fdinfoField(b []byte, name string) ([]byte, bool) {
	for len(b) > 0 {
		line := b
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			line, b = b[:i], b[i+1:]
		} else {
			b = nil
		}
		if v, ok := bytes.CutPrefix(line, []byte(name+":")); ok {
			return bytes.TrimSpace(v), true
		}
	}
	return nil, false
}

// ParseFDInfoMountID reads the mnt_id line of an fdinfo file.
func ParseFDInfoMountID(b []byte) (int, bool) {
	v, ok := fdinfoField(b, "mnt_id")
	if !ok {
		return 0, false
	}
	n, err := strconv.Atoi(string(v))
	if err != nil || n < 0 {
		return 0, false
	}
	return n, true
}

// ParseFDInfoWritten reads the flags line of an fdinfo file (octal open
// flags) and says whether the file is open for writing: its access mode
// (O_ACCMODE, the low two bits) is O_WRONLY (1) or O_RDWR (2).
func ParseFDInfoWritten(b []byte) bool {
	v, ok := fdinfoField(b, "flags")
	if !ok {
		return false
	}
	n, err := strconv.ParseUint(string(v), 8, 64)
	return err == nil && n&3 != 0
}

// OpenFiles lists the regular files among pid's first max descriptors
// (/proc/<pid>/fd), stopping at deadline: truncated says the list stopped
// at either bound. Sockets, pipes, anonymous inodes, devices and files
// under /dev, /proc and /sys are left out. A process that exited has none.
// The fd and fdinfo directories are held open while their entries are
// read: a descriptor costs a readlinkat and, for a data file, an openat of
// one path component, not a walk of /proc/<pid>/fd/<n>.
func (f FS) OpenFiles(pid, max int, deadline time.Time) (files []OpenFile, truncated bool, err error) {
	return f.NewOpenFileReader().OpenFiles(pid, max, deadline)
}

// OpenFileReader is OpenFiles through buffers kept from one process to the
// next (the directory listing, link targets, fdinfo), for a scan over many
// processes: a scan then allocates only the paths it returns.
//
// With a listing age (KeepListings), it also keeps each process's
// descriptor directory open and its last listing: a process whose count
// of open descriptors has not moved since (one fstat, Linux 6.2+; see
// hostfile.Dir.DescriptorCount) is answered from that listing until it is
// older than the age. A loader's data files change by the shard or the
// epoch, and opening or closing one moves the count; what the count cannot
// see, a file closed and another opened under its number between two
// scans, waits for the age. The held directory is the process's own: once
// it exits its PID's next owner is read afresh. Not safe for concurrent
// use.
type OpenFileReader struct {
	fs                        FS
	fds                       []int
	dents, name, target, info []byte
	listings                  int // directories listed, for tests

	maxAge time.Duration // 0: every call lists
	now    func() time.Time
	held   map[int]*heldListing
	// scan is the number of EndScan calls: a held listing not used
	// since the previous one is closed.
	scan uint64
}

// heldListing is a process's descriptor directory held open and what its
// last listing found.
type heldListing struct {
	dir       *hostfile.Dir
	count     int64 // descriptors when listed
	max       int
	files     []OpenFile
	truncated bool
	at        time.Time // when listed
	used      uint64    // the scan that last used it
}

// maxHeldListings bounds the descriptor directories one reader holds
// open; past it a process is listed as without holding.
const maxHeldListings = 512

// NewOpenFileReader returns a reader of the processes under f.
func (f FS) NewOpenFileReader() *OpenFileReader { return &OpenFileReader{fs: f, now: time.Now} }

// KeepListings makes the reader hold each process's descriptor directory
// and answer from its last listing while the process's descriptor count
// stands, for up to maxAge (see OpenFileReader). EndScan closes what a
// scan no longer reads; Close closes them all.
func (r *OpenFileReader) KeepListings(maxAge time.Duration) {
	r.maxAge = maxAge
	if r.held == nil {
		r.held = map[int]*heldListing{}
	}
}

// EndScan closes the descriptor directories of the processes not read
// since the previous EndScan: exited, or no longer a GPU's.
func (r *OpenFileReader) EndScan() {
	for pid, h := range r.held {
		if h.used < r.scan {
			h.dir.Close()
			delete(r.held, pid)
		}
	}
	r.scan++
}

// Close closes every descriptor directory the reader holds.
func (r *OpenFileReader) Close() error {
	for pid, h := range r.held {
		h.dir.Close()
		delete(r.held, pid)
	}
	return nil
}

// Held is how many descriptor directories the reader holds open.
func (r *OpenFileReader) Held() int { return len(r.held) }

// OpenFiles is FS.OpenFiles through the reader's buffers. The files
// returned may be those of the process's last listing, shared with the
// reader: the caller must not change them.
func (r *OpenFileReader) OpenFiles(pid, max int, deadline time.Time) (files []OpenFile, truncated bool, err error) {
	if r.held == nil {
		return r.listOnce(pid, max, deadline)
	}
	h := r.held[pid]
	if h != nil {
		// The count is taken before a listing: a descriptor opened in
		// between is then listed and moves the count at the next call.
		count, known, err := h.dir.DescriptorCount()
		switch {
		case err != nil: // the process is gone: its PID may be another's now
			h.dir.Close()
			delete(r.held, pid)
			h = nil
		case known && count == h.count && max == h.max && r.now().Sub(h.at) < r.maxAge:
			h.used = r.scan
			return h.files, h.truncated, nil
		default:
			h.count = count
		}
	}
	if h == nil {
		if len(r.held) >= maxHeldListings {
			return r.listOnce(pid, max, deadline)
		}
		dir, err := r.openFd(pid)
		if dir == nil {
			return nil, false, err
		}
		h = &heldListing{dir: dir}
		if h.count, _, err = dir.DescriptorCount(); err != nil {
			dir.Close()
			return nil, false, nil // exited since the open
		}
		r.held[pid] = h
	}
	h.used = r.scan
	files, truncated, late, err := r.list(h.dir, pid, max, deadline)
	if err != nil || late {
		// Unreadable, gone, or cut short by the deadline: not a
		// listing to stand for the count.
		h.dir.Close()
		delete(r.held, pid)
		return files, truncated, vanishedIsNone(err)
	}
	if files == nil {
		files = []OpenFile{} // listed: a process with no data files
	}
	h.files, h.truncated, h.max, h.at = files, truncated, max, r.now()
	return files, truncated, nil
}

// listOnce lists pid's descriptors through a directory opened for this
// call alone.
func (r *OpenFileReader) listOnce(pid, max int, deadline time.Time) ([]OpenFile, bool, error) {
	dir, err := r.openFd(pid)
	if dir == nil {
		return nil, false, err
	}
	defer dir.Close()
	files, truncated, _, err := r.list(dir, pid, max, deadline)
	return files, truncated, vanishedIsNone(err)
}

// openFd opens pid's descriptor directory; a process that exited has
// none (nil, nil).
func (r *OpenFileReader) openFd(pid int) (*hostfile.Dir, error) {
	dir, err := hostfile.OpenDirFd(r.fs.pidPath(pid, "fd"))
	if err != nil {
		if Vanished(err) {
			return nil, nil
		}
		return nil, err
	}
	return dir, nil
}

// vanishedIsNone reads a process gone as one with no files.
func vanishedIsNone(err error) error {
	if Vanished(err) {
		return nil
	}
	return err
}

// list reads the links of the directory's first max descriptors; late
// says the deadline cut it short (truncated is then true too).
func (r *OpenFileReader) list(dir *hostfile.Dir, pid, max int, deadline time.Time) (files []OpenFile, truncated, late bool, err error) {
	f := r.fs
	r.listings++
	fds, dents, err := dir.ListNumeric(r.dents, r.fds[:0], max+1)
	r.fds, r.dents = fds, dents
	if err != nil {
		return nil, false, false, err
	}
	if len(fds) > max {
		fds, truncated = fds[:max], true
	}
	var info *hostfile.Dir // opened at the first data file
	infoTried := false
	defer func() {
		if info != nil {
			info.Close()
		}
	}()
	name, target, buf := r.name, r.target, r.info
	defer func() { r.name, r.target, r.info = name, target, buf }()
	for i, fd := range fds {
		if i%64 == 0 && time.Now().After(deadline) {
			return files, true, true, nil
		}
		name = strconv.AppendInt(name[:0], int64(fd), 10)
		if target, err = dir.Readlink(name, target); err != nil || !DataFileTarget(string(target)) {
			continue
		}
		// fdinfo, not stat: a stat follows the link into the filesystem,
		// and an NFS server that does not answer would hold the scan.
		of := OpenFile{Path: string(target)}
		if !infoTried {
			infoTried = true
			info, _ = hostfile.OpenDirFd(f.pidPath(pid, "fdinfo"))
		}
		if info != nil {
			if buf, err = info.ReadInto(name, procFDInfoBytes, buf); err == nil {
				of.MountID, of.HasMountID = ParseFDInfoMountID(buf)
				of.Written = ParseFDInfoWritten(buf)
			}
		}
		files = append(files, of)
	}
	return files, truncated, false, nil
}

// DataFileTarget says whether a descriptor's link target can name a data
// file: an absolute path outside /dev, /proc and /sys, not deleted. The
// kernel prints sockets, pipes and anonymous inodes as "socket:[n]",
// "pipe:[n]", "anon_inode:[x]", and memfds as "/memfd:name (deleted)".
func DataFileTarget(target string) bool {
	if !strings.HasPrefix(target, "/") || strings.HasSuffix(target, " (deleted)") {
		return false
	}
	for _, p := range []string{"/dev/", "/proc/", "/sys/", "/memfd:"} {
		if strings.HasPrefix(target, p) {
			return false
		}
	}
	return target != "/dev" && target != "/proc" && target != "/sys"
}
