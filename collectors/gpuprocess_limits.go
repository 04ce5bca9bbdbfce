package collectors

// The limits only a GPU's own processes are read for: RLIMIT_MEMLOCK (with
// CAP_IPC_LOCK, which lifts it) and /dev/shm.

import (
	"errors"
	"io/fs"
	"time"

	"go.uber.org/zap"

	"github.com/gpudiag/gpudiag/hostfs"
	"github.com/gpudiag/gpudiag/sample"
)

type memlockRead struct {
	limit   hostfs.Memlock
	ipcLock bool
}

// processLimits reads, once per sample, what only the GPU's own processes
// are asked: RLIMIT_MEMLOCK (RDMA registration of NCCL's buffers runs in
// them; read with the placement, see processAttrInterval) and the size and
// use of /dev/shm in their mount namespace (every sample: it fills).
func (cy *procCycle) processLimits(r *procReading) (errs []string) {
	if r.limitsRead {
		return nil
	}
	r.limitsRead = true
	c, d := cy.c, &r.detail
	if cy.ctx.Err() != nil {
		return nil
	}
	m := r.attrs.memlock
	if m == nil {
		var keep bool
		m, keep, errs = readMemlock(c.host, d)
		if keep {
			r.attrs.memlock = m
		}
	}
	if m != nil {
		if m.limit.Unlimited {
			d.MemlockUnlimited = true
		} else {
			b := m.limit.Bytes
			d.MemlockBytes = &b
		}
		d.IPCLock = m.ipcLock
	}
	// Bounded by the sample's deadline as well: a hung /dev/shm (FUSE,
	// NFS) costs this sample at most what is left of it.
	var timeout time.Duration
	if dl, ok := cy.ctx.Deadline(); ok {
		if timeout = time.Until(dl); timeout <= 0 {
			return errs
		}
	}
	shm, err := c.host.DevShm(d.PID, timeout)
	switch {
	case err == nil:
		d.DevShm = &sample.DevShm{Tmpfs: shm.Tmpfs, SizeBytes: shm.SizeBytes, UsedBytes: shm.UsedBytes}
	case errors.Is(err, fs.ErrPermission):
		d.Unreadable = append(d.Unreadable, "root/dev/shm")
	default:
		// Absent (a root without /dev/shm, a process gone), pending or
		// hung: not measured.
		c.log.Debug("/dev/shm unreadable", zap.Int("pid", d.PID), zap.Error(err))
	}
	return errs
}

// readMemlock reads the process's RLIMIT_MEMLOCK and, where it is finite,
// whether CAP_IPC_LOCK lifts it: nil when the limit was not read (noted in
// d or errs). keep says the reading is whole and stands until the
// attributes are due; otherwise the next sample reads again.
func readMemlock(host hostfs.FS, d *sample.GPUProcess) (m *memlockRead, keep bool, errs []string) {
	ml, err := host.MaxLockedMemory(d.PID)
	switch {
	case err == nil:
	case hostfs.Vanished(err):
		return nil, false, nil
	case errors.Is(err, fs.ErrPermission):
		d.Unreadable = append(d.Unreadable, "limits")
		return nil, false, nil
	default:
		return nil, false, []string{err.Error()}
	}
	m = &memlockRead{limit: ml}
	if ml.Unlimited {
		return m, true, nil
	}
	// CAP_IPC_LOCK lifts the limit: only then does it matter.
	switch caps, err := host.CapEff(d.PID); {
	case err == nil:
		m.ipcLock = caps&(1<<hostfs.CapIPCLock) != 0
		return m, true, nil
	case errors.Is(err, fs.ErrPermission):
		return m, true, nil // the limit stands on its own
	case hostfs.Vanished(err):
		return m, false, nil
	default:
		return m, false, []string{err.Error()}
	}
}
