package hostfs

import (
	"errors"
	"fmt"
	"io/fs"
	"strconv"
	"strings"
)

// Sysctls, read under /proc/sys rather than through procfs, whose blocking
// open would wait on a FIFO in a tree given as --path.procfs.

// sysctlPath is where /proc/sys holds the sysctl name (vm.swappiness).
func (f FS) sysctlPath(name string) string {
	return f.ProcPath("sys", strings.ReplaceAll(name, ".", "/"))
}

// Sysctl reads a sysctl's whitespace-separated values; absent gives nil,
// nil.
func (f FS) Sysctl(name string) ([]string, error) {
	path := f.sysctlPath(name)
	b, err := ReadAttr(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, WithPath(path, err)
	}
	return strings.Fields(string(b)), nil
}

// SysctlInts reads a sysctl of integers; absent gives nil, nil.
func (f FS) SysctlInts(name string) ([]int, error) {
	fields, err := f.Sysctl(name)
	if err != nil || fields == nil {
		return nil, err
	}
	out := make([]int, len(fields))
	for i, v := range fields {
		if out[i], err = strconv.Atoi(v); err != nil {
			return nil, fmt.Errorf("%s: field %d is not an integer: %s", f.sysctlPath(name), i+1, Quote(v))
		}
	}
	return out, nil
}
