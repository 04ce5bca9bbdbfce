package sample

import (
	"slices"
	"strings"
)

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
	// Unmeasured names the counters, as sysfs names them (rx_bytes, …,
	// carrier_changes), that were read from neither /sys/class/net/<if>
	// nor /proc/net/dev: they are 0 and mean nothing, and their series are
	// left out.
	Unmeasured []string `json:"unmeasured,omitempty"`
	// Rates is nil on the first reading of the interface, and when its
	// Unmeasured changed since the previous one; the rates of its
	// Unmeasured counters are 0 and mean nothing.
	Rates *NetRates `json:"rates,omitempty"`
}

// Measured is whether the counter of that name (rx_bytes, …) was read.
func (f *NetInterface) Measured(counter string) bool { return !slices.Contains(f.Unmeasured, counter) }

// UnmeasuredFields names, for the collector's health, each interface's
// counters that were not read: "eth0 rx_bytes tx_bytes".
func (s *NetDevices) UnmeasuredFields() []string {
	var out []string
	for i := range s.Interfaces {
		if f := &s.Interfaces[i]; len(f.Unmeasured) > 0 {
			out = append(out, f.Name+" "+strings.Join(f.Unmeasured, " "))
		}
	}
	return out
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
		n += 200 + len(f.Name) + len(f.PCIBusID) + len(f.OperState) + 24*len(f.Unmeasured)
		if f.Rates != nil {
			n += 80
		}
	}
	return n
}
