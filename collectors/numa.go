package collectors

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/gpudiag/gpudiag/engine"
	"github.com/gpudiag/gpudiag/hostfs"
	"github.com/gpudiag/gpudiag/sample"
)

const (
	numaNodesDir    = "devices/system/node"
	pciVendorNVIDIA = 0x10de
)

func init() {
	registerReplay("numa", func() any { return new(sample.NUMA) }, (&numaCollector{}).Metrics)
	register("numa", true, "NUMA nodes (CPUs, distances, allocation counters) and the node each GPU is attached to", nil,
		func(cfg Config) (engine.Collector, error) { return newNUMACollector(cfg) })
}

// numaCollector reads the node layout and allocation counters from sysfs and
// maps each GPU to its node. It works without a GPU backend: when the GPU
// collector publishes nothing it finds NVIDIA GPUs on the PCI bus itself, so
// a node whose driver is broken still says where its GPUs sit.
type numaCollector struct {
	sysPath  string
	procPath string
	shared   *Shared
	log      *zap.Logger
	now      func() time.Time

	prev     map[int]sample.NUMAAllocations
	prevTime time.Time

	// GPU placement, see cachedLocalities.
	locCache []sample.GPUNUMA
	locKey   string
	locAt    time.Time
}

func newNUMACollector(cfg Config) (*numaCollector, error) {
	dir := filepath.Join(cfg.SysPath, numaNodesDir)
	if _, err := os.Stat(dir); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("%w: no %s (kernel built without NUMA)", ErrUnavailable, dir)
		}
		return nil, err
	}
	cfg = cfg.withDefaults()
	log := cfg.Logger
	shared := cfg.Shared
	return &numaCollector{sysPath: cfg.SysPath, procPath: cfg.ProcPath, shared: shared, log: log, now: time.Now}, nil
}

func (c *numaCollector) Name() string { return "numa" }

func (c *numaCollector) Sample(ctx context.Context) (any, error) {
	now := c.now()
	nodeDir := filepath.Join(c.sysPath, numaNodesDir)
	ids, err := numaNodeIDs(nodeDir)
	if err != nil {
		return nil, err
	}
	online, err := onlineNUMANodes(nodeDir, ids)
	if err != nil {
		return nil, err
	}
	out := &sample.NUMA{StatisticsEnabled: readNUMAStatSwitch(c.procPath)}
	interval := 0.0
	if c.prev != nil {
		interval = now.Sub(c.prevTime).Seconds()
		out.IntervalSeconds = interval
	}
	cur := make(map[int]sample.NUMAAllocations, len(ids))
	for _, id := range ids {
		dir := filepath.Join(nodeDir, "node"+strconv.Itoa(id))
		n := sample.NUMANode{Node: id}
		cpus, list, err := hostfs.ReadCPUList(filepath.Join(dir, "cpulist"))
		if err != nil {
			return nil, err
		}
		n.CPUList, n.CPUs = list, len(cpus)
		if n.Distances, err = readNUMADistances(filepath.Join(dir, "distance"), online); err != nil {
			return nil, err
		}
		if n.Allocations, err = readNUMAAllocations(dir); err != nil {
			return nil, err
		}
		cur[id] = n.Allocations
		if p, ok := c.prev[id]; ok && interval > 0 {
			n.AllocationsPerSecond, n.OtherNodeRatio = numaRates(p, n.Allocations, interval)
		}
		out.Nodes = append(out.Nodes, n)
	}
	c.prev, c.prevTime = cur, now

	out.GPUs = c.cachedLocalities(ctx, now)
	return out, nil
}

func numaRates(p, a sample.NUMAAllocations, seconds float64) (*sample.NUMAAllocationRates, *float64) {
	r := func(prev, cur uint64) float64 { return sample.CounterRate(float64(prev), float64(cur), seconds) }
	rates := &sample.NUMAAllocationRates{
		Hit: r(p.Hit, a.Hit), Miss: r(p.Miss, a.Miss), Foreign: r(p.Foreign, a.Foreign),
		InterleaveHit: r(p.InterleaveHit, a.InterleaveHit),
		LocalNode:     r(p.LocalNode, a.LocalNode), OtherNode: r(p.OtherNode, a.OtherNode),
	}
	if sum := rates.LocalNode + rates.OtherNode; sum > 0 {
		ratio := rates.OtherNode / sum
		return rates, &ratio
	}
	return rates, nil
}

