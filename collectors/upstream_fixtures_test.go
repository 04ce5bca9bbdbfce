package collectors

import (
	"context"
	"fmt"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/prometheus/procfs"
	"github.com/prometheus/procfs/blockdevice"
	"github.com/prometheus/procfs/sysfs"
	"go.uber.org/zap"

	"github.com/gpudiag/gpudiag/engine"
)

// The host collectors on hosts they were not written against: the /proc
// and /sys trees node_exporter and procfs test their parsers on
// (testdata/upstream, trimmed to what the collectors read). Every host
// collector succeeds on each; what a tree lacks (MemAvailable, a NUMA
// node's distance, an interface's statistics/) is named unmeasured, not
// a failure; and every value gpudiag exports from what node_exporter
// reads too equals node_exporter's own output on its tree, and procfs's
// parsers' reading of the procfs tree.

const upstreamDir = "../testdata/upstream"

// upstreamTree is one upstream tree, unpacked.
type upstreamTree struct {
	name      string
	proc, sys string
}

// nodeExporterTree is node_exporter's collector/fixtures: its proc/ as
// files, its sys.ttar unpacked.
func nodeExporterTree(t *testing.T) upstreamTree {
	t.Helper()
	root := t.TempDir()
	unpackTTAR(t, filepath.Join(upstreamDir, "node_exporter", "sys.ttar"), root)
	return upstreamTree{name: "node_exporter", proc: filepath.Join(upstreamDir, "node_exporter", "proc"), sys: filepath.Join(root, "sys")}
}

// procfsTree is procfs's testdata/fixtures.ttar unpacked: fixtures/proc
// and fixtures/sys.
func procfsTree(t *testing.T) upstreamTree {
	t.Helper()
	root := t.TempDir()
	unpackTTAR(t, filepath.Join(upstreamDir, "procfs", "fixtures.ttar"), root)
	return upstreamTree{name: "procfs", proc: filepath.Join(root, "fixtures", "proc"), sys: filepath.Join(root, "fixtures", "sys")}
}

func unpackTTAR(t *testing.T, archive, dst string) {
	t.Helper()
	f, err := os.Open(archive)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := extractTTAR(f, dst); err != nil {
		t.Fatalf("%s: %v", archive, err)
	}
}

// notHostCollectors are the registered collectors that read no /proc or
// /sys tree: a GPU backend, the kubelet's API, eBPF, NCCL's log files.
var notHostCollectors = []string{"ebpf", "gpu", "kubelet", "nccl", "podresources"}

// upstreamHostCollectors builds every host collector over the tree as the
// daemon does with --path.procfs and --path.sysfs pointing there and the
// collectors' flags at their defaults; the TCP collector's kernel is a
// dump of no sockets (the tree has none). include, when set, is
// --collector.netdev.device-include and --collector.diskstats.device-include.
func upstreamHostCollectors(t *testing.T, tree upstreamTree, include string) []engine.Collector {
	t.Helper()
	cfg := Config{ProcPath: tree.proc, SysPath: tree.sys, Logger: zap.NewNop(), Shared: &Shared{}}
	diskFilter, err := newDiskFilter(include, defaultDiskExclude, false)
	if err != nil {
		t.Fatal(err)
	}
	netdevInclude := include
	builders := map[string]func() (engine.Collector, error){
		"cpu":        func() (engine.Collector, error) { return asEngineErr(newCPUCollector(cfg)) },
		"dataset":    func() (engine.Collector, error) { return asEngineErr(newDatasetCollector(cfg)) },
		"diskstats":  func() (engine.Collector, error) { return asEngineErr(newDiskstatsCollector(cfg, diskFilter)) },
		"gpuprocess": func() (engine.Collector, error) { return asEngineErr(newGPUProcessCollector(cfg, gpuProcessDefaults)) },
		"infiniband": func() (engine.Collector, error) { return asEngineErr(newInfiniBandCollector(cfg)) },
		"ncclproc":   func() (engine.Collector, error) { return asEngineErr(newNCCLProcCollector(cfg, ncclProcDefaults)) },
		"netdev": func() (engine.Collector, error) {
			return asEngineErr(newNetdevCollector(cfg, netdevInclude, netdevDefaultExclude))
		},
		"numa":     func() (engine.Collector, error) { return asEngineErr(newNUMACollector(cfg)) },
		"pressure": func() (engine.Collector, error) { return asEngineErr(newPressureCollector(cfg)) },
		"tcp":      func() (engine.Collector, error) { return asEngineErr(newTCPCollector(cfg, &tcpFakeDump{}, 64)) },
		"tuning":   func() (engine.Collector, error) { return asEngineErr(newTuningCollector(cfg)) },
	}
	host := slices.DeleteFunc(Names(), func(n string) bool { return slices.Contains(notHostCollectors, n) })
	if got := slices.Sorted(maps.Keys(builders)); !slices.Equal(got, host) {
		t.Fatalf("the test builds %q; the host collectors registered are %q", got, host)
	}
	var out []engine.Collector
	for _, name := range host {
		c, err := builders[name]()
		if err != nil {
			t.Fatalf("%s on %s's tree: %v", name, tree.name, err)
		}
		if cl, ok := c.(interface{ Close() error }); ok {
			t.Cleanup(func() { cl.Close() })
		}
		out = append(out, c)
	}
	return out
}

