package fabricsim

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"sort"
	"strings"

	"github.com/gpudiag/gpudiag/record"
	"github.com/gpudiag/gpudiag/sample"
)

// Summary is a trace's key numbers: medians over the readings in which the
// job runs (some GPU's utilization ≥ 0.5), and the longest hang.
type Summary struct {
	Seconds float64
	GDR     string // the infiniband sample's peer-memory module
	GPUs    []GPUSummary
	Ports   []PortSummary
	// HangSeconds is the longest span in which a GPU's utilization stays
	// ≥ 0.9 while its PCIe traffic and every port's bytes stay under
	// 1 MB/s; HangFrom is when it starts (seconds from the first frame).
	HangSeconds, HangFrom float64
	HangGPU               int
}

// GPUSummary is one GPU's medians.
type GPUSummary struct {
	GPU                      int
	SM, Util, PCIeTX, PCIeRX float64
	Paths                    []string // NCCL's paths for the GPU's rank
}

// PortSummary is one port's medians.
type PortSummary struct {
	Device                 string
	LinkLayer              string
	Rate                   float64 // bytes/s
	Degraded               bool
	TX, RX                 float64 // bytes/s
	XmitWaitShare          float64 // rate(transmit_wait) × 8 / rate
	ECNShare               float64 // ECN-marked / received packets
	CNPHandled, CNPSent    float64 // per second
	SymbolErrs, LinkRecovs uint64  // counters' increase over the trace
}

// ReadFrames reads a trace's frames.
func ReadFrames(path string) ([]record.Frame, error) { return readBase(path) }

func median(x []float64) float64 {
	if len(x) == 0 {
		return math.NaN()
	}
	y := append([]float64(nil), x...)
	sort.Float64s(y)
	return y[len(y)/2]
}

// Summarize computes a trace's Summary.
func Summarize(frames []record.Frame) (*Summary, error) {
	t0 := frames[0].UnixNano
	s := &Summary{Seconds: float64(frames[len(frames)-1].UnixNano-t0) / 1e9, HangGPU: -1}
	type gacc struct{ sm, util, tx, rx []float64 }
	type pacc struct {
		tx, rx, wait, ecn, cnph, cnps []float64
		first, last                   map[sample.InfiniBandCounter]uint64
		p                             sample.InfiniBandPort
	}
	var gs []gacc
	var ps []pacc
	running := false
	// Hang tracking.
	hangStart := make([]float64, 0)
	portsQuiet := true
	for _, f := range frames {
		t := float64(f.UnixNano-t0) / 1e9
		switch f.Collector {
		case sample.GPUKey.Name():
			var g sample.GPUs
			if err := json.Unmarshal(f.Sample, &g); err != nil {
				return nil, err
			}
			if gs == nil {
				gs = make([]gacc, len(g.Devices))
				hangStart = make([]float64, len(g.Devices))
				for i := range hangStart {
					hangStart[i] = -1
				}
			}
			running = false
			for _, d := range g.Devices {
				if u, ok := d.Values.Get(sample.Utilization); ok && u >= 0.5 {
					running = true
				}
			}
			for k, d := range g.Devices {
				if k >= len(gs) || d.IntervalSeconds <= 0 {
					continue
				}
				u, _ := d.Values.Get(sample.Utilization)
				tx, rx := rateOf(&d)
				if running {
					sm, _ := d.Values.Get(sample.SMActive)
					gs[k].sm = append(gs[k].sm, sm)
					gs[k].util = append(gs[k].util, u)
					gs[k].tx = append(gs[k].tx, tx)
					gs[k].rx = append(gs[k].rx, rx)
				}
				if u >= 0.9 && tx < 1e6 && rx < 1e6 && portsQuiet {
					if hangStart[k] < 0 {
						hangStart[k] = t
					}
					if span := t - hangStart[k]; span > s.HangSeconds {
						s.HangSeconds, s.HangFrom, s.HangGPU = span, hangStart[k], k
					}
				} else {
					hangStart[k] = -1
				}
			}
		case sample.InfiniBandKey.Name():
			var ib sample.InfiniBand
			if err := json.Unmarshal(f.Sample, &ib); err != nil {
				return nil, err
			}
			s.GDR = ib.GPUDirectRDMAModule
			if ps == nil {
				ps = make([]pacc, len(ib.Ports))
			}
			portsQuiet = true
			for j, p := range ib.Ports {
				a := &ps[j]
				a.p = p
				if a.first == nil {
					a.first = p.Counters
				}
				a.last = p.Counters
				if p.Rates == nil {
					continue
				}
				r := p.Rates
				if r[sample.IBTransmitBytes] >= 1e6 || r[sample.IBReceiveBytes] >= 1e6 {
					portsQuiet = false
				}
				if !running {
					continue
				}
				a.tx = append(a.tx, r[sample.IBTransmitBytes])
				a.rx = append(a.rx, r[sample.IBReceiveBytes])
				a.wait = append(a.wait, r[sample.IBTransmitWait]*8/p.RateBytesPerSecond)
				if rp := r[sample.IBReceivePackets]; rp > 0 {
					a.ecn = append(a.ecn, r[sample.IBECNMarkedRoCEPackets]/rp)
				}
				a.cnph = append(a.cnph, r[sample.IBCNPHandled])
				a.cnps = append(a.cnps, r[sample.IBCNPSent])
			}
		}
	}
	for k, g := range gs {
		s.GPUs = append(s.GPUs, GPUSummary{GPU: k, SM: median(g.sm), Util: median(g.util), PCIeTX: median(g.tx), PCIeRX: median(g.rx)})
	}
	for _, a := range ps {
		s.Ports = append(s.Ports, PortSummary{Device: a.p.Device, LinkLayer: a.p.LinkLayer, Rate: a.p.RateBytesPerSecond,
			Degraded: a.p.RateDegraded, TX: median(a.tx), RX: median(a.rx), XmitWaitShare: median(a.wait),
			ECNShare: median(a.ecn), CNPHandled: median(a.cnph), CNPSent: median(a.cnps),
			SymbolErrs: a.last[sample.IBSymbolErrors] - a.first[sample.IBSymbolErrors],
			LinkRecovs: a.last[sample.IBLinkErrorRecovery] - a.first[sample.IBLinkErrorRecovery]})
	}
	// NCCL paths per GPU, from the last nccl sample.
	for i := len(frames) - 1; i >= 0; i-- {
		if frames[i].Collector != sample.NCCLKey.Name() {
			continue
		}
		var n sample.NCCL
		if err := json.Unmarshal(frames[i].Sample, &n); err != nil {
			return nil, err
		}
		for _, g := range n.GPUs {
			if g.GPU >= 0 && g.GPU < len(s.GPUs) && g.File < len(n.Files) && g.Process < len(n.Files[g.File].Processes) {
				s.GPUs[g.GPU].Paths = n.Process(g).Paths
			}
		}
		break
	}
	return s, nil
}

