package collectors

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/procfs/sysfs"
	"go.uber.org/zap"

	"github.com/gpudiag/gpudiag/engine"
	"github.com/gpudiag/gpudiag/hostfile"
	"github.com/gpudiag/gpudiag/hostfs"
	"github.com/gpudiag/gpudiag/sample"
)

func init() {
	register(collectorSpec[sample.InfiniBand, *infinibandCollector]{
		key:          sample.InfiniBandKey,
		defaultOn:    true,
		help:         "InfiniBand and RoCE ports: state, rate, traffic, errors, congestion; GPUDirect RDMA module",
		newCollector: newInfiniBandCollector,
		metrics:      (&infinibandCollector{}).Metrics,
	})
}

// gpuDirectRDMAModules are the peer-memory modules that let an HCA DMA to and
// from GPU memory, newest first. DMA-BUF based GPUDirect RDMA (open kernel
// modules on Linux 5.12+) needs neither; this reports only the module path.
var gpuDirectRDMAModules = []string{"nvidia_peermem", "nv_peer_mem"}

type infinibandCollector struct {
	sys  sysfs.FS
	host hostfs.FS // /sys only: the collector reads nothing under /proc
	log  *zap.Logger
	now  func() time.Time

	// prev holds each port's last counters, to turn them into rates.
	prev     map[string]map[sample.InfiniBandCounter]uint64
	prevTime time.Time
}

func newInfiniBandCollector(cfg Config) (*infinibandCollector, error) {
	sys, err := sysfs.NewFS(cfg.SysPath)
	if err != nil {
		return nil, fmt.Errorf("sysfs at %s: %w", cfg.SysPath, err)
	}
	cfg = cfg.withDefaults()
	log := cfg.Logger
	return &infinibandCollector{sys: sys, host: hostfs.NewSysFS(cfg.SysPath), log: log, now: time.Now}, nil
}

func (c *infinibandCollector) Name() string { return sample.InfiniBandKey.Name() }