// runUpstream samples every collector twice (the second has the rates) on
// an engine and returns their statuses and what they export.
func runUpstream(t *testing.T, cs []engine.Collector) ([]engine.Status, map[string]map[string]float64) {
	t.Helper()
	// An interval no sample comes near: the test judges what the
	// collectors read, not how fast.
	e := engine.New(engine.Options{Interval: time.Hour})
	for _, c := range cs {
		e.Add(c, time.Hour)
	}
	e.SampleOnce(context.Background())
	e.SampleOnce(context.Background())
	mfs, err := e.Gather()
	if err != nil {
		t.Fatal(err)
	}
	return e.Statuses(), seriesValues(mfs)
}

// seriesValues indexes families by name, then by their label pairs
// (labelKey).
func seriesValues(mfs []*dto.MetricFamily) map[string]map[string]float64 {
	out := map[string]map[string]float64{}
	for _, mf := range mfs {
		m := map[string]float64{}
		for _, s := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range s.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			var v float64
			switch {
			case s.Gauge != nil:
				v = s.Gauge.GetValue()
			case s.Counter != nil:
				v = s.Counter.GetValue()
			case s.Untyped != nil:
				v = s.Untyped.GetValue()
			}
			m[labelKey(labels)] = v
		}
		out[mf.GetName()] = m
	}
	return out
}

// labelKey is a series' label pairs in name order: `device="sda"`.
func labelKey(labels map[string]string) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(labels)) {
		parts = append(parts, fmt.Sprintf("%s=%q", k, labels[k]))
	}
	return strings.Join(parts, ",")
}

// upstreamSeries maps a family gpudiag exports to node_exporter's of the
// same reading: ours = theirs × scale (1 when 0), their label sumOver
// summed away (node_exporter's per-CPU times; gpudiag's are the node's),
// and the rest of the labels the same.
type upstreamSeries struct {
	ours, theirs string
	scale        float64
	sumOver      string
}

func same(suffix string) upstreamSeries {
	return upstreamSeries{ours: "gpudiag_" + suffix, theirs: "node_" + suffix}
}

