package hostfs

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"

	"github.com/gpudiag/gpudiag/sample"
)

// procVMStatBytes bounds /proc/vmstat: some 180 lines, under 8 KiB on
// every kernel.
const procVMStatBytes = 64 << 10

// VMStat reads the counters of /proc/vmstat the analyzers use; a file
// that is not there leaves every one unmeasured (VMCounters.Unmeasured).
func (f FS) VMStat() (sample.VMCounters, error) {
	vm, err := readParsed(f, f.ProcPath("vmstat"), procVMStatBytes, func(path string, raw []byte) (sample.VMCounters, error) {
		return ParseVMStat(path, bytes.NewReader(raw))
	})
	if errors.Is(err, fs.ErrNotExist) {
		return sample.VMCounters{Unmeasured: []string{sample.VMSwapIn, sample.VMSwapOut, sample.VMMajorFaults, sample.VMPageCacheRefaults}}, nil
	}
	return vm, err
}

// ParseVMStat reads the counters the analyzers use from /proc/vmstat ("name
// value" lines); procfs has no parser for this file. Read every second, it
// takes each line in place: no string or slice per line of its 180. A line
// of another shape is an error; a counter the file lacks is named in
// Unmeasured (workingset_refault before 3.15, a container's partial /proc).
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
	}{{sawSwapIn, sample.VMSwapIn}, {sawSwapOut, sample.VMSwapOut}, {sawMajorFaults, sample.VMMajorFaults}} {
		if seen&need.bit == 0 {
			vm.Unmeasured = append(vm.Unmeasured, need.name)
		}
	}
	switch {
	case refaultFile != nil:
		vm.PageCacheRefaults = *refaultFile
	case refaultAll != nil:
		vm.PageCacheRefaults = *refaultAll
	default:
		vm.Unmeasured = append(vm.Unmeasured, sample.VMPageCacheRefaults)
	}
	return vm, nil
}
