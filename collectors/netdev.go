package collectors

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"regexp"
	"slices"
	"strconv"
	"time"

	"github.com/alecthomas/kingpin/v2"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/gpudiag/gpudiag/engine"
	"github.com/gpudiag/gpudiag/hostfs"
	"github.com/gpudiag/gpudiag/sample"
)

// netdevDefaultExclude names the virtual interfaces of container and VM
// networking. They have no device and so are skipped by the physical rule
// anyway; the list keeps them out when --collector.netdev.device-include
// widens the selection.
const netdevDefaultExclude = "lo|veth.*|docker.*|cni.*|flannel.*|cali.*|virbr.*"

var netdevFlags struct {
	include string
	exclude string
}

func init() {
	register(collectorSpec[sample.NetDevices, *netdevCollector]{
		key:       sample.NetDevKey,
		defaultOn: true,
		help:      "Physical network interfaces: traffic, drops, errors, speed, carrier, MTU and NUMA node",
		flags: func(app *kingpin.Application) {
			app.Flag("collector.netdev.device-include",
				"Regexp matched against the whole interface name; when set, only matching interfaces are reported, virtual ones included (bond0, vlan interfaces). When empty, only physical interfaces (those with a /sys/class/net/<if>/device) are.").
				Default("").StringVar(&netdevFlags.include)
			app.Flag("collector.netdev.device-exclude",
				"Regexp matched against the whole interface name; matching interfaces are never reported.").
				Default(netdevDefaultExclude).StringVar(&netdevFlags.exclude)
		},
		newCollector: func(cfg Config) (*netdevCollector, error) {
			return newNetdevCollector(cfg, netdevFlags.include, netdevFlags.exclude)
		},
		metrics: (&netdevCollector{}).Metrics,
	})
}

// netdevCollector reports network interfaces. By default only physical ones:
// an interface is physical when /sys/class/net/<if>/device exists, i.e. a
// bus device (PCI NIC, IPoIB port, SR-IOV VF, virtio-net) backs it; loopback,
// veth, bridges, bonds, VLANs and tunnels have none. Counters come from
// sysfs (see hostfs.FS.NetInterface); /proc/net/dev only for an interface
// without statistics/ (hostfs.FS.ProcNetDev).
type netdevCollector struct {
	host             hostfs.FS
	log              *zap.Logger
	include, exclude *regexp.Regexp // nil when not set
	now              func() time.Time

	prev     map[string]netPrev
	prevTime time.Time
	// procNetDevErr is the last failure to read /proc/net/dev, logged
	// when it changes.
	procNetDevErr string

	// PCI location per interface: resolving the device link and walking up
	// for its NUMA node is static and was a third of a cycle; re-read every
	// hostfs.LocalityRefresh.
	locations map[string]nicLocation
	// physical is whether each listed interface has a bus device, kept
	// while it stays listed and re-checked every hostfs.LocalityRefresh: a
	// Kubernetes node lists hundreds of veths, each a stat every second
	// otherwise, and an interface does not gain or lose its device.
	physical map[string]physicalCheck
	// links holds each listed interface's MTU and speed as last read:
	// read again every hostfs.LocalityRefresh, and at once when the
	// interface's state, carrier or carrier-change count moves (a link
	// renegotiates its speed only across a carrier change). See
	// hostfs.NetInterfaceLink for what a speed read costs.
	links map[string]linkRead
	// heldNames are the interface names when the held files were last
	// dropped, at heldSince (see checkHeldNames).
	heldNames []string
	heldSince time.Time
}

// netPrev is an interface's previous reading, for its rates.
type netPrev struct {
	counters   sample.NetCounters
	unmeasured []string
}

type linkRead struct {
	mtu            int
	speed          float64
	operState      string
	carrier        bool
	carrierChanges uint64
	at             time.Time
}

type physicalCheck struct {
	physical bool
	at       time.Time
}

type nicLocation struct {
	bus    string
	node   int
	readAt time.Time
}

