package sample

// InfiniBandKey is the infiniband collector's key: its samples are *InfiniBand.
var InfiniBandKey = NewKey[InfiniBand]("infiniband")

// InfiniBand is one reading of the host's RDMA ports (InfiniBand and RoCE)
// and of whether GPUDirect RDMA can work.
type InfiniBand struct {
	// GPUDirectRDMAModule names the loaded peer-memory module that lets an
	// HCA read and write GPU memory directly (nvidia_peermem, or the legacy
	// nv_peer_mem); empty when neither is loaded.
	GPUDirectRDMAModule string `json:"gpudirect_rdma_module,omitempty"`
	// IntervalSeconds is the span the ports' Rates cover; 0 on the first
	// reading, which has no rates.
	IntervalSeconds float64          `json:"interval_seconds,omitempty"`
	Ports           []InfiniBandPort `json:"ports,omitempty"`
}

// InfiniBandPort is one port of one HCA.
type InfiniBandPort struct {
	Device string `json:"device"` // mlx5_0
	Port   uint   `json:"port"`
	// LinkLayer is "InfiniBand", or "Ethernet" for RoCE.
	LinkLayer   string `json:"link_layer"`
	State       string `json:"state"` // ACTIVE, DOWN, INIT, ARMED...
	StateID     uint   `json:"state_id"`
	PhysState   string `json:"phys_state"` // LinkUp, Polling, Disabled...
	PhysStateID uint   `json:"phys_state_id"`
	// RateBytesPerSecond is the negotiated signalling rate of the link
	// (400 Gb/s NDR = 5e10), one direction.
	RateBytesPerSecond float64 `json:"rate_bps"`
	// RateDegraded is true when the port is active at a lower rate than the
	// fastest active port of the same link layer and HCA model on the host:
	// the usual sign of a link that trained down (bad cable, dirty optic).
	RateDegraded bool `json:"rate_degraded,omitempty"`

	HCAType         string `json:"hca_type,omitempty"` // MT4129 = ConnectX-7
	FirmwareVersion string `json:"firmware_version,omitempty"`
	// NetDev is the port's network interface (IPoIB for InfiniBand, the
	// Ethernet interface for RoCE), empty when none is bound.
	NetDev string `json:"netdev,omitempty"`
	// PCIBusID is the HCA's PCI function in kernel form (0000:1a:00.0), to
	// join with GPUs; NUMANode is its node, -1 when the kernel does not say.
	PCIBusID string `json:"pci_bus_id,omitempty"`
	NUMANode int    `json:"numa_node"`
	// PCIPath places the HCA in the PCIe tree, to tell which GPUs share its
	// PCIe switch (PCIDistance).
	PCIPath PCIPath `json:"pci_path,omitempty"`

	// Counters holds the raw counters the port exposes; a counter the HCA
	// lacks (RoCE congestion counters on an InfiniBand port) is absent.
	Counters map[InfiniBandCounter]uint64 `json:"counters"`
	// Rates holds each counter's increase per second over the interval,
	// reset-safe (a counter that went backwards gives 0); nil on the first
	// reading of the port.
	Rates map[InfiniBandCounter]float64 `json:"rates,omitempty"`
}

// InfiniBandCounter names a port counter. Data counters are in bytes (the
// kernel's 4-octet words already multiplied out); the others are events.
type InfiniBandCounter string

const (
	IBTransmitBytes   InfiniBandCounter = "transmit_bytes"
	IBReceiveBytes    InfiniBandCounter = "receive_bytes"
	IBTransmitPackets InfiniBandCounter = "transmit_packets"
	IBReceivePackets  InfiniBandCounter = "receive_packets"
	// IBTransmitWait counts ticks in which the port had data to send but no
	// flow-control credits: the fabric's back-pressure on this port.
	IBTransmitWait                 InfiniBandCounter = "transmit_wait"
	IBTransmitDiscards             InfiniBandCounter = "transmit_discards"
	IBReceiveDiscards              InfiniBandCounter = "receive_discards"
	IBReceiveErrors                InfiniBandCounter = "receive_errors"
	IBReceiveRemotePhysicalErrors  InfiniBandCounter = "receive_remote_physical_errors"
	IBSymbolErrors                 InfiniBandCounter = "symbol_errors"
	IBLinkDowned                   InfiniBandCounter = "link_downed"
	IBLinkErrorRecovery            InfiniBandCounter = "link_error_recovery"
	IBLocalLinkIntegrityErrors     InfiniBandCounter = "local_link_integrity_errors"
	IBExcessiveBufferOverrunErrors InfiniBandCounter = "excessive_buffer_overrun_errors"
	IBECNMarkedRoCEPackets         InfiniBandCounter = "np_ecn_marked_roce_packets"
	IBCNPSent                      InfiniBandCounter = "np_cnp_sent"
	IBCNPHandled                   InfiniBandCounter = "rp_cnp_handled"
	IBOutOfSequence                InfiniBandCounter = "out_of_sequence"
	IBPacketSequenceErrors         InfiniBandCounter = "packet_seq_err"
	IBLocalAckTimeoutErrors        InfiniBandCounter = "local_ack_timeout_err"
	IBOutOfBuffer                  InfiniBandCounter = "out_of_buffer"
)

// Active reports whether the port is in the ACTIVE state (4), the only
// state in which it carries traffic.
func (p *InfiniBandPort) Active() bool { return p.StateID == 4 }

// SizeBytes estimates the memory a reading holds, for the window's budget.
func (s *InfiniBand) SizeBytes() int {
	n := 64 + len(s.GPUDirectRDMAModule)
	for i := range s.Ports {
		p := &s.Ports[i]
		n += 160 + len(p.Device) + len(p.LinkLayer) + len(p.State) + len(p.PhysState) +
			len(p.HCAType) + len(p.FirmwareVersion) + len(p.NetDev) + len(p.PCIBusID) + p.PCIPath.size()
		// A map entry costs its key header and value plus bucket overhead.
		n += 48*len(p.Counters) + 48*len(p.Rates)
	}
	return n
}
