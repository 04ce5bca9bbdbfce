package collectors

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/common/expfmt"
	"go.uber.org/zap"

	"github.com/gpudiag/gpudiag/engine"
	"github.com/gpudiag/gpudiag/hostfs"
	"github.com/gpudiag/gpudiag/internal/hosttest"
	"github.com/gpudiag/gpudiag/sample"
)

const (
	fixtureProc = "../hostfs/testdata/host/proc"
	fixtureSys  = "../hostfs/testdata/host/sys"
)

// sampledMetrics exposes the metrics of one sample as a prometheus.Collector,
// so tests can gather them without running an engine.
type sampledMetrics struct {
	c engine.Collector
	s any
}

func (sampledMetrics) Describe(chan<- *prometheus.Desc) {}
func (m sampledMetrics) Collect(ch chan<- prometheus.Metric) {
	m.c.Metrics(m.s, func(x prometheus.Metric) { ch <- x })
}

// lintWithPromtool renders the metrics in the text format and fails the test
// on anything `promtool check metrics` prints.
func lintWithPromtool(t *testing.T, c prometheus.Collector) {
	t.Helper()
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Skip("promtool not on PATH")
	}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	if len(mfs) == 0 {
		t.Fatal("no metrics to check")
	}
	var text bytes.Buffer
	for _, mf := range mfs {
		if _, err := expfmt.MetricFamilyToText(&text, mf); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command(promtool, "check", "metrics")
	cmd.Stdin = &text
	out, err := cmd.CombinedOutput()
	if err != nil || len(out) > 0 {
		t.Fatalf("promtool check metrics: %v\n%s", err, out)
	}
}

// procTree returns a temporary proc directory holding copies of the named
// fixture files, for tests that rewrite some of them between samples.
func procTree(t *testing.T, files ...string) string {
	t.Helper()
	dir := t.TempDir()
	for _, f := range files {
		b, err := os.ReadFile(filepath.Join(fixtureProc, f))
		if err != nil {
			t.Fatal(err)
		}
		hosttest.WriteFile(t, filepath.Join(dir, f), string(b))
	}
	return dir
}

func defaultDiskFilter(t *testing.T) diskFilter {
	t.Helper()
	f, err := newDiskFilter("", defaultDiskExclude, false)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func newTestDiskstats(t *testing.T, proc, sys string, filter diskFilter) (*diskstatsCollector, *fakeClock) {
	t.Helper()
	c, err := newDiskstatsCollector(Config{ProcPath: proc, SysPath: sys, Logger: zap.NewNop()}, filter)
	if err != nil {
		t.Fatal(err)
	}
	clk := &fakeClock{t: time.Unix(1_700_000_000, 0)}
	c.now = clk.now
	return c, clk
}

func sampleDisks(t *testing.T, c *diskstatsCollector) *sample.Disks {
	return sampleAs[sample.Disks](t, c)
}

// diskstatsLine formats a line as the kernel does ("%4d %7d %s" and 17
// counters).
func diskstatsLine(major, minor int, name string, v [17]uint64) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%4d %7d %s", major, minor, name)
	for _, x := range v {
		fmt.Fprintf(&b, " %d", x)
	}
	return b.String() + "\n"
}

