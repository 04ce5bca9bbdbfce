package hostfs

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"strconv"

	"github.com/gpudiag/gpudiag/hostfile"
)

// The stat file of a process or thread, /proc/<pid>/stat or
// /proc/<pid>/task/<tid>/stat, parsed without allocating: gpuprocess reads
// one per thread of every GPU process and descendant each sample (thousands
// on a busy node), and a parent scan one per process on the host, where
// procfs's Proc.Stat, which scans with fmt, was the daemon's largest cost.

// taskStatBytes bounds a stat file: 52 numbers and a comm of at most 64
// bytes hold under 1.5 KiB.
const taskStatBytes = 4 << 10

// TaskStat is the part of a stat file the collectors use, with procfs's
// names and units (clock ticks, USER_HZ).
type TaskStat struct {
	PID        int
	State      byte // R, S, D, Z, T, t, X, I...
	PPID       int
	UTime      uint64
	STime      uint64
	CUTime     int64
	CSTime     int64
	NumThreads int
	Starttime  uint64
	VSize      uint64 // bytes of virtual memory: 0 for kernel threads and zombies
	RSSPages   uint64 // resident pages (the kernel's per-mm counters, up to 64 pages per CPU behind)
	StartStack uint64 // the main thread's stack bottom: a fork keeps it, an exec moves it
	// DelayAcctBlkIOTicks is 0 where the kernel's line stops before it.
	DelayAcctBlkIOTicks uint64
}

// TaskStatReader reads stat files into one buffer it keeps: one reader
// per goroutine, reused across threads and samples.
type TaskStatReader struct {
	fs     FS
	buf    []byte
	path   []byte
	dirBuf []byte
	name   []byte
}

// NewTaskStatReader returns a reader of the stat files under f's /proc.
func (f FS) NewTaskStatReader() *TaskStatReader { return &TaskStatReader{fs: f} }

// Thread reads /proc/<pid>/task/<tid>/stat.
func (r *TaskStatReader) Thread(pid, tid int) (TaskStat, error) {
	r.path = strconv.AppendInt(append(append(r.path[:0], r.fs.proc...), '/'), int64(pid), 10)
	r.path = strconv.AppendInt(append(r.path, "/task/"...), int64(tid), 10)
	r.path = append(r.path, "/stat"...)
	return r.read()
}

// Process reads /proc/<pid>/stat.
func (r *TaskStatReader) Process(pid int) (TaskStat, error) {
	r.path = strconv.AppendInt(append(append(r.path[:0], r.fs.proc...), '/'), int64(pid), 10)
	r.path = append(r.path, "/stat"...)
	return r.read()
}

// EachProcess lists /proc and passes each process's stat to fn, in PID
// order, through one held directory and one buffer. A process that exited
// or whose stat is not readable is left out; errors in stat files are
// passed to bad, when not nil. It stops early when ctx is done and says so.
func (r *TaskStatReader) EachProcess(ctx context.Context, fn func(TaskStat), bad func(pid int, err error)) error {
	return r.eachPID(ctx, func(dir *hostfile.Dir, pid int) error {
		st, err := r.ProcessIn(dir, pid)
		if err == nil {
			fn(st)
		}
		return err
	}, bad)
}

// commBytes bounds /proc/<pid>/comm: TASK_COMM_LEN (16) bytes and a
// newline, with room for kernels that print longer names.
const commBytes = 256

// EachComm lists /proc and passes each process's command name (its comm
// file without the newline; the bytes are valid during the call only) to
// fn, as EachProcess does with stat files: a scan for a program by name
// reads the smallest file that has it, without a string per process.
func (r *TaskStatReader) EachComm(ctx context.Context, fn func(pid int, comm []byte), bad func(pid int, err error)) error {
	return r.eachPID(ctx, func(dir *hostfile.Dir, pid int) error {
		r.name = append(strconv.AppendInt(r.name[:0], int64(pid), 10), "/comm"...)
		b, err := dir.ReadInto(r.name, commBytes, r.buf)
		if err != nil {
			return err
		}
		r.buf = b
		fn(pid, bytes.TrimSuffix(b, []byte("\n")))
		return nil
	}, bad)
}

