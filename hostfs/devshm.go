package hostfs

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gpudiag/gpudiag/hostfile"
)

// A process's /dev/shm, seen through /proc/<pid>/root: the tmpfs that
// DataLoader workers pass batches through and NCCL's SHM transport maps
// its buffers in. Docker gives a container 64 MiB unless --shm-size says
// otherwise.

// ShmUsage is the size and use of a /dev/shm.
type ShmUsage struct {
	// Tmpfs is false when /dev/shm is not a tmpfs of its own (a directory
	// of the container's root filesystem, or another filesystem): then
	// the sizes are that filesystem's.
	Tmpfs                bool
	SizeBytes, UsedBytes uint64
}

// StatfsTimeout bounds one statfs: a /dev/shm that is a FUSE or network
// mount may never answer.
const StatfsTimeout = 2 * time.Second

// ErrStatfsPending is returned while an earlier statfs of the same path
// has not returned: at most one goroutine is left waiting per path.
var ErrStatfsPending = errors.New("an earlier statfs has not returned")

var statfsInFlight sync.Map // path → struct{}

// DevShm statfs-es /dev/shm in the mount namespace of process pid,
// resolved inside /proc/<pid>/root (no symlink out of it is followed),
// within timeout (at most StatfsTimeout; 0 means StatfsTimeout).
func (f FS) DevShm(pid int, timeout time.Duration) (ShmUsage, error) {
	if timeout <= 0 || timeout > StatfsTimeout {
		timeout = StatfsTimeout
	}
	return statfsInRoot(f.pidPath(pid, "root"), "/dev/shm", timeout)
}

func statfsInRoot(root, name string, timeout time.Duration) (ShmUsage, error) {
	key := root + "\x00" + name
	if _, busy := statfsInFlight.LoadOrStore(key, struct{}{}); busy {
		return ShmUsage{}, fmt.Errorf("%s%s: %w", root, name, ErrStatfsPending)
	}
	type result struct {
		u   ShmUsage
		err error
	}
	done := make(chan result, 1)
	go func() {
		defer statfsInFlight.Delete(key)
		u, err := statfsNow(root, name)
		done <- result{u, err}
	}()
	select {
	case r := <-done:
		return r.u, r.err
	case <-time.After(timeout):
		return ShmUsage{}, fmt.Errorf("%s%s: statfs did not return within %s", root, name, timeout)
	}
}

func statfsNow(root, name string) (ShmUsage, error) {
	d, err := hostfile.OpenDirInRoot(root, name)
	if err != nil {
		return ShmUsage{}, err
	}
	defer d.Close()
	var st unix.Statfs_t
	if err := unix.Fstatfs(int(d.Fd()), &st); err != nil {
		return ShmUsage{}, fmt.Errorf("%s: statfs: %w", d.Name(), err)
	}
	return ShmUsageOf(st), nil
}

// ShmUsageOf turns a statfs answer into sizes.
func ShmUsageOf(st unix.Statfs_t) ShmUsage {
	bs := uint64(st.Bsize)
	free := min(st.Bfree, st.Blocks)
	return ShmUsage{Tmpfs: st.Type == unix.TMPFS_MAGIC, SizeBytes: st.Blocks * bs, UsedBytes: (st.Blocks - free) * bs}
}
