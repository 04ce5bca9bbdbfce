package collectors

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpudiag/gpudiag/engine"
	"github.com/gpudiag/gpudiag/hostfs"
	"github.com/gpudiag/gpudiag/sample"
)

func init() {
	register(collectorSpec[sample.CPU, *cpuCollector]{
		key:          sample.CPUKey,
		defaultOn:    true,
		help:         "Node CPU time by mode, run queue, memory, swap and OOM kills from /proc/stat, /proc/meminfo and /proc/vmstat",
		newCollector: newCPUCollector,
		metrics:      (&cpuCollector{}).Metrics,
	})
}

// cpuModeNames are the modes of /proc/stat in file order, as exported.
var cpuModeNames = [...]string{"user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal"}

const (
	numCPUModes = len(cpuModeNames)
	// Positions of the modes that are not busy time.
	cpuIdle   = 3
	cpuIOWait = 4
)

// cpuTicks holds one CPU's (or the node's) times in USER_HZ ticks, indexed
// like cpuModeNames. Integers keep the sums over 128+ CPUs exact.
type cpuTicks [numCPUModes]uint64

type cpuCollector struct {
	host hostfs.FS
	now  func() time.Time

	// perCPU is the highest reading of each CPU seen so far, including CPUs
	// since taken offline, so that the node totals never step back.
	perCPU map[int64]cpuTicks
	prev   *cpuReading
	at     time.Time
}

// cpuReading is what the next interval is measured from.
type cpuReading struct {
	ticks           cpuTicks
	contextSwitches uint64
	vm              sample.VMCounters
}

// newCPUCollector needs /proc/stat; a missing meminfo or vmstat leaves
// their fields unmeasured, named in the collector's health.
func newCPUCollector(cfg Config) (*cpuCollector, error) {
	if _, err := os.Stat(filepath.Join(cfg.ProcPath, "stat")); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	host, err := hostfs.NewFS(cfg.ProcPath, cfg.SysPath)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	host = host.Holding() // the same files every second
	return &cpuCollector{host: host, now: time.Now, perCPU: map[int64]cpuTicks{}}, nil
}

// Close closes the files held open.
func (c *cpuCollector) Close() error {
	c.host.CloseHeld()
	return nil
}

func (c *cpuCollector) Name() string { return sample.CPUKey.Name() }

func (c *cpuCollector) Sample(context.Context) (*sample.CPU, error) {
	stat, err := c.host.ProcStat()
	if err != nil {
		return nil, err
	}
	meminfo, err := c.host.Meminfo()
	if err != nil {
		return nil, err
	}
	vmstat, err := c.host.VMStat()
	if err != nil {
		return nil, err
	}
	// Conversions, not copies field by field: a field added to one side
	// and not the other fails the build instead of going missing.
	mem, vm := sample.HostMemory(meminfo), sample.VMCounters(vmstat)
	now := c.now()

	var total cpuTicks
	for _, st := range stat.CPUs {
		t := cpuTicks(st.Ticks)
		id := int64(st.ID)
		if old, seen := c.perCPU[id]; seen {
			for m := range t {
				t[m] = max(t[m], old[m])
			}
		}
		c.perCPU[id] = t
	}
	for _, t := range c.perCPU {
		for m := range t {
			total[m] += t[m]
		}
	}

	out := &sample.CPU{
		OnlineCPUs:      len(stat.CPUs),
		Seconds:         ticksToModes(total, hostfs.UserHZ),
		ProcsRunning:    stat.ProcsRunning,
		ProcsBlocked:    stat.ProcsBlocked,
		ContextSwitches: stat.ContextSwitches,
		Memory:          mem,
		VM:              vm,
	}
	cur := &cpuReading{ticks: total, contextSwitches: stat.ContextSwitches, vm: vm}
	if c.prev != nil {
		out.IntervalSeconds = now.Sub(c.at).Seconds()
		out.Interval = cpuInterval(c.prev, cur, out.IntervalSeconds)
	}
	c.prev, c.at = cur, now
	return out, nil
}

