// Package fabricsim simulates the inter-node path of a multi-node GPU job:
// from a scenario (a JSON file) it writes, for each simulated node, a trace
// in the daemon's record format (package record) whose GPU and host samples
// are those of a real single-node recording (testdata/traces) and whose
// fabric samples (infiniband, nccl, the GPUs' PCIe placement in numa) are
// synthesised consistently with the GPUs' traffic.
//
// What is real and what is synthetic, and the source of every rule, is in
// docs/simulation.md; each rule is also stated where it is applied.
package fabricsim

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
)

// Scenario describes one simulated job. Unknown fields are refused, so a
// misspelt field fails loudly instead of being silently ignored.
type Scenario struct {
	// Name names the scenario and its traces: <name>-node<i>.gdrec. Letters,
	// digits, '_' and '-' only.
	Name string `json:"name"`
	// Description says what the scenario shows; free text, not used.
	Description string `json:"description,omitempty"`
	// Nodes is the number of nodes in the job (NCCL's nNodes), at least 1.
	Nodes int `json:"nodes"`
	// WriteNodes lists the nodes (0 … Nodes-1) whose trace is written;
	// empty writes every node. Every node is still simulated: the
	// collective's speed is that of the slowest port of any node.
	WriteNodes []int `json:"write_nodes,omitempty"`
	// Base is the real recording whose samples are reused, relative to the
	// scenario file's directory (e.g. "../traces/allreduce_p2p_disabled.gdrec").
	// Every collector's frames are kept, with their timestamps and
	// intervals; only what the scenario changes is rewritten.
	Base string `json:"base"`
	// DurationSeconds is how long the trace lasts, from its first frame.
	// 0 keeps the base's length; longer than the base needs Loop; shorter
	// cuts the base.
	DurationSeconds float64 `json:"duration_s,omitempty"`
	// Loop is the part of the base repeated to reach DurationSeconds.
	Loop *Loop `json:"loop,omitempty"`
	// GPUs places the base's GPUs in the PCIe tree and on NUMA nodes
	// (rewritten into the numa, gpu, gpuprocess and nccl samples). A GPU
	// not listed gets the default layout (Layout in layout.go): its own
	// PCIe switch under its own host bridge on NUMA node 0.
	GPUs []GPUPlacement `json:"gpus,omitempty"`
	// HCAs are every node's RDMA ports (all nodes have the same hardware;
	// Conditions make one node's port differ). At least one.
	HCAs []HCA `json:"hcas"`
	// NCCL is what the ranks' NCCL logs say, from which the nccl sample is
	// built as the nccl collector would (the log is parsed by package nccl).
	NCCL NCCL `json:"nccl"`
	// Traffic maps the GPUs' PCIe traffic to the HCAs.
	Traffic Traffic `json:"traffic"`
	// Conditions are fabric faults: a port trained down, congestion,
	// link errors, the peer-memory module absent.
	Conditions []Condition `json:"conditions,omitempty"`
	// GPUOverrides change GPUs' samples over a span of time (a hang, a rank
	// waiting for slower nodes).
	GPUOverrides []GPUOverride `json:"gpu_overrides,omitempty"`
	// DropEnv removes these variables from the ncclproc samples' process
	// environments (e.g. NCCL_P2P_DISABLE, which the base set to force its
	// traffic over PCIe and which the simulated job does not set).
	DropEnv []string `json:"drop_env,omitempty"`

	dir string // the scenario file's directory, for Base
}

// Loop is a span of the base, in seconds from its first frame, repeated
// back to back after the base's frames before To. Counters of the
// repeated frames are carried on (see extend.go), so they never go back.
type Loop struct {
	FromSeconds float64 `json:"from_s"`
	ToSeconds   float64 `json:"to_s"`
}

// GPUPlacement places one of the base's GPUs.
type GPUPlacement struct {
	// GPU is the base's GPU index.
	GPU int `json:"gpu"`
	// NUMANode is the GPU's NUMA node (default 0).
	NUMANode *int `json:"numa_node,omitempty"`
	// PCIPath is the GPU's sysfs path from the host bridge down
	// (sample.PCIPath); its last element is the GPU's bus ID, which
	// replaces the base's everywhere. Empty: the default layout.
	PCIPath []string `json:"pci_path,omitempty"`
}

