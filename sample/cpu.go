package sample

import "slices"

// CPUKey is the cpu collector's key: its samples are *CPU.
var CPUKey = NewKey[CPU]("cpu")

// CPU is one reading of the node's CPU time, run queue, memory and paging
// activity (/proc/stat, /proc/meminfo, /proc/vmstat).
type CPU struct {
	// IntervalSeconds is the time since the previous reading; 0 on the first.
	IntervalSeconds float64 `json:"interval_seconds,omitempty"`
	// OnlineCPUs counts the cpuN lines of /proc/stat.
	OnlineCPUs int `json:"online_cpus"`
	// Seconds is CPU time by mode, summed over all CPUs since boot. Kept
	// monotonic per CPU, as the kernel's idle and iowait can step back.
	Seconds CPUModes `json:"seconds"`
	// ProcsRunning and ProcsBlocked are tasks runnable and tasks in
	// uninterruptible (mostly I/O) sleep at the moment of the reading.
	ProcsRunning    uint64 `json:"procs_running"`
	ProcsBlocked    uint64 `json:"procs_blocked"`
	ContextSwitches uint64 `json:"context_switches"`

	Memory HostMemory `json:"memory"`
	VM     VMCounters `json:"vm"`

	// Interval is nil on the first reading.
	Interval *CPUInterval `json:"interval,omitempty"`
}

// CPUModes holds one value per CPU mode of /proc/stat. Guest time is part of
// User and Nice, as the kernel counts it.
type CPUModes struct {
	User    float64 `json:"user"`
	Nice    float64 `json:"nice"`
	System  float64 `json:"system"`
	Idle    float64 `json:"idle"`
	IOWait  float64 `json:"iowait"`
	IRQ     float64 `json:"irq"`
	SoftIRQ float64 `json:"softirq"`
	Steal   float64 `json:"steal"`
}

// HostMemory is the part of /proc/meminfo the analyzers use, in bytes.
type HostMemory struct {
	// Unmeasured names the meminfo lines the file did not have (MemAvailable
	// before 3.14), or all of them when there was no file: their fields are
	// 0 and mean nothing, and their series are left out.
	Unmeasured     []string `json:"unmeasured,omitempty"`
	TotalBytes     uint64   `json:"total_bytes"`
	AvailableBytes uint64   `json:"available_bytes"`
	// CachedBytes is the page cache (Cached), where datasets stay warm
	// between epochs when they fit.
	CachedBytes    uint64 `json:"cached_bytes"`
	DirtyBytes     uint64 `json:"dirty_bytes"`
	WritebackBytes uint64 `json:"writeback_bytes"`
	SwapTotalBytes uint64 `json:"swap_total_bytes"`
	SwapFreeBytes  uint64 `json:"swap_free_bytes"`
}

// VMCounters are /proc/vmstat event counters since boot.
type VMCounters struct {
	// Unmeasured names the counters (VMSwapIn, VMSwapOut, VMMajorFaults,
	// VMPageCacheRefaults) the file did not have, or all of them when there
	// was no file: their fields are 0 and mean nothing. oom_kill, which
	// kernels before 4.13 lack, is HasOOMKills.
	Unmeasured   []string `json:"unmeasured,omitempty"`
	SwapInPages  uint64   `json:"swap_in_pages"`
	SwapOutPages uint64   `json:"swap_out_pages"`
	MajorFaults  uint64   `json:"major_faults"`
	// PageCacheRefaults counts file pages read back in soon after the page
	// cache evicted them (workingset_refault_file; workingset_refault before
	// 5.9, when only file pages were tracked): a dataset that does not fit.
	PageCacheRefaults uint64 `json:"page_cache_refaults"`
	// HasOOMKills is false before 4.13, which had no oom_kill counter.
	HasOOMKills bool   `json:"has_oom_kills"`
	OOMKills    uint64 `json:"oom_kills"`
}

// The /proc/vmstat counters VMCounters keeps, by their kernel names: what
// its and CPUInterval's Unmeasured list. VMPageCacheRefaults stands for
// workingset_refault_file, or workingset_refault before 5.9.
const (
	VMSwapIn            = "pswpin"
	VMSwapOut           = "pswpout"
	VMMajorFaults       = "pgmajfault"
	VMPageCacheRefaults = "workingset_refault"
)

// Measured is whether the counter of that name (VMSwapIn, …) was read.
func (v *VMCounters) Measured(name string) bool { return !slices.Contains(v.Unmeasured, name) }

// Measured is whether the meminfo line of that name (MemAvailable, …) was
// read.
func (m *HostMemory) Measured(name string) bool { return !slices.Contains(m.Unmeasured, name) }

// CPUInterval holds averages over the interval since the previous reading.
// Counter resets give zeros, never negative values.
type CPUInterval struct {
	// Unmeasured names the vmstat counters (VMSwapIn, …) missing from this
	// reading or the previous one: their rates are 0 and mean nothing.
	Unmeasured []string `json:"unmeasured,omitempty"`
	// Ratios are each mode's share of all CPU time in the interval, 0–1.
	Ratios CPUModes `json:"ratios"`
	// BusyRatio is the share neither idle nor waiting on I/O.
	BusyRatio                  float64 `json:"busy_ratio"`
	ContextSwitchesPerSecond   float64 `json:"context_switches_per_second"`
	SwapInPagesPerSecond       float64 `json:"swap_in_pages_per_second"`
	SwapOutPagesPerSecond      float64 `json:"swap_out_pages_per_second"`
	MajorFaultsPerSecond       float64 `json:"major_faults_per_second"`
	PageCacheRefaultsPerSecond float64 `json:"page_cache_refaults_per_second"`
	// OOMKills is the number of OOM kills in the interval.
	OOMKills uint64 `json:"oom_kills"`
}

// Measured is whether the rate of the vmstat counter of that name
// (VMSwapIn, …) was measured over the interval.
func (iv *CPUInterval) Measured(name string) bool { return !slices.Contains(iv.Unmeasured, name) }

// UnmeasuredFields names what the reading lacks, for the collector's
// health: "meminfo MemAvailable", "vmstat pswpin", "vmstat oom_kill".
func (c *CPU) UnmeasuredFields() []string {
	var out []string
	for _, name := range c.Memory.Unmeasured {
		out = append(out, "meminfo "+name)
	}
	for _, name := range c.VM.Unmeasured {
		out = append(out, "vmstat "+name)
	}
	if !c.VM.HasOOMKills {
		out = append(out, "vmstat oom_kill")
	}
	return out
}

// SizeBytes estimates the memory a reading holds, for the window's budget.
func (c *CPU) SizeBytes() int {
	n := 280 + 24*(len(c.Memory.Unmeasured)+len(c.VM.Unmeasured))
	if c.Interval != nil {
		n += 120 + 24*len(c.Interval.Unmeasured)
	}
	return n
}