// upstreamSeriesMap lists every family both read.
func upstreamSeriesMap() []upstreamSeries {
	m := []upstreamSeries{
		{ours: "gpudiag_cpu_seconds_total", theirs: "node_cpu_seconds_total", sumOver: "cpu"},
		same("procs_running"), same("procs_blocked"), same("context_switches_total"),
		{ours: "gpudiag_memory_bytes", theirs: "node_memory_MemTotal_bytes"},
		{ours: "gpudiag_memory_available_bytes", theirs: "node_memory_MemAvailable_bytes"},
		{ours: "gpudiag_memory_cached_bytes", theirs: "node_memory_Cached_bytes"},
		{ours: "gpudiag_memory_dirty_bytes", theirs: "node_memory_Dirty_bytes"},
		{ours: "gpudiag_memory_writeback_bytes", theirs: "node_memory_Writeback_bytes"},
		{ours: "gpudiag_memory_swap_bytes", theirs: "node_memory_SwapTotal_bytes"},
		{ours: "gpudiag_memory_swap_free_bytes", theirs: "node_memory_SwapFree_bytes"},
		{ours: "gpudiag_memory_swap_in_pages_total", theirs: "node_vmstat_pswpin"},
		{ours: "gpudiag_memory_swap_out_pages_total", theirs: "node_vmstat_pswpout"},
		{ours: "gpudiag_memory_major_page_faults_total", theirs: "node_vmstat_pgmajfault"},
		{ours: "gpudiag_memory_oom_kills_total", theirs: "node_vmstat_oom_kill"},
		{ours: "gpudiag_network_speed_bytes_per_second", theirs: "node_network_speed_bytes"},
		{ours: "gpudiag_disk_discarded_bytes_total", theirs: "node_disk_discarded_sectors_total", scale: 512},
	}
	for _, n := range []string{"hit", "miss", "foreign"} {
		m = append(m, upstreamSeries{ours: "gpudiag_numa_" + n + "_allocations_total", theirs: "node_memory_numa_numa_" + n + "_total"})
	}
	for _, n := range []string{"interleave_hit", "local_node", "other_node"} {
		m = append(m, upstreamSeries{ours: "gpudiag_numa_" + n + "_allocations_total", theirs: "node_memory_numa_" + n + "_total"})
	}
	for _, s := range []string{
		// node_exporter has no cpu full (always 0 system-wide).
		"pressure_cpu_waiting_seconds_total", "pressure_io_waiting_seconds_total",
		"pressure_io_stalled_seconds_total", "pressure_memory_waiting_seconds_total", "pressure_memory_stalled_seconds_total",
		"pressure_irq_stalled_seconds_total",
		"network_up", "network_carrier", "network_mtu_bytes", "network_carrier_changes_total",
		"disk_reads_completed_total", "disk_reads_merged_total", "disk_read_bytes_total", "disk_read_time_seconds_total",
		"disk_writes_completed_total", "disk_writes_merged_total", "disk_written_bytes_total", "disk_write_time_seconds_total",
		"disk_io_time_seconds_total", "disk_io_time_weighted_seconds_total", "disk_io_now", "disk_discards_completed_total",
		"disk_discards_merged_total", "disk_discard_time_seconds_total", "disk_flush_requests_total",
		"disk_flush_requests_time_seconds_total",
		"infiniband_state_id", "infiniband_physical_state_id", "infiniband_rate_bytes_per_second",
		"infiniband_port_data_transmitted_bytes_total", "infiniband_port_data_received_bytes_total",
		"infiniband_port_packets_transmitted_total", "infiniband_port_packets_received_total", "infiniband_port_transmit_wait_total",
		"infiniband_port_discards_transmitted_total", "infiniband_port_discards_received_total", "infiniband_port_errors_received_total",
		"infiniband_link_downed_total", "infiniband_link_error_recovery_total",
	} {
		m = append(m, same(s))
	}
	return m
}