func TestDiskstatsFixture(t *testing.T) {
	c, _ := newTestDiskstats(t, fixtureProc, fixtureSys, defaultDiskFilter(t))
	s := sampleDisks(t, c)
	// Partitions, loop0 and dm-0 are left out by default.
	var names []string
	for _, d := range s.Devices {
		names = append(names, d.Name)
	}
	if !reflect.DeepEqual(names, []string{"nvme0n1", "vda"}) {
		t.Fatalf("devices %v; want [nvme0n1 vda]", names)
	}
	nvme, vda := s.Devices[0], s.Devices[1]
	wantNVMe := sample.Disk{
		Name: "nvme0n1", Major: 259, Minor: 0, NUMANode: 0, InFlight: 3,
		Counters: sample.DiskCounters{
			ReadsCompleted: 1000000, ReadsMerged: 2000, ReadBytes: 409600000 * 512, ReadTimeMillis: 250000,
			WritesCompleted: 500000, WritesMerged: 10000, WrittenBytes: 81920000 * 512, WriteTimeMillis: 400000,
			IOTimeMillis: 600000, IOTimeWeightedMillis: 700000,
			HasDiscards: true, DiscardsCompleted: 100, DiscardedBytes: 2097152 * 512, DiscardTimeMillis: 50,
			HasFlushes: true, FlushesCompleted: 2000, FlushTimeMillis: 1000,
		},
		Queue: &sample.DiskQueue{Scheduler: "none", ReadAheadBytes: 128 << 10, NRRequests: 1023, HWQueues: 32},
	}
	if !reflect.DeepEqual(nvme, wantNVMe) {
		t.Errorf("nvme0n1:\n got %+v %+v\nwant %+v %+v", nvme, nvme.Queue, wantNVMe, wantNVMe.Queue)
	}
	wantVDAQueue := sample.DiskQueue{Scheduler: "mq-deadline", ReadAheadBytes: 4096 << 10, NRRequests: 256, Rotational: true, HWQueues: 1}
	if vda.NUMANode != -1 || vda.Queue == nil || *vda.Queue != wantVDAQueue || vda.Rates != nil {
		t.Errorf("vda: numa %d queue %+v rates %+v; want numa -1, queue %+v, no rates", vda.NUMANode, vda.Queue, vda.Rates, wantVDAQueue)
	}
	if s.IntervalSeconds != 0 || nvme.Rates != nil {
		t.Errorf("first sample has interval %v, rates %+v", s.IntervalSeconds, nvme.Rates)
	}
}

func TestDiskstatsMetrics(t *testing.T) {
	c, _ := newTestDiskstats(t, fixtureProc, fixtureSys, defaultDiskFilter(t))
	m := sampledMetrics{asEngine(c), sampleDisks(t, c)}
	want := `
# HELP gpudiag_disk_info Block device identity; numa_node is the node of its controller, empty when the kernel does not know it.
# TYPE gpudiag_disk_info gauge
gpudiag_disk_info{device="nvme0n1",major="259",minor="0",numa_node="0"} 1
gpudiag_disk_info{device="vda",major="252",minor="0",numa_node=""} 1
# HELP gpudiag_disk_queue_info Block queue settings: the active I/O scheduler (empty for bio-based devices) and whether the device is rotational (1) or not (0).
# TYPE gpudiag_disk_queue_info gauge
gpudiag_disk_queue_info{device="nvme0n1",rotational="0",scheduler="none"} 1
gpudiag_disk_queue_info{device="vda",rotational="1",scheduler="mq-deadline"} 1
# HELP gpudiag_disk_read_ahead_bytes Read-ahead window of the device (queue/read_ahead_kb).
# TYPE gpudiag_disk_read_ahead_bytes gauge
gpudiag_disk_read_ahead_bytes{device="nvme0n1"} 131072
gpudiag_disk_read_ahead_bytes{device="vda"} 4.194304e+06
# HELP gpudiag_disk_hw_queues blk-mq hardware queues of the device (NVMe: I/O submission queues in use).
# TYPE gpudiag_disk_hw_queues gauge
gpudiag_disk_hw_queues{device="nvme0n1"} 32
gpudiag_disk_hw_queues{device="vda"} 1
# HELP gpudiag_disk_nr_requests Requests the block layer may allocate per hardware queue (queue/nr_requests).
# TYPE gpudiag_disk_nr_requests gauge
gpudiag_disk_nr_requests{device="nvme0n1"} 1023
gpudiag_disk_nr_requests{device="vda"} 256
# HELP gpudiag_disk_read_bytes_total Bytes read.
# TYPE gpudiag_disk_read_bytes_total counter
gpudiag_disk_read_bytes_total{device="nvme0n1"} 2.097152e+11
gpudiag_disk_read_bytes_total{device="vda"} 2.62144e+09
# HELP gpudiag_disk_io_time_weighted_seconds_total Time spent on requests, weighted by the number in flight; rate() is the average queue depth.
# TYPE gpudiag_disk_io_time_weighted_seconds_total counter
gpudiag_disk_io_time_weighted_seconds_total{device="nvme0n1"} 700
gpudiag_disk_io_time_weighted_seconds_total{device="vda"} 80
# HELP gpudiag_disk_io_now Requests issued to the driver and not yet completed.
# TYPE gpudiag_disk_io_now gauge
gpudiag_disk_io_now{device="nvme0n1"} 3
gpudiag_disk_io_now{device="vda"} 0
# HELP gpudiag_disk_discard_time_seconds_total Time discards took, summed over discards.
# TYPE gpudiag_disk_discard_time_seconds_total counter
gpudiag_disk_discard_time_seconds_total{device="nvme0n1"} 0.05
gpudiag_disk_discard_time_seconds_total{device="vda"} 0
# HELP gpudiag_disk_flush_requests_time_seconds_total Time flush requests took, summed over flushes.
# TYPE gpudiag_disk_flush_requests_time_seconds_total counter
gpudiag_disk_flush_requests_time_seconds_total{device="nvme0n1"} 1
gpudiag_disk_flush_requests_time_seconds_total{device="vda"} 3
`
	names := []string{"gpudiag_disk_info", "gpudiag_disk_queue_info", "gpudiag_disk_read_ahead_bytes", "gpudiag_disk_hw_queues",
		"gpudiag_disk_nr_requests", "gpudiag_disk_read_bytes_total", "gpudiag_disk_io_time_weighted_seconds_total",
		"gpudiag_disk_io_now", "gpudiag_disk_discard_time_seconds_total", "gpudiag_disk_flush_requests_time_seconds_total"}
	if err := testutil.CollectAndCompare(m, strings.NewReader(want), names...); err != nil {
		t.Fatal(err)
	}
	// 16 counters, io_now, info, queue info and 3 queue gauges per disk.
	if n := testutil.CollectAndCount(m); n != 2*22 {
		t.Fatalf("%d series; want %d", n, 2*22)
	}
	lintWithPromtool(t, m)
}

