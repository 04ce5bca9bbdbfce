package hostfs

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// The settings of a block device's queue: /sys/block/<dev>/queue and the
// blk-mq hardware queues under /sys/block/<dev>/mq.

// BlockQueue is the settings of /sys/block/<dev>/queue and mq.
type BlockQueue struct {
	// Scheduler is the active I/O scheduler (none, mq-deadline, kyber, bfq);
	// empty for bio-based devices, which have none to choose.
	Scheduler      string
	ReadAheadBytes uint64
	// NRRequests is the request budget per hardware queue; 0 when the
	// device has no request queue (bio-based).
	NRRequests uint64
	Rotational bool
	// HWQueues is the number of blk-mq hardware queues (NVMe submission
	// queues); 0 for bio-based devices.
	HWQueues int
}

// BlockQueueAttr reads one attribute of a queue directory by name: ok is
// false when the kernel does not have it.
type BlockQueueAttr func(name string) (b []byte, ok bool, err error)

// BlockQueue reads the settings under /sys/block/<device>/queue that decide
// how I/O reaches the device. Nil when the device has no queue directory
// there (partitions, or a container without the host's /sys) or one that
// cannot be described (see ParseBlockQueue).
//
// skipped is told of what was passed over without failing the read, for a
// debug log: a queue directory or blk-mq directory that cannot be listed,
// an incomplete queue directory (err nil), an attribute that cannot be
// read for want of permission (the setting is then left unset).
//
// procfs's SysBlockDeviceQueueStats is not used: it fails unless some thirty
// attributes are all present, and io_timeout alone is missing on virtio-blk
// and on every bio-based device (NVMe multipath heads, zram).
func (f FS) BlockQueue(device string, skipped func(msg, path string, err error)) (*BlockQueue, error) {
	dir := f.SysPath("block", device)
	qdir := filepath.Join(dir, "queue")
	if _, err := os.Stat(qdir); err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			skipped("block queue unreadable", qdir, err)
		}
		return nil, nil
	}
	q, err := ParseBlockQueue(qdir, func(name string) ([]byte, bool, error) {
		return readOptionalAttr(filepath.Join(qdir, name), skipped)
	})
	if err != nil {
		return nil, err
	}
	if q == nil {
		skipped("block queue incomplete", qdir, nil)
		return nil, nil
	}
	mq := filepath.Join(dir, "mq")
	hw, err := os.ReadDir(mq)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		skipped("blk-mq directory unreadable", mq, err)
	}
	for _, e := range hw {
		if e.IsDir() {
			q.HWQueues++
		}
	}
	return q, nil
}

// readOptionalAttr reads a sysfs attribute that comes and goes with kernel
// version and device type: ok is false when it is absent, or unreadable
// (told to skipped).
func readOptionalAttr(path string, skipped func(msg, path string, err error)) ([]byte, bool, error) {
	b, err := ReadAttr(path)
	switch {
	case err == nil:
		return b, true, nil
	case errors.Is(err, fs.ErrNotExist):
		return nil, false, nil
	case errors.Is(err, fs.ErrPermission):
		skipped("sysfs attribute unreadable", path, err)
		return nil, false, nil
	}
	return nil, false, err
}

// ParseBlockQueue parses the attributes of the queue directory qdir, got
// through attr in the order: read_ahead_kb, rotational, scheduler (the
// active one of the bracketed list), nr_requests. Every block queue has
// read_ahead_kb and rotational; without either the directory is not one
// that can be described (a partial bind mount, or unreadable) and the
// queue is nil, with no error. The others are left unset when absent. A
// value that is not a number is an error naming its file. HWQueues is not
// set: it is a directory count, not an attribute.
func ParseBlockQueue(qdir string, attr BlockQueueAttr) (*BlockQueue, error) {
	readAheadKB, okReadAhead, err := blockQueueUint(qdir, "read_ahead_kb", attr)
	if err != nil {
		return nil, err
	}
	rotational, okRotational, err := blockQueueUint(qdir, "rotational", attr)
	if err != nil {
		return nil, err
	}
	if !okReadAhead || !okRotational {
		return nil, nil
	}
	q := &BlockQueue{ReadAheadBytes: readAheadKB * 1024, Rotational: rotational == 1}
	sched, ok, err := attr("scheduler")
	if err != nil {
		return nil, err
	}
	if ok {
		q.Scheduler = ActiveScheduler(strings.TrimSpace(string(sched)))
	}
	if q.NRRequests, _, err = blockQueueUint(qdir, "nr_requests", attr); err != nil {
		return nil, err
	}
	return q, nil
}

// blockQueueUint reads and parses one numeric queue attribute.
func blockQueueUint(qdir, name string, attr BlockQueueAttr) (uint64, bool, error) {
	b, ok, err := attr(name)
	if !ok || err != nil {
		return 0, false, err
	}
	v, err := ParseUintAttr(filepath.Join(qdir, name), b)
	return v, err == nil, err
}
