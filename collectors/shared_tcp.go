package collectors

import "time"

// The scopes of TCP traffic: to a peer on this node (loopback) or over the
// network. Both the ebpf collector, which counts them, and the tcp
// collector, which exports them, index TCPBytes arrays by scope.
const (
	tcpLoopback = iota
	tcpNetwork
	tcpScopes
)

// KernelTCP is the TCP payload of the GPU processes counted by the eBPF
// programs at each send and receive call, published by the ebpf collector
// after every sample. The tcp collector takes its byte counts from it while
// it is fresh instead of listing sockets: it costs no polling, sees short
// connections that open and close between two socket listings, and sees
// processes in other network namespaces.
//
// Only the GPU processes' own calls count, not their descendants', as in
// the socket listing: a DataLoader worker streaming a dataset over HTTP is
// input, not a collective.
type KernelTCP struct {
	// At is when the programs' counters were read.
	At time.Time
	// GPUs holds each GPU's cumulative bytes, by scope (tcpLoopback,
	// tcpNetwork), since the collector started; they never decrease. A
	// process on several GPUs counts on each.
	GPUs map[int][tcpScopes]TCPBytes
	// Processes holds each GPU process's bytes since it was first tracked,
	// by scope.
	Processes map[uint32][tcpScopes]TCPBytes
}

// TCPBytes is payload sent and received.
type TCPBytes struct{ Sent, Received uint64 }

// SetKernelTCP publishes a reading; nil withdraws it (programs detached).
func (s *Shared) SetKernelTCP(k *KernelTCP) { s.kernelTCP.Store(k) }

// KernelTCP returns the latest reading, or nil.
func (s *Shared) KernelTCP() *KernelTCP { return s.kernelTCP.Load() }
