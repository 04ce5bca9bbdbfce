package hostfs

import (
	"errors"
	"fmt"
	"io/fs"

	"github.com/prometheus/procfs"

	"github.com/gpudiag/gpudiag/hostfile"
)

// procSockstatBytes bounds /proc/net/sockstat{,6}, read by procfs after
// hostfile.Check.
const procSockstatBytes = 1 << 16

// TCPSockets is how many TCP sockets the reader's network namespace
// holds, from /proc/net/sockstat and sockstat6 (absent where IPv6 is
// disabled): those in use of both families and those in TIME_WAIT. It
// reads two small files, where the TCP tables (TCPLocalPorts) are walked
// bucket by bucket.
func (f FS) TCPSockets() (int, error) {
	n := 0
	for _, read := range []struct {
		file  string
		parse func() (*procfs.NetSockstat, error)
	}{{"sockstat", f.pfs.NetSockstat}, {"sockstat6", f.pfs.NetSockstat6}} {
		path := f.ProcPath("net", read.file)
		if err := hostfile.Check(path, procSockstatBytes); err != nil {
			if errors.Is(err, fs.ErrNotExist) && read.file == "sockstat6" {
				continue
			}
			return 0, err
		}
		st, err := read.parse()
		if err != nil {
			return 0, fmt.Errorf("%s: %w", path, err)
		}
		found := false
		for _, p := range st.Protocols {
			if p.Protocol != "TCP" && p.Protocol != "TCP6" {
				continue
			}
			found = true
			n += p.InUse
			if p.TW != nil {
				n += *p.TW
			}
		}
		if !found {
			return 0, fmt.Errorf("%s: no TCP line", path)
		}
	}
	return n, nil
}
