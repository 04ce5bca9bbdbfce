package collectors

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/gpudiag/gpudiag/hostfs"
	"github.com/gpudiag/gpudiag/sample"
)

func newFixtureNetdev(t *testing.T, sys, include, exclude string) *netdevCollector {
	t.Helper()
	c, err := newNetdevCollector(rdmaConfig(rdmaFixtureProc, sys), include, exclude)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// newClockedNetdev is the default netdev collector over a copy of the
// fixture tree, which a test may change, with a fixed start time.
func newClockedNetdev(t *testing.T) (*netdevCollector, string, *fakeClock) {
	t.Helper()
	sys := rdmaCopyTree(t, rdmaFixtureSys)
	c := newFixtureNetdev(t, sys, "", netdevDefaultExclude)
	clk := &fakeClock{t: time.Unix(1_700_000_000, 0)}
	c.now = clk.now
	return c, sys, clk
}

func sampleNetdev(t *testing.T, c *netdevCollector) *sample.NetDevices {
	return sampleAs[sample.NetDevices](t, c)
}

func TestNetdevFixture(t *testing.T) {
	got := sampleNetdev(t, newFixtureNetdev(t, rdmaFixtureSys, "", netdevDefaultExclude))
	want := &sample.NetDevices{Interfaces: []sample.NetInterface{{
		Name: "ens9c0np0", Physical: true, PCIBusID: "0000:9c:00.0", NUMANode: 1,
		OperState: "up", Carrier: true, MTUBytes: 9000, SpeedBytesPerSecond: 200e9 / 8,
		Counters: sample.NetCounters{
			ReceiveBytes: 912345678, TransmitBytes: 812345678, ReceivePackets: 700000, TransmitPackets: 650000,
			ReceiveDrops: 17, ReceiveErrors: 1, CarrierChanges: 4,
		},
	}, {
		Name: "eth0", Physical: true, PCIBusID: "0000:03:00.0", NUMANode: 0,
		OperState: "up", Carrier: true, MTUBytes: 1500, SpeedBytesPerSecond: 10e9 / 8,
		Counters: sample.NetCounters{
			ReceiveBytes: 5368709120, TransmitBytes: 1073741824, ReceivePackets: 4100000, TransmitPackets: 2300000,
			ReceiveDrops: 120, CarrierChanges: 1,
		},
	}, {
		Name: "ibp26s0", Physical: true, PCIBusID: "0000:1a:00.0", NUMANode: 0,
		OperState: "up", Carrier: true, MTUBytes: 4092, SpeedBytesPerSecond: 400e9 / 8,
		Counters: sample.NetCounters{
			ReceiveBytes: 81234567, TransmitBytes: 71234567, ReceivePackets: 60000, TransmitPackets: 50000,
			ReceiveDrops: 4, CarrierChanges: 2,
		},
	}}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("sample:\n got %+v\nwant %+v", got, want)
	}
	if got.SizeBytes() <= 0 {
		t.Fatal("SizeBytes not positive")
	}
}

func TestNetdevSelection(t *testing.T) {
	for _, tc := range []struct {
		name, include, exclude string
		want                   []string
	}{
		{"default: physical only", "", netdevDefaultExclude, []string{"ens9c0np0", "eth0", "ibp26s0"}},
		{"no exclusion still physical only", "", "", []string{"ens9c0np0", "eth0", "ibp26s0"}},
		{"exclude management NIC", "", "eth.*", []string{"ens9c0np0", "ibp26s0"}},
		{"include IPoIB only", "ib.*", netdevDefaultExclude, []string{"ibp26s0"}},
		{"include is anchored: eth.* does not match veth1234", "eth.*", "", []string{"eth0"}},
		{"include reaches virtual interfaces", "veth.*|eth0", "", []string{"eth0", "veth1234"}},
		{"exclude wins over include", "veth.*|eth0", netdevDefaultExclude, []string{"eth0"}},
		{"loopback stays out by default", "lo", netdevDefaultExclude, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := sampleNetdev(t, newFixtureNetdev(t, rdmaFixtureSys, tc.include, tc.exclude))
			var got []string
			for _, f := range s.Interfaces {
				got = append(got, f.Name)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("interfaces %v; want %v", got, tc.want)
			}
		})
	}
	for _, bad := range [][2]string{{"(", ""}, {"", "eth["}} {
		if _, err := newNetdevCollector(rdmaConfig(rdmaFixtureProc, rdmaFixtureSys), bad[0], bad[1]); err == nil ||
			!strings.Contains(err.Error(), "--collector.netdev.device-") {
			t.Errorf("include %q exclude %q: error %v; want one naming the flag", bad[0], bad[1], err)
		}
	}
}