// Before 4.18 diskstats had 14 fields: no discard or flush series then.
func TestDiskstatsOldKernelFields(t *testing.T) {
	proc := t.TempDir()
	hosttest.WriteFile(t, filepath.Join(proc, "diskstats"), " 259       0 nvme0n1 10 0 80 1 20 0 160 2 0 3 3\n")
	c, _ := newTestDiskstats(t, proc, fixtureSys, defaultDiskFilter(t))
	s := sampleDisks(t, c)
	if len(s.Devices) != 1 || s.Devices[0].Counters.HasDiscards || s.Devices[0].Counters.HasFlushes {
		t.Fatalf("got %+v", s.Devices)
	}
	m := sampledMetrics{asEngine(c), s}
	if n := testutil.CollectAndCount(m, "gpudiag_disk_discards_completed_total", "gpudiag_disk_flush_requests_total"); n != 0 {
		t.Fatalf("%d discard/flush series on a kernel without them", n)
	}
	if n := testutil.CollectAndCount(m, "gpudiag_disk_writes_completed_total"); n != 1 {
		t.Fatalf("%d write series; want 1", n)
	}
}

func TestDiskstatsRatesAndReset(t *testing.T) {
	proc := t.TempDir()
	path := filepath.Join(proc, "diskstats")
	base := [17]uint64{1000000, 2000, 409600000, 250000, 500000, 10000, 81920000, 400000, 3, 600000, 700000, 100, 0, 2097152, 50, 2000, 1000}
	hosttest.WriteFile(t, path, diskstatsLine(259, 0, "nvme0n1", base))
	c, clk := newTestDiskstats(t, proc, fixtureSys, defaultDiskFilter(t))
	sampleDisks(t, c)

	// 10 s of 1 MiB reads at 2000/s, 20% merged, 0.2 ms each; 1 MiB writes
	// at 100/s, 3 ms each; busy 90% with 7 requests in flight on average.
	next := base
	for i, d := range map[int]uint64{0: 20000, 1: 5000, 2: 40960000, 3: 4000, 4: 1000, 6: 2048000, 7: 3000, 9: 9000, 10: 70000} {
		next[i] += d
	}
	hosttest.WriteFile(t, path, diskstatsLine(259, 0, "nvme0n1", next))
	clk.t = clk.t.Add(10 * time.Second)
	s := sampleDisks(t, c)
	want := sample.DiskRates{
		ReadBytesPerSecond: 2097152000, WriteBytesPerSecond: 104857600,
		ReadsPerSecond: 2000, WritesPerSecond: 100,
		AverageReadBytes: 1 << 20, AverageWriteBytes: 1 << 20,
		ReadAwaitSeconds: 0.0002, WriteAwaitSeconds: 0.003,
		ReadsMergedRatio: 0.2, BusyRatio: 0.9, AverageQueueDepth: 7,
	}
	if s.IntervalSeconds != 10 || s.Devices[0].Rates == nil || *s.Devices[0].Rates != want {
		t.Fatalf("interval %v rates %+v;\nwant 10, %+v", s.IntervalSeconds, s.Devices[0].Rates, want)
	}

	// The device is re-created: every counter restarts near zero.
	reset := [17]uint64{10, 0, 80, 1, 5, 0, 40, 1, 0, 2, 2, 0, 0, 0, 0, 0, 0}
	hosttest.WriteFile(t, path, diskstatsLine(259, 0, "nvme0n1", reset))
	clk.t = clk.t.Add(10 * time.Second)
	s = sampleDisks(t, c)
	if r := s.Devices[0].Rates; r == nil || *r != (sample.DiskRates{}) {
		t.Fatalf("rates across a reset %+v; want all zero", r)
	}

	// Same name, other device number (hot-swapped): no rates against the old one.
	hosttest.WriteFile(t, path, diskstatsLine(259, 5, "nvme0n1", reset))
	clk.t = clk.t.Add(10 * time.Second)
	if r := sampleDisks(t, c).Devices[0].Rates; r != nil {
		t.Fatalf("rates against another device: %+v", r)
	}
}