func newNetdevCollector(cfg Config, include, exclude string) (*netdevCollector, error) {
	host, err := hostfs.NewFS(cfg.ProcPath, cfg.SysPath)
	if err != nil {
		return nil, fmt.Errorf("procfs at %s: %w", cfg.ProcPath, err)
	}
	host = host.Holding() // the same files every second
	cfg = cfg.withDefaults()
	c := &netdevCollector{host: host, log: cfg.Logger, now: time.Now}
	if c.include, err = netdevCompileFilter(include); err != nil {
		return nil, fmt.Errorf("--collector.netdev.device-include: %w", err)
	}
	if c.exclude, err = netdevCompileFilter(exclude); err != nil {
		return nil, fmt.Errorf("--collector.netdev.device-exclude: %w", err)
	}
	return c, nil
}

// netdevCompileFilter anchors expr so that "eth0" does not also match
// "veth0"; an empty expr gives nil (no filter).
func netdevCompileFilter(expr string) (*regexp.Regexp, error) {
	if expr == "" {
		return nil, nil
	}
	return regexp.Compile("^(?:" + expr + ")$")
}

// checkHeldNames drops the held files when the interface names changed
// since they were opened, and every hostfs.LocalityRefresh: a held file
// follows its interface through a rename (or a move to a pod's namespace),
// so another interface given the old name would be read as the first.
func (c *netdevCollector) checkHeldNames(names []string, now time.Time) {
	if slices.Equal(names, c.heldNames) && now.Sub(c.heldSince) < hostfs.LocalityRefresh {
		return
	}
	c.host.CloseHeld()
	c.heldNames, c.heldSince = slices.Clone(names), now
}

// Close closes the files held open.
func (c *netdevCollector) Close() error {
	c.host.CloseHeld()
	return nil
}

func (c *netdevCollector) Name() string { return sample.NetDevKey.Name() }

// selected applies the selection rule: excluded names never; with an include
// regexp, exactly the names it matches; otherwise physical interfaces only.
func (c *netdevCollector) selected(name string, physical bool) bool {
	if c.exclude != nil && c.exclude.MatchString(name) {
		return false
	}
	if c.include != nil {
		return c.include.MatchString(name)
	}
	return physical
}

func (c *netdevCollector) Sample(ctx context.Context) (*sample.NetDevices, error) {
	now := c.now()
	s := &sample.NetDevices{}
	names, err := c.host.NetInterfaceNames()
	if errors.Is(err, fs.ErrNotExist) {
		return s, nil
	}
	if err != nil {
		return nil, err
	}
	c.checkHeldNames(names, now)
	seen := make(map[string]physicalCheck, len(names))
	links := make(map[string]linkRead, len(c.links))
	defer func() { c.physical, c.links = seen, links }()
	var procNetDev map[string]hostfs.NetCounters // read once, for the first interface without statistics/
	procNetDevRead := false
	for _, name := range names {
		// Some 11 reads per interface (13 when its MTU and speed are
		// due): a node with thousands of interfaces (VFs, container
		// veths selected by an include) must not run past the
		// sample's deadline.
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("%s: sample deadline reached: %w", c.host.SysPath(hostfs.NetClassDir), err)
		}
		physical := c.isPhysical(name, now, seen)
		if !c.selected(name, physical) {
			continue
		}
		iface, err := c.host.NetInterfaceState(name)
		if err == nil {
			lk, ok := c.links[name]
			if !ok || now.Sub(lk.at) >= hostfs.LocalityRefresh || lk.operState != iface.OperState ||
				lk.carrier != iface.Carrier || lk.carrierChanges != iface.Counters.CarrierChanges {
				lk = linkRead{operState: iface.OperState, carrier: iface.Carrier, carrierChanges: iface.Counters.CarrierChanges, at: now}
				lk.mtu, lk.speed, err = c.host.NetInterfaceLink(name)
			}
			if err == nil {
				links[name] = lk
				iface.MTUBytes, iface.SpeedBytesPerSecond = lk.mtu, lk.speed
			}
		}
		if errors.Is(err, fs.ErrNotExist) {
			c.log.Debug("interface vanished while being read", zap.String("interface", name))
			continue
		}
		if err != nil {
			return nil, err
		}
		if hostfs.LacksStatistics(&iface) {
			if !procNetDevRead {
				procNetDev, procNetDevRead = c.readProcNetDev(), true
			}
			if dev, ok := procNetDev[name]; ok {
				hostfs.FromProcNetDev(&iface, dev)
			}
		}
		out := netInterface(name, physical, iface)
		if physical {
			loc, ok := c.locations[name]
			if !ok || now.Sub(loc.readAt) >= hostfs.LocalityRefresh {
				loc.bus, loc.node, _ = c.host.PCILocation(c.host.NetInterfaceDevice(name))
				loc.readAt = now
				if c.locations == nil {
					c.locations = map[string]nicLocation{}
				}
				c.locations[name] = loc
			}
			out.PCIBusID, out.NUMANode = loc.bus, loc.node
		}
		s.Interfaces = append(s.Interfaces, out)
	}
	c.computeRates(s, now)
	return s, nil
}