// HCA is one RDMA port of every node.
type HCA struct {
	// Device and Port name it as the kernel does (mlx5_0, 1).
	Device string `json:"device"`
	Port   uint   `json:"port,omitempty"` // default 1
	// LinkLayer is "InfiniBand" (default) or "Ethernet" (RoCE).
	LinkLayer string `json:"link_layer,omitempty"`
	// RateGbps is the port's nominal rate in Gb/s, one direction (NDR
	// 400); required. RateBytesPerSecond is RateGbps×1e9/8.
	RateGbps float64 `json:"rate_gbps"`
	// SameSwitchAsGPU puts the HCA under GPU k's PCIe switch (PIX to it).
	// Unset: the HCA hangs off a root port of its own host bridge on
	// NUMANode ("other socket" when that node is not the GPUs').
	SameSwitchAsGPU *int `json:"same_switch_as_gpu,omitempty"`
	// NUMANode is the HCA's node; default: the GPU's under SameSwitchAsGPU,
	// else 0.
	NUMANode *int `json:"numa_node,omitempty"`
	// PCIPath overrides the computed path (last element: the bus ID).
	PCIPath []string `json:"pci_path,omitempty"`
	// MTU is the path MTU in bytes used to count packets (default 4096,
	// the InfiniBand MTU NCCL uses; packets = bytes / MTU).
	MTU float64 `json:"mtu,omitempty"`
}

// NCCL is what the simulated ranks' NCCL_DEBUG=INFO logs say.
type NCCL struct {
	// GDR is true when NCCL uses GPUDirect RDMA (channel paths
	// NET/IB/<i>/GDRDMA, transport NET/IB+GDRDMA); false for host-staged
	// transfers (paths NET/IB/<i>, plus a "GPU Direct RDMA Disabled" note
	// per HCA).
	GDR bool `json:"gdr"`
	// GDRNote is the note NCCL prints per HCA when GDR is off; %d is the
	// HCA's index, %s its device. Default: "NET/IB : GPU Direct RDMA
	// Disabled for HCA %d '%s' (no module)".
	GDRNote string `json:"gdr_note,omitempty"`
	// HCAOfGPU maps each local GPU's rank (by the base's GPU index) to the
	// HCA (index into HCAs) it uses; required for every GPU. Several GPUs
	// may share one.
	HCAOfGPU []int `json:"hca_of_gpu"`
	// Version is the NCCL version line (default "2.28.9+cuda13.0", the
	// base recordings').
	Version string `json:"version,omitempty"`
	// Channels is the number of channels each rank opens to its peers
	// (default 2).
	Channels int `json:"channels,omitempty"`
	// GDRLevel is NCCL_NET_GDR_LEVEL: the farthest PCIe distance (PIX,
	// PXB, PHB, NODE, SYS) at which a rank still uses GDR (default PXB,
	// NCCL's default). A rank whose HCA is farther is host-staged.
	GDRLevel string `json:"gdr_level,omitempty"`
	// HostStagedFactor is the share of the GDR throughput reached without
	// GDR (default 0.375: seeds F7, 30 vs 80 GB/s).
	HostStagedFactor float64 `json:"host_staged_factor,omitempty"`
}

// Traffic maps the base GPUs' PCIe traffic to the network.
type Traffic struct {
	// NetworkFraction is the share of a GPU's PCIe traffic that crosses
	// the network (default 1: in the base all-reduce all of it is
	// collective traffic). ByGPU overrides it per GPU index.
	NetworkFraction float64         `json:"network_fraction,omitempty"`
	ByGPU           map[int]float64 `json:"network_fraction_by_gpu,omitempty"`
	// Scale multiplies the base's PCIe traffic. Exclusive with
	// TargetLineShare; neither: 1.
	Scale float64 `json:"scale,omitempty"`
	// TargetLineShare sets Scale so that, with GDR and no fault, the median
	// of a GPU's busier network direction over the base's active intervals
	// (those above 10% of its peak) is this share of its HCA's nominal
	// rate. The smallest scale over the GPUs is used.
	TargetLineShare float64 `json:"target_line_share,omitempty"`
	// MaxLineShare is the most of a port's line rate the traffic can use
	// (default 0.97: NDR all-reduce bus bandwidth tops out near 97%).
	MaxLineShare float64 `json:"max_line_share,omitempty"`
}