// cachedLocalities returns gpuLocalities, re-read when the published GPUs
// change or hostfs.LocalityRefresh has passed.
func (c *numaCollector) cachedLocalities(ctx context.Context, now time.Time) []sample.GPUNUMA {
	key := ""
	for _, r := range c.shared.GPUs() {
		key += fmt.Sprintf("%d=%s;", r.Index, r.PCIBusID)
	}
	if c.locAt.IsZero() || key != c.locKey || now.Sub(c.locAt) >= hostfs.LocalityRefresh {
		c.locCache, c.locKey, c.locAt = c.gpuLocalities(ctx), key, now
	}
	return c.locCache
}

// gpuLocalities maps the GPUs the GPU collector published, or, before it
// publishes or without a backend, the NVIDIA GPUs on the PCI bus.
func (c *numaCollector) gpuLocalities(ctx context.Context) []sample.GPUNUMA {
	type gpuID struct {
		index int
		bus   string
	}
	var gpus []gpuID
	if refs := c.shared.GPUs(); len(refs) > 0 {
		for _, r := range refs {
			gpus = append(gpus, gpuID{r.Index, r.PCIBusID})
		}
	} else {
		for _, bus := range scanNVIDIAGPUs(c.sysPath, c.log) {
			gpus = append(gpus, gpuID{-1, bus})
		}
	}
	var out []sample.GPUNUMA
	for _, g := range gpus {
		if ctx.Err() != nil {
			break
		}
		loc, err := hostfs.ReadPCILocality(c.sysPath, g.bus)
		if err != nil {
			c.log.Debug("GPU's NUMA placement unreadable", zap.Int("gpu", g.index), zap.String("pci_bus_id", g.bus), zap.Error(err))
			continue
		}
		out = append(out, sample.GPUNUMA{
			GPU: g.index, PCIBusID: g.bus, PCIDeviceID: loc.DeviceID,
			NUMANode: loc.NUMANode, LocalCPUList: loc.LocalCPUList, LocalCPUs: len(loc.LocalCPUs),
		})
	}
	return out
}

var (
	numaNodeInfoDesc = prometheus.NewDesc(engine.Namespace+"_numa_node_info",
		"NUMA node and its CPUs as the kernel lists them (empty for a memory-only node).", []string{"node", "cpulist"}, nil)
	numaNodeCPUsDesc = prometheus.NewDesc(engine.Namespace+"_numa_node_cpus",
		"Number of CPUs in the NUMA node.", []string{"node"}, nil)
	numaDistanceDesc = prometheus.NewDesc(engine.Namespace+"_numa_node_distance",
		"Relative memory access distance from node to peer_node as the firmware reports it (ACPI SLIT): 10 is local, 20 twice as far.",
		[]string{"node", "peer_node"}, nil)
	numaStatEnabledDesc = prometheus.NewDesc(engine.Namespace+"_numa_statistics_enabled",
		"Whether the kernel counts NUMA allocations (vm.numa_stat); while 0 the *_allocations_total counters stand still.", nil, nil)
	gpuNUMAInfoDesc = prometheus.NewDesc(engine.Namespace+"_gpu_numa_info",
		"NUMA node the GPU is attached to and the CPUs local to it. numa_node=\"-1\" means the platform does not say (most VMs); local_cpulist then lists every CPU. gpu is empty when no GPU backend published the GPU and it was found on the PCI bus.",
		[]string{"gpu", "pci_bus_id", "numa_node", "local_cpulist"}, nil)
)

func numaAllocDesc(name, help string) *prometheus.Desc {
	return prometheus.NewDesc(engine.Namespace+"_numa_"+name+"_allocations_total",
		help+" The kernel counts one per page allocation whatever its size (a 2 MiB THP counts 1).", []string{"node"}, nil)
}

