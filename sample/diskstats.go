package sample

// DiskstatsKey is the diskstats collector's key: its samples are *Disks.
var DiskstatsKey = NewKey[Disks]("diskstats")

// Disks is one reading of the block devices the diskstats collector selects
// (whole disks by default: no partitions, loop, ram, zram or device-mapper).
type Disks struct {
	// IntervalSeconds is the time since the previous reading; 0 on the first.
	IntervalSeconds float64 `json:"interval_seconds,omitempty"`
	Devices         []Disk  `json:"devices"`
}

// Disk is one block device.
type Disk struct {
	Name  string `json:"name"`
	Major uint32 `json:"major"`
	Minor uint32 `json:"minor"`
	// NUMANode is the node of the controller the disk hangs off; -1 when the
	// kernel does not know (VMs, virtual devices, NVMe multipath heads).
	NUMANode int `json:"numa_node"`

	Counters DiskCounters `json:"counters"`
	// InFlight is the number of requests issued to the driver and not yet
	// completed, at the moment of the reading.
	InFlight uint64 `json:"in_flight"`

	// Queue is nil when /sys/block/<name>/queue is absent (partitions, or a
	// container without the host's /sys).
	Queue *DiskQueue `json:"queue,omitempty"`
	// Rates is nil on the device's first reading.
	Rates *DiskRates `json:"rates,omitempty"`
}

// DiskCounters are the /proc/diskstats counters since the device appeared.
// Times are the kernel's milliseconds; they are 32-bit in the kernel and wrap
// (weighted time on a deep queue in days), which DiskRates accounts for.
type DiskCounters struct {
	ReadsCompleted  uint64 `json:"reads_completed"`
	ReadsMerged     uint64 `json:"reads_merged"`
	ReadBytes       uint64 `json:"read_bytes"`
	ReadTimeMillis  uint64 `json:"read_time_ms"`
	WritesCompleted uint64 `json:"writes_completed"`
	WritesMerged    uint64 `json:"writes_merged"`
	WrittenBytes    uint64 `json:"written_bytes"`
	WriteTimeMillis uint64 `json:"write_time_ms"`
	// IOTimeMillis grows while at least one request is in flight ("busy").
	IOTimeMillis uint64 `json:"io_time_ms"`
	// IOTimeWeightedMillis grows by the number of requests in flight per
	// millisecond: its rate is the average queue depth.
	IOTimeWeightedMillis uint64 `json:"io_time_weighted_ms"`

	// HasDiscards is set on kernels 4.18+, HasFlushes on 5.5+; the fields
	// that follow each are zero without them.
	HasDiscards       bool   `json:"has_discards,omitempty"`
	DiscardsCompleted uint64 `json:"discards_completed,omitempty"`
	DiscardsMerged    uint64 `json:"discards_merged,omitempty"`
	DiscardedBytes    uint64 `json:"discarded_bytes,omitempty"`
	DiscardTimeMillis uint64 `json:"discard_time_ms,omitempty"`
	HasFlushes        bool   `json:"has_flushes,omitempty"`
	FlushesCompleted  uint64 `json:"flushes_completed,omitempty"`
	FlushTimeMillis   uint64 `json:"flush_time_ms,omitempty"`
}

// DiskQueue holds the block-layer settings of /sys/block/<name>/queue and mq.
type DiskQueue struct {
	// Scheduler is the active I/O scheduler (none, mq-deadline, kyber, bfq);
	// empty for bio-based devices, which have none to choose.
	Scheduler      string `json:"scheduler,omitempty"`
	ReadAheadBytes uint64 `json:"read_ahead_bytes"`
	// NRRequests is the request budget per hardware queue; 0 when the
	// device has no request queue (bio-based).
	NRRequests uint64 `json:"nr_requests,omitempty"`
	Rotational bool   `json:"rotational"`
	// HWQueues is the number of blk-mq hardware queues (NVMe submission
	// queues); 0 for bio-based devices.
	HWQueues int `json:"hw_queues,omitempty"`
}

// DiskRates are averages over the interval since the previous reading. A
// counter reset (device re-created) gives zeros, never negative values.
type DiskRates struct {
	ReadBytesPerSecond  float64 `json:"read_bps"`
	WriteBytesPerSecond float64 `json:"write_bps"`
	ReadsPerSecond      float64 `json:"read_iops"`
	WritesPerSecond     float64 `json:"write_iops"`
	AverageReadBytes    float64 `json:"avg_read_bytes"`
	AverageWriteBytes   float64 `json:"avg_write_bytes"`
	ReadAwaitSeconds    float64 `json:"read_await_seconds"`
	WriteAwaitSeconds   float64 `json:"write_await_seconds"`
	// ReadsMergedRatio is the share of read requests the block layer merged
	// into a neighbour: high for sequential streams, near 0 for random reads.
	ReadsMergedRatio float64 `json:"reads_merged_ratio"`
	// BusyRatio is the share of the interval with at least one request in
	// flight. On NVMe it reaches 1 long before the device is saturated:
	// compare throughput with the device's measured maximum instead.
	BusyRatio         float64 `json:"busy_ratio"`
	AverageQueueDepth float64 `json:"avg_queue_depth"`
}

// SizeBytes estimates the memory a reading holds, for the window's budget.
func (d *Disks) SizeBytes() int {
	n := 48
	for i := range d.Devices {
		dev := &d.Devices[i]
		n += 200 + len(dev.Name)
		if dev.Queue != nil {
			n += 64 + len(dev.Queue.Scheduler)
		}
		if dev.Rates != nil {
			n += 96
		}
	}
	return n
}