// eachPID lists /proc through a held directory and calls read for each
// PID in order, until ctx is done; read's errors other than a process
// gone or hidden go to bad.
func (r *TaskStatReader) eachPID(ctx context.Context, read func(dir *hostfile.Dir, pid int) error, bad func(pid int, err error)) error {
	dir, err := hostfile.OpenDirFd(r.fs.proc)
	if err != nil {
		return err
	}
	defer dir.Close()
	var pids []int
	pids, r.dirBuf, err = dir.ListNumeric(r.dirBuf, nil, maxProcsListed)
	if err != nil {
		return err
	}
	slices.Sort(pids)
	for _, pid := range pids {
		if err := ctx.Err(); err != nil {
			return err
		}
		err := read(dir, pid)
		switch {
		case err == nil, Vanished(err) || errors.Is(err, fs.ErrPermission):
		case bad != nil:
			bad(pid, err)
		}
	}
	return nil
}

// ProcessIn reads <pid>/stat relative to dir, the /proc directory held
// open.
func (r *TaskStatReader) ProcessIn(dir *hostfile.Dir, pid int) (TaskStat, error) {
	r.name = append(strconv.AppendInt(r.name[:0], int64(pid), 10), "/stat"...)
	b, err := dir.ReadInto(r.name, taskStatBytes, r.buf)
	if err != nil {
		return TaskStat{}, err
	}
	r.buf = b
	st, what, err := parseTaskStat(b)
	if err != nil {
		return TaskStat{}, fmt.Errorf("%s/%d/stat: %s: %w", r.fs.proc, pid, what, err)
	}
	return st, nil
}

// Comm is the command name in the stat file read last, allocated only when
// asked: most readers want the numbers alone.
func (r *TaskStatReader) Comm() string { return commOf(r.buf) }

// CommBytes is Comm without a string: the bytes are valid until the
// reader's next read.
func (r *TaskStatReader) CommBytes() []byte { return commField(r.buf) }

// commOf is the command name of a stat file: what lies between its first
// '(' and its last ')'.
func commOf(stat []byte) string { return string(commField(stat)) }

func commField(stat []byte) []byte {
	open := bytes.IndexByte(stat, '(')
	end := bytes.LastIndexByte(stat, ')')
	if open < 0 || end < open {
		return nil
	}
	return stat[open+1 : end]
}

func (r *TaskStatReader) read() (TaskStat, error) {
	path := string(r.path)
	b, err := hostfile.ReadInto(path, taskStatBytes, r.buf)
	if err != nil {
		return TaskStat{}, err
	}
	r.buf = b
	return ParseTaskStat(path, b)
}

var errTaskStatShort = errors.New("too few fields")

// ParseTaskStat parses a stat file: "pid (comm) state ppid ...". comm may
// hold spaces and parentheses, so the fields start after the last ')'.
func ParseTaskStat(path string, b []byte) (TaskStat, error) {
	st, what, err := parseTaskStat(b)
	if err != nil {
		return TaskStat{}, fmt.Errorf("%s: %s: %w", path, what, err)
	}
	return st, nil
}

