package sample

import "math"

// EBPFKey is the ebpf collector's key: its samples are *EBPF.
var EBPFKey = NewKey[EBPF]("ebpf")

// EBPF is one reading of what gpudiag's eBPF programs counted in the kernel:
// the latency of every block request per disk and operation, and the block
// I/O and TCP traffic of the GPU processes and their descendants, each
// charged to the process that made it.
type EBPF struct {
	// IntervalSeconds is the time since the previous reading, over which the
	// rates are computed; 0 on the first reading.
	IntervalSeconds float64 `json:"interval_seconds,omitempty"`

	// BlockIO and TCP say whether each part is loaded, and where it hooks.
	BlockIO EBPFFeature `json:"block_io"`
	TCP     EBPFFeature `json:"tcp"`

	// TrackedProcesses is the number of processes followed: the GPU
	// processes and their descendants.
	TrackedProcesses int           `json:"tracked_processes"`
	Lost             EBPFLost      `json:"lost"`
	Disks            []DiskLatency `json:"disks,omitempty"`
	GPUs             []EBPFGPU     `json:"gpus"`
	// Processes lists the tracked processes with block I/O or TCP traffic
	// counted, descendants included, by PID.
	Processes []EBPFProcess `json:"processes,omitempty"`
	// Programs is the programs' own cost, when run-time statistics are on.
	Programs []EBPFProgram `json:"programs,omitempty"`
}

// EBPFProgram is one program's runs and CPU time since it was loaded.
type EBPFProgram struct {
	Name       string  `json:"name"`
	Runs       uint64  `json:"runs"`
	RunSeconds float64 `json:"run_seconds"`
}

// EBPFFeature is the state of one part of the eBPF collector.
type EBPFFeature struct {
	Loaded bool `json:"loaded"`
	// Hook names the kernel hook that attributes the traffic to a process
	// (block I/O: block_io_start, blk_account_io_start or block_rq_issue;
	// TCP: sock_send_length/sock_recv_length or tcp_sendmsg/tcp_recvmsg).
	Hook string `json:"hook,omitempty"`
	// Error says why it is not loaded: disabled by flag, or the kernel's
	// refusal.
	Error string `json:"error,omitempty"`
}

// EBPFLost counts, since the programs were loaded, what they could not
// record. Non-zero values mean the counts above are short.
type EBPFLost struct {
	// ProcessesUntracked: GPU processes or descendants not followed because
	// the process table was full, whether found forking by the kernel or
	// in /proc.
	ProcessesUntracked uint64 `json:"processes_untracked,omitempty"`
	// RequestsUnmatched: completions whose issue was not seen (in flight
	// when the programs attached, or the request table was full).
	RequestsUnmatched uint64 `json:"requests_unmatched,omitempty"`
	RequestTableFull  uint64 `json:"request_table_full,omitempty"`
	DiskTableFull     uint64 `json:"disk_table_full,omitempty"`
	ProcessIOFull     uint64 `json:"process_io_table_full,omitempty"`
	TCPTableFull      uint64 `json:"tcp_table_full,omitempty"`
	// ProgramRunsSkipped: runs the kernel skipped because the same program
	// was already running on that CPU (an interrupt's completion landing
	// while another was handled): their events were never seen.
	ProgramRunsSkipped uint64 `json:"program_runs_skipped,omitempty"`
}

// DiskLatency is the latency of one disk's requests of one operation, from
// issue to the driver to completion, since the programs were loaded.
type DiskLatency struct {
	Device string `json:"device"`
	// Op is read, write, flush, discard (discard, secure erase, write
	// zeroes) or other.
	Op string `json:"op"`
	// Buckets[i] counts requests whose latency was below
	// DiskLatencyBucketBound(i) seconds and not below the bound before; the
	// last bucket has no upper bound.
	Buckets    []uint64 `json:"buckets"`
	Count      uint64   `json:"count"`
	SumSeconds float64  `json:"sum_seconds"`

	// Over the last interval: requests completed per second, their mean
	// latency and the upper bound of the bucket holding their 99th
	// percentile (the last bucket's lower bound when it is that one); zero
	// without requests.
	RequestsPerSecond float64 `json:"requests_per_second"`
	MeanSeconds       float64 `json:"mean_seconds"`
	P99Seconds        float64 `json:"p99_seconds"`
}

// DiskLatencyBucketBound is the upper bound of DiskLatency bucket i: 2^i µs.
func DiskLatencyBucketBound(i int) float64 { return math.Ldexp(1e-6, i) }

// EBPFBlockIO is block I/O of one disk and operation charged to a GPU or a
// process.
type EBPFBlockIO struct {
	Device string `json:"device"`
	Op     string `json:"op"`
	// Totals since the daemon began following the processes.
	BytesTotal    uint64 `json:"bytes_total"`
	RequestsTotal uint64 `json:"requests_total"`
	// WaitSecondsTotal sums each request's time from its creation to its
	// completion (queueing and service): concurrent requests each count,
	// so its rate is the average number of the processes' requests in
	// flight on the disk.
	WaitSecondsTotal float64 `json:"wait_seconds_total"`

	// Rates over the last interval (GPU entries only).
	BytesPerSecond       float64 `json:"bytes_per_second,omitempty"`
	RequestsPerSecond    float64 `json:"requests_per_second,omitempty"`
	WaitSecondsPerSecond float64 `json:"wait_seconds_per_second,omitempty"`
}

// EBPFTCP is TCP payload passed through send and receive calls, in one scope.
type EBPFTCP struct {
	SentBytesTotal         uint64  `json:"sent_bytes_total"`
	ReceivedBytesTotal     uint64  `json:"received_bytes_total"`
	SentBytesPerSecond     float64 `json:"sent_bytes_per_second,omitempty"`
	ReceivedBytesPerSecond float64 `json:"received_bytes_per_second,omitempty"`
}

// EBPFGPU is what the processes on one GPU and their descendants did. A
// process on several GPUs counts on each.
type EBPFGPU struct {
	Index   int           `json:"index"`
	BlockIO []EBPFBlockIO `json:"block_io,omitempty"`
	// Loopback is traffic that stays on the host (both ends loopback, or
	// both the same address), Network the rest, as in the tcp collector.
	Loopback EBPFTCP `json:"tcp_loopback"`
	Network  EBPFTCP `json:"tcp_network"`
}

// EBPFProcess is one tracked process's counts since it was first followed.
type EBPFProcess struct {
	PID uint32 `json:"pid"`
	// Root is the GPU process it is or descends from (PID itself for a GPU
	// process).
	Root     uint32        `json:"root"`
	GPUs     []int         `json:"gpus"`
	BlockIO  []EBPFBlockIO `json:"block_io,omitempty"`
	Loopback EBPFTCP       `json:"tcp_loopback"`
	Network  EBPFTCP       `json:"tcp_network"`
}

// SizeBytes estimates the memory a reading holds, for the window's budget.
func (e *EBPF) SizeBytes() int {
	const blockIO, tcp = 96, 32
	n := 192 + len(e.BlockIO.Error) + len(e.TCP.Error)
	for i := range e.Disks {
		n += 96 + 8*len(e.Disks[i].Buckets)
	}
	for i := range e.GPUs {
		n += 32 + 2*tcp + blockIO*len(e.GPUs[i].BlockIO)
	}
	for i := range e.Processes {
		n += 48 + 2*tcp + 8*len(e.Processes[i].GPUs) + blockIO*len(e.Processes[i].BlockIO)
	}
	n += 48 * len(e.Programs)
	return n
}
