package collectors

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap"

	"github.com/gpudiag/gpudiag/hostfs"
	"github.com/gpudiag/gpudiag/internal/hosttest"
	"github.com/gpudiag/gpudiag/sample"
)

// numaFixtureBusIDs are the reference host's GPUs, index i at element i.
var numaFixtureBusIDs = []string{
	"0000:18:00.0", "0000:2a:00.0", "0000:3a:00.0", "0000:5d:00.0",
	"0000:9a:00.0", "0000:ab:00.0", "0000:ba:00.0", "0000:db:00.0",
}

// numaFixtureGPURefs stands in for the GPU collector: GPU 0 runs PID 4242 and
// GPU 4 runs PID 4343.
func numaFixtureGPURefs() []GPURef {
	refs := make([]GPURef, len(numaFixtureBusIDs))
	for i, bus := range numaFixtureBusIDs {
		refs[i] = GPURef{Index: i, PCIBusID: bus}
	}
	refs[0].PIDs = []uint32{4242}
	refs[4].PIDs = []uint32{4343}
	return refs
}

func newNUMATestCollector(t *testing.T, procPath, sysPath string, refs []GPURef) *numaCollector {
	t.Helper()
	shared := &Shared{}
	if refs != nil {
		shared.SetGPUs(refs)
	}
	c, err := newNUMACollector(Config{ProcPath: procPath, SysPath: sysPath, Logger: zap.NewNop(), Shared: shared})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func sampleNUMA(t *testing.T, c *numaCollector) *sample.NUMA { return sampleAs[sample.NUMA](t, c) }

func TestNUMAFixture(t *testing.T) {
	c := newNUMATestCollector(t, fixtureProc, fixtureSys, numaFixtureGPURefs())
	s := sampleNUMA(t, c)

	if s.StatisticsEnabled == nil || !*s.StatisticsEnabled {
		t.Errorf("statistics enabled = %v; want true", s.StatisticsEnabled)
	}
	want := []sample.NUMANode{
		{Node: 0, CPUList: "0-31,64-95", CPUs: 64,
			Distances:   []sample.NUMADistance{{PeerNode: 0, Distance: 10}, {PeerNode: 1, Distance: 21}},
			Allocations: sample.NUMAAllocations{Hit: 48213377261, Miss: 0, Foreign: 1730052411, InterleaveHit: 104213, LocalNode: 48196215002, OtherNode: 17162259}},
		{Node: 1, CPUList: "32-63,96-127", CPUs: 64,
			Distances:   []sample.NUMADistance{{PeerNode: 0, Distance: 21}, {PeerNode: 1, Distance: 10}},
			Allocations: sample.NUMAAllocations{Hit: 31877120455, Miss: 1730052411, Foreign: 0, InterleaveHit: 104190, LocalNode: 31402911870, OtherNode: 2204260996}},
	}
	if !reflect.DeepEqual(s.Nodes, want) {
		t.Errorf("nodes:\n got %+v\nwant %+v", s.Nodes, want)
	}
	if len(s.GPUs) != 8 {
		t.Fatalf("%d GPUs; want 8", len(s.GPUs))
	}
	for i, g := range s.GPUs {
		node, cpus := 0, "0-31,64-95"
		if i >= 4 {
			node, cpus = 1, "32-63,96-127"
		}
		w := sample.GPUNUMA{GPU: i, PCIBusID: numaFixtureBusIDs[i], PCIDeviceID: "0x2330", NUMANode: node, LocalCPUList: cpus, LocalCPUs: 64}
		// Each GPU sits under a PCIe switch of its own host bridge, the
		// function last.
		if len(g.PCIPath) != 5 || g.PCIPath[4] != numaFixtureBusIDs[i] || !strings.HasPrefix(g.PCIPath[0], "pci0000:") {
			t.Errorf("GPU %d: PCIe path %q", i, g.PCIPath)
		}
		w.PCIPath = g.PCIPath
		if !reflect.DeepEqual(g, w) {
			t.Errorf("GPU %d: got %+v; want %+v", i, g, w)
		}
	}

	m := sampledMetrics{asEngine(c), s}
	exp := `
# HELP gpudiag_gpu_numa_info NUMA node the GPU is attached to and the CPUs local to it. numa_node="-1" means the platform does not say (most VMs); local_cpulist then lists every CPU. gpu is empty when no GPU backend published the GPU and it was found on the PCI bus.
# TYPE gpudiag_gpu_numa_info gauge
gpudiag_gpu_numa_info{gpu="0",local_cpulist="0-31,64-95",numa_node="0",pci_bus_id="0000:18:00.0"} 1
gpudiag_gpu_numa_info{gpu="1",local_cpulist="0-31,64-95",numa_node="0",pci_bus_id="0000:2a:00.0"} 1
gpudiag_gpu_numa_info{gpu="2",local_cpulist="0-31,64-95",numa_node="0",pci_bus_id="0000:3a:00.0"} 1
gpudiag_gpu_numa_info{gpu="3",local_cpulist="0-31,64-95",numa_node="0",pci_bus_id="0000:5d:00.0"} 1
gpudiag_gpu_numa_info{gpu="4",local_cpulist="32-63,96-127",numa_node="1",pci_bus_id="0000:9a:00.0"} 1
gpudiag_gpu_numa_info{gpu="5",local_cpulist="32-63,96-127",numa_node="1",pci_bus_id="0000:ab:00.0"} 1
gpudiag_gpu_numa_info{gpu="6",local_cpulist="32-63,96-127",numa_node="1",pci_bus_id="0000:ba:00.0"} 1
gpudiag_gpu_numa_info{gpu="7",local_cpulist="32-63,96-127",numa_node="1",pci_bus_id="0000:db:00.0"} 1
# HELP gpudiag_numa_node_distance Relative memory access distance from node to peer_node as the firmware reports it (ACPI SLIT): 10 is local, 20 twice as far.
# TYPE gpudiag_numa_node_distance gauge
gpudiag_numa_node_distance{node="0",peer_node="0"} 10
gpudiag_numa_node_distance{node="0",peer_node="1"} 21
gpudiag_numa_node_distance{node="1",peer_node="0"} 21
gpudiag_numa_node_distance{node="1",peer_node="1"} 10
# HELP gpudiag_numa_node_info NUMA node and its CPUs as the kernel lists them (empty for a memory-only node).
# TYPE gpudiag_numa_node_info gauge
gpudiag_numa_node_info{cpulist="0-31,64-95",node="0"} 1
gpudiag_numa_node_info{cpulist="32-63,96-127",node="1"} 1
# HELP gpudiag_numa_other_node_allocations_total Allocations on this node by tasks running on another node (other_node): remote memory in the making. The kernel counts one per page allocation whatever its size (a 2 MiB THP counts 1).
# TYPE gpudiag_numa_other_node_allocations_total counter
gpudiag_numa_other_node_allocations_total{node="0"} 1.7162259e+07
gpudiag_numa_other_node_allocations_total{node="1"} 2.204260996e+09
# HELP gpudiag_numa_statistics_enabled Whether the kernel counts NUMA allocations (vm.numa_stat); while 0 the *_allocations_total counters stand still.
# TYPE gpudiag_numa_statistics_enabled gauge
gpudiag_numa_statistics_enabled 1
`
	if err := testutil.CollectAndCompare(m, strings.NewReader(exp), "gpudiag_gpu_numa_info", "gpudiag_numa_node_distance",
		"gpudiag_numa_node_info", "gpudiag_numa_other_node_allocations_total", "gpudiag_numa_statistics_enabled"); err != nil {
		t.Error(err)
	}
	for _, name := range []string{"hit", "miss", "foreign", "interleave_hit", "local_node"} {
		if n := testutil.CollectAndCount(m, "gpudiag_numa_"+name+"_allocations_total"); n != 2 {
			t.Errorf("gpudiag_numa_%s_allocations_total: %d series; want 2", name, n)
		}
	}
	lintWithPromtool(t, m)
}

// Without a GPU backend publishing, the NVIDIA GPUs are found on the PCI
// bus; the NVSwitch (NVIDIA bridge) and the BMC's VGA (other vendor) are not
// GPUs.
func TestNUMAFindsGPUsOnPCIBusWithoutBackend(t *testing.T) {
	c := newNUMATestCollector(t, fixtureProc, fixtureSys, nil)
	s := sampleNUMA(t, c)
	var got []string
	for _, g := range s.GPUs {
		if g.GPU != -1 {
			t.Errorf("GPU %s has index %d; want -1 (unknown)", g.PCIBusID, g.GPU)
		}
		got = append(got, g.PCIBusID)
	}
	if !reflect.DeepEqual(got, numaFixtureBusIDs) {
		t.Errorf("GPUs found %v; want %v", got, numaFixtureBusIDs)
	}
	m := sampledMetrics{asEngine(c), s}
	exp := `
# HELP gpudiag_gpu_numa_info NUMA node the GPU is attached to and the CPUs local to it. numa_node="-1" means the platform does not say (most VMs); local_cpulist then lists every CPU. gpu is empty when no GPU backend published the GPU and it was found on the PCI bus.
# TYPE gpudiag_gpu_numa_info gauge
gpudiag_gpu_numa_info{gpu="",local_cpulist="0-31,64-95",numa_node="0",pci_bus_id="0000:18:00.0"} 1
gpudiag_gpu_numa_info{gpu="",local_cpulist="0-31,64-95",numa_node="0",pci_bus_id="0000:2a:00.0"} 1
gpudiag_gpu_numa_info{gpu="",local_cpulist="0-31,64-95",numa_node="0",pci_bus_id="0000:3a:00.0"} 1
gpudiag_gpu_numa_info{gpu="",local_cpulist="0-31,64-95",numa_node="0",pci_bus_id="0000:5d:00.0"} 1
gpudiag_gpu_numa_info{gpu="",local_cpulist="32-63,96-127",numa_node="1",pci_bus_id="0000:9a:00.0"} 1
gpudiag_gpu_numa_info{gpu="",local_cpulist="32-63,96-127",numa_node="1",pci_bus_id="0000:ab:00.0"} 1
gpudiag_gpu_numa_info{gpu="",local_cpulist="32-63,96-127",numa_node="1",pci_bus_id="0000:ba:00.0"} 1
gpudiag_gpu_numa_info{gpu="",local_cpulist="32-63,96-127",numa_node="1",pci_bus_id="0000:db:00.0"} 1
`
	if err := testutil.CollectAndCompare(m, strings.NewReader(exp), "gpudiag_gpu_numa_info"); err != nil {
		t.Error(err)
	}
}

// Rates come from the previous reading: 2 s in which node 1 served 3000
// local and 1000 remote allocations.
func TestNUMAAllocationRates(t *testing.T) {
	sys := numaCopyTree(t, fixtureSys)
	c := newNUMATestCollector(t, fixtureProc, sys, numaFixtureGPURefs())
	clk := &fakeClock{t: time.Unix(1_700_000_000, 0)}
	c.now = clk.now
	first := sampleNUMA(t, c)
	if first.IntervalSeconds != 0 || first.Nodes[1].AllocationsPerSecond != nil || first.Nodes[1].OtherNodeRatio != nil {
		t.Fatalf("first reading has rates: %+v", first.Nodes[1])
	}
	vmstat := filepath.Join(sys, "devices/system/node/node1/vmstat")
	b, err := os.ReadFile(vmstat)
	if err != nil {
		t.Fatal(err)
	}
	text := strings.NewReplacer(
		"numa_hit 31877120455", "numa_hit 31877124455",
		"numa_local 31402911870", "numa_local 31402914870",
		"numa_other 2204260996", "numa_other 2204261996",
	).Replace(string(b))
	if err := os.WriteFile(vmstat, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	clk.t = clk.t.Add(2 * time.Second)
	s := sampleNUMA(t, c)
	if s.IntervalSeconds != 2 {
		t.Errorf("interval %v; want 2", s.IntervalSeconds)
	}
	n1 := s.Nodes[1]
	wantRates := sample.NUMAAllocationRates{Hit: 2000, LocalNode: 1500, OtherNode: 500}
	if n1.AllocationsPerSecond == nil || *n1.AllocationsPerSecond != wantRates {
		t.Errorf("node 1 rates %+v; want %+v", n1.AllocationsPerSecond, wantRates)
	}
	if n1.OtherNodeRatio == nil || *n1.OtherNodeRatio != 0.25 {
		t.Errorf("node 1 other-node ratio %v; want 0.25", n1.OtherNodeRatio)
	}
	if s.Nodes[0].OtherNodeRatio != nil {
		t.Errorf("node 0 allocated nothing, yet has a ratio %v", *s.Nodes[0].OtherNodeRatio)
	}
}

// numaWriteVMHost writes a one-node VM: the GPU's PCI numa_node is -1 and its
// local_cpulist is every CPU, as KVM guests report.
func numaWriteVMHost(t *testing.T) (procPath, sysPath string) {
	t.Helper()
	root := t.TempDir()
	procPath, sysPath = filepath.Join(root, "proc"), filepath.Join(root, "sys")
	vmstat, err := os.ReadFile(filepath.Join(fixtureSys, "devices/system/node/node0/vmstat"))
	if err != nil {
		t.Fatal(err)
	}
	gpuDir := filepath.Join(sysPath, "devices/pci0000:00/0000:00:05.0")
	files := map[string]string{
		"sys/devices/system/node/online":         "0\n",
		"sys/devices/system/node/node0/cpulist":  "0-1\n",
		"sys/devices/system/node/node0/distance": "10\n",
		"sys/devices/system/node/node0/vmstat":   string(vmstat),
	}
	for name, text := range files {
		hosttest.WriteFile(t, filepath.Join(root, name), text)
	}
	for name, text := range map[string]string{"class": "0x030200\n", "vendor": "0x10de\n", "device": "0x2330\n", "numa_node": "-1\n", "local_cpulist": "0-1\n"} {
		hosttest.WriteFile(t, filepath.Join(gpuDir, name), text)
	}
	if err := os.MkdirAll(filepath.Join(sysPath, "bus/pci/devices"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("../../../devices/pci0000:00/0000:00:05.0", filepath.Join(sysPath, "bus/pci/devices/0000:00:05.0")); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(procPath, 0o755); err != nil {
		t.Fatal(err)
	}
	return procPath, sysPath
}

// In a VM the GPU's node is unknown: reported as -1, nothing guessed.
func TestNUMAUnknownGPUNodeInVM(t *testing.T) {
	procPath, sysPath := numaWriteVMHost(t)
	c := newNUMATestCollector(t, procPath, sysPath, []GPURef{{Index: 0, PCIBusID: "0000:00:05.0"}})
	s := sampleNUMA(t, c)
	want := []sample.GPUNUMA{{GPU: 0, PCIBusID: "0000:00:05.0", PCIDeviceID: "0x2330", NUMANode: -1, LocalCPUList: "0-1", LocalCPUs: 2,
		PCIPath: sample.PCIPath{"pci0000:00", "0000:00:05.0"}}}
	if !reflect.DeepEqual(s.GPUs, want) {
		t.Errorf("GPUs %+v; want %+v", s.GPUs, want)
	}
	if s.StatisticsEnabled != nil {
		t.Errorf("no vm.numa_stat file, yet statistics enabled = %v", *s.StatisticsEnabled)
	}
	if len(s.Nodes) != 1 || s.Nodes[0].CPUList != "0-1" {
		t.Errorf("nodes %+v", s.Nodes)
	}
}

func TestNUMAUnavailableWithoutNodeDirectory(t *testing.T) {
	_, err := newNUMACollector(Config{ProcPath: t.TempDir(), SysPath: t.TempDir()})
	if !errors.Is(err, ErrUnavailable) {
		t.Fatalf("error %v; want ErrUnavailable", err)
	}
}

// A distance file that does not match the online nodes is an error naming
// the file, not a wrong mapping.
func TestNUMAMalformedDistance(t *testing.T) {
	sys := numaCopyTree(t, fixtureSys)
	path := filepath.Join(sys, "devices/system/node/node1/distance")
	hosttest.WriteFile(t, path, "21\n")
	c := newNUMATestCollector(t, fixtureProc, sys, numaFixtureGPURefs())
	_, err := c.Sample(context.Background())
	if err == nil || !strings.Contains(err.Error(), path) {
		t.Fatalf("error %v; want one naming %s", err, path)
	}
}

// The live machine may be a VM with one node, or have no node directory.
func TestNUMALive(t *testing.T) {
	c, err := newNUMACollector(Config{ProcPath: "/proc", SysPath: "/sys", Logger: zap.NewNop()})
	if errors.Is(err, ErrUnavailable) {
		t.Skip(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	if err != nil {
		t.Fatal(err)
	}
	s := sampleNUMA(t, c)
	if len(s.Nodes) == 0 {
		t.Fatal("no NUMA node")
	}
	cpus := 0
	for _, n := range s.Nodes {
		cpus += n.CPUs
		self := false
		for _, d := range n.Distances {
			if d.PeerNode == n.Node {
				self = d.Distance == 10
			}
		}
		if !self {
			t.Errorf("node %d: distance to itself is not 10: %+v", n.Node, n.Distances)
		}
		if n.Allocations.Hit == 0 && n.CPUs > 0 {
			t.Errorf("node %d: no allocation counted: %+v", n.Node, n.Allocations)
		}
	}
	if cpus == 0 {
		t.Error("no CPU in any node")
	}
	for _, g := range s.GPUs {
		if g.NUMANode < -1 {
			t.Errorf("GPU %s: node %d", g.PCIBusID, g.NUMANode)
		}
	}
	lintWithPromtool(t, sampledMetrics{asEngine(c), s})
}

// numaCopyTree copies a fixture tree (files, directories, symlinks) into a
// temporary directory that a test may modify.
func numaCopyTree(t *testing.T, src string) string {
	t.Helper()
	dst := filepath.Join(t.TempDir(), filepath.Base(src))
	err := filepath.Walk(src, func(path string, info os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, path)
		if err != nil {
			return err
		}
		target := filepath.Join(dst, rel)
		switch {
		case info.Mode()&os.ModeSymlink != 0:
			link, err := os.Readlink(path)
			if err != nil {
				return err
			}
			return os.Symlink(link, target)
		case info.IsDir():
			return os.MkdirAll(target, 0o755)
		default:
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			return os.WriteFile(target, b, 0o644)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	return dst
}

// The nodes' CPUs and distances are read every hostfs.LocalityRefresh, the
// allocation counters every sample; a node whose counters vanish (taken
// offline) makes the layout be read again at once.
func TestNUMALayoutOnItsOwnClock(t *testing.T) {
	sys := numaCopyTree(t, fixtureSys)
	c := newNUMATestCollector(t, fixtureProc, sys, numaFixtureGPURefs())
	clk := &fakeClock{t: time.Unix(1_700_000_000, 0)}
	c.now = clk.now
	first := sampleNUMA(t, c)
	if len(first.Nodes) < 2 {
		t.Fatalf("fixture nodes: %+v", first.Nodes)
	}
	node1 := filepath.Join(sys, "devices/system/node/node1")
	hosttest.WriteFile(t, filepath.Join(node1, "cpulist"), "0-3\n")
	clk.t = clk.t.Add(time.Second)
	if s := sampleNUMA(t, c); s.Nodes[1].CPUList != first.Nodes[1].CPUList {
		t.Errorf("CPU list re-read within the refresh: %q; want %q", s.Nodes[1].CPUList, first.Nodes[1].CPUList)
	}
	clk.t = clk.t.Add(hostfs.LocalityRefresh)
	if s := sampleNUMA(t, c); s.Nodes[1].CPUList != "0-3" || s.Nodes[1].CPUs != 4 {
		t.Errorf("after the refresh node 1 has %q (%d CPUs); want 0-3 (4)", s.Nodes[1].CPUList, s.Nodes[1].CPUs)
	}
	if err := os.RemoveAll(node1); err != nil {
		t.Fatal(err)
	}
	clk.t = clk.t.Add(time.Second)
	s := sampleNUMA(t, c)
	for _, n := range s.Nodes {
		if n.Node == 1 {
			t.Errorf("node 1 is gone, yet sampled: %+v", n)
		}
	}
	if len(s.Nodes) != len(first.Nodes)-1 {
		t.Errorf("%d nodes after node 1 went; want %d", len(s.Nodes), len(first.Nodes)-1)
	}
}

// A node's directory without its distance file, with numastat instead of
// vmstat (node_exporter's fixture), or without its cpulist: the node is
// reported with what it has, the rest named unmeasured and left out of the
// series, and the collector keeps sampling. Before, any one of them failed
// every sample.
func TestNUMANodeWithoutDistanceVMStatOrCPUList(t *testing.T) {
	sys := numaCopyTree(t, fixtureSys)
	node := func(n int, file string) string {
		return filepath.Join(sys, "devices/system/node", fmt.Sprintf("node%d", n), file)
	}
	for _, p := range []string{node(0, "distance"), node(0, "vmstat"), node(1, "cpulist")} {
		if err := os.Remove(p); err != nil {
			t.Fatal(err)
		}
	}
	hosttest.WriteFile(t, node(0, "numastat"), "numa_hit 100\nnuma_miss 2\nnuma_foreign 3\ninterleave_hit 4\nlocal_node 90\nother_node 10\n")
	c := newNUMATestCollector(t, fixtureProc, sys, numaFixtureGPURefs())
	s := sampleNUMA(t, c)
	if got, want := s.UnmeasuredFields(), []string{"node0 distance", "node1 cpulist"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("unmeasured %q; want %q", got, want)
	}
	if a := s.Nodes[0].Allocations; a.Hit != 100 || a.OtherNode != 10 {
		t.Errorf("node 0 counters from numastat %+v", a)
	}
	m := sampledMetrics{asEngine(c), s}
	if n := testutil.CollectAndCount(m, "gpudiag_numa_node_info"); n != 1 {
		t.Errorf("%d node_info series; want node 0's only: node 1's empty cpulist would say memory-only", n)
	}
	if n := testutil.CollectAndCount(m, "gpudiag_numa_node_distance"); n != 2 {
		t.Errorf("%d distance series; want node 1's two", n)
	}

	// Neither counter file: the node's counters are unmeasured, not 0.
	if err := os.Remove(node(0, "numastat")); err != nil {
		t.Fatal(err)
	}
	s = sampleNUMA(t, c)
	if got, want := s.UnmeasuredFields(), []string{"node0 distance", "node0 allocations", "node1 cpulist"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("unmeasured %q; want %q", got, want)
	}
	if s.Nodes[0].AllocationsPerSecond != nil {
		t.Errorf("node 0 has rates from unmeasured counters: %+v", s.Nodes[0].AllocationsPerSecond)
	}
	m = sampledMetrics{asEngine(c), s}
	if n := testutil.CollectAndCount(m, "gpudiag_numa_hit_allocations_total"); n != 1 {
		t.Errorf("%d numa_hit series; want node 1's only", n)
	}
}