// netInterface is what sysfs says of the interface, its node unknown (-1)
// until its PCI function is placed.
func netInterface(name string, physical bool, read hostfs.NetInterface) sample.NetInterface {
	return sample.NetInterface{Name: name, Physical: physical, NUMANode: -1, OperState: read.OperState, Carrier: read.Carrier,
		MTUBytes: read.MTUBytes, SpeedBytesPerSecond: read.SpeedBytesPerSecond,
		Counters: sample.NetCounters(read.Counters), Unmeasured: read.Unmeasured}
}

// isPhysical answers from the last check of name when it is recent, and
// records the answer in seen, the checks of this sample's listing.
func (c *netdevCollector) isPhysical(name string, now time.Time, seen map[string]physicalCheck) bool {
	p, ok := c.physical[name]
	if !ok || now.Sub(p.at) >= hostfs.LocalityRefresh {
		p = physicalCheck{physical: c.host.NetInterfacePhysical(name), at: now}
	}
	seen[name] = p
	return p.physical
}

// readProcNetDev reads /proc/net/dev for the interfaces without a
// statistics directory. A failure leaves their counters unmeasured rather
// than failing the sample (the file is the fallback), and is logged when
// it changes.
func (c *netdevCollector) readProcNetDev() map[string]hostfs.NetCounters {
	devs, err := c.host.ProcNetDev()
	msg := ""
	if err != nil {
		msg = err.Error()
	}
	if msg != c.procNetDevErr && err != nil {
		c.log.Warn("interfaces without statistics/ keep their counters unmeasured: /proc/net/dev unreadable", zap.Error(err))
	}
	c.procNetDevErr = msg
	return devs
}

// computeRates gives each interface read before its rates, unless what
// was measured of it changed: a counter read now and not then would rate
// from 0.
func (c *netdevCollector) computeRates(s *sample.NetDevices, now time.Time) {
	dt := now.Sub(c.prevTime).Seconds()
	next := make(map[string]netPrev, len(s.Interfaces))
	for i := range s.Interfaces {
		f := &s.Interfaces[i]
		next[f.Name] = netPrev{counters: f.Counters, unmeasured: f.Unmeasured}
		if prev, ok := c.prev[f.Name]; ok && dt > 0 && slices.Equal(prev.unmeasured, f.Unmeasured) {
			r := sample.NetRatesBetween(prev.counters, f.Counters, dt)
			f.Rates = &r
		}
	}
	if c.prev != nil && dt > 0 {
		s.IntervalSeconds = dt
	}
	c.prev, c.prevTime = next, now
}

func netdevDesc(name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc(engine.Namespace+"_network_"+name, help, append([]string{"device"}, labels...), nil)
}

