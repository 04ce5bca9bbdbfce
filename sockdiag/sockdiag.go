// Package sockdiag lists the TCP sockets of a network namespace with their
// cumulative byte counts, through the kernel's NETLINK_SOCK_DIAG interface
// (the one ss(8) uses), and maps sockets to processes through /proc/<pid>/fd.
//
// It exists to see collectives that fell back to TCP sockets (NCCL's
// NET/Socket transport, Gloo) without NCCL logs: such a job moves gigabytes
// per second over TCP from the GPU processes, which nothing else on the node
// attributes to a GPU.
//
// # Network namespaces
//
// A sock_diag dump covers the network namespace of the thread that opens the
// netlink socket, which is the daemon's. Run as a DaemonSet with
// hostNetwork: true, that is the host's, so it sees the sockets of every
// process in the host namespace (and of pods that use hostNetwork, as NCCL
// jobs on RDMA clusters usually do). Sockets of processes in other network
// namespaces (ordinary pods) are not in the dump; callers compare
// /proc/<pid>/ns/net with their own to tell "no TCP traffic" from "cannot
// see". The package never calls setns: that would need CAP_SYS_ADMIN and a
// locked OS thread per namespace.
//
// # Permissions
//
// Dumping needs no privilege: the kernel answers an unprivileged
// SOCK_DIAG_BY_FAMILY dump with every TCP socket of the namespace and its
// tcp_info, byte counters included; only INET_DIAG_MARK and
// INET_DIAG_CLASS_ID, which this package does not ask for, need
// CAP_NET_ADMIN. Observed on Linux 6.18 as root and as nobody (uid 65534,
// no capabilities): the same sockets and counters, those of root's
// processes included. Mapping sockets to a process needs to read
// /proc/<pid>/fd (and /proc/<pid>/ns/net to compare namespaces), which the
// kernel grants to the process's owner and to holders of CAP_SYS_PTRACE: as
// nobody, both read as permission denied for a root process.
package sockdiag

import (
	"net/netip"
	"strconv"
)

// State is a TCP state as the kernel numbers it (include/net/tcp_states.h).
type State uint8

const (
	Established State = 1 + iota
	SynSent
	SynRecv
	FinWait1
	FinWait2
	TimeWait
	Close
	CloseWait
	LastAck
	Listen
	Closing
	NewSynRecv
	BoundInactive
)

var stateNames = [...]string{
	Established:   "established",
	SynSent:       "syn_sent",
	SynRecv:       "syn_recv",
	FinWait1:      "fin_wait1",
	FinWait2:      "fin_wait2",
	TimeWait:      "time_wait",
	Close:         "close",
	CloseWait:     "close_wait",
	LastAck:       "last_ack",
	Listen:        "listen",
	Closing:       "closing",
	NewSynRecv:    "new_syn_recv",
	BoundInactive: "bound_inactive",
}

func (s State) String() string {
	if int(s) < len(stateNames) && stateNames[s] != "" {
		return stateNames[s]
	}
	return "unknown(" + strconv.Itoa(int(s)) + ")"
}

// Socket is one TCP socket as the kernel reported it.
type Socket struct {
	State  State
	Local  netip.AddrPort
	Remote netip.AddrPort
	// Inode is the socket's inode, as in /proc/<pid>/fd/N -> socket:[Inode].
	// It is 0 for TIME_WAIT and NEW_SYN_RECV entries, which no process owns.
	Inode uint32
	// Cookie identifies the socket for its lifetime; unlike inode numbers,
	// cookies are never reused while the system runs.
	Cookie uint64
	UID    uint32
	// HasInfo is true when the kernel attached a tcp_info; it does not for
	// TIME_WAIT and NEW_SYN_RECV entries.
	HasInfo bool
	// HasByteCounters is true when that tcp_info is long enough to hold
	// tcpi_bytes_acked and tcpi_bytes_received (Linux 4.1 and later).
	HasByteCounters bool
	// BytesAcked is the payload the peer acknowledged: bytes sent, without
	// retransmissions and without what is still in flight.
	BytesAcked uint64
	// BytesReceived is the payload received in order.
	BytesReceived uint64
}

// Loopback reports whether both ends are loopback addresses (127.0.0.0/8,
// ::1, or IPv4-mapped 127.0.0.0/8).
func (s *Socket) Loopback() bool {
	return s.Local.Addr().Unmap().IsLoopback() && s.Remote.Addr().Unmap().IsLoopback()
}

// OnHost reports whether the connection's traffic stays on this host: both
// ends are loopback addresses, or both ends have the same address. The second
// case is a process connecting to one of the host's own addresses, as NCCL
// does between ranks of one node when it falls back to sockets on its
// NCCL_SOCKET_IFNAME interface; the kernel routes that through lo, never
// through a NIC.
func (s *Socket) OnHost() bool {
	if s.Loopback() {
		return true
	}
	l, r := s.Local.Addr().Unmap(), s.Remote.Addr().Unmap()
	return l.IsValid() && !l.IsUnspecified() && l == r
}
