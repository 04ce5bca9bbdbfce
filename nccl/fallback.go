package nccl

import (
	"strconv"
	"strings"
)

// Fallback kinds.
const (
	// FallbackP2PDisabled: GPUs of one node talk through host shared memory
	// (SHM), or NCCL_P2P_DISABLE / NCCL_P2P_LEVEL=LOC forbids P2P.
	FallbackP2PDisabled = "p2p_disabled"
	// FallbackSHMDisabled: NCCL_SHM_DISABLE forbids the shared-memory path,
	// leaving the network for whatever P2P cannot reach.
	FallbackSHMDisabled = "shm_disabled"
	// FallbackSocketInsteadOfIB: connections run over TCP sockets. "Using
	// network Socket" alone is not enough: NCCL picks a network for every
	// communicator, and a single-node job that never uses it logs the same.
	FallbackSocketInsteadOfIB = "socket_instead_of_ib"
	// FallbackIBWithoutGDR: InfiniBand/RoCE without GPUDirect RDMA, so every
	// message is staged through host memory.
	FallbackIBWithoutGDR = "ib_without_gdr"
	// FallbackP2PCopy: NCCL could not enable P2P and copies through the host
	// ("unable to enable P2P, falling back to copy").
	FallbackP2PCopy = "p2p_copy_fallback"
	// FallbackNetWithinNode: two ranks known to run on this node connect
	// through the network (NET/*), typically because containers gave them
	// different host identities.
	FallbackNetWithinNode = "net_within_node"
)

// The paths a Fallback names as expected, or taken where no transport class
// says it.
const (
	expectedNVLinkP2P       = "P2P over NVLink"
	expectedP2P             = "P2P (over NVLink or a shared PCIe switch)"
	expectedIntraNode       = "P2P or SHM"
	expectedIBWithGDR       = "NET/IB+GDRDMA"
	expectedDirectP2P       = "P2P without host copy"
	takenP2PThroughHostCopy = "P2P through a host copy"
)

// FallbackKinds lists every kind, in the order Fallbacks reports them.
var FallbackKinds = []string{
	FallbackP2PDisabled, FallbackSHMDisabled, FallbackSocketInsteadOfIB,
	FallbackIBWithoutGDR, FallbackP2PCopy, FallbackNetWithinNode,
}

// Fallback is one way the process's communication took a slower path than
// the one it should have: what was taken, what was expected, and the lines
// that say so.
type Fallback struct {
	Kind     string
	Taken    string
	Expected string
	Evidence string
}

// IsLocal reports whether a communicator's rank is known to run on this
// node. Fallbacks uses it to tell a network connection between two GPUs of
// the node (a fallback) from one to another node (normal).
type IsLocal func(commID string, rank int) bool

