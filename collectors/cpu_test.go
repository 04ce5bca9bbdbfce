package collectors

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/gpudiag/gpudiag/hostfs"
	"github.com/gpudiag/gpudiag/internal/hosttest"
	"github.com/gpudiag/gpudiag/sample"
)

func newTestCPU(t *testing.T, proc string) (*cpuCollector, *fakeClock) {
	t.Helper()
	c, err := newCPUCollector(Config{ProcPath: proc, SysPath: fixtureSys})
	if err != nil {
		t.Fatal(err)
	}
	clk := &fakeClock{t: time.Unix(1_700_000_000, 0)}
	c.now = clk.now
	return c, clk
}

func sampleCPU(t *testing.T, c *cpuCollector) *sample.CPU { return sampleAs[sample.CPU](t, c) }

// writeProcStat writes /proc/stat as the kernel formats it, from per-CPU
// ticks in cpuModeNames order.
func writeProcStat(t *testing.T, proc string, cpus map[int]cpuTicks, ctxt uint64) {
	t.Helper()
	var total cpuTicks
	var lines []string
	for id := 0; id < 256; id++ {
		v, ok := cpus[id]
		if !ok {
			continue
		}
		for m := range v {
			total[m] += v[m]
		}
		lines = append(lines, fmt.Sprintf("cpu%d %d %d %d %d %d %d %d %d 0 0", id, v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7]))
	}
	head := fmt.Sprintf("cpu  %d %d %d %d %d %d %d %d 0 0", total[0], total[1], total[2], total[3], total[4], total[5], total[6], total[7])
	tail := fmt.Sprintf("intr 1000 0 9 0\nctxt %d\nbtime 1767225600\nprocesses 4000\nprocs_running 3\nprocs_blocked 1\nsoftirq 700 0 100 100 100 100 0 100 100 0 100", ctxt)
	hosttest.WriteFile(t, filepath.Join(proc, "stat"), head+"\n"+strings.Join(lines, "\n")+"\n"+tail+"\n")
}

// setVMStat rewrites the named counters of a copied /proc/vmstat.
func setVMStat(t *testing.T, proc string, values map[string]uint64) {
	t.Helper()
	path := filepath.Join(proc, "vmstat")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
	for i, l := range lines {
		name, _, _ := strings.Cut(l, " ")
		if v, ok := values[name]; ok {
			lines[i] = fmt.Sprintf("%s %d", name, v)
		}
	}
	hosttest.WriteFile(t, path, strings.Join(lines, "\n")+"\n")
}