var (
	netdevInfoDesc = netdevDesc("info",
		"Network interface identity; join on device. pci_bus_id is empty and numa_node -1 for virtual interfaces or when the kernel does not say.",
		"operstate", "pci_bus_id", "numa_node")
	netdevUpDesc      = netdevDesc("up", "1 when the interface's operational state is up, else 0.")
	netdevCarrierDesc = netdevDesc("carrier", "1 when the link has carrier, else 0 (no cable or peer, or administratively down).")
	netdevMTUDesc     = netdevDesc("mtu_bytes", "Interface MTU.")
	netdevSpeedDesc   = netdevDesc("speed_bytes_per_second", "Negotiated line rate, one direction; absent when the driver reports none.")
)

// netdevCounterMetrics maps the counters to their series; name is the
// counter's in NetInterface.Unmeasured, whose series are left out.
var netdevCounterMetrics = []struct {
	desc *prometheus.Desc
	name string
	get  func(*sample.NetCounters) uint64
}{
	{netdevDesc("receive_bytes_total", "Bytes received by the kernel on the interface (RDMA traffic bypasses it)."), "rx_bytes", func(n *sample.NetCounters) uint64 { return n.ReceiveBytes }},
	{netdevDesc("transmit_bytes_total", "Bytes transmitted by the kernel on the interface (RDMA traffic bypasses it)."), "tx_bytes", func(n *sample.NetCounters) uint64 { return n.TransmitBytes }},
	{netdevDesc("receive_packets_total", "Packets received."), "rx_packets", func(n *sample.NetCounters) uint64 { return n.ReceivePackets }},
	{netdevDesc("transmit_packets_total", "Packets transmitted."), "tx_packets", func(n *sample.NetCounters) uint64 { return n.TransmitPackets }},
	{netdevDesc("receive_drop_total", "Received packets dropped (no buffer, unknown protocol, filtered)."), "rx_dropped", func(n *sample.NetCounters) uint64 { return n.ReceiveDrops }},
	{netdevDesc("transmit_drop_total", "Packets dropped on transmit."), "tx_dropped", func(n *sample.NetCounters) uint64 { return n.TransmitDrops }},
	{netdevDesc("receive_errs_total", "Bad packets received (CRC, framing, length, FIFO overrun)."), "rx_errors", func(n *sample.NetCounters) uint64 { return n.ReceiveErrors }},
	{netdevDesc("transmit_errs_total", "Packets that failed to transmit."), "tx_errors", func(n *sample.NetCounters) uint64 { return n.TransmitErrors }},
	{netdevDesc("carrier_changes_total", "Times the link went up or down; a rising count is a flapping link."), "carrier_changes", func(n *sample.NetCounters) uint64 { return n.CarrierChanges }},
}

func (c *netdevCollector) Metrics(r *sample.NetDevices, emit func(prometheus.Metric)) {
	for i := range r.Interfaces {
		f := &r.Interfaces[i]
		emit(engine.NewSeries(netdevInfoDesc, prometheus.GaugeValue, 1, f.Name, f.OperState, f.PCIBusID, strconv.Itoa(f.NUMANode)))
		emit(engine.NewSeries(netdevUpDesc, prometheus.GaugeValue, boolFloat(f.OperState == "up"), f.Name))
		emit(engine.NewSeries(netdevCarrierDesc, prometheus.GaugeValue, boolFloat(f.Carrier), f.Name))
		emit(engine.NewSeries(netdevMTUDesc, prometheus.GaugeValue, float64(f.MTUBytes), f.Name))
		if f.SpeedBytesPerSecond > 0 {
			emit(engine.NewSeries(netdevSpeedDesc, prometheus.GaugeValue, f.SpeedBytesPerSecond, f.Name))
		}
		for _, m := range netdevCounterMetrics {
			if f.Measured(m.name) {
				emit(engine.NewSeries(m.desc, prometheus.CounterValue, float64(m.get(&f.Counters)), f.Name))
			}
		}
	}
}
