package nccl

import "strings"

// Transport classes: what a "via ..." line says about the path a connection
// takes. The log cannot tell NVLink from PCIe for P2P; the topology lines
// (Summary.NVLinkInTopology) say whether NVLink exists.
const (
	TransportP2P         = "P2P"
	TransportSHM         = "SHM"
	TransportNetSocket   = "NET/Socket"
	TransportNetIB       = "NET/IB"
	TransportNetIBGDR    = "NET/IB+GDRDMA"
	TransportNetOther    = "NET/other"
	TransportNetOtherGDR = "NET/other+GDRDMA"
	TransportCollNet     = "COLLNET"
	TransportNVLS        = "NVLS"
	transportNone        = ""
)

// Transports lists the classes from fastest-intended to slowest, the order
// summaries and metrics use.
var Transports = []string{
	TransportNVLS, TransportP2P, TransportCollNet, TransportNetIBGDR, TransportNetOtherGDR,
	TransportNetIB, TransportNetOther, TransportSHM, TransportNetSocket,
}

// connKey is kept small: a process holds up to MaxConnections of them.
type connKey struct {
	comm       uint32
	rank, peer int32
	channel    uint16
	connIdx    int8
	dir        direction
	collNet    bool
}

type direction uint8

const (
	dirNone direction = iota
	dirSend
	dirReceive
)

type peerKey struct {
	comm       uint32
	rank, peer int32
	transport  string
}

type peerLink struct {
	commID      string
	path        string
	connections int
}

// connection reads a transport line:
//
//	Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM
//	Channel 00 : 0[1b000] -> 1[3d000] via SHM/direct/direct
//	Channel 00/0 : 1[1] -> 0[0] [receive] via NET/Socket/0
//	Channel 01/0 : 0[0] -> 8[0] [send] via NET/IB/0(1)/GDRDMA(PCI)/Shared
//	Ring 00 : 0[0] -> 1[1] via P2P/IPC                          (NCCL 2.4)
//	CollNet 00/0 : 0 [send] via COLLNET/SHARP/0/GDRDMA
//
// Ring-order lines ("Channel 00/24 : 0 1") have no "via" and are skipped.
func (p *procState) connection(m string) {
	at := strings.Index(m, " via ")
	if at < 0 {
		return
	}
	path := truncate(strings.TrimSpace(m[at+len(" via "):]), maxNameBytes)
	class := classify(path)
	if class == transportNone {
		return
	}
	f := strings.Fields(m[:at])
	if len(f) < 4 || f[2] != ":" {
		return
	}
	chanStr, connStr, hasConn := strings.Cut(f[1], "/")
	channel, ok := atoiPositive([]byte(chanStr))
	if !ok {
		return
	}
	connIdx := -1
	if hasConn {
		if connIdx, ok = atoiPositive([]byte(connStr)); !ok {
			return
		}
	}
	if channel > 0xffff || connIdx > 127 {
		return
	}
	k := connKey{channel: uint16(channel), connIdx: int8(connIdx), rank: -1, peer: -1}
	if p.current != nil {
		k.comm = p.current.seq
	}
	switch {
	case f[0] == "CollNet" || f[0] == "Coll":
		k.collNet = true
		rank, ok := atoiPositive([]byte(f[3]))
		if !ok {
			return
		}
		k.rank = int32(rank)
		if len(f) > 4 {
			k.dir = directionOf(f[4])
		}
	case len(f) >= 6 && f[4] == "->":
		from, ok1 := rankOf(f[3])
		to, ok2 := rankOf(f[5])
		if !ok1 || !ok2 {
			return
		}
		if len(f) > 6 {
			k.dir = directionOf(f[6])
		}
		// A receive line names the sender first: the peer is on the left.
		k.rank, k.peer = int32(from), int32(to)
		if k.dir == dirReceive {
			k.rank, k.peer = int32(to), int32(from)
		}
	default:
		return
	}
	p.paths = addBounded(p.paths, path, MaxPaths)
	if _, seen := p.conns[k]; seen {
		return
	}
	// Past the bound a repeated line may be counted twice: the counts stay
	// an upper bound and memory stays flat.
	if len(p.conns) < MaxConnections {
		p.conns[k] = struct{}{}
	}
	p.transports[class]++
	if k.peer < 0 {
		return
	}
	pk := peerKey{comm: k.comm, rank: k.rank, peer: k.peer, transport: class}
	if pl := p.peers[pk]; pl != nil {
		pl.connections++
		return
	}
	if len(p.peers) >= MaxPeerLinks {
		p.peersDropped++
		return
	}
	commID := ""
	if p.current != nil {
		commID = p.current.commID
	}
	p.peers[pk] = &peerLink{commID: commID, path: path, connections: 1}
	p.peerOrder = append(p.peerOrder, pk)
}