var numaAllocMetrics = []struct {
	desc  *prometheus.Desc
	value func(sample.NUMAAllocations) uint64
}{
	{numaAllocDesc("hit", "Allocations that wanted this node and got it (numa_hit)."),
		func(a sample.NUMAAllocations) uint64 { return a.Hit }},
	{numaAllocDesc("miss", "Allocations served by this node although they wanted another one (numa_miss)."),
		func(a sample.NUMAAllocations) uint64 { return a.Miss }},
	{numaAllocDesc("foreign", "Allocations that wanted this node but were served by another one (numa_foreign)."),
		func(a sample.NUMAAllocations) uint64 { return a.Foreign }},
	{numaAllocDesc("interleave_hit", "Interleave-policy allocations that wanted this node and got it (interleave_hit)."),
		func(a sample.NUMAAllocations) uint64 { return a.InterleaveHit }},
	{numaAllocDesc("local_node", "Allocations on this node by tasks running on this node (local_node)."),
		func(a sample.NUMAAllocations) uint64 { return a.LocalNode }},
	{numaAllocDesc("other_node", "Allocations on this node by tasks running on another node (other_node): remote memory in the making."),
		func(a sample.NUMAAllocations) uint64 { return a.OtherNode }},
}

func (c *numaCollector) Metrics(s any, emit func(prometheus.Metric)) {
	r := s.(*sample.NUMA)
	if r.StatisticsEnabled != nil {
		emit(prometheus.MustNewConstMetric(numaStatEnabledDesc, prometheus.GaugeValue, boolFloat(*r.StatisticsEnabled)))
	}
	for i := range r.Nodes {
		n := &r.Nodes[i]
		node := strconv.Itoa(n.Node)
		emit(prometheus.MustNewConstMetric(numaNodeInfoDesc, prometheus.GaugeValue, 1, node, n.CPUList))
		emit(prometheus.MustNewConstMetric(numaNodeCPUsDesc, prometheus.GaugeValue, float64(n.CPUs), node))
		for _, d := range n.Distances {
			emit(prometheus.MustNewConstMetric(numaDistanceDesc, prometheus.GaugeValue, float64(d.Distance), node, strconv.Itoa(d.PeerNode)))
		}
		for _, m := range numaAllocMetrics {
			emit(prometheus.MustNewConstMetric(m.desc, prometheus.CounterValue, float64(m.value(n.Allocations)), node))
		}
	}
	for _, g := range r.GPUs {
		emit(prometheus.MustNewConstMetric(gpuNUMAInfoDesc, prometheus.GaugeValue, 1,
			gpuLabel(g.GPU), g.PCIBusID, strconv.Itoa(g.NUMANode), g.LocalCPUList))
	}
}

// gpuLabel is the gpu label value; a GPU the GPU collector did not publish
// (index -1) gets an empty one rather than an index guessed from bus order.
func gpuLabel(index int) string {
	if index < 0 {
		return ""
	}
	return strconv.Itoa(index)
}

// numaNodeIDs lists the node<N> directories, in numeric order.
func numaNodeIDs(dir string) ([]int, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var ids []int
	for _, e := range entries {
		rest, ok := strings.CutPrefix(e.Name(), "node")
		if !ok {
			continue
		}
		if id, err := strconv.Atoi(rest); err == nil && id >= 0 {
			ids = append(ids, id)
		}
	}
	sort.Ints(ids)
	return ids, nil
}

// onlineNUMANodes reads the online node list, which orders the columns of
// every node<N>/distance file. Kernels without the file have only online
// nodes registered, so the directory list stands in.
func onlineNUMANodes(dir string, fallback []int) ([]int, error) {
	ids, _, err := hostfs.ReadCPUList(filepath.Join(dir, "online"))
	if errors.Is(err, fs.ErrNotExist) {
		return fallback, nil
	}
	return ids, err
}

// readNUMADistances parses node<N>/distance: one distance per online node,
// in the order of the online list.
func readNUMADistances(path string, online []int) ([]sample.NUMADistance, error) {
	b, err := hostfs.ReadAttr(path)
	if err != nil {
		return nil, err
	}
	return parseNUMADistances(path, b, online)
}

func parseNUMADistances(path string, b []byte, online []int) ([]sample.NUMADistance, error) {
	fields := strings.Fields(string(b))
	if len(fields) != len(online) {
		return nil, fmt.Errorf("%s: %d distances for %d online nodes", path, len(fields), len(online))
	}
	out := make([]sample.NUMADistance, len(fields))
	for i, f := range fields {
		d, err := strconv.Atoi(f)
		if err != nil || d < 0 {
			return nil, fmt.Errorf("%s: bad distance %s", path, hostfs.Quote(f))
		}
		out[i] = sample.NUMADistance{PeerNode: online[i], Distance: d}
	}
	return out, nil
}

