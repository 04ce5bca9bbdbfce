package sockdiag

import (
	"errors"
	"fmt"
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

// NetNamespaceInode reads the inode of the process's network namespace
// from the link /proc/<pid>/ns/net ("net:[4026531840]"): one readlink,
// where procfs's Namespaces reads every namespace's link. known is false
// when the process has no such link (gone, or a kernel without network
// namespaces); a target that does not parse is an error, as it is to
// procfs.
func NetNamespaceInode(procPath string, pid int) (inode uint32, known bool, err error) {
	path := filepath.Join(procPath, strconv.Itoa(pid), "ns", "net")
	target, err := os.Readlink(path)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, err
	}
	_, num, ok := strings.Cut(target, ":")
	if !ok {
		return 0, false, fmt.Errorf("%s: namespace type and inode from %q", path, target)
	}
	v, err := strconv.ParseUint(strings.Trim(num, "[]"), 10, 32)
	if err != nil {
		return 0, false, fmt.Errorf("%s: inode from %q: %w", path, num, err)
	}
	return uint32(v), true, nil
}
