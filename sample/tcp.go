package sample

// TCPKey is the tcp collector's key: its samples are *TCP.
var TCPKey = NewKey[TCP]("tcp")

// TCP is one reading of the TCP traffic of the GPU processes: the signal of a
// collective that fell back to sockets (NCCL NET/Socket, Gloo), which moves
// gigabytes per second over TCP from processes that should be using NVLink or
// RDMA.
type TCP struct {
	// Source is where the byte counts come from: TCPSourceSockDiag (each
	// socket's tcp_info, listed every cycle) or TCPSourceEBPF (the eBPF
	// programs' counts at each send and receive call; the socket listing
	// then only refreshes the connection counts, every 15 cycles).
	Source string `json:"source,omitempty"`
	// IntervalSeconds is the time since the previous reading, over which the
	// per-second rates are computed; 0 on the first reading.
	IntervalSeconds float64 `json:"interval_seconds,omitempty"`
	// SocketsListed is how many TCP sockets the kernel gave: every socket
	// of the namespace from a dump, or the GPU processes' known sockets
	// looked up one by one (LookedUp); 0 when no GPU process held a socket.
	SocketsListed int `json:"sockets_listed"`
	// LookedUp is true when every socket the GPU processes hold was read
	// before, and each was looked up instead of dumping the namespace.
	LookedUp bool `json:"looked_up,omitempty"`
	// SocketsWithoutByteCounters counts sockets whose tcp_info lacked the byte
	// counters (kernels before 4.1): their traffic is not counted.
	SocketsWithoutByteCounters int `json:"sockets_without_byte_counters,omitempty"`
	// DumpInterrupted is true when the socket tables changed during the dump,
	// which may have missed a socket this time.
	DumpInterrupted bool         `json:"dump_interrupted,omitempty"`
	GPUs            []TCPGPU     `json:"gpus"`
	Processes       []TCPProcess `json:"processes,omitempty"`
}

// Sources of the TCP byte counts.
const (
	TCPSourceSockDiag = "sock_diag"
	TCPSourceEBPF     = "ebpf"
)

// TCPTraffic is the TCP traffic of one scope. Totals count since the daemon
// first saw the socket's process (bytes before that are not counted) and
// never decrease; rates are over the last interval.
type TCPTraffic struct {
	TransmitBytesTotal     uint64  `json:"transmit_bytes_total"`
	ReceiveBytesTotal      uint64  `json:"receive_bytes_total"`
	TransmitBytesPerSecond float64 `json:"transmit_bytes_per_second"`
	ReceiveBytesPerSecond  float64 `json:"receive_bytes_per_second"`
	// Connections is the number of established connections now.
	Connections int `json:"connections"`
}

// TCPGPU is the TCP traffic of the processes running on one GPU. A socket
// that several processes of the GPU share counts once.
type TCPGPU struct {
	Index int `json:"index"`
	// Loopback is traffic that never leaves the host: both ends on loopback
	// addresses, or both on the same host address. Network is the rest.
	Loopback TCPTraffic `json:"loopback"`
	Network  TCPTraffic `json:"network"`
	// ProcessesInOtherNetNS and ProcessesUnreadable count the GPU's
	// processes whose sockets the daemon could not see, so that zero
	// traffic is not mistaken for none.
	ProcessesInOtherNetNS int `json:"processes_in_other_netns,omitempty"`
	ProcessesUnreadable   int `json:"processes_unreadable,omitempty"`
}

// TCPProcess is the TCP traffic of one GPU process, for /diagnose.
type TCPProcess struct {
	PID  uint32 `json:"pid"`
	GPUs []int  `json:"gpus"`
	// Observed is false when the process's sockets could not be seen;
	// Unobserved then says why: "network_namespace" (the process lives in a
	// network namespace other than the daemon's) or "unreadable"
	// (/proc/<pid>/fd or ns/net could not be read, typically permission
	// denied).
	Observed   bool   `json:"observed"`
	Unobserved string `json:"unobserved,omitempty"`
	// DescriptorsTruncated is true when the process had more descriptors
	// than the daemon reads per cycle, so some sockets may be missing.
	DescriptorsTruncated bool       `json:"descriptors_truncated,omitempty"`
	Sockets              int        `json:"tcp_sockets"`
	Loopback             TCPTraffic `json:"loopback"`
	Network              TCPTraffic `json:"network"`
}

// SizeBytes estimates the memory a reading holds, for the window's budget.
func (t *TCP) SizeBytes() int {
	const traffic = 40
	n := 64 + len(t.GPUs)*(16+2*traffic)
	for i := range t.Processes {
		n += 64 + 2*traffic + 8*len(t.Processes[i].GPUs) + len(t.Processes[i].Unobserved)
	}
	return n
}