func TestNetdevVirtualInterfaceReadsAsVirtual(t *testing.T) {
	s := sampleNetdev(t, newFixtureNetdev(t, rdmaFixtureSys, "veth1234", ""))
	want := []sample.NetInterface{{
		Name: "veth1234", NUMANode: -1, OperState: "up", Carrier: true, MTUBytes: 1500,
		Counters: sample.NetCounters{ReceiveBytes: 424242, TransmitBytes: 424242, ReceivePackets: 4242, TransmitPackets: 4242, CarrierChanges: 2},
	}}
	if !reflect.DeepEqual(s.Interfaces, want) {
		t.Fatalf("got %+v\nwant %+v", s.Interfaces, want)
	}
}

// An interface without its carrier_changes (kernels before 3.15) is
// reported with that counter unmeasured and its series left out, never
// read as 0 after a higher value (one whose directory is gone, being
// removed, is skipped: TestNetInterfaceStateGone); a garbled counter is an
// error naming the file.
func TestNetdevCarrierChangesUnreadable(t *testing.T) {
	sys := rdmaCopyTree(t, rdmaFixtureSys)
	c := newFixtureNetdev(t, sys, "", netdevDefaultExclude)
	path := filepath.Join(sys, "class/net/ens9c0np0/carrier_changes")
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	s := sampleNetdev(t, c)
	found := false
	for _, iface := range s.Interfaces {
		if iface.Name == "ens9c0np0" {
			found = true
			if !slices.Equal(iface.Unmeasured, []string{"carrier_changes"}) || iface.Counters.ReceiveBytes == 0 {
				t.Fatalf("interface without carrier_changes: %+v", iface)
			}
		}
	}
	if !found {
		t.Fatal("interface without carrier_changes dropped")
	}
	var ms []prometheus.Metric
	c.Metrics(s, func(m prometheus.Metric) { ms = append(ms, m) })
	for _, m := range ms {
		if strings.Contains(m.Desc().String(), "carrier_changes_total") && strings.Contains(fmt.Sprint(m), "ens9c0np0") {
			t.Fatalf("unmeasured carrier_changes exported: %v", m)
		}
	}

	rdmaWrite(t, path, "")
	if _, err := c.Sample(context.Background()); err == nil || !strings.Contains(err.Error(), path) {
		t.Fatalf("empty carrier_changes: error %v, want one naming %s", err, path)
	}
}

func TestNetdevRatesResetSafe(t *testing.T) {
	sys := rdmaCopyTree(t, rdmaFixtureSys)
	c := newFixtureNetdev(t, sys, "", netdevDefaultExclude)
	t0 := time.Unix(1_700_000_000, 0)
	c.now = func() time.Time { return t0 }
	if first := sampleNetdev(t, c); first.IntervalSeconds != 0 || first.Interfaces[0].Rates != nil {
		t.Fatal("first sample has rates")
	}
	stats := filepath.Join(sys, "class/net/ens9c0np0/statistics")
	rdmaWrite(t, filepath.Join(stats, "rx_bytes"), "1412345678") // +5e8
	rdmaWrite(t, filepath.Join(stats, "rx_dropped"), "37")       // +20
	rdmaWrite(t, filepath.Join(stats, "tx_bytes"), "1000")       // driver reload: counter restarted
	c.now = func() time.Time { return t0.Add(4 * time.Second) }
	s := sampleNetdev(t, c)
	if s.IntervalSeconds != 4 {
		t.Fatalf("interval %v; want 4", s.IntervalSeconds)
	}
	want := sample.NetRates{ReceiveBytes: 1.25e8, ReceiveDrops: 5}
	if got := *s.Interfaces[0].Rates; got != want {
		t.Fatalf("rates %+v; want %+v", got, want)
	}
	if got := *s.Interfaces[1].Rates; got != (sample.NetRates{}) {
		t.Fatalf("idle eth0 rates %+v; want zero", got)
	}
}