// ticksToModes divides ticks by per (USER_HZ for seconds, the interval's
// total for ratios).
func ticksToModes(t cpuTicks, per float64) sample.CPUModes {
	return sample.CPUModes{
		User: float64(t[0]) / per, Nice: float64(t[1]) / per, System: float64(t[2]) / per, Idle: float64(t[3]) / per,
		IOWait: float64(t[4]) / per, IRQ: float64(t[5]) / per, SoftIRQ: float64(t[6]) / per, Steal: float64(t[7]) / per,
	}
}

func cpuInterval(prev, cur *cpuReading, seconds float64) *sample.CPUInterval {
	iv := &sample.CPUInterval{}
	var delta cpuTicks
	var all uint64
	for m := range delta {
		delta[m] = cur.ticks[m] - prev.ticks[m] // monotonic by construction
		all += delta[m]
	}
	if all > 0 {
		iv.Ratios = ticksToModes(delta, float64(all))
		iv.BusyRatio = float64(all-delta[cpuIdle]-delta[cpuIOWait]) / float64(all)
	}
	rate := func(p, c uint64) float64 { return sample.CounterRate(float64(p), float64(c), seconds) }
	iv.ContextSwitchesPerSecond = rate(prev.contextSwitches, cur.contextSwitches)
	// A counter missing at either end has no rate: from a 0 it would be
	// the whole count since boot in one interval.
	for _, r := range []struct {
		name string
		dst  *float64
		get  func(*sample.VMCounters) uint64
	}{
		{sample.VMSwapIn, &iv.SwapInPagesPerSecond, func(v *sample.VMCounters) uint64 { return v.SwapInPages }},
		{sample.VMSwapOut, &iv.SwapOutPagesPerSecond, func(v *sample.VMCounters) uint64 { return v.SwapOutPages }},
		{sample.VMMajorFaults, &iv.MajorFaultsPerSecond, func(v *sample.VMCounters) uint64 { return v.MajorFaults }},
		{sample.VMPageCacheRefaults, &iv.PageCacheRefaultsPerSecond, func(v *sample.VMCounters) uint64 { return v.PageCacheRefaults }},
	} {
		if !prev.vm.Measured(r.name) || !cur.vm.Measured(r.name) {
			iv.Unmeasured = append(iv.Unmeasured, r.name)
			continue
		}
		*r.dst = rate(r.get(&prev.vm), r.get(&cur.vm))
	}
	if cur.vm.HasOOMKills && prev.vm.HasOOMKills {
		iv.OOMKills = uint64(sample.CounterDelta(float64(prev.vm.OOMKills), float64(cur.vm.OOMKills)))
	}
	return iv
}

var (
	cpuSecondsDesc = prometheus.NewDesc(engine.Namespace+"_cpu_seconds_total",
		"CPU time by mode, summed over all CPUs (guest time is in user and nice). Held monotonic per CPU where the kernel's idle or iowait step back.",
		[]string{"mode"}, nil)
	cpusOnlineDesc = prometheus.NewDesc(engine.Namespace+"_cpus_online",
		"Online CPUs (logical), the denominator of rate(gpudiag_cpu_seconds_total).", nil, nil)
	procsRunningDesc = prometheus.NewDesc(engine.Namespace+"_procs_running",
		"Runnable tasks (running or waiting for a CPU).", nil, nil)
	procsBlockedDesc = prometheus.NewDesc(engine.Namespace+"_procs_blocked",
		"Tasks in uninterruptible sleep, mostly waiting for block I/O.", nil, nil)
	contextSwitchesDesc = prometheus.NewDesc(engine.Namespace+"_context_switches_total",
		"Context switches on all CPUs.", nil, nil)
	oomKillsDesc = hostMemDesc("oom_kills_total", "Processes killed by the kernel's OOM killer (oom_kill in /proc/vmstat).")
)

func hostMemDesc(name, help string) *prometheus.Desc {
	return prometheus.NewDesc(engine.Namespace+"_memory_"+name, help, nil, nil)
}