func TestCPUFixture(t *testing.T) {
	c, _ := newTestCPU(t, fixtureProc)
	s := sampleCPU(t, c)
	want := sample.CPU{
		OnlineCPUs: 128,
		Seconds: sample.CPUModes{User: 512081.28, Nice: 128, System: 102400, Idle: 1919918.72,
			IOWait: 3840, IRQ: 0, SoftIRQ: 5120, Steal: 0},
		ProcsRunning: 37, ProcsBlocked: 2, ContextSwitches: 9876543210,
		Memory: sample.HostMemory{
			TotalBytes: 2113470512 << 10, AvailableBytes: 1802345678 << 10, CachedBytes: 812345678 << 10,
			DirtyBytes: 2345678 << 10, WritebackBytes: 123456 << 10,
			SwapTotalBytes: 8388604 << 10, SwapFreeBytes: 8123456 << 10,
		},
		VM: sample.VMCounters{SwapInPages: 66123, SwapOutPages: 264321, MajorFaults: 1234567,
			PageCacheRefaults: 98765432, HasOOMKills: true, OOMKills: 3},
	}
	if !reflect.DeepEqual(*s, want) {
		t.Fatalf("got  %+v\nwant %+v", *s, want)
	}

	m := sampledMetrics{asEngine(c), s}
	text := `
# HELP gpudiag_cpu_seconds_total CPU time by mode, summed over all CPUs (guest time is in user and nice). Held monotonic per CPU where the kernel's idle or iowait step back.
# TYPE gpudiag_cpu_seconds_total counter
gpudiag_cpu_seconds_total{mode="idle"} 1919918.72
gpudiag_cpu_seconds_total{mode="iowait"} 3840
gpudiag_cpu_seconds_total{mode="irq"} 0
gpudiag_cpu_seconds_total{mode="nice"} 128
gpudiag_cpu_seconds_total{mode="softirq"} 5120
gpudiag_cpu_seconds_total{mode="steal"} 0
gpudiag_cpu_seconds_total{mode="system"} 102400
gpudiag_cpu_seconds_total{mode="user"} 512081.28
# HELP gpudiag_cpus_online Online CPUs (logical), the denominator of rate(gpudiag_cpu_seconds_total).
# TYPE gpudiag_cpus_online gauge
gpudiag_cpus_online 128
# HELP gpudiag_procs_running Runnable tasks (running or waiting for a CPU).
# TYPE gpudiag_procs_running gauge
gpudiag_procs_running 37
# HELP gpudiag_procs_blocked Tasks in uninterruptible sleep, mostly waiting for block I/O.
# TYPE gpudiag_procs_blocked gauge
gpudiag_procs_blocked 2
# HELP gpudiag_context_switches_total Context switches on all CPUs.
# TYPE gpudiag_context_switches_total counter
gpudiag_context_switches_total 9876543210
# HELP gpudiag_memory_bytes Usable RAM (MemTotal).
# TYPE gpudiag_memory_bytes gauge
gpudiag_memory_bytes 2164193804288
# HELP gpudiag_memory_available_bytes RAM available for new allocations without swapping (MemAvailable).
# TYPE gpudiag_memory_available_bytes gauge
gpudiag_memory_available_bytes 1845601974272
# HELP gpudiag_memory_swap_bytes Swap space configured (SwapTotal); GPU nodes should have none.
# TYPE gpudiag_memory_swap_bytes gauge
gpudiag_memory_swap_bytes 8589930496
# HELP gpudiag_memory_swap_out_pages_total Pages written out to swap (pswpout).
# TYPE gpudiag_memory_swap_out_pages_total counter
gpudiag_memory_swap_out_pages_total 264321
# HELP gpudiag_memory_page_cache_refaults_total File pages read back in soon after the page cache evicted them (workingset_refault_file, or workingset_refault before 5.9): the dataset does not fit in RAM.
# TYPE gpudiag_memory_page_cache_refaults_total counter
gpudiag_memory_page_cache_refaults_total 98765432
# HELP gpudiag_memory_oom_kills_total Processes killed by the kernel's OOM killer (oom_kill in /proc/vmstat).
# TYPE gpudiag_memory_oom_kills_total counter
gpudiag_memory_oom_kills_total 3
`
	names := []string{"gpudiag_cpu_seconds_total", "gpudiag_cpus_online", "gpudiag_procs_running", "gpudiag_procs_blocked",
		"gpudiag_context_switches_total", "gpudiag_memory_bytes", "gpudiag_memory_available_bytes", "gpudiag_memory_swap_bytes",
		"gpudiag_memory_swap_out_pages_total", "gpudiag_memory_page_cache_refaults_total", "gpudiag_memory_oom_kills_total"}
	if err := testutil.CollectAndCompare(m, strings.NewReader(text), names...); err != nil {
		t.Fatal(err)
	}
	// 8 modes, 4 run-queue series, 12 memory series.
	if n := testutil.CollectAndCount(m); n != 24 {
		t.Fatalf("%d series; want 24", n)
	}
	lintWithPromtool(t, m)
}

func TestCPUIntervalAndReset(t *testing.T) {
	proc := procTree(t, "meminfo", "vmstat")
	base := cpuTicks{100000, 0, 20000, 500000, 1000, 0, 2000, 0}
	cpus := map[int]cpuTicks{0: base, 1: base, 2: base, 3: base}
	writeProcStat(t, proc, cpus, 1000000)
	c, clk := newTestCPU(t, proc)
	if s := sampleCPU(t, c); s.Interval != nil {
		t.Fatalf("first sample has an interval: %+v", s.Interval)
	}

	// 10 s on 4 CPUs: 4000 ticks, of which 60% user, 20% idle, 5% iowait.
	step := cpuTicks{600, 0, 100, 200, 50, 10, 20, 20}
	for id, v := range cpus {
		for m := range v {
			v[m] += step[m]
		}
		cpus[id] = v
	}
	writeProcStat(t, proc, cpus, 1050000)
	setVMStat(t, proc, map[string]uint64{"pswpin": 66123 + 1000, "pswpout": 264321 + 2000, "pgmajfault": 1234567 + 500,
		"workingset_refault_file": 98765432 + 123450, "oom_kill": 3 + 2})
	clk.t = clk.t.Add(10 * time.Second)
	s := sampleCPU(t, c)
	want := sample.CPUInterval{
		Ratios:                   sample.CPUModes{User: 0.6, System: 0.1, Idle: 0.2, IOWait: 0.05, IRQ: 0.01, SoftIRQ: 0.02, Steal: 0.02},
		BusyRatio:                0.75,
		ContextSwitchesPerSecond: 5000,
		SwapInPagesPerSecond:     100, SwapOutPagesPerSecond: 200,
		MajorFaultsPerSecond: 50, PageCacheRefaultsPerSecond: 12345,
		OOMKills: 2,
	}
	if s.IntervalSeconds != 10 || s.Interval == nil || !reflect.DeepEqual(*s.Interval, want) {
		t.Fatalf("interval %v %+v;\nwant 10 %+v", s.IntervalSeconds, s.Interval, want)
	}

	// Counters that fall give zero rates and no OOM kills, never negatives.
	setVMStat(t, proc, map[string]uint64{"pswpin": 1, "pswpout": 1, "pgmajfault": 1, "workingset_refault_file": 1, "oom_kill": 0})
	writeProcStat(t, proc, cpus, 7)
	clk.t = clk.t.Add(10 * time.Second)
	s = sampleCPU(t, c)
	if s.Interval == nil || !reflect.DeepEqual(*s.Interval, sample.CPUInterval{}) {
		t.Fatalf("interval across a reset %+v; want all zero", s.Interval)
	}
}