// compareUpstream checks every series of theirs that gpudiag should have
// (want says which) against ours, and every series of ours against theirs
// where they have it, over the families theirs covers. It returns how many
// of their values the compared series stand for (node_exporter's per-CPU
// times are summed into gpudiag's node times).
func compareUpstream(t *testing.T, ours, theirs map[string]map[string]float64, covers func(theirs string) bool,
	want func(family string, labels map[string]string) bool) int {
	t.Helper()
	compared := 0
	for _, m := range upstreamSeriesMap() {
		if !covers(m.theirs) {
			continue
		}
		expected := map[string]float64{}
		parts := map[string]int{}
		wanted := map[string]bool{}
		for key, v := range theirs[m.theirs] {
			labels := parseLabelKey(t, key)
			if m.sumOver != "" {
				delete(labels, m.sumOver)
			}
			k := labelKey(labels)
			expected[k] += v
			parts[k]++
			if want(m.ours, labels) {
				wanted[k] = true
			}
		}
		scale := m.scale
		if scale == 0 {
			scale = 1
		}
		got := ours[m.ours]
		for _, k := range slices.Sorted(maps.Keys(wanted)) {
			if _, ok := got[k]; !ok {
				t.Errorf("%s{%s}: node_exporter's %s is %v; gpudiag exports none", m.ours, k, m.theirs, expected[k])
			}
		}
		for _, k := range slices.Sorted(maps.Keys(got)) {
			e, ok := expected[k]
			if !ok {
				continue // an entity node_exporter ignores (its flags) or has no such reading of
			}
			compared += parts[k]
			if w := e * scale; !closeTo(got[k], w) {
				t.Errorf("%s{%s} = %v; node_exporter's %s says %v", m.ours, k, got[k], m.theirs, w)
			}
		}
		if len(theirs[m.theirs]) == 0 && len(got) > 0 {
			t.Errorf("%s exported (%d series) where node_exporter has no %s: not read on this tree", m.ours, len(got), m.theirs)
		}
	}
	return compared
}

// closeTo allows the last bits a float sum or a ms→s division in another
// order gives.
func closeTo(a, b float64) bool {
	return a == b || math.Abs(a-b) <= 1e-12*math.Max(math.Abs(a), math.Abs(b))
}

func parseLabelKey(t *testing.T, key string) map[string]string {
	t.Helper()
	out := map[string]string{}
	if key == "" {
		return out
	}
	for _, pair := range strings.Split(key, ",") {
		k, v, ok := strings.Cut(pair, "=")
		if !ok {
			t.Fatalf("label pair %q", pair)
		}
		var s string
		if _, err := fmt.Sscanf(v, "%q", &s); err != nil {
			t.Fatalf("label value %s: %v", v, err)
		}
		out[k] = s
	}
	return out
}