// numaCounterNames are the allocation counters in sample.NUMAAllocations
// order: as node<N>/vmstat names them (4.14 and later), and as
// node<N>/numastat does (the only place before 4.14).
var numaCounterNames = map[string][6]string{
	"vmstat":   {"numa_hit", "numa_miss", "numa_foreign", "numa_interleave", "numa_local", "numa_other"},
	"numastat": {"numa_hit", "numa_miss", "numa_foreign", "interleave_hit", "local_node", "other_node"},
}

// readNUMAAllocations reads a node's allocation counters. All six must be
// there on whole lines: a file cut short (a node going offline mid-read)
// must fail the sample, not export counters that fell to zero.
func readNUMAAllocations(nodeDir string) (sample.NUMAAllocations, error) {
	vmstat := filepath.Join(nodeDir, "vmstat")
	v, found, err := readNUMACounters(vmstat, numaCounterNames["vmstat"])
	if err == nil && found == 0 {
		v, found, err = readNUMACounters(filepath.Join(nodeDir, "numastat"), numaCounterNames["numastat"])
		if errors.Is(err, fs.ErrNotExist) || err == nil && found == 0 {
			err = fmt.Errorf("%s: no numa_hit line (truncated?), and no counters in numastat", vmstat)
		}
	}
	if err != nil {
		return sample.NUMAAllocations{}, err
	}
	return sample.NUMAAllocations{Hit: v[0], Miss: v[1], Foreign: v[2], InterleaveHit: v[3], LocalNode: v[4], OtherNode: v[5]}, nil
}

// readNUMACounters reads the named "key value" lines of path. found counts
// the names seen; seeing some but not all is an error. A last line without
// its newline is ignored: it may be cut inside its number.
func readNUMACounters(path string, names [6]string) (v [6]uint64, found int, err error) {
	b, err := hostfs.ReadAttr(path)
	if err != nil {
		return v, 0, err
	}
	return parseNUMACounters(path, b, names)
}

func parseNUMACounters(path string, b []byte, names [6]string) (v [6]uint64, found int, err error) {
	whole := b[:bytes.LastIndexByte(b, '\n')+1]
	var seen [6]bool
	for _, line := range strings.Split(string(whole), "\n") {
		key, value, ok := strings.Cut(line, " ")
		i := slices.Index(names[:], key)
		if !ok || i < 0 || seen[i] {
			continue
		}
		value = strings.TrimSpace(value)
		if v[i], err = strconv.ParseUint(value, 10, 64); err != nil {
			return v, 0, fmt.Errorf("%s: %s: not a counter: %s", path, key, hostfs.Quote(value))
		}
		seen[i] = true
		found++
	}
	if found > 0 && found < len(names) {
		for i, ok := range seen {
			if !ok {
				return v, found, fmt.Errorf("%s: no %s line (truncated?)", path, names[i])
			}
		}
	}
	return v, found, nil
}

// readNUMAStatSwitch reads vm.numa_stat; nil when the kernel predates it or
// the file cannot be read.
func readNUMAStatSwitch(procPath string) *bool {
	b, err := hostfs.ReadAttr(filepath.Join(procPath, "sys/vm/numa_stat"))
	if err != nil {
		return nil
	}
	on := strings.TrimSpace(string(b)) != "0"
	return &on
}

// scanNVIDIAGPUs lists NVIDIA display controllers (class 0x0300 VGA, 0x0302
// 3D) on the PCI bus, sorted by bus ID. NVSwitches (class 0x0680) and other
// vendors' VGA chips are left out.
func scanNVIDIAGPUs(sysPath string, log *zap.Logger) []string {
	dir := filepath.Join(sysPath, hostfs.PCIDevicesDir)
	entries, err := os.ReadDir(dir)
	if err != nil {
		log.Debug("PCI bus unreadable", zap.Error(err))
		return nil
	}
	var out []string
	for _, e := range entries {
		vendor, err := hostfs.ReadHex(filepath.Join(dir, e.Name(), "vendor"))
		if err != nil || vendor != pciVendorNVIDIA {
			continue
		}
		class, err := hostfs.ReadHex(filepath.Join(dir, e.Name(), "class"))
		if err != nil {
			log.Debug("PCI class unreadable", zap.String("pci_bus_id", e.Name()), zap.Error(err))
			continue
		}
		if base := class >> 8; base == 0x0300 || base == 0x0302 {
			out = append(out, e.Name())
		}
	}
	sort.Strings(out)
	return out
}
