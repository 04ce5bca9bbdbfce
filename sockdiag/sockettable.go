package sockdiag

import (
	"errors"
	"io/fs"
	"math"
	"path/filepath"
	"strconv"

	"github.com/gpudiag/gpudiag/hostfile"
)

// SocketTable reads the inodes of the sockets open in a process, from the
// links /proc/<pid>/fd/N -> socket:[inode]. Threads share their process's
// descriptor table, so this covers every thread (NCCL's proxy and bootstrap
// threads included). procfs.Proc.FileDescriptorTargets reads the same links
// but the whole table at once, with no bound; a process with a million
// descriptors must not cost the daemon a million readlinks per cycle.
//
// The table keeps what each descriptor's link said and reads the link only
// of a descriptor it has not listed before. A training rank holds hundreds of
// descriptors (device files, shared memory, NCCL's sockets) that stay open
// for its whole life, and a readlink costs several microseconds of kernel
// time each.
//
// A descriptor closed and its number reused between two cycles lists the
// same; Forget (the socket left the kernel's table) and a full re-read
// (Inodes with full) catch it.
//
// Where the kernel tells how many descriptors a process holds (the size of
// /proc/<pid>/fd, Linux 6.2+), the directory is listed again only when that
// count moved since the last listing, a socket was forgotten, or at a full
// re-read; otherwise the last listing's sockets stand. A rank's descriptors
// change when it opens a connection or a file, not every second. What the
// count cannot see is a descriptor closed and another opened between two
// cycles: a socket opened that way waits for the next full re-read (at
// most tcpDescriptorRefresh, 10 s, in the tcp collector), unless the one
// closed was a socket the kernel no longer has, which makes the table
// list again at the next cycle.
type SocketTable struct {
	dir string
	// fdDir is the descriptor directory, held open from one listing to
	// the next (it belongs to the process: once the process is gone it
	// lists nothing but an error, whoever gets its PID).
	fdDir *hostfile.Dir
	links map[int]uint32 // descriptor -> socket inode; 0: not a socket
	next  map[int]uint32
	// The listing, a link's name and its target, through buffers kept
	// from cycle to cycle.
	fds                 []int
	dents, name, target []byte
	// The last listing: the descriptor count before it (0: not known),
	// its sockets, the limit it was read under and whether it stopped
	// there. stale is set by Forget: the next call lists.
	count     int64
	inodes    []uint32
	limit     int
	truncated bool
	stale     bool
	listings  int // how many times the directory was listed
}

// NewSocketTable returns the table of process pid under procPath.
func NewSocketTable(procPath string, pid int) *SocketTable {
	return &SocketTable{dir: filepath.Join(procPath, strconv.Itoa(pid), "fd"), links: map[int]uint32{}}
}

// Inodes lists the process's descriptors and returns its socket inodes,
// appended to buf, reading the links of new descriptors (of every one when
// full). It reads at most limit descriptors (limit <= 0: no limit) and then
// reports truncated. Unless full, a process whose descriptor count has not
// moved since the last listing is not listed again (see SocketTable).
// Errors wrap fs.ErrNotExist when the process is gone and fs.ErrPermission
// when its descriptors are not readable (another user's process without
// CAP_SYS_PTRACE).
func (t *SocketTable) Inodes(limit int, full bool, buf []uint32) (inodes []uint32, truncated bool, err error) {
	inodes = buf[:0]
	if t.fdDir == nil {
		// O_DIRECTORY, non-blocking: a FIFO in a tree given as
		// --path.procfs fails here instead of waiting for a writer.
		if t.fdDir, err = hostfile.OpenDirFd(t.dir); err != nil {
			return inodes, false, err
		}
		t.count = 0
	}
	d := t.fdDir
	// The count is taken before the listing: a descriptor opened in
	// between is then listed and moves the count at the next call.
	count, known, err := d.DescriptorCount()
	if err != nil {
		t.Close() // the process is gone
		return inodes, false, err
	}
	if !full && !t.stale && known && count == t.count && limit == t.limit {
		return append(inodes, t.inodes...), t.truncated, nil
	}
	max := math.MaxInt
	if limit > 0 {
		max = limit + 1
	}
	// Names that are not numbers (a test tree's stray file) are not
	// descriptors and are skipped by the listing.
	t.listings++
	t.fds, t.dents, err = d.ListNumeric(t.dents, t.fds[:0], max)
	if err != nil {
		t.Close() // the process is gone, or its table unreadable
		return inodes, false, err
	}
	fds := t.fds
	if limit > 0 && len(fds) > limit {
		fds, truncated = fds[:limit], true
	}
	if t.next == nil {
		t.next = make(map[int]uint32, len(t.links))
	}
	clear(t.next)
	for _, fd := range fds {
		ino, known := t.links[fd]
		if !known || full {
			t.name = strconv.AppendInt(t.name[:0], int64(fd), 10)
			t.target, err = d.Readlink(t.name, t.target)
			switch {
			case errors.Is(err, fs.ErrNotExist):
				continue // closed since the directory was read
			case err != nil:
				t.Close()
				return inodes[:0], false, err
			}
			ino, _ = parseSocketLink(string(t.target))
		}
		t.next[fd] = ino
		if ino != 0 {
			inodes = append(inodes, ino)
		}
	}
	t.swap()
	t.inodes = append(t.inodes[:0], inodes...)
	t.limit, t.truncated, t.stale = limit, truncated, false
	// The count is of descriptor numbers taken, the listing of files
	// installed: a number reserved by a call still under way (a thread
	// blocked in accept or in the open of a FIFO) counts before its
	// file lists, and the file it gets then leaves the count as it was.
	// Only a listing that matches the count stands for it.
	t.count = 0
	if known && !truncated && int64(len(t.fds)) == count {
		t.count = count
	}
	return inodes, truncated, nil
}

// Close closes the descriptor directory held open; a later Inodes opens
// it again.
func (t *SocketTable) Close() {
	if t.fdDir != nil {
		t.fdDir.Close()
		t.fdDir = nil
	}
}

// swap makes this listing the one the next cycle compares with.
func (t *SocketTable) swap() { t.links, t.next = t.next, t.links }

// Forget drops what the table knows of the descriptors holding socket ino
// (closed, by what the kernel's socket table says), so the next cycle reads
// their links again.
func (t *SocketTable) Forget(ino uint32) {
	t.stale = true
	for fd, v := range t.links {
		if v == ino {
			delete(t.links, fd)
		}
	}
}
