package sample

import "fmt"

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
	// LinkWidth is the active link width in lanes (4 for "4X") and
	// LinkSpeed the per-lane speed's name (EDR, NDR; SDR where the kernel
	// prints none), both from the rate file ("100 Gb/sec (4X EDR)"); 0 and
	// empty when it does not say. On RoCE they are the driver's rendering
	// of the Ethernet speed (mlx5 shows 25GbE as "1X EDR"), not lanes.
	LinkWidth int    `json:"link_width,omitempty"`
	LinkSpeed string `json:"link_speed,omitempty"`
	// RateDegraded is true when the port is active and either trained
	// narrower than an HCA port trains (WidthDegraded) or runs at a lower
	// rate than the fastest active port of the same link layer and HCA
	// model on the host: the usual sign of a link that trained down (bad
	// cable, dirty optic).
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
	// The mlx5 transport (queue pair) counters of hw_counters: work
	// requests completed with an error, those of them flushed (a queue
	// pair torn down or broken flushes what it still held), and the
	// retransmissions and NAKs of reliable connections.
	IBReqCQEErrors             InfiniBandCounter = "req_cqe_error"
	IBReqCQEFlushErrors        InfiniBandCounter = "req_cqe_flush_error"
	IBRespCQEErrors            InfiniBandCounter = "resp_cqe_error"
	IBRespCQEFlushErrors       InfiniBandCounter = "resp_cqe_flush_error"
	IBRNRNAKs                  InfiniBandCounter = "rnr_nak_retry_err"
	IBAdaptiveRetransmissions  InfiniBandCounter = "roce_adp_retrans"
	IBAdaptiveRetransTimeouts  InfiniBandCounter = "roce_adp_retrans_to"
	IBImpliedNAKSequenceErrors InfiniBandCounter = "implied_nak_seq_err"
	IBDuplicateRequests        InfiniBandCounter = "duplicate_request"
)

// Active reports whether the port is in the ACTIVE state (4), the only
// state in which it carries traffic.
func (p *InfiniBandPort) Active() bool { return p.StateID == 4 }

// InfiniBandMinWidth is the narrowest width, in lanes, at which a healthy
// InfiniBand HCA port trains at a lane speed: 4X, except 2X from HDR on,
// where splitter cables legitimately give each HCA two lanes of a switch
// port (HDR100 is 2X HDR, NDR200 2X NDR: NVIDIA's 1:4 splitters, e.g.
// MCP7Y50 and MCP7Y70, carry two channels per end). No splitter gives an
// HCA one lane, and 2X did not exist before HDR, so 1X always, and 2X below
// HDR, is a link that lost lanes: a cable, optic or port fault (a 4X cable
// with a bad pair trains at 1X). 0 for a speed not named, which is never
// judged.
func InfiniBandMinWidth(speed string) int {
	switch speed {
	case "SDR", "DDR", "QDR", "FDR10", "FDR", "EDR":
		return 4
	case "HDR", "NDR", "XDR":
		return 2
	}
	return 0
}

// ValidInfiniBandWidth reports whether lanes is a link width the kernel
// prints (ib_width_enum_to_int: 1X, 2X, 4X, 8X, 12X).
func ValidInfiniBandWidth(lanes int) bool {
	switch lanes {
	case 1, 2, 4, 8, 12:
		return true
	}
	return false
}

// ValidInfiniBandSpeed reports whether speed is a lane speed's name as the
// kernel prints it (SDR ... XDR, FDR10): one to 8 upper-case letters and
// digits. It becomes a label value and part of a finding's text, so nothing
// else is kept.
func ValidInfiniBandSpeed(speed string) bool {
	if speed == "" || len(speed) > 8 {
		return false
	}
	for _, r := range speed {
		if (r < 'A' || r > 'Z') && (r < '0' || r > '9') {
			return false
		}
	}
	return true
}

// Validate reports the first value of the reading no port can have: a
// negative or infinite rate, a width the kernel does not print, a speed
// that is not a speed's name. The collector never makes one; a recorded
// trace can hold anything, and the replay refuses such a frame.
func (s *InfiniBand) Validate() error {
	if err := nonNegative(s.IntervalSeconds); err != nil {
		return fmt.Errorf("interval_seconds: %w", err)
	}
	for i := range s.Ports {
		p := &s.Ports[i]
		if err := nonNegative(p.RateBytesPerSecond); err != nil {
			return fmt.Errorf("ports[%d].rate_bps: %w", i, err)
		}
		if p.LinkWidth != 0 && !ValidInfiniBandWidth(p.LinkWidth) {
			return fmt.Errorf("ports[%d].link_width: %d is not a link width (1, 2, 4, 8 or 12 lanes)", i, p.LinkWidth)
		}
		if p.LinkSpeed != "" && !ValidInfiniBandSpeed(p.LinkSpeed) {
			return fmt.Errorf("ports[%d].link_speed: %q is not a lane speed's name", i, p.LinkSpeed)
		}
		for c, r := range p.Rates {
			if err := nonNegative(r); err != nil {
				return fmt.Errorf("ports[%d].rates.%s: %w", i, c, err)
			}
		}
	}
	return nil
}

// WidthDegraded reports whether an active InfiniBand port trained narrower
// than InfiniBandMinWidth of its speed. It needs no peer to compare with,
// so it catches a lone port that trained down. RoCE ports are not judged:
// their width is the driver's rendering of the Ethernet speed, and a 25GbE
// port shows as 1X EDR without any lane missing.
func (p *InfiniBandPort) WidthDegraded() bool {
	minWidth := InfiniBandMinWidth(p.LinkSpeed)
	return p.Active() && p.LinkLayer == "InfiniBand" && p.LinkWidth > 0 && minWidth > 0 && p.LinkWidth < minWidth
}

// SizeBytes estimates the memory a reading holds, for the window's budget.
func (s *InfiniBand) SizeBytes() int {
	n := 64 + len(s.GPUDirectRDMAModule)
	for i := range s.Ports {
		p := &s.Ports[i]
		n += 168 + len(p.Device) + len(p.LinkLayer) + len(p.State) + len(p.PhysState) + len(p.LinkSpeed) +
			len(p.HCAType) + len(p.FirmwareVersion) + len(p.NetDev) + len(p.PCIBusID) + p.PCIPath.size()
		// A map entry costs its key header and value plus bucket overhead.
		n += 48*len(p.Counters) + 48*len(p.Rates)
	}
	return n
}