// virtio-net hangs its interface below a virtioN device that has no
// numa_node; the PCI function above it has one. Virtual devices have none.
func TestNICPCILocation(t *testing.T) {
	sys := t.TempDir()
	fn := filepath.Join(sys, "devices/pci0000:00/0000:00:03.0")
	rdmaWrite(t, filepath.Join(fn, "numa_node"), "-1")
	rdmaWrite(t, filepath.Join(fn, "virtio2/net/eth0/mtu"), "1500")
	rdmaSymlink(t, "../../../virtio2", filepath.Join(fn, "virtio2/net/eth0/device"))
	rdmaSymlink(t, "../../devices/pci0000:00/0000:00:03.0/virtio2/net/eth0", filepath.Join(sys, "class/net/eth0"))
	rdmaWrite(t, filepath.Join(sys, "devices/virtual/net/lo/mtu"), "65536")

	bdf, node, path := hostfs.NewSysFS(sys).PCILocation(filepath.Join(sys, "class/net/eth0/device"))
	if bdf != "0000:00:03.0" || node != -1 || sample.PCIPath(path).String() != "pci0000:00/0000:00:03.0" {
		t.Fatalf("virtio: %q %d %q; want 0000:00:03.0 -1 pci0000:00/0000:00:03.0", bdf, node, path)
	}
	if bdf, node, path := hostfs.NewSysFS(sys).PCILocation(filepath.Join(sys, "class/net/lo/device")); bdf != "" || node != -1 || path != nil {
		t.Fatalf("no device: %q %d %q", bdf, node, path)
	}
	if bdf, node, _ := hostfs.NewSysFS(rdmaFixtureSys).PCILocation(filepath.Join(rdmaFixtureSys, "class/net/ens9c0np0/device")); bdf != "0000:9c:00.0" || node != 1 {
		t.Fatalf("fixture: %q %d", bdf, node)
	}
}

func TestNetdevMetrics(t *testing.T) {
	e := rdmaEngine(t, asEngine(newFixtureNetdev(t, rdmaFixtureSys, "", netdevDefaultExclude)))
	want := `
# HELP gpudiag_network_info Network interface identity; join on device. pci_bus_id is empty and numa_node -1 for virtual interfaces or when the kernel does not say.
# TYPE gpudiag_network_info gauge
gpudiag_network_info{device="ens9c0np0",numa_node="1",operstate="up",pci_bus_id="0000:9c:00.0"} 1
gpudiag_network_info{device="eth0",numa_node="0",operstate="up",pci_bus_id="0000:03:00.0"} 1
gpudiag_network_info{device="ibp26s0",numa_node="0",operstate="up",pci_bus_id="0000:1a:00.0"} 1
# HELP gpudiag_network_speed_bytes_per_second Negotiated line rate, one direction; absent when the driver reports none.
# TYPE gpudiag_network_speed_bytes_per_second gauge
gpudiag_network_speed_bytes_per_second{device="ens9c0np0"} 2.5e+10
gpudiag_network_speed_bytes_per_second{device="eth0"} 1.25e+09
gpudiag_network_speed_bytes_per_second{device="ibp26s0"} 5e+10
# HELP gpudiag_network_receive_drop_total Received packets dropped (no buffer, unknown protocol, filtered).
# TYPE gpudiag_network_receive_drop_total counter
gpudiag_network_receive_drop_total{device="ens9c0np0"} 17
gpudiag_network_receive_drop_total{device="eth0"} 120
gpudiag_network_receive_drop_total{device="ibp26s0"} 4
# HELP gpudiag_network_mtu_bytes Interface MTU.
# TYPE gpudiag_network_mtu_bytes gauge
gpudiag_network_mtu_bytes{device="ens9c0np0"} 9000
gpudiag_network_mtu_bytes{device="eth0"} 1500
gpudiag_network_mtu_bytes{device="ibp26s0"} 4092
`
	if err := testutil.GatherAndCompare(e, strings.NewReader(want), "gpudiag_network_info",
		"gpudiag_network_speed_bytes_per_second", "gpudiag_network_receive_drop_total", "gpudiag_network_mtu_bytes"); err != nil {
		t.Fatal(err)
	}
	rdmaPromtool(t, e, "gpudiag_network_")
}

func TestNetdevLive(t *testing.T) {
	c, err := newNetdevCollector(rdmaConfig("/proc", "/sys"), "", netdevDefaultExclude)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	s := sampleNetdev(t, c)
	for _, f := range s.Interfaces {
		if !f.Physical || f.Name == "lo" || f.MTUBytes <= 0 || f.OperState == "" {
			t.Errorf("implausible interface %+v", f)
		}
	}
	t.Logf("physical interfaces: %+v", s.Interfaces)
	rdmaEngine(t, asEngine(c))
}

