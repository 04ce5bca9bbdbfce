package hostfs

import (
	"bufio"
	"bytes"
	"fmt"
	"io"

	"github.com/gpudiag/gpudiag/hostfile"
)

// procStatusBytes bounds /proc/<pid>/status: some 1.5 KiB, and its
// allowed lists stay short even for 8192 CPUs.
const procStatusBytes = 1 << 20

// AllowedLists reads Cpus_allowed_list and Mems_allowed_list from
// /proc/<pid>/status. procfs's status parser has no Mems_allowed_list and
// silently turns a malformed CPU list into CPU 0, so the file is read here
// once for both.
func (f FS) AllowedLists(pid int) (cpus, mems string, allowed []int, err error) {
	path := f.pidPath(pid, "status")
	file, err := hostfile.Open(path)
	if err != nil {
		return "", "", nil, err
	}
	defer file.Close()
	return ParseAllowedLists(hostfile.Limit(file, path, procStatusBytes), path)
}

// ParseAllowedLists parses a status file's allowed lists: the text of
// both, and the CPUs as members.
func ParseAllowedLists(rd io.Reader, path string) (cpus, mems string, allowed []int, err error) {
	sc := bufio.NewScanner(rd)
	for sc.Scan() {
		// Bytes, not Text: of some 55 lines two are kept.
		key, val, ok := bytes.Cut(sc.Bytes(), []byte(":"))
		if !ok {
			continue
		}
		switch string(key) {
		case "Cpus_allowed_list":
			cpus = string(bytes.TrimSpace(val))
			if allowed, err = ParseCPUList(cpus); err != nil {
				return "", "", nil, fmt.Errorf("%s: Cpus_allowed_list: %w", path, err)
			}
		case "Mems_allowed_list":
			mems = string(bytes.TrimSpace(val))
			if _, err = ParseCPUList(mems); err != nil {
				return "", "", nil, fmt.Errorf("%s: Mems_allowed_list: %w", path, err)
			}
		}
	}
	if err := sc.Err(); err != nil {
		return "", "", nil, WithPath(path, err)
	}
	return cpus, mems, allowed, nil
}