func (c *infinibandCollector) Sample(context.Context) (*sample.InfiniBand, error) {
	now := c.now()
	s := &sample.InfiniBand{GPUDirectRDMAModule: c.gpuDirectRDMAModule()}

	// Without RDMA hardware there is no class directory; the peer-memory
	// fact is still worth reporting. Once the directory exists, any missing
	// file is a real error, not absence.
	classDir := c.host.SysPath("class/infiniband")
	var class sysfs.InfiniBandClass
	if _, err := os.Stat(classDir); err == nil {
		if err := checkInfiniBandTree(classDir); err != nil {
			return nil, fmt.Errorf("reading %s: %w", classDir, err)
		}
		if class, err = c.sys.InfiniBandClass(); err != nil {
			return nil, fmt.Errorf("reading %s: %w", classDir, err)
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	for _, dev := range class {
		for _, p := range dev.Ports {
			s.Ports = append(s.Ports, c.port(dev, p))
		}
	}
	sort.Slice(s.Ports, func(i, j int) bool {
		if s.Ports[i].Device != s.Ports[j].Device {
			return s.Ports[i].Device < s.Ports[j].Device
		}
		return s.Ports[i].Port < s.Ports[j].Port
	})
	markDegradedInfiniBandPorts(s.Ports)
	c.computeRates(s, now)
	return s, nil
}

// checkInfiniBandTree refuses, before procfs reads them, the class
// directory's files that procfs opens blocking (fw_ver, board_id,
// hca_type, node_guid) or reads whole (each port's link_layer, state,
// phys_state, rate): a FIFO in a tree given as --path.sysfs would hang it,
// a huge file fill memory (a 100 MB attribute held 500 MB). The counters
// procfs reads at most 128 bytes of, and skips what the directory lists
// as not regular.
func checkInfiniBandTree(classDir string) error {
	devs, err := os.ReadDir(classDir)
	if err != nil {
		return err
	}
	check := func(dir string, names ...string) error {
		for _, n := range names {
			if err := hostfile.Check(filepath.Join(dir, n), hostfs.SysfsAttrBytes); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return err
			}
		}
		return nil
	}
	for _, d := range devs {
		dir := filepath.Join(classDir, d.Name())
		if err := check(dir, "fw_ver", "board_id", "hca_type", "node_guid"); err != nil {
			return err
		}
		ports, err := os.ReadDir(filepath.Join(dir, "ports"))
		if err != nil {
			continue // procfs says what is wrong
		}
		for _, p := range ports {
			if err := check(filepath.Join(dir, "ports", p.Name()), "link_layer", "state", "phys_state", "rate"); err != nil {
				return err
			}
		}
	}
	return nil
}

func (c *infinibandCollector) port(dev sysfs.InfiniBandDevice, p sysfs.InfiniBandPort) sample.InfiniBandPort {
	devDir := c.host.SysPath("class/infiniband", dev.Name, "device")
	out := sample.InfiniBandPort{
		Device: dev.Name, Port: p.Port, LinkLayer: p.LinkLayer,
		State: p.State, StateID: p.StateID, PhysState: p.PhysState, PhysStateID: p.PhysStateID,
		RateBytesPerSecond: float64(p.Rate),
		HCAType:            dev.HCAType, FirmwareVersion: dev.FirmwareVersion,
		NetDev:   infinibandPortNetDev(devDir, p.Port),
		Counters: map[sample.InfiniBandCounter]uint64{},
	}
	out.PCIBusID, out.NUMANode, out.PCIPath = c.host.PCILocation(devDir)
	// procfs keeps only the rate's number; the width is in the same file.
	// checkInfiniBandTree has refused a FIFO or huge file there, and an
	// unreadable or unparsable one leaves the width unknown: procfs has
	// read the rate already, so the port is still reported.
	rateFile := c.host.SysPath("class/infiniband", dev.Name, "ports", strconv.FormatUint(uint64(p.Port), 10), "rate")
	if b, err := hostfs.ReadAttr(rateFile); err == nil {
		out.LinkWidth, out.LinkSpeed, _ = parseInfiniBandWidth(string(b))
	} else {
		c.log.Debug("cannot read the port's width", zap.String("path", rateFile), zap.Error(err))
	}
	for _, k := range infinibandCounters {
		if v := k.get(&p); v != nil {
			out.Counters[k.key] = *v
		}
	}
	return out
}

// parseInfiniBandWidth reads the active link width (lanes) and lane speed
// from a port's rate file as the kernel prints it (drivers/infiniband/core/
// sysfs.c rate_show, "%d%s Gb/sec (%dX%s)"): "100 Gb/sec (4X EDR)",
// "25 Gb/sec (1X EDR)", "200 Gb/sec (2X NDR)", and "10 Gb/sec (4X)" from
// kernels that name no speed for SDR. ok is false for anything else, and
// the width is then unknown (0), never guessed. The speed is kept only as
// a short upper-case name (sample.ValidInfiniBandSpeed): it reaches the
// findings' text and a label.
func parseInfiniBandWidth(rate string) (width int, speed string, ok bool) {
	_, inner, found := strings.Cut(strings.TrimSpace(rate), " (")
	inner, closed := strings.CutSuffix(inner, ")")
	if !found || !closed {
		return 0, "", false
	}
	lanes, speed, _ := strings.Cut(inner, " ")
	lanes, isWidth := strings.CutSuffix(lanes, "X")
	width, err := strconv.Atoi(lanes)
	if !isWidth || err != nil || !sample.ValidInfiniBandWidth(width) {
		return 0, "", false
	}
	if speed == "" {
		speed = "SDR"
	}
	if !sample.ValidInfiniBandSpeed(speed) {
		return 0, "", false
	}
	return width, speed, true
}

// infinibandPortNetDev finds the network interface bound to an HCA port among
// the interfaces of its PCI function. A port's interface has dev_port equal to
// the port number minus one; switchdev representors of VFs and SFs share the
// function and are skipped, and an IPoIB parent sorts before its P_Key
// children.
func infinibandPortNetDev(devDir string, port uint) string {
	entries, err := os.ReadDir(filepath.Join(devDir, "net"))
	if err != nil {
		return ""
	}
	for _, e := range entries { // sorted by name
		dir := filepath.Join(devDir, "net", e.Name())
		devPort := uint64(0)
		if b, err := hostfs.ReadAttr(filepath.Join(dir, "dev_port")); err == nil {
			if v, err := hostfs.ParseUintAttr(filepath.Join(dir, "dev_port"), b); err == nil {
				devPort = v
			}
		}
		if devPort+1 != uint64(port) {
			continue
		}
		if b, err := hostfs.ReadAttr(filepath.Join(dir, "phys_port_name")); err == nil && infinibandIsRepresentor(strings.TrimSpace(string(b))) {
			continue
		}
		return e.Name()
	}
	return ""
}

// infinibandIsRepresentor matches the phys_port_name of switchdev representors
// (pf0vf3, pf1sf12, c1pf0vf2), not the uplink (p0).
func infinibandIsRepresentor(name string) bool {
	i := strings.Index(name, "pf")
	if i < 0 {
		return false
	}
	rest := strings.TrimLeft(name[i+2:], "0123456789")
	return strings.HasPrefix(rest, "vf") || strings.HasPrefix(rest, "sf")
}

// markDegradedInfiniBandPorts flags active ports that trained down, by two
// rules. A port slower than the fastest active port of the same link layer
// and HCA model: peers are limited to one model so that a 200 Gb/s storage
// HCA of an older generation is not flagged next to 400 Gb/s compute HCAs,
// and within one model a lower rate means the link trained down. And an
// InfiniBand port narrower than an HCA port trains (1X always, 2X below HDR:
// sample.InfiniBandMinWidth), which needs no peer, so a node's only port is
// judged too; a 2X HDR or NDR port is a splitter cable's HDR100 or NDR200
// and is flagged only next to a faster port of its model.
func markDegradedInfiniBandPorts(ports []sample.InfiniBandPort) {
	group := func(p *sample.InfiniBandPort) string { return p.LinkLayer + "\x00" + p.HCAType }
	best := map[string]float64{}
	for i := range ports {
		p := &ports[i]
		if p.Active() && p.RateBytesPerSecond > best[group(p)] {
			best[group(p)] = p.RateBytesPerSecond
		}
	}
	for i := range ports {
		p := &ports[i]
		p.RateDegraded = p.Active() && p.RateBytesPerSecond < best[group(p)] || p.WidthDegraded()
	}
}

func (c *infinibandCollector) computeRates(s *sample.InfiniBand, now time.Time) {
	dt := now.Sub(c.prevTime).Seconds()
	next := make(map[string]map[sample.InfiniBandCounter]uint64, len(s.Ports))
	for i := range s.Ports {
		p := &s.Ports[i]
		key := p.Device + "/" + strconv.FormatUint(uint64(p.Port), 10)
		next[key] = p.Counters
		prev, ok := c.prev[key]
		if !ok || dt <= 0 {
			continue
		}
		p.Rates = make(map[sample.InfiniBandCounter]float64, len(p.Counters))
		for k, cur := range p.Counters {
			if old, ok := prev[k]; ok {
				p.Rates[k] = sample.CounterRate(float64(old), float64(cur), dt)
			}
		}
	}
	if c.prev != nil && dt > 0 {
		s.IntervalSeconds = dt
	}
	c.prev, c.prevTime = next, now
}

// gpuDirectRDMAModule returns the first peer-memory module that is loaded.
// A module is in /sys/module while loaded; initstate tells a live one from
// one still loading or going away.
func (c *infinibandCollector) gpuDirectRDMAModule() string {
	for _, m := range gpuDirectRDMAModules {
		dir := c.host.SysPath("module", m)
		if _, err := os.Stat(dir); err != nil {
			if !errors.Is(err, fs.ErrNotExist) {
				c.log.Debug("cannot check module", zap.String("module", m), zap.Error(err))
			}
			continue
		}
		b, err := hostfs.ReadAttr(filepath.Join(dir, "initstate"))
		if err == nil && strings.TrimSpace(string(b)) != "live" {
			continue
		}
		return m
	}
	return ""
}

func infinibandDesc(name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc(engine.Namespace+"_infiniband_"+name, help, append([]string{"device", "port"}, labels...), nil)
}

var (
	infinibandInfoDesc = infinibandDesc("port_info",
		"InfiniBand or RoCE port identity and state; join on device and port. link_layer is InfiniBand or Ethernet (RoCE); netdev is the bound interface; numa_node -1 means unknown.",
		"link_layer", "state", "phys_state", "netdev", "numa_node", "pci_bus_id", "hca_type", "firmware_version")
	infinibandStateDesc = infinibandDesc("state_id",
		"Logical port state (1 down, 2 init, 3 armed, 4 active, 5 active defer).")
	infinibandPhysStateDesc = infinibandDesc("physical_state_id",
		"Physical port state (1 sleep, 2 polling, 3 disabled, 4 port configuration training, 5 link up, 6 link error recovery, 7 phy test).")
	infinibandRateDesc = infinibandDesc("rate_bytes_per_second",
		"Negotiated link rate, one direction (400 Gb/s NDR = 5e10).")
	infinibandWidthDesc = infinibandDesc("link_width_lanes",
		"Active link width in lanes, from the rate file (4X = 4); absent when the kernel does not say. On RoCE ports the driver's rendering of the Ethernet speed (25GbE shows as 1X), not lanes.",
		"speed")
	infinibandDegradedDesc = infinibandDesc("port_rate_degraded",
		"1 when the port is active and trained down: an InfiniBand port at 1X (or 2X below HDR; 2X HDR and NDR are splitter cables' HDR100 and NDR200), or a lower rate than the fastest active port of the same link layer and HCA model on the host; else 0.")
	gpuDirectRDMADesc = prometheus.NewDesc(engine.Namespace+"_gpudirect_rdma_module_loaded",
		"1 when a GPUDirect RDMA peer-memory module (nvidia_peermem or legacy nv_peer_mem) is loaded, else 0. Without it (or DMA-BUF support) NCCL stages RDMA traffic through host memory.",
		nil, nil)
)

// infinibandCounters maps the procfs counters we keep to sample keys and
// metrics. procfs has already turned port_{xmit,rcv}_data from 4-octet words
// into bytes.
var infinibandCounters = []struct {
	key  sample.InfiniBandCounter
	get  func(*sysfs.InfiniBandPort) *uint64
	desc *prometheus.Desc
}{
	{sample.IBTransmitBytes, func(p *sysfs.InfiniBandPort) *uint64 { return p.Counters.PortXmitData },
		infinibandDesc("port_data_transmitted_bytes_total", "Data bytes transmitted on the port (port_xmit_data × 4).")},
	{sample.IBReceiveBytes, func(p *sysfs.InfiniBandPort) *uint64 { return p.Counters.PortRcvData },
		infinibandDesc("port_data_received_bytes_total", "Data bytes received on the port (port_rcv_data × 4).")},
	{sample.IBTransmitPackets, func(p *sysfs.InfiniBandPort) *uint64 { return p.Counters.PortXmitPackets },
		infinibandDesc("port_packets_transmitted_total", "Packets transmitted on the port.")},
	{sample.IBReceivePackets, func(p *sysfs.InfiniBandPort) *uint64 { return p.Counters.PortRcvPackets },
		infinibandDesc("port_packets_received_total", "Packets received on the port, errors included.")},
	{sample.IBTransmitWait, func(p *sysfs.InfiniBandPort) *uint64 { return p.Counters.PortXmitWait },
		infinibandDesc("port_transmit_wait_total", "Ticks during which the port had data to send but no flow-control credits: back-pressure from the fabric.")},
	{sample.IBTransmitDiscards, func(p *sysfs.InfiniBandPort) *uint64 { return p.Counters.PortXmitDiscards },
		infinibandDesc("port_discards_transmitted_total", "Outbound packets discarded because the port was down or congested.")},
	{sample.IBReceiveDiscards, func(p *sysfs.InfiniBandPort) *uint64 { return p.Counters.PortRcvDiscards },
		infinibandDesc("port_discards_received_total", "Inbound packets discarded because the port was down or congested.")},
	{sample.IBReceiveErrors, func(p *sysfs.InfiniBandPort) *uint64 { return p.Counters.PortRcvErrors },
		infinibandDesc("port_errors_received_total", "Received packets that contained an error.")},
	{sample.IBReceiveRemotePhysicalErrors, func(p *sysfs.InfiniBandPort) *uint64 { return p.Counters.PortRcvRemotePhysicalErrors },
		infinibandDesc("port_receive_remote_physical_errors_total", "Received packets marked bad by an upstream link (EBP delimiter).")},
	{sample.IBSymbolErrors, func(p *sysfs.InfiniBandPort) *uint64 { return p.Counters.SymbolError },
		infinibandDesc("symbol_error_total", "Minor link errors on any lane; a rising count points at a cable, optic or connector.")},
	{sample.IBLinkDowned, func(p *sysfs.InfiniBandPort) *uint64 { return p.Counters.LinkDowned },
		infinibandDesc("link_downed_total", "Times the link failed to recover from an error and went down.")},
	{sample.IBLinkErrorRecovery, func(p *sysfs.InfiniBandPort) *uint64 { return p.Counters.LinkErrorRecovery },
		infinibandDesc("link_error_recovery_total", "Times the link recovered from an error (retraining).")},
	{sample.IBLocalLinkIntegrityErrors, func(p *sysfs.InfiniBandPort) *uint64 { return p.Counters.LocalLinkIntegrityErrors },
		infinibandDesc("local_link_integrity_errors_total", "Times the local physical errors exceeded the link's threshold.")},
	{sample.IBExcessiveBufferOverrunErrors, func(p *sysfs.InfiniBandPort) *uint64 { return p.Counters.ExcessiveBufferOverrunErrors },
		infinibandDesc("excessive_buffer_overrun_errors_total", "Consecutive flow-control update periods with a receive buffer overrun.")},
	{sample.IBECNMarkedRoCEPackets, func(p *sysfs.InfiniBandPort) *uint64 { return p.HwCounters.NpEcnMarkedRocePackets },
		infinibandDesc("np_ecn_marked_roce_packets_total", "RoCE packets received with an ECN congestion mark (notification point).")},
	{sample.IBCNPSent, func(p *sysfs.InfiniBandPort) *uint64 { return p.HwCounters.NpCnpSent },
		infinibandDesc("np_cnp_sent_total", "Congestion notification packets sent to senders in reply to ECN marks.")},
	{sample.IBCNPHandled, func(p *sysfs.InfiniBandPort) *uint64 { return p.HwCounters.RpCnpHandled },
		infinibandDesc("rp_cnp_handled_total", "Congestion notification packets acted on by this sender (reaction point): its rate was cut.")},
	{sample.IBOutOfSequence, func(p *sysfs.InfiniBandPort) *uint64 { return p.HwCounters.OutOfSequence },
		infinibandDesc("out_of_sequence_total", "Packets received out of sequence (loss or reordering in the fabric).")},
	{sample.IBPacketSequenceErrors, func(p *sysfs.InfiniBandPort) *uint64 { return p.HwCounters.PacketSeqErr },
		infinibandDesc("packet_seq_err_total", "NAKs for packet sequence errors received (the peer saw a gap and asked for a resend).")},
	{sample.IBLocalAckTimeoutErrors, func(p *sysfs.InfiniBandPort) *uint64 { return p.HwCounters.LocalAckTimeoutErr },
		infinibandDesc("local_ack_timeout_err_total", "Times a sent packet's ACK timer expired (a retransmission).")},
	{sample.IBOutOfBuffer, func(p *sysfs.InfiniBandPort) *uint64 { return p.HwCounters.OutOfBuffer },
		infinibandDesc("out_of_buffer_total", "Packets dropped because no receive WQE was posted (the receiver fell behind).")},
	{sample.IBReqCQEErrors, func(p *sysfs.InfiniBandPort) *uint64 { return p.HwCounters.ReqCqeError },
		infinibandDesc("req_cqe_error_total", "Work requests this port sent that completed with an error, flushed ones included (req_cqe_flush_error).")},
	{sample.IBReqCQEFlushErrors, func(p *sysfs.InfiniBandPort) *uint64 { return p.HwCounters.ReqCqeFlushError },
		infinibandDesc("req_cqe_flush_error_total", "Send work requests flushed with an error because their queue pair was torn down or broke.")},
	{sample.IBRespCQEErrors, func(p *sysfs.InfiniBandPort) *uint64 { return p.HwCounters.RespCqeError },
		infinibandDesc("resp_cqe_error_total", "Receive work requests that completed with an error, flushed ones included (resp_cqe_flush_error).")},
	{sample.IBRespCQEFlushErrors, func(p *sysfs.InfiniBandPort) *uint64 { return p.HwCounters.RespCqeFlushError },
		infinibandDesc("resp_cqe_flush_error_total", "Receive work requests flushed with an error because their queue pair was torn down or broke (unused receives at a job's end).")},
	{sample.IBRNRNAKs, func(p *sysfs.InfiniBandPort) *uint64 { return p.HwCounters.RnrNakRetryErr },
		infinibandDesc("rnr_nak_retry_err_total", "Receiver-not-ready NAKs received: the peer had no receive posted and this sender waited before retrying.")},
	{sample.IBAdaptiveRetransmissions, func(p *sysfs.InfiniBandPort) *uint64 { return p.HwCounters.RoceAdpRetrans },
		infinibandDesc("roce_adp_retrans_total", "RoCE adaptive retransmissions: packets sent again before the ACK timeout.")},
	{sample.IBAdaptiveRetransTimeouts, func(p *sysfs.InfiniBandPort) *uint64 { return p.HwCounters.RoceAdpRetransTo },
		infinibandDesc("roce_adp_retrans_to_total", "Times RoCE traffic reached a timeout under adaptive retransmission.")},
	{sample.IBImpliedNAKSequenceErrors, func(p *sysfs.InfiniBandPort) *uint64 { return p.HwCounters.ImpliedNakSeqErr },
		infinibandDesc("implied_nak_seq_err_total", "Responses (RDMA read, atomic) with a later sequence number than expected: the ones between were lost and are asked again.")},
	{sample.IBDuplicateRequests, func(p *sysfs.InfiniBandPort) *uint64 { return p.HwCounters.DuplicateRequest },
		infinibandDesc("duplicate_request_total", "Requests received again that had already been executed: the sender retransmitted, its ACK or the request was lost or late.")},
}

func (c *infinibandCollector) Metrics(r *sample.InfiniBand, emit func(prometheus.Metric)) {
	emit(engine.NewSeries(gpuDirectRDMADesc, prometheus.GaugeValue, boolFloat(r.GPUDirectRDMAModule != "")))
	for i := range r.Ports {
		p := &r.Ports[i]
		dev, port := p.Device, strconv.FormatUint(uint64(p.Port), 10)
		emit(engine.NewSeries(infinibandInfoDesc, prometheus.GaugeValue, 1, dev, port,
			p.LinkLayer, p.State, p.PhysState, p.NetDev, strconv.Itoa(p.NUMANode), p.PCIBusID, p.HCAType, p.FirmwareVersion))
		emit(engine.NewSeries(infinibandStateDesc, prometheus.GaugeValue, float64(p.StateID), dev, port))
		emit(engine.NewSeries(infinibandPhysStateDesc, prometheus.GaugeValue, float64(p.PhysStateID), dev, port))
		emit(engine.NewSeries(infinibandRateDesc, prometheus.GaugeValue, p.RateBytesPerSecond, dev, port))
		emit(engine.NewSeries(infinibandDegradedDesc, prometheus.GaugeValue, boolFloat(p.RateDegraded), dev, port))
		if p.LinkWidth > 0 {
			emit(engine.NewSeries(infinibandWidthDesc, prometheus.GaugeValue, float64(p.LinkWidth), dev, port, p.LinkSpeed))
		}
		for _, k := range infinibandCounters {
			if v, ok := p.Counters[k.key]; ok {
				emit(engine.NewSeries(k.desc, prometheus.CounterValue, float64(v), dev, port))
			}
		}
	}
}
