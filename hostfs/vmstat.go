package hostfs

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
)

// procVMStatBytes bounds /proc/vmstat: some 180 lines, under 8 KiB on
// every kernel.
const procVMStatBytes = 64 << 10

// VMStat is the part of /proc/vmstat the analyzers use: event counters
// since boot.
type VMStat struct {
	// Unmeasured names the counters (VMSwapIn, VMSwapOut, VMMajorFaults,
	// VMPageCacheRefaults) the file did not have, or all of them when there
	// was no file: their fields are 0 and mean nothing. oom_kill, which
	// kernels before 4.13 lack, is HasOOMKills.
	Unmeasured   []string
	SwapInPages  uint64
	SwapOutPages uint64
	MajorFaults  uint64
	// PageCacheRefaults counts file pages read back in soon after the page
	// cache evicted them (workingset_refault_file; workingset_refault before
	// 5.9, when only file pages were tracked).
	PageCacheRefaults uint64
	HasOOMKills       bool
	OOMKills          uint64
}

// The /proc/vmstat counters VMStat keeps, by their kernel names, as its
// Unmeasured names them. VMPageCacheRefaults stands for
// workingset_refault_file, or workingset_refault before 5.9.
const (
	VMSwapIn            = "pswpin"
	VMSwapOut           = "pswpout"
	VMMajorFaults       = "pgmajfault"
	VMPageCacheRefaults = "workingset_refault"
)

// VMStat reads the counters of /proc/vmstat the analyzers use; a file
// that is not there leaves every one unmeasured (VMStat.Unmeasured).
func (f FS) VMStat() (VMStat, error) {
	vm, err := readParsed(f, f.ProcPath("vmstat"), procVMStatBytes, func(path string, raw []byte) (VMStat, error) {
		return ParseVMStat(path, bytes.NewReader(raw))
	})
	if errors.Is(err, fs.ErrNotExist) {
		return VMStat{Unmeasured: []string{VMSwapIn, VMSwapOut, VMMajorFaults, VMPageCacheRefaults}}, nil
	}
	return vm, err
}

// ParseVMStat reads the counters the analyzers use from /proc/vmstat ("name
// value" lines); procfs has no parser for this file. Read every second, it
// takes each line in place: no string or slice per line of its 180. A line
// of another shape is an error; a counter the file lacks is named in
// Unmeasured (workingset_refault before 3.15, a container's partial /proc).
func ParseVMStat(path string, r io.Reader) (VMStat, error) {
	var vm VMStat
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
		case VMSwapIn:
			vm.SwapInPages, seen = v, seen|sawSwapIn
		case VMSwapOut:
			vm.SwapOutPages, seen = v, seen|sawSwapOut
		case VMMajorFaults:
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
	}{{sawSwapIn, VMSwapIn}, {sawSwapOut, VMSwapOut}, {sawMajorFaults, VMMajorFaults}} {
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
		vm.Unmeasured = append(vm.Unmeasured, VMPageCacheRefaults)
	}
	return vm, nil
}