// Whether an interface is physical (has a bus device) is checked when it is
// first listed and again every hostfs.LocalityRefresh, not every sample; an
// interface that leaves the listing is checked afresh when it comes back.
func TestNetdevPhysicalChecked(t *testing.T) {
	c, sys, clk := newClockedNetdev(t)
	t0 := clk.t
	has := func(name string) bool {
		t.Helper()
		for _, iface := range sampleNetdev(t, c).Interfaces {
			if iface.Name == name {
				return true
			}
		}
		return false
	}
	if !has("eth0") {
		t.Fatal("eth0 not selected at first")
	}
	// eth0 loses its device link (only a fixture can): the check stands.
	device := filepath.Join(sys, "class/net/eth0/device")
	target, err := os.Readlink(device)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(device); err != nil {
		t.Fatal(err)
	}
	clk.t = t0.Add(time.Second)
	if !has("eth0") {
		t.Fatal("eth0 checked again one second later")
	}
	clk.t = t0.Add(hostfs.LocalityRefresh)
	if has("eth0") {
		t.Fatal("eth0 still physical after the refresh")
	}
	// Back with its device: still virtual until it leaves the listing.
	if err := os.Symlink(target, device); err != nil {
		t.Fatal(err)
	}
	clk.t = clk.t.Add(time.Second)
	if has("eth0") {
		t.Fatal("eth0 checked again one second after the refresh")
	}
	link := filepath.Join(sys, "class/net/eth0")
	away := filepath.Join(sys, "eth0-away")
	if err := os.Rename(link, away); err != nil {
		t.Fatal(err)
	}
	clk.t = clk.t.Add(time.Second)
	if has("eth0") {
		t.Fatal("eth0 listed while gone")
	}
	if err := os.Rename(away, link); err != nil {
		t.Fatal(err)
	}
	clk.t = clk.t.Add(time.Second)
	if !has("eth0") {
		t.Fatal("eth0, listed again, not checked afresh")
	}
}

