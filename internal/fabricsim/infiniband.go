package fabricsim

import (
	"encoding/json"
	"fmt"
	"math"

	"github.com/gpudiag/gpudiag/sample"
)

// ibState integrates one node's port counters from its GPUs' network
// traffic, frame by frame.
type ibState struct {
	m *sim
	n int
	// acc holds each port's counters as exact floats; the sample shows
	// them floored, and Rates are the floored increase over the interval,
	// so Rates × IntervalSeconds is exactly the counters' increase.
	acc   []map[sample.InfiniBandCounter]float64
	last  []map[sample.InfiniBandCounter]uint64
	lastT float64
	first bool
}

// Counters every port shows; RoCE ports also show roceCounters. mlx5
// exposes the hw_counters (out_of_sequence…) on InfiniBand ports too; the
// ECN/CNP ones only on RoCE ports (Linux mlx5 hw_counters).
var (
	portCounters = []sample.InfiniBandCounter{
		sample.IBTransmitBytes, sample.IBReceiveBytes, sample.IBTransmitPackets, sample.IBReceivePackets,
		sample.IBTransmitWait, sample.IBTransmitDiscards, sample.IBReceiveDiscards, sample.IBReceiveErrors,
		sample.IBReceiveRemotePhysicalErrors, sample.IBSymbolErrors, sample.IBLinkDowned, sample.IBLinkErrorRecovery,
		sample.IBLocalLinkIntegrityErrors, sample.IBExcessiveBufferOverrunErrors,
		sample.IBOutOfSequence, sample.IBPacketSequenceErrors, sample.IBLocalAckTimeoutErrors, sample.IBOutOfBuffer,
	}
	roceCounters = []sample.InfiniBandCounter{sample.IBECNMarkedRoCEPackets, sample.IBCNPSent, sample.IBCNPHandled}
)

func newIBState(m *sim, n int) *ibState {
	st := &ibState{m: m, n: n, first: true}
	for j, h := range m.s.HCAs {
		acc := map[sample.InfiniBandCounter]float64{}
		// Counters since boot: a fixed, port-specific start so that the
		// trace does not begin at zero (a freshly booted host) and
		// traces stay deterministic.
		base := float64(j+1) * 1.234567e12
		acc[sample.IBTransmitBytes] = base
		acc[sample.IBReceiveBytes] = base * 1.01
		acc[sample.IBTransmitPackets] = math.Floor(base / h.MTU)
		acc[sample.IBReceivePackets] = math.Floor(base * 1.01 / h.MTU)
		st.acc = append(st.acc, acc)
	}
	st.last = make([]map[sample.InfiniBandCounter]uint64, len(m.s.HCAs))
	return st
}

// bytesIn is GPU k's network bytes (tx, rx) over (a, b], from its
// per-interval segments (rates constant over each).
func bytesIn(segs []segment, a, b float64) (tx, rx float64) {
	for _, s := range segs {
		lo, hi := max(s.from, a), min(s.to, b)
		if hi > lo {
			tx += s.tx * (hi - lo)
			rx += s.rx * (hi - lo)
		}
	}
	return tx, rx
}

