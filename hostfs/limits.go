package hostfs

import (
	"bufio"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// procLimitsBytes bounds /proc/<pid>/limits: 17 lines of some 80 bytes.
const procLimitsBytes = 64 << 10

// Memlock is a process's RLIMIT_MEMLOCK, soft limit (what the kernel
// checks against mlock and, without CAP_IPC_LOCK, RDMA memory
// registration).
type Memlock struct {
	Unlimited bool
	Bytes     uint64 // when not Unlimited
}

// MaxLockedMemory reads the "Max locked memory" line of
// /proc/<pid>/limits.
func (f FS) MaxLockedMemory(pid int) (Memlock, error) {
	return streamParsed(f.pidPath(pid, "limits"), procLimitsBytes, ParseMaxLockedMemory)
}

// ParseMaxLockedMemory parses the soft limit of the "Max locked memory"
// line of a limits file: a number of bytes, or "unlimited". A file without
// the line is an error.
func ParseMaxLockedMemory(r io.Reader, path string) (Memlock, error) {
	const key = "Max locked memory"
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), key)
		if !ok {
			continue
		}
		fields := strings.Fields(rest)
		if len(fields) == 0 {
			return Memlock{}, fmt.Errorf("%s: %s: no soft limit", path, key)
		}
		if fields[0] == "unlimited" {
			return Memlock{Unlimited: true}, nil
		}
		v, err := strconv.ParseUint(fields[0], 10, 64)
		if err != nil {
			return Memlock{}, fmt.Errorf("%s: %s: neither unlimited nor a number: %s", path, key, Quote(fields[0]))
		}
		if len(fields) > 2 && fields[2] != "bytes" {
			return Memlock{}, fmt.Errorf("%s: %s: unit %s, not bytes", path, key, Quote(fields[2]))
		}
		return Memlock{Bytes: v}, nil
	}
	if err := sc.Err(); err != nil {
		return Memlock{}, WithPath(path, err)
	}
	return Memlock{}, fmt.Errorf("%s: no %q line", path, key)
}