// memMetrics maps the memory fields to their metrics. measured says
// whether the reading has the field's line: a series is left out rather
// than exported as 0 when it does not.
var memMetrics = []struct {
	desc     *prometheus.Desc
	typ      prometheus.ValueType
	value    func(*sample.CPU) uint64
	measured func(*sample.CPU) bool
}{
	{hostMemDesc("bytes", "Usable RAM (MemTotal)."), prometheus.GaugeValue, func(s *sample.CPU) uint64 { return s.Memory.TotalBytes }, meminfoHas("MemTotal")},
	{hostMemDesc("available_bytes", "RAM available for new allocations without swapping (MemAvailable)."), prometheus.GaugeValue, func(s *sample.CPU) uint64 { return s.Memory.AvailableBytes }, meminfoHas("MemAvailable")},
	{hostMemDesc("cached_bytes", "Page cache (Cached)."), prometheus.GaugeValue, func(s *sample.CPU) uint64 { return s.Memory.CachedBytes }, meminfoHas("Cached")},
	{hostMemDesc("dirty_bytes", "Page cache waiting to be written back (Dirty)."), prometheus.GaugeValue, func(s *sample.CPU) uint64 { return s.Memory.DirtyBytes }, meminfoHas("Dirty")},
	{hostMemDesc("writeback_bytes", "Page cache being written back now (Writeback)."), prometheus.GaugeValue, func(s *sample.CPU) uint64 { return s.Memory.WritebackBytes }, meminfoHas("Writeback")},
	{hostMemDesc("swap_bytes", "Swap space configured (SwapTotal); GPU nodes should have none."), prometheus.GaugeValue, func(s *sample.CPU) uint64 { return s.Memory.SwapTotalBytes }, meminfoHas("SwapTotal")},
	{hostMemDesc("swap_free_bytes", "Swap space unused (SwapFree)."), prometheus.GaugeValue, func(s *sample.CPU) uint64 { return s.Memory.SwapFreeBytes }, meminfoHas("SwapFree")},
	{hostMemDesc("swap_in_pages_total", "Pages read in from swap (pswpin)."), prometheus.CounterValue, func(s *sample.CPU) uint64 { return s.VM.SwapInPages }, vmstatHas(sample.VMSwapIn)},
	{hostMemDesc("swap_out_pages_total", "Pages written out to swap (pswpout)."), prometheus.CounterValue, func(s *sample.CPU) uint64 { return s.VM.SwapOutPages }, vmstatHas(sample.VMSwapOut)},
	{hostMemDesc("major_page_faults_total", "Page faults that had to read from disk (pgmajfault)."), prometheus.CounterValue, func(s *sample.CPU) uint64 { return s.VM.MajorFaults }, vmstatHas(sample.VMMajorFaults)},
	{hostMemDesc("page_cache_refaults_total", "File pages read back in soon after the page cache evicted them (workingset_refault_file, or workingset_refault before 5.9): the dataset does not fit in RAM."), prometheus.CounterValue, func(s *sample.CPU) uint64 { return s.VM.PageCacheRefaults }, vmstatHas(sample.VMPageCacheRefaults)},
}

func meminfoHas(name string) func(*sample.CPU) bool {
	return func(s *sample.CPU) bool { return s.Memory.Measured(name) }
}

func vmstatHas(name string) func(*sample.CPU) bool {
	return func(s *sample.CPU) bool { return s.VM.Measured(name) }
}

func (c *cpuCollector) Metrics(r *sample.CPU, emit func(prometheus.Metric)) {
	sec := r.Seconds
	for i, v := range [numCPUModes]float64{sec.User, sec.Nice, sec.System, sec.Idle, sec.IOWait, sec.IRQ, sec.SoftIRQ, sec.Steal} {
		emit(engine.NewSeries(cpuSecondsDesc, prometheus.CounterValue, v, cpuModeNames[i]))
	}
	emit(engine.NewSeries(cpusOnlineDesc, prometheus.GaugeValue, float64(r.OnlineCPUs)))
	emit(engine.NewSeries(procsRunningDesc, prometheus.GaugeValue, float64(r.ProcsRunning)))
	emit(engine.NewSeries(procsBlockedDesc, prometheus.GaugeValue, float64(r.ProcsBlocked)))
	emit(engine.NewSeries(contextSwitchesDesc, prometheus.CounterValue, float64(r.ContextSwitches)))
	for _, m := range memMetrics {
		if m.measured(r) {
			emit(engine.NewSeries(m.desc, m.typ, float64(m.value(r))))
		}
	}
	if r.VM.HasOOMKills {
		emit(engine.NewSeries(oomKillsDesc, prometheus.CounterValue, float64(r.VM.OOMKills)))
	}
}