// sample returns the infiniband sample at time t. The first covers no
// interval (no Rates, IntervalSeconds 0), as the collector's first reading.
//
// Rules: a port's bytes are the sum of the network bytes of the GPUs whose
// rank uses it (GDR: the GPU's PCIe bytes × network fraction; host-staged:
// the same bytes, moved from host memory); packets = bytes / MTU; the
// conditions add their counters. The interval is the time since the
// previous infiniband frame.
func (st *ibState) sample(t float64, net [][]segment) (json.RawMessage, error) {
	m, n := st.m, st.n
	out := sample.InfiniBand{}
	if m.peermem(n) {
		out.GPUDirectRDMAModule = "nvidia_peermem"
	}
	iv := 0.0
	if !st.first {
		iv = t - st.lastT
	}
	for j, h := range m.s.HCAs {
		acc := st.acc[j]
		rate, degraded := m.portRate(n, j)
		if iv > 0 {
			var tx, rx float64
			for k := range m.nGPU {
				if m.s.NCCL.HCAOfGPU[k] == j {
					a, b := bytesIn(net[k], t-iv, t)
					tx += a
					rx += b
				}
			}
			if tx > rate*iv*1.0001 || rx > rate*iv*1.0001 {
				return nil, fmt.Errorf("%s at %.1f s: %.3g B/s over its line rate %.3g", h.Device, t, max(tx, rx)/iv, rate)
			}
			acc[sample.IBTransmitBytes] += tx
			acc[sample.IBReceiveBytes] += rx
			acc[sample.IBTransmitPackets] += tx / h.MTU
			acc[sample.IBReceivePackets] += rx / h.MTU
			load := min(1, max(tx, rx)/iv/m.portCap(n, j))
			for _, c := range m.s.Conditions {
				if c.HCA != j || !appliesTo(c.Nodes, n) || t-iv < c.FromSeconds && t <= c.FromSeconds {
					continue
				}
				span := min(iv, t-c.FromSeconds)
				switch c.Kind {
				case CondIBCongestion:
					// One transmit_wait tick per 8 bytes' time the port
					// could not send (ibdiagnet manual, "Congestion
					// Assessment on InfiniBand Links"): share × rate / 8
					// ticks per second while the job's traffic flows.
					acc[sample.IBTransmitWait] += c.XmitWaitShare * rate / 8 * span * load
				case CondRoCECongestion:
					acc[sample.IBECNMarkedRoCEPackets] += c.ECNMarkedShare * rx / h.MTU * span / iv
					acc[sample.IBCNPHandled] += c.CNPPerSecond * span * load
					acc[sample.IBCNPSent] += c.CNPPerSecond * span * load
				case CondLinkErrors:
					acc[sample.IBSymbolErrors] += c.SymbolErrorsPerSecond * span
					acc[sample.IBLinkErrorRecovery] += c.LinkErrorRecoveryPerSecond * span
					acc[sample.IBReceiveErrors] += c.ReceiveErrorsPerSecond * span
				}
			}
		}
		cur := map[sample.InfiniBandCounter]uint64{}
		names := portCounters
		if h.LinkLayer == "Ethernet" {
			names = append(append([]sample.InfiniBandCounter(nil), portCounters...), roceCounters...)
		}
		for _, c := range names {
			cur[c] = uint64(math.Floor(acc[c]))
		}
		p := sample.InfiniBandPort{
			Device: h.Device, Port: h.Port, LinkLayer: h.LinkLayer,
			State: "ACTIVE", StateID: 4, PhysState: "LinkUp", PhysStateID: 5,
			RateBytesPerSecond: rate, RateDegraded: degraded,
			HCAType: "MT4129", FirmwareVersion: "28.39.1002",
			NetDev:   netDev(h, m.lay.hcaBus(j)),
			PCIBusID: m.lay.hcaBus(j), NUMANode: m.lay.hcaNUMA[j], PCIPath: m.lay.hcaPath[j],
			Counters: cur,
		}
		if iv > 0 && st.last[j] != nil {
			p.Rates = map[sample.InfiniBandCounter]float64{}
			for c, v := range cur {
				p.Rates[c] = float64(v-st.last[j][c]) / iv
			}
		}
		st.last[j] = cur
		out.Ports = append(out.Ports, p)
	}
	if iv > 0 {
		out.IntervalSeconds = iv
	}
	st.first = false
	st.lastT = t
	return json.Marshal(&out)
}

// netDev names the port's interface as udev would from its PCI address:
// ib<bus>s0 style IPoIB names for InfiniBand (ibp<bus>s0), ens-style for
// RoCE (enp<bus>s0np<port-1>).
func netDev(h HCA, bus string) string {
	var b int
	fmt.Sscanf(bus, "0000:%x:", &b)
	if h.LinkLayer == "Ethernet" {
		return fmt.Sprintf("enp%ds0np%d", b, h.Port-1)
	}
	return fmt.Sprintf("ibp%ds0", b)
}