// Condition is a fabric fault on one port (or on the host).
type Condition struct {
	// Kind: "trained_down", "roce_congestion", "ib_congestion",
	// "link_errors", "peermem_absent".
	Kind string `json:"kind"`
	// Nodes the condition applies to; empty: every node.
	Nodes []int `json:"nodes,omitempty"`
	// HCA is the port (index into HCAs); not used by peermem_absent.
	HCA int `json:"hca,omitempty"`
	// RateGbps is a trained-down port's rate (default half the nominal).
	RateGbps float64 `json:"rate_gbps,omitempty"`
	// ECNMarkedShare is the share of received packets ECN-marked
	// (np_ecn_marked_roce_packets / receive_packets), roce_congestion.
	ECNMarkedShare float64 `json:"ecn_marked_share,omitempty"`
	// CNPPerSecond is the CNPs the port handles as reaction point
	// (rp_cnp_handled) and sends as notification point (np_cnp_sent) per
	// second while traffic flows at full speed (scaled by the port's
	// load), roce_congestion.
	CNPPerSecond float64 `json:"cnp_per_second,omitempty"`
	// XmitWaitShare is the share of time the port waits for credits,
	// ib_congestion: rate(transmit_wait) = share × line rate / 8 (one tick
	// per 8 bytes' time, ibdiagnet manual). The port then carries at most
	// (1-share) of its line rate.
	XmitWaitShare float64 `json:"xmit_wait_share,omitempty"`
	// ThroughputFactor further caps the port's usable rate (e.g. 0.8 for
	// DCQCN rate reduction under RoCE congestion); default 1.
	ThroughputFactor float64 `json:"throughput_factor,omitempty"`
	// SymbolErrorsPerSecond, LinkErrorRecoveryPerSecond and
	// ReceiveErrorsPerSecond are link_errors' counter rates, growing from
	// FromSeconds on.
	SymbolErrorsPerSecond      float64 `json:"symbol_errors_per_second,omitempty"`
	LinkErrorRecoveryPerSecond float64 `json:"link_error_recovery_per_second,omitempty"`
	ReceiveErrorsPerSecond     float64 `json:"receive_errors_per_second,omitempty"`
	// FromSeconds is when the condition starts (seconds from the trace's
	// first frame); 0: from the start. Rate and peer-memory conditions
	// hold for the whole trace.
	FromSeconds float64 `json:"from_s,omitempty"`
}

// Condition kinds.
const (
	CondTrainedDown    = "trained_down"
	CondRoCECongestion = "roce_congestion"
	CondIBCongestion   = "ib_congestion"
	CondLinkErrors     = "link_errors"
	CondPeermemAbsent  = "peermem_absent"
)

// GPUOverride changes GPUs' readings over [FromSeconds, ToSeconds).
type GPUOverride struct {
	// GPUs are the base's GPU indexes; empty: all.
	GPUs []int `json:"gpus,omitempty"`
	// Nodes the override applies to; empty: every node.
	Nodes       []int   `json:"nodes,omitempty"`
	FromSeconds float64 `json:"from_s"`
	// ToSeconds 0: to the end.
	ToSeconds float64 `json:"to_s,omitempty"`
	// Utilization and SMActive replace NVML utilization and SM activity
	// (SM occupancy, tensor and DRAM activity are scaled with SM activity).
	Utilization *float64 `json:"utilization,omitempty"`
	SMActive    *float64 `json:"sm_active,omitempty"`
	// TrafficScale multiplies the GPU's PCIe and NVLink traffic, and so its
	// network traffic (0: no progress).
	TrafficScale *float64 `json:"traffic_scale,omitempty"`
	// ProcessState replaces the state letter of the GPU's processes in the
	// gpuprocess samples (e.g. "T": stopped), and their threads' states.
	ProcessState string `json:"process_state,omitempty"`
}

var nameRE = regexp.MustCompile(`^[A-Za-z0-9_-]+$`)

// Load reads and checks a scenario file.
func Load(path string) (*Scenario, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	s, err := Parse(b)
	if err != nil {
		return nil, fmt.Errorf("scenario %s: %w", path, err)
	}
	s.dir = filepath.Dir(path)
	if _, err := os.Stat(s.BasePath()); err != nil {
		return nil, fmt.Errorf("scenario %s: base trace: %w", path, err)
	}
	return s, nil
}

// Parse decodes and checks a scenario; Base is left relative.
func Parse(b []byte) (*Scenario, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var s Scenario
	if err := dec.Decode(&s); err != nil {
		return nil, err
	}
	if dec.More() {
		return nil, errors.New("trailing data after the scenario object")
	}
	if err := s.check(); err != nil {
		return nil, err
	}
	s.defaults()
	return &s, nil
}

// BasePath is the base trace's path.
func (s *Scenario) BasePath() string {
	if filepath.IsAbs(s.Base) {
		return s.Base
	}
	return filepath.Join(s.dir, s.Base)
}

