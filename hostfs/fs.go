package hostfs

import (
	"errors"
	"io/fs"
	"path/filepath"
	"strconv"
	"syscall"

	"github.com/prometheus/procfs"
)

// UserHZ is the unit of the times in /proc/stat and /proc/<pid>/stat
// (USER_HZ, clock ticks). It is 100 on every architecture Go supports;
// procfs assumes the same.
const UserHZ = 100

// FS is the node's /proc and /sys, rooted at --path.procfs and
// --path.sysfs (a container sees the host's under /host/proc, /host/sys).
type FS struct {
	proc, sys string
	pfs       procfs.FS
	held      *heldFiles // nil: every read opens its file (see Holding)
}

// NewFS returns the handle for the trees at procPath and sysPath. It fails
// as procfs.NewFS does when procPath is not a directory; sysPath is not
// checked, since a collector that reads only /proc runs without it.
func NewFS(procPath, sysPath string) (FS, error) {
	pfs, err := procfs.NewFS(procPath)
	if err != nil {
		return FS{}, err
	}
	return FS{proc: procPath, sys: sysPath, pfs: pfs}, nil
}

// NewSysFS returns the handle for the /sys tree at sysPath alone, for a
// collector that reads nothing under /proc and so must not fail where
// --path.procfs does not exist: its ProcPath and Procfs are not to be used.
func NewSysFS(sysPath string) FS {
	return FS{sys: sysPath}
}

// Procfs is the procfs handle on the same /proc, for the files procfs
// parses itself.
func (f FS) Procfs() procfs.FS { return f.pfs }

// ProcPath joins elem under the /proc root.
func (f FS) ProcPath(elem ...string) string {
	return filepath.Join(append([]string{f.proc}, elem...)...)
}

// SysPath joins elem under the /sys root.
func (f FS) SysPath(elem ...string) string {
	return filepath.Join(append([]string{f.sys}, elem...)...)
}

// pidPath is /proc/<pid>/<elem...>.
func (f FS) pidPath(pid int, elem ...string) string {
	return f.ProcPath(append([]string{strconv.Itoa(pid)}, elem...)...)
}

// Vanished is whether a read of a process's file failed because the
// process exited: its directory is gone, or the kernel answers ESRCH for
// a task being torn down.
func Vanished(err error) bool {
	return errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ESRCH)
}
