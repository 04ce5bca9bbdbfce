package hostfs

import (
	"bytes"
	"fmt"
	"strconv"
)

// procStatBytes bounds /proc/stat: a line per CPU and the intr line, one
// number per interrupt source, under 1 MiB on hosts with thousands of
// IRQs.
const procStatBytes = 1 << 20

// CPUModes is the number of times in a /proc/stat cpu line that
// ProcStat keeps: user, nice, system, idle, iowait, irq, softirq, steal.
const CPUModes = 8

// CPUTicks is one CPU's time by mode, in clock ticks (USER_HZ).
type CPUTicks struct {
	ID    int
	Ticks [CPUModes]uint64
}

// ProcStat is what the cpu collector takes from /proc/stat.
type ProcStat struct {
	CPUs            []CPUTicks // the "cpuN" lines, in file order
	ContextSwitches uint64
	ProcsRunning    uint64
	ProcsBlocked    uint64
	SoftIRQTotal    uint64 // the softirq line's first number; the line comes last
}

// ProcStat reads /proc/stat.
func (f FS) ProcStat() (ProcStat, error) {
	return readParsed(f, f.ProcPath("stat"), procStatBytes, ParseProcStat)
}

// ParseProcStat parses /proc/stat in place, without a string or a slice
// per line: the daemon reads it every second, and on a host with many
// CPUs and IRQs procfs's parser (fmt, a map per CPU) was a sixth of the
// idle daemon's CPU. The intr line, the longest by far, is skipped
// unread. A file cut before its softirq line is an error.
func ParseProcStat(path string, b []byte) (ProcStat, error) {
	var st ProcStat
	sawSoftIRQ := false
	for n := 1; len(b) > 0; n++ {
		var line []byte
		line, b = nextLine(b)
		name, rest := nextField(line)
		bad := func(what string) (ProcStat, error) {
			return ProcStat{}, fmt.Errorf("%s: line %d (%s): %s", path, n, Quote(string(name)), what)
		}
		switch {
		case len(name) > 3 && bytes.HasPrefix(name, []byte("cpu")):
			id, ok := parseUint(name[3:])
			if !ok || id > 1<<20 {
				return bad("not a CPU number")
			}
			c := CPUTicks{ID: int(id)}
			for m := range CPUModes {
				var field []byte
				if field, rest = nextField(rest); len(field) == 0 {
					if m < 4 {
						return bad("fewer than 4 times")
					}
					break // older kernels: no iowait, irq, softirq or steal
				}
				if c.Ticks[m], ok = parseUint(field); !ok {
					return bad("a time is not a number")
				}
			}
			st.CPUs = append(st.CPUs, c)
		case string(name) == "ctxt", string(name) == "procs_running", string(name) == "procs_blocked", string(name) == "softirq":
			field, _ := nextField(rest)
			v, ok := parseUint(field)
			if !ok {
				return bad("not a number: " + strconv.Quote(string(field)))
			}
			switch string(name) {
			case "ctxt":
				st.ContextSwitches = v
			case "procs_running":
				st.ProcsRunning = v
			case "procs_blocked":
				st.ProcsBlocked = v
			default:
				st.SoftIRQTotal, sawSoftIRQ = v, true
			}
		}
	}
	if len(st.CPUs) == 0 || !sawSoftIRQ {
		return ProcStat{}, fmt.Errorf("%s: no per-CPU lines or no softirq line (truncated?)", path)
	}
	return st, nil
}