func (s *Scenario) check() error {
	var errs []string
	bad := func(format string, a ...any) { errs = append(errs, fmt.Sprintf(format, a...)) }
	if !nameRE.MatchString(s.Name) {
		bad("name %q: want letters, digits, '_' or '-'", s.Name)
	}
	if s.Nodes < 1 {
		bad("nodes: want at least 1, got %d", s.Nodes)
	}
	for _, n := range s.WriteNodes {
		if n < 0 || n >= s.Nodes {
			bad("write_nodes: node %d is not in 0…%d", n, s.Nodes-1)
		}
	}
	if s.Base == "" {
		bad("base: missing (the real trace whose samples are reused)")
	}
	if s.DurationSeconds < 0 {
		bad("duration_s: negative")
	}
	if l := s.Loop; l != nil && (l.FromSeconds < 0 || l.ToSeconds <= l.FromSeconds+1) {
		bad("loop: want 0 <= from_s and to_s > from_s + 1 s, got %v…%v", l.FromSeconds, l.ToSeconds)
	}
	if len(s.HCAs) == 0 {
		bad("hcas: at least one HCA is needed")
	}
	seen := map[string]bool{}
	for i, h := range s.HCAs {
		if h.Device == "" {
			bad("hcas[%d]: device missing", i)
		}
		key := fmt.Sprintf("%s:%d", h.Device, max(h.Port, 1))
		if seen[key] {
			bad("hcas[%d]: %s listed twice", i, key)
		}
		seen[key] = true
		if !(h.RateGbps > 0) {
			bad("hcas[%d] (%s): rate_gbps missing or not positive", i, h.Device)
		}
		switch h.LinkLayer {
		case "", "InfiniBand", "Ethernet":
		default:
			bad("hcas[%d] (%s): link_layer %q: want InfiniBand or Ethernet", i, h.Device, h.LinkLayer)
		}
		if h.MTU < 0 {
			bad("hcas[%d] (%s): mtu negative", i, h.Device)
		}
		if h.SameSwitchAsGPU != nil && len(h.PCIPath) > 0 {
			bad("hcas[%d] (%s): same_switch_as_gpu and pci_path both set", i, h.Device)
		}
	}
	if len(s.NCCL.HCAOfGPU) == 0 {
		bad("nccl.hca_of_gpu: missing (which HCA each GPU's rank uses)")
	}
	for g, h := range s.NCCL.HCAOfGPU {
		if h < 0 || h >= len(s.HCAs) {
			bad("nccl.hca_of_gpu[%d]: HCA %d is not in hcas", g, h)
		}
	}
	if f := s.NCCL.HostStagedFactor; f < 0 || f > 1 {
		bad("nccl.host_staged_factor: want 0…1, got %v", f)
	}
	switch s.NCCL.GDRLevel {
	case "", "PIX", "PXB", "PHB", "NODE", "SYS":
	default:
		bad("nccl.gdr_level %q: want PIX, PXB, PHB, NODE or SYS", s.NCCL.GDRLevel)
	}
	if s.NCCL.Channels < 0 {
		bad("nccl.channels: negative")
	}
	t := s.Traffic
	if t.NetworkFraction < 0 || t.NetworkFraction > 1 {
		bad("traffic.network_fraction: want 0…1, got %v", t.NetworkFraction)
	}
	for g, f := range t.ByGPU {
		if f < 0 || f > 1 {
			bad("traffic.network_fraction_by_gpu[%d]: want 0…1, got %v", g, f)
		}
	}
	if t.Scale < 0 || t.TargetLineShare < 0 || t.TargetLineShare > 1 || t.MaxLineShare < 0 || t.MaxLineShare > 1 {
		bad("traffic: scale, target_line_share and max_line_share must be positive, the shares at most 1")
	}
	if t.Scale > 0 && t.TargetLineShare > 0 {
		bad("traffic: scale and target_line_share both set")
	}
	for i, c := range s.Conditions {
		switch c.Kind {
		case CondTrainedDown, CondRoCECongestion, CondIBCongestion, CondLinkErrors:
			if c.HCA < 0 || c.HCA >= len(s.HCAs) {
				bad("conditions[%d] (%s): hca %d is not in hcas", i, c.Kind, c.HCA)
				continue
			}
		case CondPeermemAbsent:
			if s.NCCL.GDR {
				bad("conditions[%d]: peermem_absent with nccl.gdr true: NCCL cannot use GPUDirect RDMA without the peer-memory module", i)
			}
		default:
			bad("conditions[%d]: unknown kind %q", i, c.Kind)
			continue
		}
		for _, n := range c.Nodes {
			if n < 0 || n >= s.Nodes {
				bad("conditions[%d]: node %d is not in 0…%d", i, n, s.Nodes-1)
			}
		}
		h := HCA{}
		if c.HCA >= 0 && c.HCA < len(s.HCAs) {
			h = s.HCAs[c.HCA]
		}
		switch c.Kind {
		case CondTrainedDown:
			if c.RateGbps < 0 || (c.RateGbps > 0 && c.RateGbps >= h.RateGbps) {
				bad("conditions[%d]: trained_down rate_gbps %v must be below the nominal %v", i, c.RateGbps, h.RateGbps)
			}
		case CondRoCECongestion:
			if h.LinkLayer != "Ethernet" {
				bad("conditions[%d]: roce_congestion on %s, which is not a RoCE (Ethernet) port", i, h.Device)
			}
			if c.ECNMarkedShare < 0 || c.ECNMarkedShare > 1 || c.CNPPerSecond < 0 {
				bad("conditions[%d]: ecn_marked_share want 0…1, cnp_per_second >= 0", i)
			}
		case CondIBCongestion:
			if !(c.XmitWaitShare > 0 && c.XmitWaitShare < 1) {
				bad("conditions[%d]: xmit_wait_share want between 0 and 1, got %v", i, c.XmitWaitShare)
			}
		}
		if c.ThroughputFactor < 0 || c.ThroughputFactor > 1 {
			bad("conditions[%d]: throughput_factor want 0…1", i)
		}
	}
	for i, o := range s.GPUOverrides {
		if o.ToSeconds != 0 && o.ToSeconds <= o.FromSeconds {
			bad("gpu_overrides[%d]: to_s must be after from_s", i)
		}
		for _, p := range []*float64{o.Utilization, o.SMActive} {
			if p != nil && (*p < 0 || *p > 1) {
				bad("gpu_overrides[%d]: utilization and sm_active want 0…1", i)
			}
		}
		if o.TrafficScale != nil && *o.TrafficScale < 0 {
			bad("gpu_overrides[%d]: traffic_scale negative", i)
		}
		if o.ProcessState != "" && !strings.Contains("RSDTtZXIPWK", o.ProcessState) || len(o.ProcessState) > 1 {
			bad("gpu_overrides[%d]: process_state %q is not a process state letter", i, o.ProcessState)
		}
		for _, n := range o.Nodes {
			if n < 0 || n >= s.Nodes {
				bad("gpu_overrides[%d]: node %d is not in 0…%d", i, n, s.Nodes-1)
			}
		}
	}
	if len(errs) > 0 {
		return errors.New(strings.Join(errs, "; "))
	}
	return nil
}