// The kernel's per-CPU idle and iowait can step back, and an offlined CPU
// disappears from /proc/stat: neither may make the node totals fall, which
// Prometheus would take for a counter reset and turn into a huge rate.
func TestCPUTotalsStayMonotonic(t *testing.T) {
	proc := procTree(t, "meminfo", "vmstat")
	cpus := map[int]cpuTicks{
		0: {1000, 0, 100, 5000, 300, 0, 10, 0},
		1: {2000, 0, 200, 4000, 200, 0, 20, 0},
		2: {3000, 0, 300, 3000, 100, 0, 30, 0},
	}
	writeProcStat(t, proc, cpus, 100)
	c, clk := newTestCPU(t, proc)
	first := sampleCPU(t, c)

	back := cpus[0]
	back[cpuIOWait] -= 5 // iowait stepped back
	back[0] += 100
	writeProcStat(t, proc, map[int]cpuTicks{0: back, 1: cpus[1]}, 200) // cpu2 went offline
	clk.t = clk.t.Add(time.Second)
	s := sampleCPU(t, c)
	if s.OnlineCPUs != 2 {
		t.Fatalf("online %d; want 2", s.OnlineCPUs)
	}
	if s.Seconds.IOWait != first.Seconds.IOWait || s.Seconds.Idle != first.Seconds.Idle || s.Seconds.User != first.Seconds.User+1 {
		t.Fatalf("totals %+v after %+v; want iowait and idle held, user +1 s", s.Seconds, first.Seconds)
	}
	if r := s.Interval.Ratios; r.IOWait != 0 || r.User != 1 {
		t.Fatalf("ratios %+v; want all user", r)
	}
}

// A file of another shape fails the sample, naming it; a line the file
// lacks does not (TestCPUWithoutMemAvailableOrVMStat).
func TestCPUMalformed(t *testing.T) {
	statText, err := os.ReadFile(filepath.Join(fixtureProc, "stat"))
	if err != nil {
		t.Fatal(err)
	}
	cut := string(statText)[:strings.Index(string(statText), "procs_running")]
	for _, tc := range []struct{ name, file, text string }{
		{"stat truncated", "stat", cut},
		{"stat not a number", "stat", strings.Replace(string(statText), "cpu7 400007", "cpu7 4x0007", 1)},
		{"meminfo line cut short", "meminfo", "MemTotal:       2113470512 kB\nMemFree:"},
		{"vmstat truncated", "vmstat", "pswpin 1\npswpout"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			proc := procTree(t, "stat", "meminfo", "vmstat")
			path := filepath.Join(proc, tc.file)
			hosttest.WriteFile(t, path, tc.text)
			c, _ := newTestCPU(t, proc)
			_, err := c.Sample(context.Background())
			if err == nil || !strings.Contains(err.Error(), path) {
				t.Fatalf("error %v; want one naming %s", err, path)
			}
		})
	}
}

