package hostfs

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"strconv"

	"github.com/gpudiag/gpudiag/sample"
)

// procVMStatBytes bounds /proc/vmstat: some 180 lines, under 8 KiB on
// every kernel.
const procVMStatBytes = 64 << 10

// VMStat reads the counters of /proc/vmstat the analyzers use.
func (f FS) VMStat() (sample.VMCounters, error) {
	return readParsed(f.ProcPath("vmstat"), procVMStatBytes, func(path string, raw []byte) (sample.VMCounters, error) {
		return ParseVMStat(path, bytes.NewReader(raw))
	})
}

// ParseVMStat reads the counters the analyzers use from /proc/vmstat ("name
// value" lines); procfs has no parser for this file.
func ParseVMStat(path string, r io.Reader) (sample.VMCounters, error) {
	var vm sample.VMCounters
	var refaultFile, refaultAll *uint64
	seen := map[string]bool{}
	s := bufio.NewScanner(r)
	for line := 1; s.Scan(); line++ {
		fields := bytes.Fields(s.Bytes())
		if len(fields) == 0 {
			continue
		}
		if len(fields) != 2 {
			return vm, fmt.Errorf("%s: line %d: want \"name value\", got %s", path, line, Quote(s.Text()))
		}
		v, err := strconv.ParseUint(string(fields[1]), 10, 64)
		if err != nil {
			return vm, fmt.Errorf("%s: line %d: %s is not a counter: %s", path, line, Quote(string(fields[0])), Quote(string(fields[1])))
		}
		name := string(fields[0])
		switch name {
		case "pswpin":
			vm.SwapInPages = v
		case "pswpout":
			vm.SwapOutPages = v
		case "pgmajfault":
			vm.MajorFaults = v
		case "oom_kill":
			vm.OOMKills, vm.HasOOMKills = v, true
		case "workingset_refault_file":
			refaultFile = &v
		case "workingset_refault":
			refaultAll = &v
		default:
			continue
		}
		seen[name] = true
	}
	if err := s.Err(); err != nil {
		return vm, fmt.Errorf("%s: %w", path, err)
	}
	for _, name := range []string{"pswpin", "pswpout", "pgmajfault"} {
		if !seen[name] {
			return vm, fmt.Errorf("%s: no %s line (truncated?)", path, name)
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
