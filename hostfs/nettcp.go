package hostfs

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"strconv"

	"github.com/gpudiag/gpudiag/hostfile"
)

// procNetTCPBytes bounds /proc/net/tcp and tcp6: a line of some 150 bytes
// per socket, TIME_WAIT included, so 1.7 million sockets. The table is
// streamed, so memory stays that of the distinct ports whatever the size;
// the bound and the caller's deadline limit the time.
const procNetTCPBytes = 256 << 20

// nextLine returns b's first line, without its newline, and what follows.
func nextLine(b []byte) (line, rest []byte) {
	if i := bytes.IndexByte(b, '\n'); i >= 0 {
		return b[:i], b[i+1:]
	}
	return b, nil
}

// nextField returns the first space-separated field of b and what follows.
func nextField(b []byte) (field, rest []byte) {
	b = bytes.TrimLeft(b, " \t")
	i := bytes.IndexAny(b, " \t")
	if i < 0 {
		return b, nil
	}
	return b[:i], b[i:]
}

// TCPLocalPorts streams the /proc/net table named ("tcp" or "tcp6") and
// calls port with each socket's local port. procfs's NetTCP would build a
// record of every socket (a million TIME_WAIT sockets, some 200 MB) to give
// this.
func (f FS) TCPLocalPorts(ctx context.Context, table string, port func(uint64)) error {
	path := f.ProcPath("net", table)
	file, err := hostfile.Open(path)
	if err != nil {
		return err
	}
	defer file.Close()
	sc := bufio.NewScanner(hostfile.Limit(file, path, procNetTCPBytes))
	for line := 1; sc.Scan(); line++ {
		if line%4096 == 0 && ctx.Err() != nil {
			return fmt.Errorf("%s: sample deadline reached at line %d: %w", path, line, ctx.Err())
		}
		b := sc.Bytes()
		if line == 1 || len(bytes.TrimSpace(b)) == 0 {
			continue // the header
		}
		// "sl: local_address rem_address st ...", the address as
		// hexadecimal IP:port. The fields are found in place: a
		// million lines must not cost a million allocations.
		_, rest := nextField(b) // sl
		local, rest := nextField(rest)
		if st, _ := nextField(rest); len(st) == 0 {
			return fmt.Errorf("%s: line %d: fewer than 4 fields (truncated?)", path, line)
		}
		i := bytes.LastIndexByte(local, ':')
		p, err := strconv.ParseUint(string(local[i+1:]), 16, 16)
		if i < 0 || err != nil {
			return fmt.Errorf("%s: line %d: bad local address %s", path, line, Quote(string(local)))
		}
		port(p)
	}
	if err := sc.Err(); err != nil {
		return WithPath(path, err)
	}
	return nil
}
