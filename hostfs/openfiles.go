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
}

// procFDInfoBytes bounds /proc/<pid>/fdinfo/<fd> of a file: pos, flags,
// mnt_id, ino and perhaps a lock line.
const procFDInfoBytes = 16 << 10

// ParseFDInfoMountID reads the mnt_id line of an fdinfo file.
func ParseFDInfoMountID(b []byte) (int, bool) {
	for len(b) > 0 {
		line := b
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			line, b = b[:i], b[i+1:]
		} else {
			b = nil
		}
		if v, ok := bytes.CutPrefix(line, []byte("mnt_id:")); ok {
			n, err := strconv.Atoi(string(bytes.TrimSpace(v)))
			if err != nil || n < 0 {
				return 0, false
			}
			return n, true
		}
	}
	return 0, false
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
// processes: a scan then allocates only the paths it returns. Not safe for
// concurrent use.
type OpenFileReader struct {
	fs                        FS
	fds                       []int
	dents, name, target, info []byte
}

// NewOpenFileReader returns a reader of the processes under f.
func (f FS) NewOpenFileReader() *OpenFileReader { return &OpenFileReader{fs: f} }

// OpenFiles is FS.OpenFiles through the reader's buffers.
func (r *OpenFileReader) OpenFiles(pid, max int, deadline time.Time) (files []OpenFile, truncated bool, err error) {
	f := r.fs
	dir, err := hostfile.OpenDirFd(f.pidPath(pid, "fd"))
	if err != nil {
		if Vanished(err) {
			return nil, false, nil
		}
		return nil, false, err
	}
	defer dir.Close()
	fds, dents, err := dir.ListNumeric(r.dents, r.fds[:0], max+1)
	r.fds, r.dents = fds, dents
	if err != nil {
		if Vanished(err) {
			return nil, false, nil
		}
		return nil, false, err
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
			return files, true, nil
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
			}
		}
		files = append(files, of)
	}
	return files, truncated, nil
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
