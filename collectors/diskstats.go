package collectors

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"time"

	"github.com/alecthomas/kingpin/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/procfs"
	"github.com/prometheus/procfs/blockdevice"
	"go.uber.org/zap"

	"github.com/gpudiag/gpudiag/engine"
	"github.com/gpudiag/gpudiag/hostfs"
	"github.com/gpudiag/gpudiag/sample"
)

// defaultDiskExclude keeps whole disks and md arrays. It is node_exporter's
// default plus device-mapper (its I/O is already counted on the disks below
// it) and hidden NVMe multipath paths (counted on their nvmeXnY head).
const defaultDiskExclude = `^(z?ram|loop|fd|dm-|(h|s|v|xv)d[a-z]+|nvme\d+n\d+p|nvme\d+c\d+n|mmcblk\d+p)\d+$`

var diskstatsFlags struct {
	exclude, include string
	excludeSet       bool
}

func init() {
	register(collectorSpec[sample.Disks, *diskstatsCollector]{
		key:       sample.DiskstatsKey,
		defaultOn: true,
		help:      "Block device I/O from /proc/diskstats, queue settings and NUMA node from /sys/block",
		flags: func(app *kingpin.Application) {
			app.Flag("collector.diskstats.device-exclude",
				"Regexp of devices to leave out (partitions, loop, ram, zram, dm by default). Mutually exclusive with device-include.").
				Default(defaultDiskExclude).IsSetByUser(&diskstatsFlags.excludeSet).StringVar(&diskstatsFlags.exclude)
			app.Flag("collector.diskstats.device-include",
				"Regexp of devices to keep; when set, only these are kept and device-exclude is not applied.").
				Default("").StringVar(&diskstatsFlags.include)
		},
		newCollector: func(cfg Config) (*diskstatsCollector, error) {
			filter, err := newDiskFilter(diskstatsFlags.include, diskstatsFlags.exclude, diskstatsFlags.excludeSet)
			if err != nil {
				return nil, err
			}
			return newDiskstatsCollector(cfg, filter)
		},
		metrics: (&diskstatsCollector{}).Metrics,
	})
}

// diskFilter selects devices by name: include when it is set, else exclude.
type diskFilter struct {
	include, exclude *regexp.Regexp
}

func newDiskFilter(include, exclude string, excludeSetByUser bool) (diskFilter, error) {
	if include != "" && excludeSetByUser {
		return diskFilter{}, errors.New("--collector.diskstats.device-include and --collector.diskstats.device-exclude are mutually exclusive")
	}
	if include != "" {
		re, err := regexp.Compile(include)
		if err != nil {
			return diskFilter{}, fmt.Errorf("--collector.diskstats.device-include: %w", err)
		}
		return diskFilter{include: re}, nil
	}
	if exclude == "" {
		return diskFilter{}, nil
	}
	re, err := regexp.Compile(exclude)
	if err != nil {
		return diskFilter{}, fmt.Errorf("--collector.diskstats.device-exclude: %w", err)
	}
	return diskFilter{exclude: re}, nil
}

func (f diskFilter) keep(device string) bool {
	switch {
	case f.include != nil:
		return f.include.MatchString(device)
	case f.exclude != nil:
		return !f.exclude.MatchString(device)
	}
	return true
}

type diskstatsCollector struct {
	host   hostfs.FS
	filter diskFilter
	log    *zap.Logger
	now    func() time.Time

	// The previous reading of each device, for the per-interval rates.
	prev   map[string]diskPrev
	prevAt time.Time

	// Queue settings and NUMA node change only when an administrator
	// retunes a device; reading them costs a dozen sysfs opens and a symlink
	// walk per device, most of a cycle's cost, so they are re-read every
	// diskSettingsRefresh or when a device (major:minor) is new.
	settings map[string]diskSettings
}

// diskSettingsRefresh is how often queue settings and NUMA nodes are re-read.
const diskSettingsRefresh = 30 * time.Second

type diskSettings struct {
	major, minor uint32
	queue        *sample.DiskQueue
	numaNode     int
	readAt       time.Time
}

type diskPrev struct {
	major, minor uint32
	counters     sample.DiskCounters
}

func newDiskstatsCollector(cfg Config, filter diskFilter) (*diskstatsCollector, error) {
	path := filepath.Join(cfg.ProcPath, "diskstats")
	if _, err := os.Stat(path); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	// A /sys that does not resolve leaves the collector unavailable.
	if _, err := filepath.EvalSymlinks(cfg.SysPath); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	host, err := hostfs.NewFS(cfg.ProcPath, cfg.SysPath)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	host = host.Holding() // the same files every second
	cfg = cfg.withDefaults()
	log := cfg.Logger
	return &diskstatsCollector{
		host: host, filter: filter,
		log: log, now: time.Now, prev: map[string]diskPrev{}, settings: map[string]diskSettings{},
	}, nil
}

