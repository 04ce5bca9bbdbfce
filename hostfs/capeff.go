package hostfs

import (
	"bufio"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// CapIPCLock is CAP_IPC_LOCK's bit in a capability set: a process holding
// it may lock and register (RDMA) memory beyond RLIMIT_MEMLOCK.
const CapIPCLock = 14

// CapEff reads the effective capability set (CapEff) of /proc/<pid>/status.
func (f FS) CapEff(pid int) (uint64, error) {
	return streamParsed(f.pidPath(pid, "status"), procStatusBytes, ParseCapEff)
}

// ParseCapEff parses the CapEff line of a status file, a hexadecimal
// mask. A file without the line is an error.
func ParseCapEff(r io.Reader, path string) (uint64, error) {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		val, ok := strings.CutPrefix(sc.Text(), "CapEff:")
		if !ok {
			continue
		}
		v := strings.TrimSpace(val)
		caps, err := strconv.ParseUint(v, 16, 64)
		if err != nil {
			return 0, fmt.Errorf("%s: CapEff: not a hexadecimal mask: %s", path, Quote(v))
		}
		return caps, nil
	}
	if err := sc.Err(); err != nil {
		return 0, WithPath(path, err)
	}
	return 0, fmt.Errorf("%s: no CapEff line", path)
}
