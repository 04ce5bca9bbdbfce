package sockdiag

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

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