func directionOf(f string) direction {
	switch f {
	case "[send]":
		return dirSend
	case "[receive]":
		return dirReceive
	}
	return dirNone
}

// rankOf reads "3[3]" or "3[1b000]": the rank before the bracket.
func rankOf(f string) (int, bool) {
	r, _, ok := strings.Cut(f, "[")
	if !ok {
		return 0, false
	}
	return atoiPositive([]byte(r))
}

// classify maps a "via" path to its transport class.
func classify(path string) string {
	switch {
	case strings.HasPrefix(path, "P2P"):
		return TransportP2P
	case strings.HasPrefix(path, "SHM"):
		return TransportSHM
	case strings.HasPrefix(path, "COLLNET"):
		return TransportCollNet
	case strings.HasPrefix(path, "NVLS"):
		return TransportNVLS
	case strings.HasPrefix(path, "NET/"):
		name, _, _ := strings.Cut(strings.TrimPrefix(path, "NET/"), "/")
		gdr := strings.Contains(path, "/GDRDMA")
		switch {
		case strings.EqualFold(name, "Socket"):
			return TransportNetSocket
		case strings.HasPrefix(strings.ToUpper(name), "IB"):
			// IB, and plugins named after it (IBext, IBext_v8 from HPC-X).
			if gdr {
				return TransportNetIBGDR
			}
			return TransportNetIB
		case gdr:
			return TransportNetOtherGDR
		default:
			return TransportNetOther
		}
	}
	return transportNone
}

// nvlsChannelsLine reads "24 coll channels, 24 collnet channels, 0 nvls
// channels, 32 p2p channels, 32 p2p channels per peer".
func (p *procState) nvlsChannelsLine(m string) {
	for _, part := range strings.Split(m, ",") {
		f := strings.Fields(part)
		if len(f) == 3 && f[1] == "nvls" && f[2] == "channels" {
			if n, ok := atoiPositive([]byte(f[0])); ok && n > p.nvlsChannels {
				p.nvlsChannels = n
			}
		}
	}
}

// netDeviceList reads "[0]mlx5_0:1/IB [1]mlx5_1:1/RoCE [RO]; OOB eth0:10.0.0.1<0>"
// or "[0]eth0:192.0.2.2<0> [1]eth1:...": the "[N]name" entries before ";".
func netDeviceList(s string) []string {
	s, _, _ = strings.Cut(s, ";")
	var out []string
	for _, f := range strings.Fields(s) {
		if !strings.HasPrefix(f, "[") {
			continue
		}
		end := strings.IndexByte(f, ']')
		if end < 2 {
			continue
		}
		if _, ok := atoiPositive([]byte(f[1:end])); !ok || end+1 >= len(f) {
			continue
		}
		out = append(out, truncate(f[end+1:], maxNameBytes))
	}
	return out
}

// socketInterface turns "eth0:192.0.2.2<0>" into "eth0:192.0.2.2".
func socketInterface(d string) string {
	if i := strings.IndexByte(d, '<'); i > 0 {
		return d[:i]
	}
	return d
}