func (s *Scenario) defaults() {
	for i := range s.HCAs {
		h := &s.HCAs[i]
		if h.Port == 0 {
			h.Port = 1
		}
		if h.LinkLayer == "" {
			h.LinkLayer = "InfiniBand"
		}
		if h.MTU == 0 {
			h.MTU = 4096
		}
	}
	if s.NCCL.Version == "" {
		s.NCCL.Version = "2.28.9+cuda13.0"
	}
	if s.NCCL.GDRLevel == "" {
		s.NCCL.GDRLevel = "PXB"
	}
	if s.NCCL.Channels == 0 {
		s.NCCL.Channels = 2
	}
	if s.NCCL.HostStagedFactor == 0 {
		s.NCCL.HostStagedFactor = 0.375
	}
	if s.NCCL.GDRNote == "" {
		s.NCCL.GDRNote = "NET/IB : GPU Direct RDMA Disabled for HCA %d '%s' (no module)"
	}
	if s.Traffic.NetworkFraction == 0 {
		s.Traffic.NetworkFraction = 1
	}
	if s.Traffic.MaxLineShare == 0 {
		s.Traffic.MaxLineShare = 0.97
	}
	for i := range s.Conditions {
		if s.Conditions[i].ThroughputFactor == 0 {
			s.Conditions[i].ThroughputFactor = 1
		}
	}
}

// writesNode reports whether node n's trace is written.
func (s *Scenario) writesNode(n int) bool {
	if len(s.WriteNodes) == 0 {
		return true
	}
	for _, w := range s.WriteNodes {
		if w == n {
			return true
		}
	}
	return false
}

// appliesTo reports whether a node list (empty: all) includes n.
func appliesTo(nodes []int, n int) bool {
	if len(nodes) == 0 {
		return true
	}
	for _, x := range nodes {
		if x == n {
			return true
		}
	}
	return false
}

// networkFraction is GPU g's share of PCIe traffic that crosses the network.
func (t *Traffic) networkFraction(g int) float64 {
	if f, ok := t.ByGPU[g]; ok {
		return f
	}
	return t.NetworkFraction
}