// parseTaskStat is ParseTaskStat with the failure's place and cause
// apart, so that the path is formatted only on failure.
func parseTaskStat(b []byte) (TaskStat, string, error) {
	var st TaskStat
	bad := func(what string, err error) (TaskStat, string, error) {
		return TaskStat{}, what, err
	}
	open := bytes.IndexByte(b, '(')
	end := bytes.LastIndexByte(b, ')')
	if open < 1 || end < open {
		return bad("no (comm)", errTaskStatShort)
	}
	pid, ok := parseUint(bytes.TrimRight(b[:open], " "))
	if !ok || pid > 1<<31 {
		return bad("pid", strconv.ErrSyntax)
	}
	st.PID = int(pid)
	rest := b[end+1:]
	// Fields are numbered from 1 as in proc(5): 3 is the state.
	field := 2
	for len(rest) > 0 {
		rest = trimSpaces(rest)
		if len(rest) == 0 {
			break
		}
		i := bytes.IndexAny(rest, " \n")
		if i < 0 {
			i = len(rest)
		}
		tok := rest[:i]
		rest = rest[i:]
		field++
		if field == 3 {
			if len(tok) != 1 {
				return bad("state", strconv.ErrSyntax)
			}
			st.State = tok[0]
			continue
		}
		var dst *uint64
		var sdst *int64
		switch field {
		case 4, 14, 15, 20, 22, 23, 24, 28, 42:
		case 16, 17:
		default:
			if field > 42 {
				return st, "", nil
			}
			continue
		}
		switch field {
		case 16:
			sdst = &st.CUTime
		case 17:
			sdst = &st.CSTime
		case 14:
			dst = &st.UTime
		case 15:
			dst = &st.STime
		case 22:
			dst = &st.Starttime
		case 23:
			dst = &st.VSize
		case 24:
			dst = &st.RSSPages
		case 28:
			dst = &st.StartStack
		case 42:
			dst = &st.DelayAcctBlkIOTicks
		}
		if sdst != nil {
			v, ok := parseInt(tok)
			if !ok {
				return bad(fieldName(field), strconv.ErrSyntax)
			}
			*sdst = v
			continue
		}
		if dst != nil {
			v, ok := parseUint(tok)
			if !ok {
				return bad(fieldName(field), strconv.ErrSyntax)
			}
			*dst = v
			continue
		}
		// ppid and num_threads: ints.
		v, ok := parseInt(tok)
		if !ok || v < -1<<31 || v > 1<<31 {
			return bad(fieldName(field), strconv.ErrSyntax)
		}
		if field == 4 {
			st.PPID = int(v)
		} else {
			st.NumThreads = int(v)
		}
	}
	if field < 22 {
		return bad("fields", errTaskStatShort)
	}
	return st, "", nil
}

func trimSpaces(b []byte) []byte {
	for len(b) > 0 && (b[0] == ' ' || b[0] == '\n') {
		b = b[1:]
	}
	return b
}

// parseUint parses decimal digits, failing on overflow.
func parseUint(b []byte) (uint64, bool) {
	if len(b) == 0 || len(b) > 20 {
		return 0, false
	}
	var v uint64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		d := uint64(c - '0')
		if v > (1<<64-1-d)/10 {
			return 0, false
		}
		v = v*10 + d
	}
	return v, true
}

func parseInt(b []byte) (int64, bool) {
	neg := len(b) > 0 && b[0] == '-'
	if neg {
		b = b[1:]
	}
	u, ok := parseUint(b)
	if !ok || u > 1<<63 || (!neg && u == 1<<63) {
		return 0, false
	}
	if neg {
		return -int64(u), true
	}
	return int64(u), true
}

// Tasks is a process's task directory held open while its threads are
// read: each thread's stat is opened relative to it.
type Tasks struct {
	r   *TaskStatReader
	dir *hostfile.Dir
	pid int
}

// OpenTasks opens /proc/<pid>/task.
func (r *TaskStatReader) OpenTasks(pid int) (*Tasks, error) {
	r.path = strconv.AppendInt(append(append(r.path[:0], r.fs.proc...), '/'), int64(pid), 10)
	r.path = append(r.path, "/task"...)
	d, err := hostfile.OpenDirFd(string(r.path))
	if err != nil {
		return nil, err
	}
	return &Tasks{r: r, dir: d, pid: pid}, nil
}

// Close closes the directory.
func (t *Tasks) Close() error { return t.dir.Close() }

// IDs lists the threads into dst[:0], at most maxThreadsListed, in the
// directory's order.
func (t *Tasks) IDs(dst []int) ([]int, error) {
	out, buf, err := t.dir.ListNumeric(t.r.dirBuf, dst[:0], maxThreadsListed)
	t.r.dirBuf = buf
	return out, err
}

// Stat reads task/<tid>/stat.
func (t *Tasks) Stat(tid int) (TaskStat, error) {
	r := t.r
	r.name = append(strconv.AppendInt(r.name[:0], int64(tid), 10), "/stat"...)
	b, err := t.dir.ReadInto(r.name, taskStatBytes, r.buf)
	if err != nil {
		return TaskStat{}, err
	}
	r.buf = b
	st, what, err := parseTaskStat(b)
	if err != nil {
		return TaskStat{}, fmt.Errorf("%s/%d/task/%d/stat: %s: %w", r.fs.proc, t.pid, tid, what, err)
	}
	return st, nil
}

func fieldName(n int) string { return "field " + strconv.Itoa(n) }
