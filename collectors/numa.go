package collectors

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/gpudiag/gpudiag/engine"
	"github.com/gpudiag/gpudiag/hostfs"
	"github.com/gpudiag/gpudiag/sample"
)

const (
	pciVendorNVIDIA = 0x10de
)

func init() {
	register(collectorSpec[sample.NUMA, *numaCollector]{
		key:          sample.NUMAKey,
		defaultOn:    true,
		help:         "NUMA nodes (CPUs, distances, allocation counters) and the node each GPU is attached to",
		newCollector: newNUMACollector,
		metrics:      (&numaCollector{}).Metrics,
	})
}

// numaCollector reads the node layout and allocation counters from sysfs and
// maps each GPU to its node. It works without a GPU backend: when the GPU
// collector publishes nothing it finds NVIDIA GPUs on the PCI bus itself, so
// a node whose driver is broken still says where its GPUs sit.
type numaCollector struct {
	host   hostfs.FS
	shared *Shared
	log    *zap.Logger
	now    func() time.Time

	prev     map[int]sample.NUMAAllocations
	prevTime time.Time

	// layout is the nodes' CPUs and distances and the vm.numa_stat
	// switch, read at layoutAt: they change with a CPU or node brought
	// on- or offline, or an administrator's sysctl, so they are read
	// every hostfs.LocalityRefresh (and at once when a node's counters
	// cannot be read); the allocation counters every sample.
	layout     []sample.NUMANode
	statSwitch *bool
	layoutAt   time.Time

	// GPU placement, see cachedLocalities.
	locCache []sample.GPUNUMA
	locKey   string
	locAt    time.Time
}

func newNUMACollector(cfg Config) (*numaCollector, error) {
	dir := filepath.Join(cfg.SysPath, hostfs.NUMANodesDir)
	if _, err := os.Stat(dir); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("%w: no %s (kernel built without NUMA)", ErrUnavailable, dir)
		}
		return nil, err
	}
	host, err := hostfs.NewFS(cfg.ProcPath, cfg.SysPath)
	if err != nil {
		return nil, fmt.Errorf("procfs at %s: %w", cfg.ProcPath, err)
	}
	host = host.Holding() // the same files every second
	cfg = cfg.withDefaults()
	log := cfg.Logger
	shared := cfg.Shared
	return &numaCollector{host: host, shared: shared, log: log, now: time.Now}, nil
}

// Close closes the files held open.
func (c *numaCollector) Close() error {
	c.host.CloseHeld()
	return nil
}

func (c *numaCollector) Name() string { return sample.NUMAKey.Name() }

func (c *numaCollector) Sample(ctx context.Context) (*sample.NUMA, error) {
	now := c.now()
	fresh := c.layout == nil || now.Sub(c.layoutAt) >= hostfs.LocalityRefresh || now.Before(c.layoutAt)
	if fresh {
		if err := c.readLayout(now); err != nil {
			return nil, err
		}
	}
	nodes, err := c.allocations()
	if err != nil && !fresh {
		// A node gone offline since the layout was read: read it
		// again.
		if err := c.readLayout(now); err != nil {
			return nil, err
		}
		nodes, err = c.allocations()
	}
	if err != nil {
		return nil, err
	}
	out := &sample.NUMA{StatisticsEnabled: c.statSwitch, Nodes: nodes}
	cur := make(map[int]sample.NUMAAllocations, len(nodes))
	if c.prev != nil {
		out.IntervalSeconds = now.Sub(c.prevTime).Seconds()
	}
	for i := range nodes {
		n := &nodes[i]
		if !n.Measured(sample.NUMAAllocationCounters) {
			continue
		}
		cur[n.Node] = n.Allocations
		if p, ok := c.prev[n.Node]; ok && out.IntervalSeconds > 0 {
			n.AllocationsPerSecond, n.OtherNodeRatio = numaRates(p, n.Allocations, out.IntervalSeconds)
		}
	}
	c.prev, c.prevTime = cur, now

	out.GPUs = c.cachedLocalities(ctx, now)
	return out, nil
}

// allocations reads every node of the layout's allocation counters. A
// node whose directory is there without them (neither vmstat nor
// numastat) has them unmeasured; one whose directory is gone fails, so
// that the layout is read again.
func (c *numaCollector) allocations() ([]sample.NUMANode, error) {
	nodes := make([]sample.NUMANode, len(c.layout))
	for i, n := range c.layout {
		a, err := c.host.NUMAAllocations(n.Node)
		switch {
		case errors.Is(err, fs.ErrNotExist) && c.host.NUMANodeExists(n.Node):
			// Clipped: the layout's list is shared by every sample
			// until the layout is read again.
			n.Unmeasured = append(slices.Clip(n.Unmeasured), sample.NUMAAllocationCounters)
		case err != nil:
			return nil, err
		default:
			n.Allocations = sample.NUMAAllocations(a)
		}
		nodes[i] = n
	}
	return nodes, nil
}