// An interface's MTU and speed are read at first sight and then every
// hostfs.LocalityRefresh, or at once when its carrier-change count, carrier
// or state moves: a link renegotiates only across a carrier change.
func TestNetdevLinkReadWhenDue(t *testing.T) {
	c, sys, clk := newClockedNetdev(t)
	t0 := clk.t
	eth0 := func(when string, wantMTU int, wantSpeed float64) {
		t.Helper()
		for _, iface := range sampleNetdev(t, c).Interfaces {
			if iface.Name == "eth0" {
				if iface.MTUBytes != wantMTU || iface.SpeedBytesPerSecond != wantSpeed {
					t.Errorf("%s: eth0 MTU %d speed %g; want %d, %g", when, iface.MTUBytes, iface.SpeedBytesPerSecond, wantMTU, wantSpeed)
				}
				return
			}
		}
		t.Fatalf("%s: eth0 not listed", when)
	}
	write := func(file, value string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(sys, "class/net/eth0", file), []byte(value+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	eth0("first sample", 1500, 10e9/8)
	write("speed", "25000")
	write("mtu", "9000")
	clk.t = t0.Add(time.Second)
	eth0("1 s later, the link unchanged", 1500, 10e9/8)
	write("carrier_changes", "3")
	clk.t = t0.Add(2 * time.Second)
	eth0("after a carrier change", 9000, 25e9/8)
	write("mtu", "4200")
	clk.t = t0.Add(2*time.Second + hostfs.LocalityRefresh)
	eth0("after the refresh", 4200, 25e9/8)
}

// A held file follows its interface through a rename: when another
// interface takes the old name, the name is read as the new interface, not
// the renamed one. Needs CAP_NET_ADMIN and ip(8); makes a veth pair.
func TestNetdevHeldFilesFollowNames(t *testing.T) {
	const a, b, moved = "gpudiagnda", "gpudiagndb", "gpudiagndc"
	ip := func(args ...string) error { return exec.Command("ip", append([]string{"link"}, args...)...).Run() }
	if err := ip("add", a, "type", "veth", "peer", "name", b); err != nil {
		t.Skipf("cannot make a veth pair: %v", err)
	}
	defer ip("del", moved)                     //nolint:errcheck // the pair, whatever its names now
	defer ip("del", a)                         //nolint:errcheck
	if err := ip("set", a, "up"); err != nil { // b stays down: a's lower layer is down
		t.Fatal(err)
	}
	c, err := newNetdevCollector(rdmaConfig("/proc", "/sys"), "gpudiagnd.", "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	state := func() map[string]string {
		t.Helper()
		out := map[string]string{}
		for _, d := range sampleNetdev(t, c).Interfaces {
			out[d.Name] = d.OperState
		}
		return out
	}
	before := state()
	if before[a] != "lowerlayerdown" || before[b] != "down" {
		t.Skipf("veth states %v: not what this kernel is expected to say", before)
	}
	// a becomes moved, b becomes a.
	for _, step := range [][]string{{"set", a, "down"}, {"set", a, "name", moved}, {"set", moved, "up"}, {"set", b, "name", a}} {
		if err := ip(step...); err != nil {
			t.Fatal(step, err)
		}
	}
	after := state()
	if after[a] != "down" || after[moved] != "lowerlayerdown" {
		t.Errorf("after the renames: %v; want %s down (the former %s) and %s lowerlayerdown", after, a, b, moved)
	}
}

// An interface whose /sys/class/net/<if> has no statistics/ (the upstream
// fixture trees; a sysfs masked in part) takes its counters from the
// host's /proc/net/dev: the same values the kernel prints under
// statistics/, exported as before. Before, the interface was dropped every
// sample, at debug level only. Without a /proc/net/dev line either, it is
// kept with those counters unmeasured and their series left out.
func TestNetdevWithoutStatisticsFallsBackToProcNetDev(t *testing.T) {
	sys := rdmaCopyTree(t, rdmaFixtureSys)
	whole := sampleNetdev(t, newFixtureNetdev(t, sys, "", netdevDefaultExclude))
	if err := os.RemoveAll(filepath.Join(sys, "class/net/ens9c0np0/statistics")); err != nil {
		t.Fatal(err)
	}
	c := newFixtureNetdev(t, sys, "", netdevDefaultExclude)
	s := sampleNetdev(t, c)
	if !reflect.DeepEqual(s.Interfaces, whole.Interfaces) || len(s.UnmeasuredFields()) != 0 {
		t.Fatalf("from /proc/net/dev:\n%+v\nwant as from statistics/:\n%+v", s.Interfaces, whole.Interfaces)
	}

	proc := t.TempDir()
	for _, f := range []string{"stat", "meminfo"} {
		b, err := os.ReadFile(filepath.Join(rdmaFixtureProc, f))
		if err != nil {
			t.Fatal(err)
		}
		rdmaWrite(t, filepath.Join(proc, f), string(b))
	}
	c, err := newNetdevCollector(rdmaConfig(proc, sys), "", netdevDefaultExclude)
	if err != nil {
		t.Fatal(err)
	}
	clk := &fakeClock{t: time.Unix(1_700_000_000, 0)}
	c.now = clk.now
	s = sampleNetdev(t, c)
	var nic *sample.NetInterface
	for i := range s.Interfaces {
		if s.Interfaces[i].Name == "ens9c0np0" {
			nic = &s.Interfaces[i]
		}
	}
	if nic == nil || nic.OperState != "up" || nic.Counters.CarrierChanges == 0 || len(nic.Unmeasured) != 8 {
		t.Fatalf("without /proc/net/dev: %+v; want the interface with its 8 statistics unmeasured", nic)
	}
	if got := s.UnmeasuredFields(); len(got) != 1 || !strings.HasPrefix(got[0], "ens9c0np0 rx_bytes tx_bytes") {
		t.Errorf("health names %q", got)
	}
	if n := testutil.CollectAndCount(sampledMetrics{asEngine(c), s}, "gpudiag_network_receive_bytes_total"); n != len(s.Interfaces)-1 {
		t.Errorf("%d receive_bytes series for %d interfaces; want the unmeasured one left out", n, len(s.Interfaces))
	}

	// Its statistics come back: no rate from the unread zeros.
	for _, f := range []string{"rx_bytes", "tx_bytes", "rx_packets", "tx_packets", "rx_dropped", "tx_dropped", "rx_errors", "tx_errors"} {
		rdmaWrite(t, filepath.Join(sys, "class/net/ens9c0np0/statistics", f), "1000000\n")
	}
	clk.t = clk.t.Add(time.Second)
	for _, f := range sampleNetdev(t, c).Interfaces {
		if f.Name == "ens9c0np0" && (f.Rates != nil || f.Unmeasured != nil) {
			t.Errorf("statistics back: rates %+v, unmeasured %q; want every counter read and no rate yet", f.Rates, f.Unmeasured)
		}
	}
}
