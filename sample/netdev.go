package sample

// NetDevKey is the netdev collector's key: its samples are *NetDevices.
var NetDevKey = NewKey[NetDevices]("netdev")

// NetDevices is one reading of the host's network interfaces.
type NetDevices struct {
	// IntervalSeconds is the span the interfaces' Rates cover; 0 on the
	// first reading, which has no rates.
	IntervalSeconds float64        `json:"interval_seconds,omitempty"`
	Interfaces      []NetInterface `json:"interfaces,omitempty"`
}

// NetInterface is one network interface.
type NetInterface struct {
	Name string `json:"name"`
	// Physical is true when the interface is backed by a device
	// (/sys/class/net/<if>/device exists): a NIC, an IPoIB port, a VF.
	Physical bool `json:"physical"`
	// PCIBusID is the PCI function behind the interface in kernel form
	// (0000:9c:00.0), empty for virtual interfaces; NUMANode is its node,
	// -1 when unknown.
	PCIBusID  string `json:"pci_bus_id,omitempty"`
	NUMANode  int    `json:"numa_node"`
	OperState string `json:"operstate"` // up, down, lowerlayerdown, unknown...
	// Carrier is false when the link has no carrier or the interface is
	// administratively down (the kernel then refuses to say).
	Carrier  bool `json:"carrier"`
	MTUBytes int  `json:"mtu"`
	// SpeedBytesPerSecond is the negotiated line rate, one direction; 0 when
	// the driver does not report one (virtual interfaces, link down).
	SpeedBytesPerSecond float64     `json:"speed_bps"`
	Counters            NetCounters `json:"counters"`
	// Rates is nil on the first reading of the interface.
	Rates *NetRates `json:"rates,omitempty"`
}

// NetCounters are the kernel's interface statistics since the driver
// registered the interface.
type NetCounters struct {
	ReceiveBytes    uint64 `json:"rx_bytes"`
	TransmitBytes   uint64 `json:"tx_bytes"`
	ReceivePackets  uint64 `json:"rx_packets"`
	TransmitPackets uint64 `json:"tx_packets"`
	ReceiveDrops    uint64 `json:"rx_dropped"`
	TransmitDrops   uint64 `json:"tx_dropped"`
	ReceiveErrors   uint64 `json:"rx_errors"`
	TransmitErrors  uint64 `json:"tx_errors"`
	CarrierChanges  uint64 `json:"carrier_changes"`
}

// NetRates are NetCounters per second over the sample interval, reset-safe
// (a counter that went backwards gives 0).
type NetRates struct {
	ReceiveBytes    float64 `json:"rx_bytes"`
	TransmitBytes   float64 `json:"tx_bytes"`
	ReceivePackets  float64 `json:"rx_packets"`
	TransmitPackets float64 `json:"tx_packets"`
	ReceiveDrops    float64 `json:"rx_dropped"`
	TransmitDrops   float64 `json:"tx_dropped"`
	ReceiveErrors   float64 `json:"rx_errors"`
	TransmitErrors  float64 `json:"tx_errors"`
	CarrierChanges  float64 `json:"carrier_changes"`
}

// NetRatesBetween returns the per-second rates from prev to cur over seconds.
func NetRatesBetween(prev, cur NetCounters, seconds float64) NetRates {
	r := func(p, c uint64) float64 { return CounterRate(float64(p), float64(c), seconds) }
	return NetRates{
		ReceiveBytes:    r(prev.ReceiveBytes, cur.ReceiveBytes),
		TransmitBytes:   r(prev.TransmitBytes, cur.TransmitBytes),
		ReceivePackets:  r(prev.ReceivePackets, cur.ReceivePackets),
		TransmitPackets: r(prev.TransmitPackets, cur.TransmitPackets),
		ReceiveDrops:    r(prev.ReceiveDrops, cur.ReceiveDrops),
		TransmitDrops:   r(prev.TransmitDrops, cur.TransmitDrops),
		ReceiveErrors:   r(prev.ReceiveErrors, cur.ReceiveErrors),
		TransmitErrors:  r(prev.TransmitErrors, cur.TransmitErrors),
		CarrierChanges:  r(prev.CarrierChanges, cur.CarrierChanges),
	}
}

// SizeBytes estimates the memory a reading holds, for the window's budget.
func (s *NetDevices) SizeBytes() int {
	n := 48
	for i := range s.Interfaces {
		f := &s.Interfaces[i]
		n += 200 + len(f.Name) + len(f.PCIBusID) + len(f.OperState)
		if f.Rates != nil {
			n += 80
		}
	}
	return n
}