// nodeExporterOutput is node_exporter's golden /metrics on its tree.
func nodeExporterOutput(t *testing.T) map[string]map[string]float64 {
	t.Helper()
	f, err := os.Open(filepath.Join(upstreamDir, "node_exporter", "e2e-output.txt"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	p := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := p.TextToMetricFamilies(f)
	if err != nil {
		t.Fatal(err)
	}
	var list []*dto.MetricFamily
	for _, mf := range mfs {
		list = append(list, mf)
	}
	return seriesValues(list)
}

// unmeasuredBy is each collector's Unmeasured, those with none left out.
func unmeasuredBy(statuses []engine.Status) map[string][]string {
	out := map[string][]string{}
	for _, st := range statuses {
		if len(st.Unmeasured) > 0 {
			out[st.Name] = st.Unmeasured
		}
	}
	return out
}

// requireAllSucceed fails the test for every collector that failed.
func requireAllSucceed(t *testing.T, tree upstreamTree, statuses []engine.Status) {
	t.Helper()
	for _, st := range statuses {
		if !st.Success {
			t.Errorf("%s fails on %s's tree: %s", st.Name, tree.name, st.LastError)
		}
	}
}

// On node_exporter's tree every host collector succeeds, with what the
// tree lacks named unmeasured (its meminfo has no MemAvailable, its NUMA
// nodes no distance and numastat where node<N>/vmstat would be, its
// interfaces no statistics/ and its /proc no net/dev), and the values
// gpudiag exports equal node_exporter's output on the same tree: some 300.
// Before, the cpu and numa collectors failed every sample, and an
// interface selected by --collector.netdev.device-include was dropped (or,
// with bonding_masters selected, failed the collector).
func TestHostCollectorsOnNodeExporterFixtures(t *testing.T) {
	tree := nodeExporterTree(t)
	theirs := nodeExporterOutput(t)
	everything := func(string, map[string]string) bool { return true }
	entities := func(family string) bool {
		return strings.HasPrefix(family, "gpudiag_network_") || strings.HasPrefix(family, "gpudiag_disk_")
	}
	entityFamily := func(theirs string) bool {
		return strings.HasPrefix(theirs, "node_network_") || strings.HasPrefix(theirs, "node_disk_")
	}

	statuses, ours := runUpstream(t, upstreamHostCollectors(t, tree, ""))
	requireAllSucceed(t, tree, statuses)
	wantUnmeasured := map[string][]string{
		"cpu":  {"meminfo MemAvailable"},
		"numa": {"node0 distance", "node1 distance", "node2 distance"},
	}
	if got := unmeasuredBy(statuses); !maps.EqualFunc(got, wantUnmeasured, slices.Equal) {
		t.Errorf("unmeasured %q; want %q", got, wantUnmeasured)
	}
	// By default: the whole disks (no dm-*, no partitions), and no
	// interface (none of the tree's has a device/, so none is physical).
	diskFilter, err := newDiskFilter("", defaultDiskExclude, false)
	if err != nil {
		t.Fatal(err)
	}
	var wantDisks []string
	for key := range theirs["node_disk_reads_completed_total"] {
		if d := parseLabelKey(t, key)["device"]; diskFilter.keep(d) {
			wantDisks = append(wantDisks, fmt.Sprintf("device=%q", d))
		}
	}
	slices.Sort(wantDisks)
	if got := slices.Sorted(maps.Keys(ours["gpudiag_disk_reads_completed_total"])); !slices.Equal(got, wantDisks) {
		t.Errorf("disks %q; want %q", got, wantDisks)
	}
	if n := len(ours["gpudiag_network_up"]); n != 0 {
		t.Errorf("%d interfaces selected by default; want none (none is physical)", n)
	}
	for family := range ours {
		if entities(family) {
			delete(ours, family) // compared, all of them, below
		}
	}
	compared := compareUpstream(t, ours, theirs, func(theirs string) bool { return !entityFamily(theirs) }, everything)

	// Every interface and every disk, as the device-include flags select
	// them (--collector.netdev.device-include=.*): bonding_masters is no
	// interface; the interfaces without statistics/ (and no /proc/net/dev
	// to fall back to) are kept, their counters unmeasured; the disks the
	// default leaves out read as node_exporter reads them.
	statuses, ours = runUpstream(t, upstreamHostCollectors(t, tree, ".*"))
	requireAllSucceed(t, tree, statuses)
	counters := " rx_bytes tx_bytes rx_packets tx_packets rx_dropped tx_dropped rx_errors tx_errors"
	wantNet := []string{"bond0" + counters, "dmz" + counters, "eth0" + counters, "int" + counters}
	if got := unmeasuredBy(statuses)["netdev"]; !slices.Equal(got, wantNet) {
		t.Errorf("netdev unmeasured %q; want %q", got, wantNet)
	}
	if n := len(ours["gpudiag_network_receive_bytes_total"]); n != 0 {
		t.Errorf("%d receive_bytes series for interfaces whose counters were not read", n)
	}
	for family := range ours {
		if !entities(family) {
			delete(ours, family) // compared above
		}
	}
	compared += compareUpstream(t, ours, theirs, entityFamily, everything)
	total := 0
	for _, f := range theirs {
		total += len(f)
	}
	t.Logf("%d values equal node_exporter's", compared)
	if compared != total {
		t.Errorf("%d of node_exporter's %d values compared", compared, total)
	}
}

// On procfs's tree every host collector succeeds: its /proc has no vmstat
// and a meminfo without MemAvailable, its NUMA nodes only a vmstat without
// the numa_* counters, no irq pressure file, and its eth0 no statistics/,
// whose counters come from /proc/net/dev. The values equal what procfs's
// own parsers read from the same files. Before, the cpu collector was left
// out (no vmstat), numa failed every sample and eth0 was dropped.
func TestHostCollectorsOnProcfsFixtures(t *testing.T) {
	tree := procfsTree(t)
	statuses, ours := runUpstream(t, upstreamHostCollectors(t, tree, ""))
	requireAllSucceed(t, tree, statuses)
	wantUnmeasured := map[string][]string{
		"cpu": {"meminfo MemAvailable", "vmstat pswpin", "vmstat pswpout", "vmstat pgmajfault", "vmstat workingset_refault",
			"vmstat oom_kill"},
		"numa":     {"node1 cpulist", "node1 distance", "node1 allocations", "node2 cpulist", "node2 distance", "node2 allocations"},
		"pressure": {"pressure/irq"},
	}
	if got := unmeasuredBy(statuses); !maps.EqualFunc(got, wantUnmeasured, slices.Equal) {
		t.Errorf("unmeasured %q; want %q", got, wantUnmeasured)
	}
	theirs := procfsReading(t, tree)
	diskFilter, err := newDiskFilter("", defaultDiskExclude, false)
	if err != nil {
		t.Fatal(err)
	}
	// procfsReading makes no InfiniBand families: they are compared on
	// node_exporter's tree.
	notIB := func(theirs string) bool { return !strings.HasPrefix(theirs, "node_infiniband_") }
	compared := compareUpstream(t, ours, theirs, notIB, func(family string, labels map[string]string) bool {
		if strings.HasPrefix(family, "gpudiag_disk_") {
			return diskFilter.keep(labels["device"])
		}
		return true
	})
	// eth0's counters, from /proc/net/dev.
	for _, c := range []struct {
		ours string
		want uint64
	}{{"receive_bytes_total", 874354587}, {"transmit_bytes_total", 563352563}, {"receive_packets_total", 1036395}, {"transmit_packets_total", 732147}} {
		if got, ok := ours["gpudiag_network_"+c.ours][`device="eth0"`]; !ok || got != float64(c.want) {
			t.Errorf("eth0 %s = %v (exported %v); /proc/net/dev says %d", c.ours, got, ok, c.want)
		}
	}
	t.Logf("%d values equal procfs's reading", compared)
	if compared < 150 {
		t.Errorf("only %d values compared with procfs's reading", compared)
	}
}

// procfsReading reads the procfs tree with procfs's own parsers, into the
// families node_exporter would make of them.
func procfsReading(t *testing.T, tree upstreamTree) map[string]map[string]float64 {
	t.Helper()
	out := map[string]map[string]float64{}
	set := func(family string, labels map[string]string, v float64) {
		if out[family] == nil {
			out[family] = map[string]float64{}
		}
		out[family][labelKey(labels)] = v
	}
	fs, err := procfs.NewFS(tree.proc)
	if err != nil {
		t.Fatal(err)
	}
	stat, err := fs.Stat()
	if err != nil {
		t.Fatal(err)
	}
	for id, c := range stat.CPU {
		for mode, v := range map[string]float64{"user": c.User, "nice": c.Nice, "system": c.System, "idle": c.Idle,
			"iowait": c.Iowait, "irq": c.IRQ, "softirq": c.SoftIRQ, "steal": c.Steal} {
			set("node_cpu_seconds_total", map[string]string{"cpu": fmt.Sprint(id), "mode": mode}, v)
		}
	}
	set("node_procs_running", nil, float64(stat.ProcessesRunning))
	set("node_procs_blocked", nil, float64(stat.ProcessesBlocked))
	set("node_context_switches_total", nil, float64(stat.ContextSwitches))

	mem, err := fs.Meminfo()
	if err != nil {
		t.Fatal(err)
	}
	for name, p := range map[string]*uint64{"MemTotal": mem.MemTotalBytes, "Cached": mem.CachedBytes, "Dirty": mem.DirtyBytes,
		"Writeback": mem.WritebackBytes, "SwapTotal": mem.SwapTotalBytes, "SwapFree": mem.SwapFreeBytes, "MemAvailable": mem.MemAvailableBytes} {
		if p != nil {
			set("node_memory_"+name+"_bytes", nil, float64(*p))
		}
	}

	for _, res := range []string{"cpu", "io", "memory"} {
		psi, err := fs.PSIStatsForResource(res)
		if err != nil {
			t.Fatal(err)
		}
		if psi.Some != nil {
			set("node_pressure_"+res+"_waiting_seconds_total", nil, float64(psi.Some.Total)/1e6)
		}
		if psi.Full != nil && res != "cpu" {
			set("node_pressure_"+res+"_stalled_seconds_total", nil, float64(psi.Full.Total)/1e6)
		}
	}

	bfs, err := blockdevice.NewFS(tree.proc, tree.sys)
	if err != nil {
		t.Fatal(err)
	}
	disks, err := bfs.ProcDiskstats()
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range disks {
		l := map[string]string{"device": d.DeviceName}
		for family, v := range map[string]float64{
			"reads_completed_total": float64(d.ReadIOs), "reads_merged_total": float64(d.ReadMerges),
			"read_bytes_total": float64(d.ReadSectors) * 512, "read_time_seconds_total": float64(d.ReadTicks) * 0.001,
			"writes_completed_total": float64(d.WriteIOs), "writes_merged_total": float64(d.WriteMerges),
			"written_bytes_total": float64(d.WriteSectors) * 512, "write_time_seconds_total": float64(d.WriteTicks) * 0.001,
			"io_now": float64(d.IOsInProgress), "io_time_seconds_total": float64(d.IOsTotalTicks) * 0.001,
			"io_time_weighted_seconds_total": float64(d.WeightedIOTicks) * 0.001,
		} {
			set("node_disk_"+family, l, v)
		}
		if d.IoStatsCount >= 18 {
			for family, v := range map[string]float64{
				"discards_completed_total": float64(d.DiscardIOs), "discards_merged_total": float64(d.DiscardMerges),
				"discarded_sectors_total": float64(d.DiscardSectors), "discard_time_seconds_total": float64(d.DiscardTicks) * 0.001,
			} {
				set("node_disk_"+family, l, v)
			}
		}
		if d.IoStatsCount >= 20 {
			set("node_disk_flush_requests_total", l, float64(d.FlushRequestsCompleted))
			set("node_disk_flush_requests_time_seconds_total", l, float64(d.TimeSpentFlushing)*0.001)
		}
	}

	sfs, err := sysfs.NewFS(tree.sys)
	if err != nil {
		t.Fatal(err)
	}
	netClass, err := sfs.NetClass()
	if err != nil {
		t.Fatal(err)
	}
	for name, iface := range netClass {
		l := map[string]string{"device": name}
		if iface.OperState != "" {
			set("node_network_up", l, boolFloat(iface.OperState == "up"))
		}
		if iface.Carrier != nil {
			set("node_network_carrier", l, float64(*iface.Carrier))
		}
		if iface.MTU != nil {
			set("node_network_mtu_bytes", l, float64(*iface.MTU))
		}
		if iface.CarrierChanges != nil {
			set("node_network_carrier_changes_total", l, float64(*iface.CarrierChanges))
		}
		if iface.Speed != nil && *iface.Speed > 0 {
			set("node_network_speed_bytes", l, float64(*iface.Speed)*1e6/8)
		}
	}
	return out
}

// The upstream trees are kept as upstream wrote them: extractTTAR reads
// every entry of both archives and refuses one that would leave its
// directory.
func TestExtractTTARRefusesEscapes(t *testing.T) {
	for _, archive := range []string{
		"Path: ../outside\nLines: 1\nx\nMode: 644\n",
		"Path: /etc/passwd\nLines: 1\nx\nMode: 644\n",
		"Directory: a\nMode: 755\nPath: a/link\nSymlinkTo: ../../outside\nMode: 777\n",
		"Path: a/link\nSymlinkTo: /\nMode: 777\n",
	} {
		dst := t.TempDir()
		if err := extractTTAR(strings.NewReader(archive), dst); err == nil {
			t.Errorf("archive %q extracted", archive)
		}
	}
	dst := t.TempDir()
	archive := "Directory: a\nMode: 755\nPath: a/f\nLines: 2\nx\\EOF y\nlastEOF\nMode: 644\n# ttar - -\nPath: a/link\nSymlinkTo: f\nMode: 777\n"
	if err := extractTTAR(strings.NewReader(archive), dst); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(dst, "a/link")); err != nil || string(b) != "xEOF y\nlast" {
		t.Fatalf("read %q, %v", b, err)
	}
}