// readLayout reads the nodes, their CPUs and distances, and the
// vm.numa_stat switch. A node's cpulist or distance file that is not
// there (node_exporter's fixture has no distance) is named unmeasured.
func (c *numaCollector) readLayout(now time.Time) error {
	ids, err := c.host.NUMANodeIDs()
	if err != nil {
		return err
	}
	online, err := c.host.OnlineNUMANodes(ids)
	if err != nil {
		return err
	}
	layout := make([]sample.NUMANode, 0, len(ids))
	for _, id := range ids {
		n := sample.NUMANode{Node: id}
		cpus, list, err := c.host.NUMANodeCPUs(id)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			n.Unmeasured = append(n.Unmeasured, sample.NUMACPUList)
		case err != nil:
			return err
		default:
			n.CPUList, n.CPUs = list, len(cpus)
		}
		distances, err := c.host.NUMADistances(id, online)
		n.Distances = numaDistances(distances)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			n.Unmeasured = append(n.Unmeasured, sample.NUMADistances)
		case err != nil:
			return err
		}
		layout = append(layout, n)
	}
	c.layout, c.statSwitch, c.layoutAt = layout, c.host.NUMAStatSwitch(), now
	return nil
}

// numaDistances keeps nil apart from empty: a node read with no online
// node to measure to shows "distances": [], one unread null.
func numaDistances(read []hostfs.NUMADistance) []sample.NUMADistance {
	if read == nil {
		return nil
	}
	out := make([]sample.NUMADistance, len(read))
	for i, d := range read {
		out[i] = sample.NUMADistance(d)
	}
	return out
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
		for _, bus := range scanNVIDIAGPUs(c.host, c.log) {
			gpus = append(gpus, gpuID{-1, bus})
		}
	}
	var out []sample.GPUNUMA
	for _, g := range gpus {
		if ctx.Err() != nil {
			break
		}
		loc, err := c.host.PCILocality(g.bus)
		if err != nil {
			c.log.Debug("GPU's NUMA placement unreadable", zap.Int("gpu", g.index), zap.String("pci_bus_id", g.bus), zap.Error(err))
			continue
		}
		out = append(out, sample.GPUNUMA{
			GPU: g.index, PCIBusID: g.bus, PCIDeviceID: loc.DeviceID,
			NUMANode: loc.NUMANode, LocalCPUList: loc.LocalCPUList, LocalCPUs: len(loc.LocalCPUs), PCIPath: loc.Path,
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

func (c *numaCollector) Metrics(r *sample.NUMA, emit func(prometheus.Metric)) {
	if r.StatisticsEnabled != nil {
		emit(engine.NewSeries(numaStatEnabledDesc, prometheus.GaugeValue, boolFloat(*r.StatisticsEnabled)))
	}
	for i := range r.Nodes {
		n := &r.Nodes[i]
		node := strconv.Itoa(n.Node)
		// An empty cpulist label says memory-only: not for a node whose
		// cpulist was not read.
		if n.Measured(sample.NUMACPUList) {
			emit(engine.NewSeries(numaNodeInfoDesc, prometheus.GaugeValue, 1, node, n.CPUList))
			emit(engine.NewSeries(numaNodeCPUsDesc, prometheus.GaugeValue, float64(n.CPUs), node))
		}
		for _, d := range n.Distances {
			emit(engine.NewSeries(numaDistanceDesc, prometheus.GaugeValue, float64(d.Distance), node, strconv.Itoa(d.PeerNode)))
		}
		if n.Measured(sample.NUMAAllocationCounters) {
			for _, m := range numaAllocMetrics {
				emit(engine.NewSeries(m.desc, prometheus.CounterValue, float64(m.value(n.Allocations)), node))
			}
		}
	}
	for _, g := range r.GPUs {
		emit(engine.NewSeries(gpuNUMAInfoDesc, prometheus.GaugeValue, 1,
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

// scanNVIDIAGPUs lists NVIDIA display controllers (class 0x0300 VGA, 0x0302
// 3D) on the PCI bus, sorted by bus ID. NVSwitches (class 0x0680) and other
// vendors' VGA chips are left out.
func scanNVIDIAGPUs(host hostfs.FS, log *zap.Logger) []string {
	dir := host.SysPath(hostfs.PCIDevicesDir)
	entries, err := os.ReadDir(dir)
	if err != nil {
		log.Debug("PCI bus unreadable", zap.Error(err))
		return nil
	}
	var out []string
	for _, e := range entries {
		vendor, err := host.PCIHex(e.Name(), "vendor")
		if err != nil || vendor != pciVendorNVIDIA {
			continue
		}
		class, err := host.PCIHex(e.Name(), "class")
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
