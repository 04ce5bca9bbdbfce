package hostfs

import (
	"errors"
	"io"
	"os"
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
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "mnt_id:"); ok {
			n, err := strconv.Atoi(strings.TrimSpace(v))
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
func (f FS) OpenFiles(pid, max int, deadline time.Time) (files []OpenFile, truncated bool, err error) {
	dir := f.pidPath(pid, "fd")
	d, err := hostfile.OpenDir(dir)
	if err != nil {
		if Vanished(err) {
			return nil, false, nil
		}
		return nil, false, err
	}
	names, err := d.Readdirnames(max + 1)
	d.Close()
	if err != nil && !errors.Is(err, io.EOF) {
		if Vanished(err) {
			return nil, false, nil
		}
		return nil, false, err
	}
	if len(names) > max {
		names, truncated = names[:max], true
	}
	for i, n := range names {
		if i%64 == 0 && time.Now().After(deadline) {
			return files, true, nil
		}
		link := dir + "/" + n
		target, err := os.Readlink(link)
		if err != nil || !DataFileTarget(target) {
			continue
		}
		// fdinfo, not stat: a stat follows the link into the filesystem,
		// and an NFS server that does not answer would hold the scan.
		of := OpenFile{Path: target}
		if b, err := hostfile.Read(f.pidPath(pid, "fdinfo", n), procFDInfoBytes); err == nil {
			of.MountID, of.HasMountID = ParseFDInfoMountID(b)
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