// Print writes the summary in a few lines.
func (s *Summary) Print(w io.Writer) {
	fmt.Fprintf(w, "  %.0f s, peer-memory module %q\n", s.Seconds, s.GDR)
	for _, g := range s.GPUs {
		fmt.Fprintf(w, "  GPU %d: SM %.3f util %.2f PCIe TX %.2f GB/s RX %.2f GB/s, NCCL %s\n", g.GPU, g.SM, g.Util,
			g.PCIeTX/1e9, g.PCIeRX/1e9, strings.Join(g.Paths, ","))
	}
	for _, p := range s.Ports {
		fmt.Fprintf(w, "  %s (%s, %.0f Gb/s%s): TX %.2f GB/s RX %.2f GB/s (%.0f%%/%.0f%% of line)", p.Device, p.LinkLayer,
			p.Rate*8/1e9, map[bool]string{true: " degraded", false: ""}[p.Degraded], p.TX/1e9, p.RX/1e9, 100*p.TX/p.Rate, 100*p.RX/p.Rate)
		if p.XmitWaitShare > 0 {
			fmt.Fprintf(w, ", xmit_wait share %.2f", p.XmitWaitShare)
		}
		if p.ECNShare > 0 || p.CNPHandled > 0 {
			fmt.Fprintf(w, ", ECN %.3f of rx packets, CNP handled %.0f/s sent %.0f/s", p.ECNShare, p.CNPHandled, p.CNPSent)
		}
		if p.SymbolErrs > 0 || p.LinkRecovs > 0 {
			fmt.Fprintf(w, ", +%d symbol errors, +%d link error recoveries", p.SymbolErrs, p.LinkRecovs)
		}
		fmt.Fprintln(w)
	}
	if s.HangSeconds > 0 {
		fmt.Fprintf(w, "  hang: GPU %d busy with no progress for %.0f s from %.0f s\n", s.HangGPU, s.HangSeconds, s.HangFrom)
	}
}

// SummarizeFile summarises a trace file.
func SummarizeFile(path string) (*Summary, error) {
	if _, err := os.Stat(path); err != nil {
		return nil, err
	}
	f, err := ReadFrames(path)
	if err != nil {
		return nil, err
	}
	return Summarize(f)
}
