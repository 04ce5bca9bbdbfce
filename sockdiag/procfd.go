package sockdiag

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/gpudiag/gpudiag/hostfile"
)

// ProcessSocketInodes returns the inodes of the sockets open in process pid,
// from the links /proc/<pid>/fd/N -> socket:[inode] under procPath. Threads
// share their process's descriptor table, so this covers every thread (NCCL's
// proxy and bootstrap threads included). It reads at most limit descriptors
// (limit <= 0: no limit) and then reports truncated.
//
// procfs.Proc.FileDescriptorTargets reads the same links but the whole table
// at once, with no bound; a process with a million descriptors must not cost
// the daemon a million readlinks per cycle.
//
// Errors wrap fs.ErrNotExist when the process is gone and fs.ErrPermission
// when its descriptors are not readable (another user's process without
// CAP_SYS_PTRACE).
func ProcessSocketInodes(procPath string, pid int, limit int) (inodes []uint32, truncated bool, err error) {
	dir := filepath.Join(procPath, strconv.Itoa(pid), "fd")
	// O_DIRECTORY, non-blocking: a FIFO in a tree given as --path.procfs
	// fails here instead of waiting for a writer.
	d, err := hostfile.OpenDir(dir)
	if err != nil {
		return nil, false, err
	}
	defer d.Close()
	const batch = 256
	read := 0
	for {
		names, err := d.Readdirnames(batch)
		for _, name := range names {
			if limit > 0 && read >= limit {
				return inodes, true, nil
			}
			read++
			target, err := os.Readlink(filepath.Join(dir, name))
			switch {
			case errors.Is(err, fs.ErrNotExist):
				continue // closed since the directory was read
			case err != nil:
				return nil, false, err
			}
			if ino, ok := parseSocketLink(target); ok {
				inodes = append(inodes, ino)
			}
		}
		if errors.Is(err, io.EOF) || (err == nil && len(names) == 0) {
			return inodes, false, nil
		}
		if err != nil {
			return nil, false, err
		}
	}
}

// parseSocketLink reads the inode from a descriptor link "socket:[12345]".
// Socket inodes come from the kernel's 32-bit get_next_ino(), as does
// inet_diag_msg's idiag_inode, so a larger number cannot be a socket of ours.
func parseSocketLink(target string) (uint32, bool) {
	s, ok := strings.CutPrefix(target, "socket:[")
	if !ok {
		return 0, false
	}
	s, ok = strings.CutSuffix(s, "]")
	if !ok {
		return 0, false
	}
	ino, err := strconv.ParseUint(s, 10, 32)
	if err != nil || ino == 0 {
		return 0, false
	}
	return uint32(ino), true
}