// Fallbacks derives the fallbacks the summary shows, in FallbackKinds
// order. isLocal may be nil when no other rank's location is known.
func (s *Summary) Fallbacks(isLocal IsLocal) []Fallback {
	var out []Fallback
	// Without NVLink in NCCL's topology dump, SHM may be the best this pair
	// of GPUs has (P2P across CPU sockets is off by default); the expected
	// path then says what P2P needs.
	p2p, intraNode := expectedP2P, expectedIntraNode
	if s.NVLinkInTopology {
		p2p, intraNode = expectedNVLinkP2P, expectedNVLinkP2P
	}
	slowIntra := s.takenAmong(TransportSHM, TransportNetSocket, TransportNetIB, TransportNetIBGDR, TransportNetOther, TransportNetOtherGDR)

	// p2p_disabled
	var ev []string
	if v, ok := s.EnvValue("NCCL_P2P_DISABLE"); ok && truthy(v) {
		ev = append(ev, "NCCL_P2P_DISABLE="+v+" set by environment")
	}
	if v, ok := s.EnvValue("NCCL_P2P_LEVEL"); ok && (strings.EqualFold(v, "LOC") || v == "0") {
		ev = append(ev, "NCCL_P2P_LEVEL="+v+" set by environment")
	}
	if n := s.connections(TransportSHM); n > 0 {
		ev = append(ev, strconv.Itoa(n)+" connections via "+s.pathOf(TransportSHM))
	}
	if len(ev) > 0 {
		taken := slowIntra
		if s.Uses(TransportSHM) {
			taken = TransportSHM
		}
		out = append(out, Fallback{FallbackP2PDisabled, taken, p2p, strings.Join(ev, "; ")})
	}

	// shm_disabled
	if v, ok := s.EnvValue("NCCL_SHM_DISABLE"); ok && truthy(v) {
		out = append(out, Fallback{FallbackSHMDisabled, s.takenAmong(TransportNetSocket, TransportNetIB,
			TransportNetIBGDR, TransportNetOther, TransportNetOtherGDR), intraNode,
			"NCCL_SHM_DISABLE=" + v + " set by environment"})
	}

	// socket_instead_of_ib
	if n := s.connections(TransportNetSocket); n > 0 {
		ev := []string{strconv.Itoa(n) + " connections via " + s.pathOf(TransportNetSocket)}
		if s.IBNoDevice {
			ev = append(ev, "NET/IB : No device found")
		}
		if v, ok := s.EnvValue("NCCL_IB_DISABLE"); ok && truthy(v) {
			ev = append(ev, "NCCL_IB_DISABLE="+v+" set by environment")
		}
		if len(s.SocketInterfaces) > 0 {
			ev = append(ev, "socket interfaces "+strings.Join(firstN(s.SocketInterfaces, maxEvidenceEntries), " "))
		}
		out = append(out, Fallback{FallbackSocketInsteadOfIB, TransportNetSocket, expectedIBWithGDR, strings.Join(ev, "; ")})
	}

	// ib_without_gdr: connections over InfiniBand or RoCE stage through host
	// memory. Sends alone without GDR are NCCL's default where it keeps
	// GPUDirect RDMA for receives (PCIe GPUs before NCCL_NET_GDR_READ
	// defaulted on), so it takes a receive without it, or none with it. A
	// log without connection lines still says it where NCCL's notes turn
	// GDR off on an IB network and nothing says it is on.
	plain, withGDR := s.connections(TransportNetIB), s.connections(TransportNetIBGDR)
	notesOnly := plain == 0 && withGDR == 0 && len(s.GDRNotes) > 0 && s.NetworkKind() == NetworkIB &&
		!s.GDREnabled
	if plain > 0 && (withGDR == 0 || s.IBPlainReceives > 0) || notesOnly {
		var ev []string
		taken := TransportNetIB
		if plain > 0 {
			ev = append(ev, strconv.Itoa(plain)+" connections via "+s.pathOf(TransportNetIB)+" without /GDRDMA")
		} else {
			taken = "NET/IB (GPUDirect RDMA off)"
		}
		if v, ok := s.EnvValue("NCCL_NET_GDR_LEVEL"); ok {
			ev = append(ev, "NCCL_NET_GDR_LEVEL="+v+" set by environment")
		}
		ev = append(ev, firstN(s.GDRNotes, maxEvidenceEntries)...)
		out = append(out, Fallback{FallbackIBWithoutGDR, taken, expectedIBWithGDR, strings.Join(ev, "; ")})
	}

	// p2p_copy_fallback
	if s.CopyFallback != "" {
		out = append(out, Fallback{FallbackP2PCopy, takenP2PThroughHostCopy, expectedDirectP2P, s.CopyFallback})
	}

	// net_within_node
	if isLocal != nil {
		var taken, example string
		n := 0
		for _, pl := range s.Peers {
			if !strings.HasPrefix(pl.Transport, "NET/") || !isLocal(pl.Comm, pl.Peer) {
				continue
			}
			n += pl.Connections
			if taken == "" {
				taken = pl.Transport
				example = "ranks " + strconv.Itoa(pl.Rank) + " and " + strconv.Itoa(pl.Peer) + commText(pl.Comm) +
					" run on this node yet connect via " + pl.Path
			}
		}
		if n > 0 {
			out = append(out, Fallback{FallbackNetWithinNode, taken, intraNode,
				example + " (" + strconv.Itoa(n) + " connections between ranks on this node)"})
		}
	}
	return out
}

// commText names a communicator in evidence.
func commText(key string) string {
	if key == "" {
		return ""
	}
	return " of comm " + key
}

func (s *Summary) connections(class string) int {
	for _, t := range s.Transports {
		if t.Transport == class {
			return t.Connections
		}
	}
	return 0
}

// pathOf returns the first "via" text of a class, for evidence.
func (s *Summary) pathOf(class string) string {
	for _, p := range s.Paths {
		if classify(p) == class {
			return p
		}
	}
	return class
}

// takenAmong joins the classes the process used, from the given ones.
func (s *Summary) takenAmong(classes ...string) string {
	var used []string
	for _, c := range classes {
		if s.Uses(c) {
			used = append(used, c)
		}
	}
	return strings.Join(used, ",")
}

// truthy reads an integer setting as NCCL does (strtoll, base auto): any
// non-zero number is on; text it cannot parse leaves the default (off).
func truthy(v string) bool {
	n, err := strconv.ParseInt(v, 0, 64)
	return err == nil && n != 0
}

func firstN(s []string, n int) []string {
	if len(s) > n {
		return s[:n]
	}
	return s
}