// Close closes the files held open.
func (c *diskstatsCollector) Close() error {
	c.host.CloseHeld()
	return nil
}

func (c *diskstatsCollector) Name() string { return sample.DiskstatsKey.Name() }

func (c *diskstatsCollector) Sample(ctx context.Context) (*sample.Disks, error) {
	stats, err := c.host.Diskstats()
	if err != nil {
		return nil, err
	}
	now := c.now()
	out := &sample.Disks{}
	if !c.prevAt.IsZero() {
		out.IntervalSeconds = now.Sub(c.prevAt).Seconds()
	}
	next := make(map[string]diskPrev, len(c.prev))
	for i := range stats {
		st := &stats[i]
		if !c.filter.keep(st.DeviceName) {
			continue
		}
		// Each new device costs a dozen sysfs reads; past the deadline
		// the sample is abandoned, not finished late.
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("%s: sample deadline reached after %d of %d devices: %w", c.host.ProcPath("diskstats"), i, len(stats), err)
		}
		d := sample.Disk{
			Name: st.DeviceName, Major: st.MajorNumber, Minor: st.MinorNumber,
			Counters: diskCounters(st), InFlight: st.IOsInProgress,
		}
		set, ok := c.settings[d.Name]
		if !ok || set.major != d.Major || set.minor != d.Minor || now.Sub(set.readAt) >= diskSettingsRefresh {
			set = diskSettings{major: d.Major, minor: d.Minor, readAt: now}
			if set.queue, err = c.readQueue(d.Name); err != nil {
				return nil, err
			}
			if set.numaNode, err = c.numaNode(d.Name); err != nil {
				return nil, err
			}
			c.settings[d.Name] = set
		}
		d.Queue, d.NUMANode = set.queue, set.numaNode
		if p, ok := c.prev[d.Name]; ok && p.major == d.Major && p.minor == d.Minor && out.IntervalSeconds > 0 {
			d.Rates = diskRates(p.counters, d.Counters, out.IntervalSeconds)
		}
		next[d.Name] = diskPrev{major: d.Major, minor: d.Minor, counters: d.Counters}
		out.Devices = append(out.Devices, d)
	}
	for name := range c.settings {
		if _, ok := next[name]; !ok {
			delete(c.settings, name) // the device went away
		}
	}
	c.prev, c.prevAt = next, now
	return out, nil
}

func diskCounters(st *blockdevice.Diskstats) sample.DiskCounters {
	c := sample.DiskCounters{
		ReadsCompleted:       st.ReadIOs,
		ReadsMerged:          st.ReadMerges,
		ReadBytes:            st.ReadSectors * procfs.SectorSize,
		ReadTimeMillis:       st.ReadTicks,
		WritesCompleted:      st.WriteIOs,
		WritesMerged:         st.WriteMerges,
		WrittenBytes:         st.WriteSectors * procfs.SectorSize,
		WriteTimeMillis:      st.WriteTicks,
		IOTimeMillis:         st.IOsTotalTicks,
		IOTimeWeightedMillis: st.WeightedIOTicks,
	}
	// IoStatsCount counts major, minor and name too: 14 fields before 4.18,
	// 18 with discards, 20 with flushes (5.5+).
	if st.IoStatsCount >= 18 {
		c.HasDiscards = true
		c.DiscardsCompleted = st.DiscardIOs
		c.DiscardsMerged = st.DiscardMerges
		c.DiscardedBytes = st.DiscardSectors * procfs.SectorSize
		c.DiscardTimeMillis = st.DiscardTicks
	}
	if st.IoStatsCount >= 20 {
		c.HasFlushes = true
		c.FlushesCompleted = st.FlushRequestsCompleted
		c.FlushTimeMillis = st.TimeSpentFlushing
	}
	return c
}

