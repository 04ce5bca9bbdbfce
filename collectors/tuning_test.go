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

	"github.com/gpudiag/gpudiag/analyzers"
	"github.com/gpudiag/gpudiag/engine"
	"github.com/gpudiag/gpudiag/hostfs"
	"github.com/gpudiag/gpudiag/sample"
)

func newFixtureTuning(t *testing.T, proc, sys string) *tuningCollector {
	t.Helper()
	cfg := rdmaConfig(proc, sys)
	cfg.OwnInterval = registry[sample.TuningKey.Name()].interval.value // the registered default
	c, err := newTuningCollector(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func sampleTuning(t *testing.T, c *tuningCollector) *sample.HostTuning {
	return sampleAs[sample.HostTuning](t, c)
}

func TestTuningFixture(t *testing.T) {
	got := sampleTuning(t, newFixtureTuning(t, rdmaFixtureProc, rdmaFixtureSys))
	swappiness, numaBalancing, isolated, dirtyRatio, dirtyBg, zero := 60, 1, 8, 20, 10, 0
	want := &sample.HostTuning{
		TransparentHugepage: "always", TransparentHugepageDefrag: "madvise",
		Swappiness:  &swappiness,
		SwapDevices: 1, SwapBytes: 8388604 * 1024, SwapUsedBytes: 1024 * 1024,
		// CPUs 32-63 (node 1's first threads) were left on powersave.
		ScalingGovernors:    map[string]int{"performance": 96, "powersave": 32},
		ScalingGovernorCPUs: map[string][]int{"performance": append(cpuRange(0, 31), cpuRange(64, 127)...), "powersave": cpuRange(32, 63)},
		NUMABalancing:       &numaBalancing,
		// In range: v4 :40000 ESTABLISHED, :40001 TIME_WAIT, :45123 LISTEN;
		// v6 :40000 (shared with the v4 socket), :50000 TIME_WAIT. Ports 22
		// and 9400 lie below the range.
		EphemeralPortFirst: 32768, EphemeralPortLast: 60999,
		EphemeralPortSockets: 5, EphemeralPortsInUse: 4,
		Processes: map[string]bool{
			"irqbalance": true, "nvidia-persistenced": true, "nv-fabricmanager": false, "nv-hostengine": false,
		},
		KernelRelease: "5.15.0-105-generic",
		// The eight GPUs are bound to NVIDIA's driver.
		GPUPCIDrivers: map[string]int{"nvidia": 8},
		// GPU 0000:9a:00.0 sits on node 1 and three of its four vectors
		// are served by node 0's CPUs 3, 4 and 65; the fourth has only an
		// smp_affinity_list (node 1's 32-63). GPU 0000:18:00.0 and mlx5_0
		// (node 0) are served on node 0; the other devices have no msi_irqs.
		DeviceIRQs: []sample.DeviceIRQs{
			{Device: "0000:18:00.0", Kind: "gpu", PCIBusID: "0000:18:00.0", NUMANode: 0, Vectors: 4},
			{Device: "0000:9a:00.0", Kind: "gpu", PCIBusID: "0000:9a:00.0", NUMANode: 1, Vectors: 4, Remote: 3},
			{Device: "mlx5_0", Kind: "rdma", PCIBusID: "0000:1a:00.0", NUMANode: 0, Vectors: 2},
		},
		// cpu0 and cpu1 declare idle states; cpu1 has C6 disabled.
		CPUIdleStates: []sample.CPUIdleState{
			{Name: "POLL", CPUs: 2, Enabled: 2}, {Name: "C1", LatencyMicros: 1, CPUs: 2, Enabled: 2},
			{Name: "C1E", LatencyMicros: 4, CPUs: 2, Enabled: 2}, {Name: "C6", LatencyMicros: 170, CPUs: 2, Enabled: 1},
		},
		Cmdline:      sample.KernelCmdline{Isolcpus: "managed_irq,domain,120-127", NohzFull: "120-127"},
		IsolatedCPUs: &isolated, IsolatedCPUList: "120-127", NohzFullCPUs: &isolated,
		Hugepages:  []sample.HugepagePool{{PageBytes: 2 << 20}, {PageBytes: 1 << 30, Total: 16, Free: 4}},
		DirtyRatio: &dirtyRatio, DirtyBackgroundRatio: &dirtyBg, DirtyBytes: &zero, DirtyBackgroundBytes: &zero,
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("sample:\n got %+v\nwant %+v", got, want)
	}
	if got.EphemeralPortRangeSize() != 28232 || got.EphemeralPortUsage() != 4.0/28232 {
		t.Fatalf("range size %d usage %v", got.EphemeralPortRangeSize(), got.EphemeralPortUsage())
	}
	if got.SizeBytes() <= 0 {
		t.Fatal("SizeBytes not positive")
	}
}

// The daemons running are taken from a scan of every process published
// within the collector's interval: the fixture host runs irqbalance and
// nvidia-persistenced; the scan says nv-hostengine ("nv-hostengine" fits
// comm whole) and nvidia-persistenced (cut to 15 bytes) run. An older scan
// is not taken: the collector reads the comm files again.
func TestTuningDaemonsFromPublishedScan(t *testing.T) {
	c := newFixtureTuning(t, rdmaFixtureProc, rdmaFixtureSys)
	clk := &fakeClock{t: time.Unix(1_700_000_000, 0)}
	c.now = clk.now
	comms := map[string]bool{"nv-hostengine": true, "nvidia-persiste": true, "bash": true}
	c.shared.SetProcessScan(&ProcessScan{At: clk.t.Add(-c.interval / 2), Comms: comms})
	want := map[string]bool{"irqbalance": false, "nvidia-persistenced": true, "nv-fabricmanager": false, "nv-hostengine": true}
	if got := sampleTuning(t, c).Processes; !reflect.DeepEqual(got, want) {
		t.Errorf("from a fresh scan: %v; want %v", got, want)
	}
	c.shared.SetProcessScan(&ProcessScan{At: clk.t.Add(-c.interval), Comms: comms})
	want = map[string]bool{"irqbalance": true, "nvidia-persistenced": true, "nv-fabricmanager": false, "nv-hostengine": false}
	if got := sampleTuning(t, c).Processes; !reflect.DeepEqual(got, want) {
		t.Errorf("with a scan as old as the interval: %v; want the comm files' %v", got, want)
	}
}

func TestTuningMetrics(t *testing.T) {
	e := rdmaEngine(t, asEngine(newFixtureTuning(t, rdmaFixtureProc, rdmaFixtureSys)))
	want := `
# HELP gpudiag_host_transparent_hugepage_info Active transparent hugepage modes: enabled (always, madvise, never) and defrag.
# TYPE gpudiag_host_transparent_hugepage_info gauge
gpudiag_host_transparent_hugepage_info{defrag="madvise",enabled="always"} 1
# HELP gpudiag_host_cpu_scaling_governor_cpus CPUs running each cpufreq scaling governor.
# TYPE gpudiag_host_cpu_scaling_governor_cpus gauge
gpudiag_host_cpu_scaling_governor_cpus{governor="performance"} 96
gpudiag_host_cpu_scaling_governor_cpus{governor="powersave"} 32
# HELP gpudiag_host_swap_size_bytes Size of all active swap areas.
# TYPE gpudiag_host_swap_size_bytes gauge
gpudiag_host_swap_size_bytes 8.589930496e+09
# HELP gpudiag_host_ephemeral_port_usage_ratio Fraction of the ephemeral port range held by TCP sockets (ephemeral_ports_in_use over the range size).
# TYPE gpudiag_host_ephemeral_port_usage_ratio gauge
gpudiag_host_ephemeral_port_usage_ratio 0.00014168319637291017
# HELP gpudiag_host_process_running 1 when a process of this support daemon runs on the host, else 0.
# TYPE gpudiag_host_process_running gauge
gpudiag_host_process_running{process="irqbalance"} 1
gpudiag_host_process_running{process="nv-fabricmanager"} 0
gpudiag_host_process_running{process="nv-hostengine"} 0
gpudiag_host_process_running{process="nvidia-persistenced"} 1
# HELP gpudiag_host_kernel_info Running kernel release.
# TYPE gpudiag_host_kernel_info gauge
gpudiag_host_kernel_info{release="5.15.0-105-generic"} 1
# HELP gpudiag_host_irq_remote_ratio Share of a device's MSI vectors served by no CPU of its NUMA node (effective_affinity_list, else smp_affinity_list).
# TYPE gpudiag_host_irq_remote_ratio gauge
gpudiag_host_irq_remote_ratio{device="0000:18:00.0",kind="gpu",numa_node="0"} 0
gpudiag_host_irq_remote_ratio{device="0000:9a:00.0",kind="gpu",numa_node="1"} 0.75
gpudiag_host_irq_remote_ratio{device="mlx5_0",kind="rdma",numa_node="0"} 0
# HELP gpudiag_host_cpu_deepest_idle_latency_seconds Exit latency of the deepest cpuidle state some CPU may enter.
# TYPE gpudiag_host_cpu_deepest_idle_latency_seconds gauge
gpudiag_host_cpu_deepest_idle_latency_seconds 0.00017
# HELP gpudiag_host_isolated_cpus CPUs in /sys/devices/system/cpu/isolated (isolcpus=): left out of scheduler load balancing.
# TYPE gpudiag_host_isolated_cpus gauge
gpudiag_host_isolated_cpus 8
# HELP gpudiag_host_hugepages Explicit hugepages configured per page size (nr_hugepages).
# TYPE gpudiag_host_hugepages gauge
gpudiag_host_hugepages{page_size="1073741824"} 16
gpudiag_host_hugepages{page_size="2097152"} 0
# HELP gpudiag_host_vm_dirty_ratio vm.dirty_ratio: percent of reclaimable memory that may be dirty before writers are throttled.
# TYPE gpudiag_host_vm_dirty_ratio gauge
gpudiag_host_vm_dirty_ratio 20
`
	if err := testutil.GatherAndCompare(e, strings.NewReader(want), "gpudiag_host_transparent_hugepage_info",
		"gpudiag_host_cpu_scaling_governor_cpus", "gpudiag_host_swap_size_bytes", "gpudiag_host_ephemeral_port_usage_ratio",
		"gpudiag_host_process_running", "gpudiag_host_kernel_info", "gpudiag_host_irq_remote_ratio",
		"gpudiag_host_cpu_deepest_idle_latency_seconds", "gpudiag_host_isolated_cpus", "gpudiag_host_hugepages",
		"gpudiag_host_vm_dirty_ratio"); err != nil {
		t.Fatal(err)
	}
	rdmaPromtool(t, e, "gpudiag_host_")
}

// The tuning collector asks the engine for a clock of its own, through the
// adapter the registry runs it in.
func TestTuningAsksForItsOwnInterval(t *testing.T) {
	c := newFixtureTuning(t, rdmaFixtureProc, rdmaFixtureSys)
	e := engine.New(engine.Options{Interval: time.Second})
	e.Add(asEngine(c), 0)
	if got := e.Statuses()[0].Interval; got != 30*time.Second {
		t.Fatalf("engine samples tuning every %s; want 30s", got)
	}
}

func TestTuningActiveChoice(t *testing.T) {
	for in, want := range map[string]string{
		"always [madvise] never\n":                   "madvise",
		"[always] madvise never":                     "always",
		"always defer defer+madvise [madvise] never": "madvise",
		"always madvise [never]":                     "never",
	} {
		if got, err := hostfs.ActiveChoice(in); err != nil || got != want {
			t.Errorf("%q: %q, %v; want %q", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "always madvise never", "[]", "[always"} {
		if _, err := hostfs.ActiveChoice(bad); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

// A host that exposes none of it (a minimal container) gives an empty but
// successful reading.
func TestTuningNothingExposed(t *testing.T) {
	got := sampleTuning(t, newFixtureTuning(t, t.TempDir(), t.TempDir()))
	want := &sample.HostTuning{Processes: map[string]bool{
		"irqbalance": false, "nvidia-persistenced": false, "nv-fabricmanager": false, "nv-hostengine": false,
	}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %+v; want %+v", got, want)
	}
}

func TestTuningMalformedNamesFile(t *testing.T) {
	const portRange = "proc/sys/net/ipv4/ip_local_port_range"
	for _, tc := range []struct {
		name      string
		files     map[string]string
		wantInErr string
	}{
		{"reversed port range", map[string]string{portRange: "60999\t32768"}, "ip_local_port_range"},
		{"swappiness", map[string]string{"proc/sys/vm/swappiness": "sixty"}, "sys/vm/swappiness"},
		{"truncated swaps", map[string]string{"proc/swaps": "Filename Type Size Used Priority\n/swap.img file"}, "swaps"},
		{"tcp", map[string]string{portRange: "32768\t60999", "proc/net/tcp": "  sl  local_address\n   0: garbage"}, "net/tcp"},
		{"THP without brackets", map[string]string{"sys/kernel/mm/transparent_hugepage/enabled": "always madvise never"}, "transparent_hugepage/enabled"},
		{"idle latency", map[string]string{"sys/devices/system/cpu/cpu0/cpuidle/state1/name": "C1", "sys/devices/system/cpu/cpu0/cpuidle/state1/latency": "x"}, "state1/latency"},
		{"isolated list", map[string]string{"sys/devices/system/cpu/isolated": "7-3"}, "cpu/isolated"},
		{"IRQ affinity", map[string]string{"sys/bus/pci/devices/0000:18:00.0/vendor": "0x10de", "sys/bus/pci/devices/0000:18:00.0/class": "0x030200",
			"sys/bus/pci/devices/0000:18:00.0/numa_node": "0", "sys/devices/system/node/node0/cpulist": "0-3",
			"sys/bus/pci/devices/0000:18:00.0/msi_irqs/40": "", "proc/irq/40/effective_affinity_list": "zero"}, "irq/40/effective_affinity_list"},
		{"dirty ratio", map[string]string{"proc/sys/vm/dirty_ratio": "twenty"}, "vm/dirty_ratio"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			rdmaWrite(t, filepath.Join(root, "proc/sys/kernel/osrelease"), "6.8.0")
			for f, content := range tc.files {
				rdmaWrite(t, filepath.Join(root, f), content)
			}
			c := newFixtureTuning(t, filepath.Join(root, "proc"), filepath.Join(root, "sys"))
			_, err := c.Sample(context.Background())
			if err == nil || !strings.Contains(err.Error(), tc.wantInErr) {
				t.Fatalf("error %v; want one naming %s", err, tc.wantInErr)
			}
		})
	}
}

func TestTuningLive(t *testing.T) {
	c, err := newTuningCollector(rdmaConfig("/proc", "/sys"))
	if err != nil {
		t.Fatal(err)
	}
	s := sampleTuning(t, c)
	if s.KernelRelease == "" || s.Swappiness == nil || s.EphemeralPortRangeSize() == 0 {
		t.Fatalf("implausible reading %+v", s)
	}
	if u := s.EphemeralPortUsage(); u < 0 || u > 1 || s.EphemeralPortsInUse > s.EphemeralPortSockets {
		t.Fatalf("ports in use %d, sockets %d, usage %v", s.EphemeralPortsInUse, s.EphemeralPortSockets, u)
	}
	t.Logf("%+v", s)
	rdmaEngine(t, asEngine(c))
}

// The reference host fires the host tuning findings its files describe:
// CPUs 32-63 on powersave, GPU 0000:9a:00.0's vectors served on node 0,
// swap configured, C6 (170 µs) enabled on cpu0, and NUMA balancing on.
func TestTuningFixtureFindings(t *testing.T) {
	got := sampleTuning(t, newFixtureTuning(t, rdmaFixtureProc, rdmaFixtureSys))
	var checks []string
	for _, f := range analyzers.Audit(analyzers.AuditInput{Tuning: got}) {
		checks = append(checks, f.Check+":"+string(f.Severity)+":"+f.Device)
	}
	want := "cpu_governor:warning:,irq_affinity_remote:warning:0000:9a:00.0,swap_active:warning:,cpu_deep_cstates:info:,numa_balancing:info:"
	if strings.Join(checks, ",") != want {
		t.Fatalf("findings %q; want %q", strings.Join(checks, ","), want)
	}
}

// The reference host's sockets hold ports 40000 and 40001: with a range of
// just those two, ephemeral_ports fires from the collector's reading.
func TestTuningEphemeralPortsFinding(t *testing.T) {
	root := t.TempDir()
	rdmaWrite(t, filepath.Join(root, "proc/sys/net/ipv4/ip_local_port_range"), "40000\t40001\n")
	for _, f := range []string{"net/tcp", "net/tcp6"} {
		b, err := os.ReadFile(filepath.Join(rdmaFixtureProc, f))
		if err != nil {
			t.Fatal(err)
		}
		rdmaWrite(t, filepath.Join(root, "proc", f), string(b))
	}
	got := sampleTuning(t, newFixtureTuning(t, filepath.Join(root, "proc"), filepath.Join(root, "sys")))
	fs := analyzers.Audit(analyzers.AuditInput{Tuning: got})
	if len(fs) != 1 || fs[0].Check != "ephemeral_ports" || fs[0].Severity != analyzers.SeverityWarning || fs[0].Evidence[0].Value != 1 {
		t.Fatalf("findings %+v", fs)
	}
}

// The TCP tables are walked for the ephemeral port count when sockstat says
// enough TCP sockets exist to hold a tenth of the range, or fewer than the
// ports last counted, and otherwise at least every ephemeralRecount; in
// between the last count stands. A table
// made unreadable shows which samples walked it.
func TestTuningEphemeralPortsWalkedWhenTheyCanMatter(t *testing.T) {
	root := t.TempDir()
	proc := filepath.Join(root, "proc")
	rdmaWrite(t, filepath.Join(proc, "sys/net/ipv4/ip_local_port_range"), "32768\t60999\n")
	tables := map[string]string{}
	for _, f := range []string{"net/tcp", "net/tcp6"} {
		b, err := os.ReadFile(filepath.Join(rdmaFixtureProc, f))
		if err != nil {
			t.Fatal(err)
		}
		tables[f] = string(b)
		rdmaWrite(t, filepath.Join(proc, f), string(b))
	}
	inuse := 3
	sockstat := func(tw int) {
		rdmaWrite(t, filepath.Join(proc, "net/sockstat"), fmt.Sprintf("sockets: used 40\nTCP: inuse %d orphan 0 tw %d alloc 5 mem 1\nUDP: inuse 0 mem 0", inuse, tw))
		rdmaWrite(t, filepath.Join(proc, "net/sockstat6"), "TCP6: inuse 1\nUDP6: inuse 0")
	}
	sockstat(2)
	c := newFixtureTuning(t, proc, filepath.Join(root, "sys"))
	now := time.Unix(1000, 0)
	c.now = func() time.Time { return now }
	walked := func() bool {
		t.Helper()
		var s sample.HostTuning
		if err := c.readEphemeralPorts(t.Context(), &s); err != nil {
			if !strings.Contains(err.Error(), "net/tcp") {
				t.Fatal(err)
			}
			return true // the garbled table was read
		}
		if s.EphemeralPortSockets != 5 || s.EphemeralPortsInUse != 4 {
			t.Fatalf("counted %d sockets on %d ports; want 5 on 4", s.EphemeralPortSockets, s.EphemeralPortsInUse)
		}
		return false
	}
	if walked() {
		t.Fatal("the first count failed")
	}
	rdmaWrite(t, filepath.Join(proc, "net/tcp"), "  sl  local_address\n   0: garbage")
	now = now.Add(30 * time.Second)
	if walked() {
		t.Fatal("6 TCP sockets against a range of 28,232 ports: the tables were walked; the last count should stand")
	}
	sockstat(2900) // 2,904 sockets: a tenth of the range
	if !walked() {
		t.Fatal("2,904 TCP sockets: the tables were not walked")
	}
	sockstat(2)
	rdmaWrite(t, filepath.Join(proc, "net/tcp"), tables["net/tcp"])
	if walked() {
		t.Fatal("the recount failed")
	}
	// Fewer TCP sockets than the 4 ports last counted: the count is out of
	// date (a burst's TIME_WAIT sockets expired), so the tables are walked.
	rdmaWrite(t, filepath.Join(proc, "net/tcp"), "  sl  local_address\n   0: garbage")
	inuse = 1
	sockstat(1)
	if !walked() {
		t.Fatal("3 TCP sockets under a count of 4 ports: the tables were not walked")
	}
	inuse = 3
	sockstat(2)
	rdmaWrite(t, filepath.Join(proc, "net/tcp"), tables["net/tcp"])
	if walked() {
		t.Fatal("the recount failed")
	}
	rdmaWrite(t, filepath.Join(proc, "net/tcp"), "  sl  local_address\n   0: garbage")
	now = now.Add(ephemeralRecount)
	if !walked() {
		t.Fatalf("%v after the last count: the tables were not walked", ephemeralRecount)
	}
	if err := os.Remove(filepath.Join(proc, "net/sockstat")); err != nil {
		t.Fatal(err)
	}
	if !walked() {
		t.Fatal("without sockstat the tables must be walked")
	}
}

// A zram swap area is counted apart: the audit's fix for it is not fstab.
func TestTuningZramSwap(t *testing.T) {
	root := t.TempDir()
	rdmaWrite(t, filepath.Join(root, "proc/sys/kernel/osrelease"), "6.8.0")
	rdmaWrite(t, filepath.Join(root, "proc/swaps"), "Filename\t\t\t\tType\t\tSize\t\tUsed\t\tPriority\n"+
		"/dev/zram0                              partition\t8388604\t\t0\t\t100\n"+
		"/swap.img                               file\t\t2097148\t\t0\t\t-2")
	got := sampleTuning(t, newFixtureTuning(t, filepath.Join(root, "proc"), filepath.Join(root, "sys")))
	if got.SwapDevices != 2 || got.SwapZramDevices != 1 {
		t.Fatalf("swap areas %d, on zram %d; want 2 and 1", got.SwapDevices, got.SwapZramDevices)
	}
}

func cpuRange(first, last int) []int {
	var out []int
	for c := first; c <= last; c++ {
		out = append(out, c)
	}
	return out
}

// The governor of each CPU is kept by CPU number, in numeric order
// (cpu10 globs before cpu2), and the driver is read from the first CPU.
func TestTuningGovernorCPUsAndDriver(t *testing.T) {
	root := t.TempDir()
	rdmaWrite(t, filepath.Join(root, "proc/sys/kernel/osrelease"), "6.8.0")
	for cpu, g := range map[int]string{0: "powersave", 2: "performance", 10: "powersave"} {
		dir := filepath.Join(root, "sys/devices/system/cpu", fmt.Sprintf("cpu%d", cpu), "cpufreq")
		rdmaWrite(t, filepath.Join(dir, "scaling_governor"), g+"\n")
		rdmaWrite(t, filepath.Join(dir, "scaling_driver"), "intel_pstate\n")
	}
	got := sampleTuning(t, newFixtureTuning(t, filepath.Join(root, "proc"), filepath.Join(root, "sys")))
	want := map[string][]int{"performance": {2}, "powersave": {0, 10}}
	if !reflect.DeepEqual(got.ScalingGovernorCPUs, want) || got.ScalingDriver != "intel_pstate" {
		t.Fatalf("governor CPUs %v, driver %q; want %v and intel_pstate", got.ScalingGovernorCPUs, got.ScalingDriver, want)
	}
}

// Each NVIDIA GPU on the PCI bus is counted by the driver bound to it:
// nouveau, or none when no driver took it. Other vendors' display
// controllers and NVIDIA bridges (NVSwitch) are not GPUs.
func TestTuningGPUPCIDrivers(t *testing.T) {
	root := t.TempDir()
	rdmaWrite(t, filepath.Join(root, "proc/sys/kernel/osrelease"), "6.8.0")
	device := func(id, vendor, class, driver string) {
		dir := filepath.Join(root, "sys/bus/pci/devices", id)
		rdmaWrite(t, filepath.Join(dir, "vendor"), vendor+"\n")
		rdmaWrite(t, filepath.Join(dir, "class"), class+"\n")
		if driver != "" {
			if err := os.Symlink("../../../../bus/pci/drivers/"+driver, filepath.Join(dir, "driver")); err != nil {
				t.Fatal(err)
			}
		}
	}
	device("0000:01:00.0", "0x10de", "0x030200", "nouveau")
	device("0000:02:00.0", "0x10de", "0x030200", "")
	device("0000:03:00.0", "0x10de", "0x068000", "nvidia-nvswitch")
	device("0000:04:00.0", "0x1a03", "0x030000", "ast")
	got := sampleTuning(t, newFixtureTuning(t, filepath.Join(root, "proc"), filepath.Join(root, "sys")))
	if want := map[string]int{"nouveau": 1, "none": 1}; !reflect.DeepEqual(got.GPUPCIDrivers, want) {
		t.Fatalf("GPUs by driver %v; want %v", got.GPUPCIDrivers, want)
	}
}

// Each NIC, RDMA device and NVMe controller's PCIe link is read once per
// PCI function, with the fastest port's rate for a NIC; a function without
// link attributes (a VF, an emulated bus) is left out.
func TestTuningDeviceLinks(t *testing.T) {
	root := t.TempDir()
	rdmaWrite(t, filepath.Join(root, "proc/sys/kernel/osrelease"), "6.8.0")
	sys := filepath.Join(root, "sys")
	function := func(busID string, link map[string]string) string {
		dir := filepath.Join(sys, "devices/pci0000:00/0000:00:01.0", busID)
		rdmaWrite(t, filepath.Join(dir, "numa_node"), "0")
		for name, v := range link {
			rdmaWrite(t, filepath.Join(dir, name), v)
		}
		return dir
	}
	classLink := func(class, name, target string) {
		dir := filepath.Join(sys, "class", class, name)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(target, filepath.Join(dir, "device")); err != nil {
			t.Fatal(err)
		}
	}
	gen4x16 := map[string]string{"current_link_speed": "16.0 GT/s PCIe", "max_link_speed": "16.0 GT/s PCIe", "current_link_width": "16", "max_link_width": "16"}
	hca := function("0000:3b:00.0", gen4x16)
	classLink("infiniband", "mlx5_0", hca)
	rdmaWrite(t, filepath.Join(sys, "class/infiniband/mlx5_0/ports/1/rate"), "400 Gb/sec (4X NDR)")
	classLink("net", "ibp59s0", hca) // the HCA's IPoIB interface: the same function
	eth := function("0000:5e:00.0", map[string]string{"current_link_speed": "8.0 GT/s PCIe", "max_link_speed": "16.0 GT/s PCIe", "current_link_width": "8", "max_link_width": "8"})
	classLink("net", "eth0", eth)
	rdmaWrite(t, filepath.Join(sys, "class/net/eth0/speed"), "100000")
	nvme := function("0000:c1:00.0", map[string]string{"current_link_speed": "16.0 GT/s PCIe", "max_link_speed": "16.0 GT/s PCIe", "current_link_width": "2", "max_link_width": "4"})
	classLink("nvme", "nvme0", nvme)
	classLink("net", "eth1", function("0000:5e:00.1", nil)) // no link attributes
	got := sampleTuning(t, newFixtureTuning(t, filepath.Join(root, "proc"), sys))
	want := []sample.DeviceLink{
		{Device: "mlx5_0", Kind: "rdma", PCIBusID: "0000:3b:00.0", CurrentGTs: 16, MaxGTs: 16, CurrentWidth: 16, MaxWidth: 16, PortBytesPerSecond: 50e9},
		{Device: "eth0", Kind: "nic", PCIBusID: "0000:5e:00.0", CurrentGTs: 8, MaxGTs: 16, CurrentWidth: 8, MaxWidth: 8, PortBytesPerSecond: 12.5e9},
		{Device: "nvme0", Kind: "nvme", PCIBusID: "0000:c1:00.0", CurrentGTs: 16, MaxGTs: 16, CurrentWidth: 2, MaxWidth: 4},
	}
	if !reflect.DeepEqual(got.DeviceLinks, want) {
		t.Fatalf("device links\n%+v\nwant\n%+v", got.DeviceLinks, want)
	}
}
