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
	comm        string // commID, or the key of a communicator NCCL gave none
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
//	Ring 00 : 6 -> 2 [receive] via NET/IB/0                     (NCCL <= 2.4: no GPU on the network)
//	Ring 00 : 0[1b000] -> 7[41000] via direct shared memory     (NCCL <= 2.5)
//	Channel 00/0 : 3[1] -> 4[0] [send] via NET/IBext_v8/5(2)/GDRDMA
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
	comm := ""
	if p.current != nil {
		k.comm = p.current.seq
		comm = p.commKey(p.current)
	}
	localGPU := ""
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
		from, fromGPU, ok1 := rankOf(f[3])
		to, toGPU, ok2 := rankOf(f[5])
		if !ok1 || !ok2 {
			return
		}
		if len(f) > 6 {
			k.dir = directionOf(f[6])
		}
		// NCCL prints a connection from the rank that sets it up, the
		// sender's side but for [receive]: the local rank is on the
		// left, and a receive line names the sender first.
		k.rank, k.peer, localGPU = int32(from), int32(to), fromGPU
		if k.dir == dirReceive {
			k.rank, k.peer, localGPU = int32(to), int32(from), toGPU
		}
	default:
		return
	}
	p.paths = addBounded(p.paths, path, MaxPaths)
	p.noteRank(RankRef{Comm: comm, Rank: int(k.rank)}, localGPU)
	if k.peer >= 0 && (class == TransportP2P || class == TransportSHM) {
		// P2P and SHM reach only GPUs of the same node.
		p.notePeer(RankRef{Comm: comm, Rank: int(k.peer)})
	}
	if _, seen := p.conns[k]; seen {
		return
	}
	// Past the bound a repeated line may be counted twice: the counts stay
	// an upper bound and memory stays flat.
	if len(p.conns) < MaxConnections {
		p.conns[k] = struct{}{}
	}
	p.transports[class]++
	if class == TransportNetIB && k.dir != dirSend {
		p.ibPlainRecv++
	}
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
	p.peers[pk] = &peerLink{commID: commID, comm: comm, path: path, connections: 1}
	p.peerOrder = append(p.peerOrder, pk)
}

// noteRank records a rank the process drives, with the GPU its line names.
func (p *procState) noteRank(r RankRef, gpu string) {
	if old, seen := p.localRanks[r]; seen {
		if old == "" && gpu != "" {
			p.localRanks[r] = gpu
		}
		return
	}
	if len(p.localRanks) >= MaxPeerLinks {
		return
	}
	p.localRanks[r] = gpu
	p.localOrder = append(p.localOrder, r)
}

// notePeer records a peer that shares the process's node.
func (p *procState) notePeer(r RankRef) {
	if _, seen := p.nodePeers[r]; seen || len(p.nodePeers) >= MaxPeerLinks {
		return
	}
	p.nodePeers[r] = struct{}{}
	p.peerOrderN = append(p.peerOrderN, r)
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

// rankOf reads "3[3]" or "3[1b000]", the rank before the bracket and the
// GPU in it, or NCCL <= 2.4's bare "3" on network connections.
func rankOf(f string) (int, string, bool) {
	r, gpu, hasGPU := strings.Cut(f, "[")
	if hasGPU {
		var ok bool
		if gpu, ok = strings.CutSuffix(gpu, "]"); !ok {
			return 0, "", false
		}
	}
	n, ok := atoiPositive([]byte(r))
	return n, truncate(gpu, maxNameBytes), ok
}

// classify maps a "via" path to its transport class.
func classify(path string) string {
	switch {
	case strings.HasPrefix(path, "P2P"):
		return TransportP2P
	case strings.HasPrefix(path, "SHM"), path == "direct shared memory":
		// NCCL <= 2.4 wrote "via direct shared memory".
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