func TestMillisDelta(t *testing.T) {
	for _, tc := range []struct{ prev, cur, want uint64 }{
		{100, 250, 150},
		{4294960000, 2704, 10000}, // the 32-bit millisecond counter wrapped
		{5000, 100, 0},            // fell from the low half: a reset, not a wrap
		{1 << 40, 5, 0},           // not a 32-bit value: a reset
	} {
		if got := millisDelta(tc.prev, tc.cur); got != tc.want {
			t.Errorf("millisDelta(%d, %d) = %d; want %d", tc.prev, tc.cur, got, tc.want)
		}
	}
}

func TestDiskFilter(t *testing.T) {
	def := defaultDiskFilter(t)
	for name, keep := range map[string]bool{
		"nvme0n1": true, "nvme12n3": true, "sda": true, "sdaa": true, "vda": true, "xvda": true, "md0": true, "md127": true, "mmcblk0": true,
		"nvme0n1p1": false, "nvme1c1n1": false, "sda1": false, "sdaa12": false, "vda1": false, "xvda1": false, "hda2": false,
		"mmcblk0p1": false, "loop0": false, "loop12": false, "ram0": false, "zram0": false, "dm-0": false, "dm-13": false, "fd0": false,
	} {
		if got := def.keep(name); got != keep {
			t.Errorf("default filter keep(%q) = %v; want %v", name, got, keep)
		}
	}

	inc, err := newDiskFilter(`^dm-`, defaultDiskExclude, false)
	if err != nil {
		t.Fatal(err)
	}
	if !inc.keep("dm-0") || inc.keep("nvme0n1") {
		t.Error("include ^dm- must keep dm-0 only, whatever the default exclude says")
	}
	none, err := newDiskFilter("", "", true)
	if err != nil || !none.keep("loop0") {
		t.Errorf("an empty exclude keeps everything: %v", err)
	}
	for _, tc := range []struct {
		include, exclude string
		excludeSet       bool
		errHas           string
	}{
		{`^dm-`, `^loop`, true, "mutually exclusive"},
		{`^(dm-`, defaultDiskExclude, false, "device-include"},
		{"", `^(loop`, true, "device-exclude"},
	} {
		_, err := newDiskFilter(tc.include, tc.exclude, tc.excludeSet)
		if err == nil || !strings.Contains(err.Error(), tc.errHas) {
			t.Errorf("newDiskFilter(%q, %q, %v) error %v; want one naming %s", tc.include, tc.exclude, tc.excludeSet, err, tc.errHas)
		}
	}
}

