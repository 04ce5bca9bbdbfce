package hostfs

import (
	"errors"
	"fmt"

	"github.com/gpudiag/gpudiag/hostfile"
)

// A process's stat and io files, held open between reads: gpuprocess reads
// both for every GPU process and descendant (72 on a busy 8-GPU node) every
// sample, and on procfs an open and a close cost more than the read itself
// (8.1 µs against 2.8 µs for stat, 5.0 against 1.3 for io, on the busy-node
// benchmark's VM). A read of a held procfs file at offset 0 is generated
// afresh. The descriptors belong to the process, not to its number: once it
// is reaped they answer ESRCH, and a process given the same PID later is
// never read through them. Each held file keeps a page of kernel memory
// (its seq_file buffer), charged to the daemon's cgroup, not to its RSS.

// processIOBytes bounds /proc/<pid>/io: seven lines of under 40 bytes.
const processIOBytes = 4 << 10

// ProcessIO is the part of /proc/<pid>/io the collectors use, summed over
// the process's threads and the children it reaped.
type ProcessIO struct {
	RChar     uint64 // bytes read by read(2) and kin, page-cache hits included
	SyscR     uint64 // read system calls
	ReadBytes uint64 // bytes the process caused to be fetched from storage
}

// ProcessFiles holds one process's stat and io files open.
type ProcessFiles struct {
	dir      string // /proc/<pid>, for errors
	stat, io *hostfile.Held
	ioErr    error // why io is not held
	buf      []byte
}

// OpenProcessFiles opens /proc/<pid>/stat and /proc/<pid>/io. When the io
// file cannot be opened (another user's process without CAP_SYS_PTRACE)
// the stat file is still held, and IO tries again and returns the error.
func (f FS) OpenProcessFiles(pid int) (*ProcessFiles, error) {
	p := &ProcessFiles{dir: f.pidPath(pid)}
	var err error
	if p.stat, err = hostfile.OpenHeld(p.dir + "/stat"); err != nil {
		return nil, err
	}
	p.io, p.ioErr = hostfile.OpenHeld(p.dir + "/io")
	return p, nil
}

// Stat reads the held stat file afresh.
func (p *ProcessFiles) Stat() (TaskStat, error) {
	b, err := p.stat.ReadInto(taskStatBytes, p.buf)
	if err != nil {
		return TaskStat{}, err
	}
	p.buf = b
	st, what, err := parseTaskStat(b)
	if err != nil {
		return TaskStat{}, fmt.Errorf("%s/stat: %s: %w", p.dir, what, err)
	}
	return st, nil
}

// Comm is the command name in the stat file read last (allocated only
// when asked); "" after an IO read.
func (p *ProcessFiles) Comm() string { return commOf(p.buf) }

// IO reads the held io file afresh; one that could not be opened is tried
// again.
func (p *ProcessFiles) IO() (ProcessIO, error) {
	if p.io == nil {
		if p.io, p.ioErr = hostfile.OpenHeld(p.dir + "/io"); p.io == nil {
			return ProcessIO{}, p.ioErr
		}
	}
	b, err := p.io.ReadInto(processIOBytes, p.buf)
	if err != nil {
		return ProcessIO{}, err
	}
	p.buf = b
	return ParseProcessIO(p.dir+"/io", b)
}

// Close closes the held files.
func (p *ProcessFiles) Close() {
	p.stat.Close()
	if p.io != nil {
		p.io.Close()
	}
}

var errProcessIOShort = errors.New("fields missing")

// ParseProcessIO parses /proc/<pid>/io in place. rchar, syscr and
// read_bytes are required: a kernel without task I/O accounting has no io
// file at all, so a file without them is not one.
func ParseProcessIO(path string, b []byte) (ProcessIO, error) {
	var io ProcessIO
	var seen uint8
	for n := 1; len(b) > 0; n++ {
		var line []byte
		line, b = nextLine(b)
		name, rest := nextField(line)
		var dst *uint64
		var bit uint8
		switch string(name) {
		case "rchar:":
			dst, bit = &io.RChar, 1
		case "syscr:":
			dst, bit = &io.SyscR, 2
		case "read_bytes:":
			dst, bit = &io.ReadBytes, 4
		default:
			continue
		}
		value, _ := nextField(rest)
		v, ok := parseUint(value)
		if !ok {
			return ProcessIO{}, fmt.Errorf("%s: line %d (%s): not a number: %s", path, n, Quote(string(name)), Quote(string(value)))
		}
		*dst = v
		seen |= bit
	}
	if seen != 7 {
		return ProcessIO{}, fmt.Errorf("%s: %w: rchar, syscr and read_bytes wanted", path, errProcessIOShort)
	}
	return io, nil
}
