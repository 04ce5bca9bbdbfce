package hostfs

import (
	"bufio"
	"bytes"
	"fmt"
	"io"

	"github.com/gpudiag/gpudiag/sample"
)

// procVMStatBytes bounds /proc/vmstat: some 180 lines, under 8 KiB on
// every kernel.
const procVMStatBytes = 64 << 10

// VMStat reads the counters of /proc/vmstat the analyzers use.
func (f FS) VMStat() (sample.VMCounters, error) {
	return readParsed(f, f.ProcPath("vmstat"), procVMStatBytes, func(path string, raw []byte) (sample.VMCounters, error) {
		return ParseVMStat(path, bytes.NewReader(raw))
	})
}

// ParseVMStat reads the counters the analyzers use from /proc/vmstat ("name
// value" lines); procfs has no parser for this file. Read every second, it
// takes each line in place: no string or slice per line of its 180.
func ParseVMStat(path string, r io.Reader) (sample.VMCounters, error) {
	var vm sample.VMCounters
	var refaultFile, refaultAll *uint64
	const (
		sawSwapIn = 1 << iota
		sawSwapOut
		sawMajorFaults
	)
	seen := 0
	s := bufio.NewScanner(r)
	for line := 1; s.Scan(); line++ {
		name, rest := nextField(s.Bytes())
		if len(name) == 0 {
			continue
		}
		value, rest := nextField(rest)
		if extra, _ := nextField(rest); len(value) == 0 || len(extra) > 0 {
			return vm, fmt.Errorf("%s: line %d: want \"name value\", got %s", path, line, Quote(s.Text()))
		}
		v, ok := parseUint(value)
		if !ok {
			return vm, fmt.Errorf("%s: line %d: %s is not a counter: %s", path, line, Quote(string(name)), Quote(string(value)))
		}
		switch string(name) {
		case "pswpin":
			vm.SwapInPages, seen = v, seen|sawSwapIn
		case "pswpout":
			vm.SwapOutPages, seen = v, seen|sawSwapOut
		case "pgmajfault":
			vm.MajorFaults, seen = v, seen|sawMajorFaults
		case "oom_kill":
			vm.OOMKills, vm.HasOOMKills = v, true
		case "workingset_refault_file":
			refaultFile = &v
		case "workingset_refault":
			refaultAll = &v
		}
	}
	if err := s.Err(); err != nil {
		return vm, fmt.Errorf("%s: %w", path, err)
	}
	for _, need := range []struct {
		bit  int
		name string
	}{{sawSwapIn, "pswpin"}, {sawSwapOut, "pswpout"}, {sawMajorFaults, "pgmajfault"}} {
		if seen&need.bit == 0 {
			return vm, fmt.Errorf("%s: no %s line (truncated?)", path, need.name)
		}
	}
	switch {
	case refaultFile != nil:
		vm.PageCacheRefaults = *refaultFile
	case refaultAll != nil:
		vm.PageCacheRefaults = *refaultAll
	default:
		return vm, fmt.Errorf("%s: no workingset_refault_file or workingset_refault line (truncated?)", path)
	}
	return vm, nil
}