// diskRates averages the counters' growth over the interval. Request counts
// are 64-bit and only fall when the device was re-created; the interval then
// reports zeros.
func diskRates(prev, cur sample.DiskCounters, seconds float64) *sample.DiskRates {
	r := &sample.DiskRates{}
	if cur.ReadsCompleted < prev.ReadsCompleted || cur.WritesCompleted < prev.WritesCompleted {
		return r
	}
	delta := func(p, c uint64) float64 { return sample.CounterDelta(float64(p), float64(c)) }
	reads := delta(prev.ReadsCompleted, cur.ReadsCompleted)
	writes := delta(prev.WritesCompleted, cur.WritesCompleted)
	readMerges := delta(prev.ReadsMerged, cur.ReadsMerged)
	readBytes := delta(prev.ReadBytes, cur.ReadBytes)
	writeBytes := delta(prev.WrittenBytes, cur.WrittenBytes)
	readSeconds := float64(millisDelta(prev.ReadTimeMillis, cur.ReadTimeMillis)) / 1000
	writeSeconds := float64(millisDelta(prev.WriteTimeMillis, cur.WriteTimeMillis)) / 1000
	busySeconds := float64(millisDelta(prev.IOTimeMillis, cur.IOTimeMillis)) / 1000
	weightedSeconds := float64(millisDelta(prev.IOTimeWeightedMillis, cur.IOTimeWeightedMillis)) / 1000

	r.ReadBytesPerSecond = readBytes / seconds
	r.WriteBytesPerSecond = writeBytes / seconds
	r.ReadsPerSecond = reads / seconds
	r.WritesPerSecond = writes / seconds
	if reads > 0 {
		r.AverageReadBytes = readBytes / reads
		r.ReadAwaitSeconds = readSeconds / reads
		r.ReadsMergedRatio = readMerges / (readMerges + reads)
	}
	if writes > 0 {
		r.AverageWriteBytes = writeBytes / writes
		r.WriteAwaitSeconds = writeSeconds / writes
	}
	// io_ticks is sampled on request start and end, so it can run a tick
	// ahead of the wall clock.
	r.BusyRatio = math.Min(1, busySeconds/seconds)
	r.AverageQueueDepth = weightedSeconds / seconds
	return r
}

// millisDelta is the growth of a diskstats time. The kernel prints them as
// 32-bit milliseconds, which wrap after 49.7 days of accumulated time (the
// weighted time of a deep NVMe queue within days): a value that fell from the
// upper half of the 32-bit range wrapped. Any other fall counts as no time.
func millisDelta(prev, cur uint64) uint64 {
	if cur >= prev {
		return cur - prev
	}
	if prev >= 1<<31 && prev <= math.MaxUint32 {
		return cur + 1<<32 - prev
	}
	return 0
}

// readQueue reads the device's queue settings (see hostfs.FS.BlockQueue),
// logging at debug what was passed over.
func (c *diskstatsCollector) readQueue(device string) (*sample.DiskQueue, error) {
	q, err := c.host.BlockQueue(device, func(msg, path string, err error) {
		c.log.Debug(msg, zap.String("device", device), zap.String("path", path), zap.Error(err))
	})
	return (*sample.DiskQueue)(q), err
}

// numaNode reads the node of the device's controller (see
// hostfs.FS.BlockDeviceNUMANode), logging at debug what was passed over.
func (c *diskstatsCollector) numaNode(device string) (int, error) {
	return c.host.BlockDeviceNUMANode(device, func(msg, path string, err error) {
		c.log.Debug(msg, zap.String("path", path), zap.Error(err))
	})
}

func diskDesc(name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc(engine.Namespace+"_disk_"+name, help, append([]string{"device"}, labels...), nil)
}

var (
	diskInfoDesc = diskDesc("info",
		"Block device identity; numa_node is the node of its controller, empty when the kernel does not know it.",
		"major", "minor", "numa_node")
	diskQueueInfoDesc = diskDesc("queue_info",
		"Block queue settings: the active I/O scheduler (empty for bio-based devices) and whether the device is rotational (1) or not (0).",
		"scheduler", "rotational")
	diskReadAheadDesc = diskDesc("read_ahead_bytes", "Read-ahead window of the device (queue/read_ahead_kb).")
	diskNRRequests    = diskDesc("nr_requests", "Requests the block layer may allocate per hardware queue (queue/nr_requests).")
	diskHWQueuesDesc  = diskDesc("hw_queues", "blk-mq hardware queues of the device (NVMe: I/O submission queues in use).")
	diskIONowDesc     = diskDesc("io_now", "Requests issued to the driver and not yet completed.")
)

