package hostfs

import (
	"bufio"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// procMountstatsBytes bounds /proc/<pid>/mountstats: an NFS mount's block
// is some 4 KiB (its per-op table), a host with hundreds of mounts stays
// far below 1 MiB.
const procMountstatsBytes = 1 << 20

// NFSMount is one NFS mount's client statistics.
type NFSMount struct {
	MountPoint string
	Server     string
	FSType     string
	// RSize is the negotiated read size in bytes, 0 when not shown.
	RSize uint64
	// Counters since mount, of the READ operation.
	ReadOps            uint64
	ReadBytes          uint64
	ReadRTTMillis      uint64
	ReadExecuteMillis  uint64
	ReadQueueMillis    uint64
	ReadRetransmission uint64
}

// MountStats reads the NFS mounts of /proc/<pid>/mountstats, in the
// process's mount namespace.
func (f FS) MountStats(pid int) ([]NFSMount, error) {
	return streamParsed(f.pidPath(pid, "mountstats"), procMountstatsBytes, ParseMountStats)
}

// ParseMountStats reads the NFS mounts of a mountstats file: each
// "device S mounted on M with fstype nfs*" block, its "opts:" line
// (rsize) and the READ line of its per-op statistics (ops, transmissions,
// timeouts, bytes sent, bytes received, queue, RTT and execute
// milliseconds, and since 5.x errors). Other filesystems' blocks are
// skipped; a malformed NFS block fails the read.
func ParseMountStats(r io.Reader, path string) ([]NFSMount, error) {
	var out []NFSMount
	var cur *NFSMount
	s := bufio.NewScanner(r)
	s.Buffer(make([]byte, 0, 4096), 64<<10)
	for line := 1; s.Scan(); line++ {
		text := s.Text()
		if strings.HasPrefix(text, "device ") {
			cur = nil
			f := strings.Fields(text)
			// device SOURCE mounted on MOUNTPOINT with fstype TYPE [statvers=…]
			if len(f) < 8 || f[2] != "mounted" || f[3] != "on" || f[5] != "with" || f[6] != "fstype" {
				return nil, fmt.Errorf("%s: line %d: want \"device S mounted on M with fstype T\", got %s", path, line, Quote(text))
			}
			if strings.HasPrefix(f[7], "nfs") {
				out = append(out, NFSMount{Server: f[1], MountPoint: f[4], FSType: f[7]})
				cur = &out[len(out)-1]
			}
			continue
		}
		if cur == nil {
			continue
		}
		f := strings.Fields(text)
		if len(f) == 0 {
			continue
		}
		switch f[0] {
		case "opts:":
			if len(f) < 2 {
				continue
			}
			for _, o := range strings.Split(f[1], ",") {
				if v, ok := strings.CutPrefix(o, "rsize="); ok {
					n, err := strconv.ParseUint(v, 10, 64)
					if err != nil {
						return nil, fmt.Errorf("%s: line %d: rsize %s is not a number", path, line, Quote(v))
					}
					cur.RSize = n
				}
			}
		case "READ:":
			if len(f) < 9 {
				return nil, fmt.Errorf("%s: line %d: READ has %d fields, want at least 8", path, line, len(f)-1)
			}
			var v [8]uint64
			for i := range v {
				n, err := strconv.ParseUint(f[i+1], 10, 64)
				if err != nil {
					return nil, fmt.Errorf("%s: line %d: READ field %d is not a counter: %s", path, line, i+1, Quote(f[i+1]))
				}
				v[i] = n
			}
			cur.ReadOps, cur.ReadBytes = v[0], v[4]
			cur.ReadQueueMillis, cur.ReadRTTMillis, cur.ReadExecuteMillis = v[5], v[6], v[7]
			if v[1] > v[0] {
				cur.ReadRetransmission = v[1] - v[0]
			}
		}
	}
	if err := s.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return out, nil
}
