package hostfs

import (
	"bytes"
	"os"
	"slices"
	"strconv"

	"github.com/gpudiag/gpudiag/hostfile"
)

// taskStamp is what /proc/loadavg says of the host's tasks: how many exist
// (nr_threads, every thread of every process on the host) and the last PID
// the kernel gave (in the reader's PID namespace). Every new task, thread or
// process, takes a PID and moves the second; a task reaped lowers the
// first. Two equal stamps therefore say that no task was born and none was
// reaped in between: a listing of /proc made at the first still holds
// (ParentIndex.listing checks that the last PID given was done). That listing
// walks every task on the host (procfs skips threads one by one to find
// the processes): on a training node with thousands of threads it costs
// most of a millisecond, the stamp a read of one short line.
type taskStamp struct{ threads, lastPID int64 }

// loadavgBytes bounds /proc/loadavg: one line of five numbers.
const loadavgBytes = 256

// parseLoadavgTasks reads the stamp from a loadavg line, in place:
// "0.23 0.33 0.28 1/77 18080".
func parseLoadavgTasks(b []byte) (taskStamp, bool) {
	var f [5][]byte
	rest, _ := nextLine(b)
	for i := range f {
		if f[i], rest = nextField(rest); len(f[i]) == 0 {
			return taskStamp{}, false
		}
	}
	if extra, _ := nextField(rest); len(extra) > 0 {
		return taskStamp{}, false
	}
	_, total, ok := bytes.Cut(f[3], []byte("/"))
	if !ok {
		return taskStamp{}, false
	}
	threads, err1 := strconv.ParseInt(string(total), 10, 64)
	last, err2 := strconv.ParseInt(string(f[4]), 10, 64)
	if err1 != nil || err2 != nil || threads <= 0 || last < 0 {
		return taskStamp{}, false
	}
	return taskStamp{threads: threads, lastPID: last}, true
}

// taskStamper reads the stamp of the /proc at f, where it can stand for a
// listing of that /proc: loadavg's last PID is that of the reader's PID
// namespace, the listing that of the namespace the /proc was mounted for,
// so the stamp is used only where the two are one (the daemon finds itself
// as /proc/self). Elsewhere (a copy of /proc in a test, a /proc of another
// namespace) ok is always false and the caller lists.
type taskStamper struct {
	fs      FS
	checked bool
	sameNS  bool
	buf     []byte
}

// taskShown tells whether pid is done being made: listed in pids (a
// listing of /proc) or found by name as a thread.
func (f FS) taskShown(pids []int, pid int64) bool {
	if slices.Contains(pids, int(pid)) {
		return true
	}
	_, err := os.Lstat(f.ProcPath(strconv.FormatInt(pid, 10)))
	return err == nil
}

func (s *taskStamper) stamp() (taskStamp, bool) {
	if !s.checked {
		s.checked = true
		self, err := os.Readlink(s.fs.ProcPath("self"))
		s.sameNS = err == nil && self == strconv.Itoa(os.Getpid())
	}
	if !s.sameNS {
		return taskStamp{}, false
	}
	b, err := hostfile.ReadInto(s.fs.ProcPath("loadavg"), loadavgBytes, s.buf)
	if err != nil {
		return taskStamp{}, false
	}
	s.buf = b
	return parseLoadavgTasks(b)
}