// diskCounterMetrics maps each diskstats counter to its metric, with
// node_exporter's names so dashboards carry over.
var diskCounterMetrics = []struct {
	desc  *prometheus.Desc
	value func(*sample.DiskCounters) float64
	has   func(*sample.DiskCounters) bool
}{
	{diskDesc("reads_completed_total", "Reads completed."), func(c *sample.DiskCounters) float64 { return float64(c.ReadsCompleted) }, nil},
	{diskDesc("reads_merged_total", "Reads merged into an adjacent request before reaching the device."), func(c *sample.DiskCounters) float64 { return float64(c.ReadsMerged) }, nil},
	{diskDesc("read_bytes_total", "Bytes read."), func(c *sample.DiskCounters) float64 { return float64(c.ReadBytes) }, nil},
	{diskDesc("read_time_seconds_total", "Time reads took from submission to completion, summed over reads."), func(c *sample.DiskCounters) float64 { return millisToSeconds(c.ReadTimeMillis) }, nil},
	{diskDesc("writes_completed_total", "Writes completed."), func(c *sample.DiskCounters) float64 { return float64(c.WritesCompleted) }, nil},
	{diskDesc("writes_merged_total", "Writes merged into an adjacent request before reaching the device."), func(c *sample.DiskCounters) float64 { return float64(c.WritesMerged) }, nil},
	{diskDesc("written_bytes_total", "Bytes written."), func(c *sample.DiskCounters) float64 { return float64(c.WrittenBytes) }, nil},
	{diskDesc("write_time_seconds_total", "Time writes took from submission to completion, summed over writes."), func(c *sample.DiskCounters) float64 { return millisToSeconds(c.WriteTimeMillis) }, nil},
	{diskDesc("io_time_seconds_total", "Time with at least one request in flight; rate() is the busy ratio (not saturation on NVMe)."), func(c *sample.DiskCounters) float64 { return millisToSeconds(c.IOTimeMillis) }, nil},
	{diskDesc("io_time_weighted_seconds_total", "Time spent on requests, weighted by the number in flight; rate() is the average queue depth."), func(c *sample.DiskCounters) float64 { return millisToSeconds(c.IOTimeWeightedMillis) }, nil},
	{diskDesc("discards_completed_total", "Discards completed."), func(c *sample.DiskCounters) float64 { return float64(c.DiscardsCompleted) }, hasDiscards},
	{diskDesc("discards_merged_total", "Discards merged into an adjacent request."), func(c *sample.DiskCounters) float64 { return float64(c.DiscardsMerged) }, hasDiscards},
	{diskDesc("discarded_bytes_total", "Bytes discarded (trimmed)."), func(c *sample.DiskCounters) float64 { return float64(c.DiscardedBytes) }, hasDiscards},
	{diskDesc("discard_time_seconds_total", "Time discards took, summed over discards."), func(c *sample.DiskCounters) float64 { return millisToSeconds(c.DiscardTimeMillis) }, hasDiscards},
	{diskDesc("flush_requests_total", "Cache flush requests completed."), func(c *sample.DiskCounters) float64 { return float64(c.FlushesCompleted) }, hasFlushes},
	{diskDesc("flush_requests_time_seconds_total", "Time flush requests took, summed over flushes."), func(c *sample.DiskCounters) float64 { return millisToSeconds(c.FlushTimeMillis) }, hasFlushes},
}

func hasDiscards(c *sample.DiskCounters) bool { return c.HasDiscards }
func hasFlushes(c *sample.DiskCounters) bool  { return c.HasFlushes }
func millisToSeconds(ms uint64) float64       { return float64(ms) / 1000 }

func (c *diskstatsCollector) Metrics(r *sample.Disks, emit func(prometheus.Metric)) {
	for i := range r.Devices {
		d := &r.Devices[i]
		node := ""
		if d.NUMANode >= 0 {
			node = strconv.Itoa(d.NUMANode)
		}
		emit(engine.NewSeries(diskInfoDesc, prometheus.GaugeValue, 1, d.Name,
			strconv.FormatUint(uint64(d.Major), 10), strconv.FormatUint(uint64(d.Minor), 10), node))
		for _, m := range diskCounterMetrics {
			if m.has == nil || m.has(&d.Counters) {
				emit(engine.NewSeries(m.desc, prometheus.CounterValue, m.value(&d.Counters), d.Name))
			}
		}
		emit(engine.NewSeries(diskIONowDesc, prometheus.GaugeValue, float64(d.InFlight), d.Name))
		q := d.Queue
		if q == nil {
			continue
		}
		rotational := "0"
		if q.Rotational {
			rotational = "1"
		}
		emit(engine.NewSeries(diskQueueInfoDesc, prometheus.GaugeValue, 1, d.Name, q.Scheduler, rotational))
		emit(engine.NewSeries(diskReadAheadDesc, prometheus.GaugeValue, float64(q.ReadAheadBytes), d.Name))
		if q.NRRequests > 0 {
			emit(engine.NewSeries(diskNRRequests, prometheus.GaugeValue, float64(q.NRRequests), d.Name))
		}
		if q.HWQueues > 0 {
			emit(engine.NewSeries(diskHWQueuesDesc, prometheus.GaugeValue, float64(q.HWQueues), d.Name))
		}
	}
}