func TestCPULive(t *testing.T) {
	c, err := newCPUCollector(Config{ProcPath: "/proc", SysPath: "/sys"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	first := sampleCPU(t, c)
	time.Sleep(100 * time.Millisecond)
	s := sampleCPU(t, c)
	t.Logf("%d CPUs, %+v, memory %+v, vm %+v, interval %+v", s.OnlineCPUs, s.Seconds, s.Memory, s.VM, s.Interval)
	if s.OnlineCPUs < 1 || s.ProcsRunning < 1 || s.ContextSwitches == 0 {
		t.Errorf("run queue: %+v", s)
	}
	if s.Memory.TotalBytes == 0 || s.Memory.AvailableBytes > s.Memory.TotalBytes || s.Memory.SwapFreeBytes > s.Memory.SwapTotalBytes {
		t.Errorf("memory: %+v", s.Memory)
	}
	if s.Seconds.Idle < first.Seconds.Idle || s.Seconds.User < first.Seconds.User {
		t.Errorf("totals fell: %+v then %+v", first.Seconds, s.Seconds)
	}
	iv := s.Interval
	if iv == nil {
		t.Fatal("no interval on the second sample")
	}
	r := iv.Ratios
	sum := r.User + r.Nice + r.System + r.Idle + r.IOWait + r.IRQ + r.SoftIRQ + r.Steal
	if iv.BusyRatio < 0 || iv.BusyRatio > 1 || (sum != 0 && (sum < 0.999 || sum > 1.001)) {
		t.Errorf("ratios %+v (sum %v), busy %v", r, sum, iv.BusyRatio)
	}
	lintWithPromtool(t, sampledMetrics{asEngine(c), s})
}

// A kernel before 3.14 has no MemAvailable; a container's /proc may have
// no vmstat. The collector samples on: the CPU times and the memory it
// has are read and exported, what is missing is named in its health and
// left out of the series, not exported as 0. A counter that comes back
// has no rate until it was read twice: from an unread 0 the rate would be
// the whole count since boot in one interval.
func TestCPUWithoutMemAvailableOrVMStat(t *testing.T) {
	proc := procTree(t, "meminfo")
	writeProcStat(t, proc, map[int]cpuTicks{0: {1000, 0, 100, 5000, 300, 0, 10, 0}}, 1000)
	b, err := os.ReadFile(filepath.Join(proc, "meminfo"))
	if err != nil {
		t.Fatal(err)
	}
	var kept []string
	for _, l := range strings.SplitAfter(string(b), "\n") {
		if !strings.HasPrefix(l, "MemAvailable:") {
			kept = append(kept, l)
		}
	}
	hosttest.WriteFile(t, filepath.Join(proc, "meminfo"), strings.Join(kept, ""))

	c, clk := newTestCPU(t, proc)
	s := sampleCPU(t, c)
	want := []string{"meminfo MemAvailable", "vmstat pswpin", "vmstat pswpout", "vmstat pgmajfault", "vmstat workingset_refault", "vmstat oom_kill"}
	if got := s.UnmeasuredFields(); !reflect.DeepEqual(got, want) {
		t.Fatalf("unmeasured %q; want %q", got, want)
	}
	if s.Memory.TotalBytes != 2113470512<<10 || s.OnlineCPUs != 1 {
		t.Fatalf("the rest unread: %+v", s)
	}
	m := sampledMetrics{asEngine(c), s}
	for _, name := range []string{"gpudiag_memory_available_bytes", "gpudiag_memory_swap_in_pages_total", "gpudiag_memory_swap_out_pages_total",
		"gpudiag_memory_major_page_faults_total", "gpudiag_memory_page_cache_refaults_total", "gpudiag_memory_oom_kills_total"} {
		if n := testutil.CollectAndCount(m, name); n != 0 {
			t.Errorf("%s exported (%d series) though not measured", name, n)
		}
	}
	if n := testutil.CollectAndCount(m, "gpudiag_memory_bytes"); n != 1 {
		t.Errorf("gpudiag_memory_bytes: %d series; want the measured MemTotal", n)
	}

	// vmstat appears: its counters are read, their rates wait one interval.
	b, err = os.ReadFile(filepath.Join(fixtureProc, "vmstat"))
	if err != nil {
		t.Fatal(err)
	}
	hosttest.WriteFile(t, filepath.Join(proc, "vmstat"), string(b))
	clk.t = clk.t.Add(10 * time.Second)
	s = sampleCPU(t, c)
	if s.Interval == nil || s.Interval.SwapOutPagesPerSecond != 0 || s.Interval.Measured(sample.VMSwapOut) || s.VM.SwapOutPages != 264321 {
		t.Fatalf("interval after vmstat appeared %+v, vm %+v; want no swap rate from the unread 0", s.Interval, s.VM)
	}
	clk.t = clk.t.Add(10 * time.Second)
	if s = sampleCPU(t, c); s.Interval == nil || len(s.Interval.Unmeasured) != 0 {
		t.Fatalf("second interval with vmstat %+v; want every rate measured", s.Interval)
	}
}

// The cpu collector hands hostfs.VMStat's Unmeasured on as
// sample.VMCounters': both must name a counter alike.
func TestVMStatNamesAreSampleNames(t *testing.T) {
	for _, n := range [][2]string{{hostfs.VMSwapIn, sample.VMSwapIn}, {hostfs.VMSwapOut, sample.VMSwapOut},
		{hostfs.VMMajorFaults, sample.VMMajorFaults}, {hostfs.VMPageCacheRefaults, sample.VMPageCacheRefaults}} {
		if n[0] != n[1] {
			t.Errorf("hostfs names %q what sample names %q", n[0], n[1])
		}
	}
}