// Included devices without a queue in /sys (dm, loop in this fixture) are
// still reported, without queue settings.
func TestDiskstatsIncludeWithoutSysfs(t *testing.T) {
	f, err := newDiskFilter(`^(dm-|loop)\d+$`, defaultDiskExclude, false)
	if err != nil {
		t.Fatal(err)
	}
	c, _ := newTestDiskstats(t, fixtureProc, fixtureSys, f)
	s := sampleDisks(t, c)
	if len(s.Devices) != 2 || s.Devices[0].Name != "loop0" || s.Devices[1].Name != "dm-0" {
		t.Fatalf("devices %+v; want loop0, dm-0", s.Devices)
	}
	for _, d := range s.Devices {
		if d.Queue != nil || d.NUMANode != -1 {
			t.Errorf("%s: queue %+v numa %d; want none, -1", d.Name, d.Queue, d.NUMANode)
		}
	}
	if d := s.Devices[1]; d.Counters.ReadBytes != 409500000*512 {
		t.Errorf("dm-0 read bytes %d", d.Counters.ReadBytes)
	}
}

func TestDiskstatsMalformed(t *testing.T) {
	good := diskstatsLine(259, 0, "nvme0n1", [17]uint64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17})
	for name, text := range map[string]string{
		"truncated line": good + " 252       0 vda 40000 5000 5120000",
		"not a number":   " 259       0 nvme0n1 1 2 x 4 5 6 7 8 9 10 11 12 13 14 15 16 17\n",
	} {
		t.Run(name, func(t *testing.T) {
			proc := t.TempDir()
			hosttest.WriteFile(t, filepath.Join(proc, "diskstats"), text)
			c, _ := newTestDiskstats(t, proc, fixtureSys, defaultDiskFilter(t))
			_, err := c.Sample(context.Background())
			if err == nil || !strings.Contains(err.Error(), filepath.Join(proc, "diskstats")) {
				t.Fatalf("error %v; want one naming the file", err)
			}
		})
	}
	t.Run("bad sysfs attribute", func(t *testing.T) {
		proc, sys := t.TempDir(), t.TempDir()
		hosttest.WriteFile(t, filepath.Join(proc, "diskstats"), good)
		q := filepath.Join(sys, "block", "nvme0n1", "queue")
		hosttest.WriteFile(t, filepath.Join(q, "read_ahead_kb"), "lots\n")
		hosttest.WriteFile(t, filepath.Join(q, "rotational"), "0\n")
		c, _ := newTestDiskstats(t, proc, sys, defaultDiskFilter(t))
		_, err := c.Sample(context.Background())
		if err == nil || !strings.Contains(err.Error(), filepath.Join(q, "read_ahead_kb")) {
			t.Fatalf("error %v; want one naming read_ahead_kb", err)
		}
	})
	t.Run("bad numa_node", func(t *testing.T) {
		proc, sys := t.TempDir(), t.TempDir()
		hosttest.WriteFile(t, filepath.Join(proc, "diskstats"), good)
		pci := filepath.Join(sys, "devices", "pci0000:3b", "0000:3b:01.0", "0000:3c:00.0")
		disk := filepath.Join(pci, "nvme", "nvme0", "nvme0n1")
		hosttest.WriteFile(t, filepath.Join(pci, "numa_node"), "zero\n")
		hosttest.WriteFile(t, filepath.Join(disk, "queue", "read_ahead_kb"), "128\n")
		hosttest.WriteFile(t, filepath.Join(disk, "queue", "rotational"), "0\n")
		if err := os.MkdirAll(filepath.Join(sys, "block"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink("../devices/pci0000:3b/0000:3b:01.0/0000:3c:00.0/nvme/nvme0/nvme0n1", filepath.Join(sys, "block", "nvme0n1")); err != nil {
			t.Fatal(err)
		}
		c, _ := newTestDiskstats(t, proc, sys, defaultDiskFilter(t))
		_, err := c.Sample(context.Background())
		if err == nil || !strings.Contains(err.Error(), "numa_node") {
			t.Fatalf("error %v; want one naming numa_node", err)
		}
	})
	t.Run("no diskstats", func(t *testing.T) {
		_, err := newDiskstatsCollector(Config{ProcPath: t.TempDir(), SysPath: fixtureSys}, defaultDiskFilter(t))
		if !errors.Is(err, ErrUnavailable) {
			t.Fatalf("error %v; want ErrUnavailable", err)
		}
	})
}

// A bio-based device (NVMe multipath head, zram) has a queue directory with
// no scheduler or nr_requests, and no mq directory.
func TestDiskstatsBioBasedQueue(t *testing.T) {
	proc, sys := t.TempDir(), t.TempDir()
	hosttest.WriteFile(t, filepath.Join(proc, "diskstats"), diskstatsLine(259, 0, "nvme0n1", [17]uint64{}))
	q := filepath.Join(sys, "block", "nvme0n1", "queue")
	hosttest.WriteFile(t, filepath.Join(q, "read_ahead_kb"), "128\n")
	hosttest.WriteFile(t, filepath.Join(q, "rotational"), "0\n")
	c, _ := newTestDiskstats(t, proc, sys, defaultDiskFilter(t))
	s := sampleDisks(t, c)
	if got := s.Devices[0].Queue; got == nil || *got != (sample.DiskQueue{ReadAheadBytes: 128 << 10}) {
		t.Fatalf("queue %+v", got)
	}
	m := sampledMetrics{asEngine(c), s}
	if n := testutil.CollectAndCount(m, "gpudiag_disk_nr_requests", "gpudiag_disk_hw_queues"); n != 0 {
		t.Fatalf("%d nr_requests/hw_queues series for a bio-based device", n)
	}
}

func TestActiveScheduler(t *testing.T) {
	for line, want := range map[string]string{
		"[none] mq-deadline kyber bfq": "none",
		"none [mq-deadline] kyber bfq": "mq-deadline",
		"mq-deadline kyber [bfq] none": "bfq",
		"none":                         "none",
		"":                             "",
		"mq-deadline none":             "",
	} {
		if got := hostfs.ActiveScheduler(line); got != want {
			t.Errorf("hostfs.ActiveScheduler(%q) = %q; want %q", line, got, want)
		}
	}
}

func TestDiskstatsLive(t *testing.T) {
	if _, err := os.Stat("/proc/diskstats"); err != nil {
		t.Skip("no /proc/diskstats")
	}
	c, err := newDiskstatsCollector(Config{ProcPath: "/proc", SysPath: "/sys", Logger: zap.NewNop()}, defaultDiskFilter(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	s := secondSample[sample.Disks](t, c)
	if s.IntervalSeconds <= 0 {
		t.Fatalf("interval %v", s.IntervalSeconds)
	}
	for _, d := range s.Devices {
		t.Logf("%s %d:%d numa %d queue %+v rates %+v", d.Name, d.Major, d.Minor, d.NUMANode, d.Queue, d.Rates)
		if !defaultDiskFilter(t).keep(d.Name) {
			t.Errorf("%s should have been left out", d.Name)
		}
		if d.Rates == nil {
			t.Errorf("%s: no rates on the second sample", d.Name)
			continue
		}
		r := d.Rates
		for _, v := range []float64{r.ReadBytesPerSecond, r.WriteBytesPerSecond, r.ReadsPerSecond, r.WritesPerSecond, r.AverageQueueDepth} {
			if v < 0 {
				t.Errorf("%s: negative rate in %+v", d.Name, r)
			}
		}
		if r.BusyRatio < 0 || r.BusyRatio > 1 {
			t.Errorf("%s: busy ratio %v", d.Name, r.BusyRatio)
		}
		if d.NUMANode < -1 {
			t.Errorf("%s: numa node %d", d.Name, d.NUMANode)
		}
	}
	lintWithPromtool(t, sampledMetrics{asEngine(c), s})
}
