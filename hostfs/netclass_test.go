package hostfs

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gpudiag/gpudiag/internal/hosttest"
)

// writeNetInterface writes a /sys/class/net/<name> directory under sys
// whose counters are all 7, with the attributes given, and returns it.
func writeNetInterface(t *testing.T, sys, name string, attrs map[string]string) string {
	t.Helper()
	dir := filepath.Join(sys, NetClassDir, name)
	for _, c := range netCounters {
		hosttest.WriteFile(t, filepath.Join(dir, c.file), "7\n")
	}
	for name, v := range attrs {
		hosttest.WriteFile(t, filepath.Join(dir, name), v)
	}
	return dir
}

func TestNetInterface(t *testing.T) {
	sys := t.TempDir()
	host, err := NewFS(t.TempDir(), sys)
	if err != nil {
		t.Fatal(err)
	}
	up := map[string]string{"operstate": "up\n", "carrier": "1\n", "mtu": "9000\n", "speed": "100000\n"}
	writeNetInterface(t, sys, "eth0", up)
	got, err := host.NetInterface("eth0")
	if err != nil {
		t.Fatal(err)
	}
	if got.OperState != "up" || !got.Carrier || got.MTUBytes != 9000 || got.SpeedBytesPerSecond != 100e9/8 ||
		got.Counters.ReceiveBytes != 7 || got.Counters.CarrierChanges != 7 {
		t.Errorf("got %+v", got)
	}
	// A link that is down: no carrier or speed to read, and a speed of
	// -1 from drivers that do not know it.
	writeNetInterface(t, sys, "eth1", map[string]string{"operstate": "down\n", "speed": "-1\n"})
	down, err := host.NetInterface("eth1")
	if err != nil || down.OperState != "down" || down.Carrier || down.SpeedBytesPerSecond != 0 || down.MTUBytes != 0 {
		t.Errorf("down: got %+v, %v", down, err)
	}
	// A garbled counter fails the read rather than reading as 0.
	dir := writeNetInterface(t, sys, "eth2", up)
	hosttest.WriteFile(t, filepath.Join(dir, "statistics/rx_bytes"), "x\n")
	if _, err := host.NetInterface("eth2"); err == nil || !strings.Contains(err.Error(), "rx_bytes") {
		t.Errorf("garbled counter: error %v", err)
	}
}

// The interfaces of /sys/class/net, sorted, and which of them a bus device
// backs; no directory at all is fs.ErrNotExist.
func TestNetInterfaceNames(t *testing.T) {
	sys := t.TempDir()
	host, err := NewFS(t.TempDir(), sys)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := host.NetInterfaceNames(); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("no class/net: error %v; want fs.ErrNotExist", err)
	}
	writeNetInterface(t, sys, "lo", nil)
	eth := writeNetInterface(t, sys, "eth0", nil)
	pci := filepath.Join(sys, "devices/pci0000:00/0000:00:03.0")
	if err := os.MkdirAll(pci, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(pci, filepath.Join(eth, "device")); err != nil {
		t.Fatal(err)
	}
	// A link whose device is gone is not physical.
	gone := writeNetInterface(t, sys, "eth9", nil)
	if err := os.Symlink(filepath.Join(sys, "devices/gone"), filepath.Join(gone, "device")); err != nil {
		t.Fatal(err)
	}
	// The bonding driver's bonding_masters is a file, no interface.
	hosttest.WriteFile(t, filepath.Join(sys, NetClassDir, "bonding_masters"), "bond0\n")
	names, err := host.NetInterfaceNames()
	if err != nil || !slices.Equal(names, []string{"eth0", "eth9", "lo"}) {
		t.Fatalf("names %q, %v", names, err)
	}
	for name, want := range map[string]bool{"eth0": true, "eth9": false, "lo": false, "nosuch": false} {
		if got := host.NetInterfacePhysical(name); got != want {
			t.Errorf("%s: physical %v; want %v", name, got, want)
		}
	}
	if got, want := host.NetInterfaceDevice("eth0"), filepath.Join(eth, "device"); got != want {
		t.Errorf("device link %s; want %s", got, want)
	}
}

// An interface without statistics/ (node_exporter's and procfs's fixture
// trees) is read with those counters unmeasured, where it was dropped
// every sample as vanished; one whose directory is gone is fs.ErrNotExist.
func TestNetInterfaceStateWithoutStatistics(t *testing.T) {
	sys := t.TempDir()
	host, err := NewFS(t.TempDir(), sys)
	if err != nil {
		t.Fatal(err)
	}
	dir := writeNetInterface(t, sys, "eth0", map[string]string{"operstate": "up\n", "carrier": "1\n"})
	if err := os.RemoveAll(filepath.Join(dir, "statistics")); err != nil {
		t.Fatal(err)
	}
	got, err := host.NetInterfaceState("eth0")
	want := []string{"rx_bytes", "tx_bytes", "rx_packets", "tx_packets", "rx_dropped", "tx_dropped", "rx_errors", "tx_errors"}
	if err != nil || got.OperState != "up" || !got.Carrier || got.Counters.CarrierChanges != 7 || !slices.Equal(got.Unmeasured, want) {
		t.Fatalf("got %+v, %v; want counters %q unmeasured", got, err, want)
	}
	if !LacksStatistics(&got) {
		t.Error("LacksStatistics false")
	}
	FromProcNetDev(&got, NetCounters{ReceiveBytes: 1, TransmitBytes: 2, ReceivePackets: 3, TransmitPackets: 4,
		ReceiveDrops: 5, TransmitDrops: 6, ReceiveErrors: 7, TransmitErrors: 8, CarrierChanges: 99})
	wantCounters := NetCounters{ReceiveBytes: 1, TransmitBytes: 2, ReceivePackets: 3, TransmitPackets: 4,
		ReceiveDrops: 5, TransmitDrops: 6, ReceiveErrors: 7, TransmitErrors: 8, CarrierChanges: 7}
	if got.Counters != wantCounters || got.Unmeasured != nil || LacksStatistics(&got) {
		t.Errorf("from /proc/net/dev: %+v; want %+v, nothing unmeasured (carrier_changes kept from sysfs)", got, wantCounters)
	}

	if _, err := host.NetInterfaceState("gone"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("interface gone: error %v; want fs.ErrNotExist", err)
	}
}
