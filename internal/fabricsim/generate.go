package fabricsim

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/gpudiag/gpudiag/record"
	"github.com/gpudiag/gpudiag/sample"
)

// Trace is one node's simulated trace.
type Trace struct {
	Node   int
	Frames []record.Frame
}

// FileName is the trace's file name: <scenario>-node<i>.gdrec.
func FileName(scenario string, node int) string {
	return fmt.Sprintf("%s-node%d.gdrec", scenario, node)
}

// WriteTraces generates the scenario and writes the traces of the nodes it
// names into dir (mode 0600), replacing existing files; it returns their
// paths.
func WriteTraces(s *Scenario, dir string) ([]string, error) {
	traces, err := Generate(s)
	if err != nil {
		return nil, err
	}
	var paths []string
	for _, t := range traces {
		p := filepath.Join(dir, FileName(s.Name, t.Node))
		if err := writeTrace(p, t.Frames); err != nil {
			return nil, err
		}
		paths = append(paths, p)
	}
	return paths, nil
}

func writeTrace(path string, frames []record.Frame) error {
	if err := os.Remove(path); err != nil && !os.IsNotExist(err) {
		return err
	}
	w, err := record.Create(path)
	if err != nil {
		return err
	}
	for _, f := range frames {
		if err := w.Write(f.Collector, f.Time(), f.Sample); err != nil {
			w.Close()
			return err
		}
	}
	return w.Close()
}

// gpuFrame is one decoded gpu frame of the extended base.
type gpuFrame struct {
	idx int // in the frame list
	t   float64
	s   *sample.GPUs
}

// sim is one scenario's generation state.
type sim struct {
	s      *Scenario
	frames []record.Frame
	t0     int64
	nGPU   int
	lay    *layout
	gpus   []gpuFrame
	scale  float64
	// busMap replaces the base's GPU bus IDs with the layout's.
	busMap map[string]string
	// factor[i] is the collective's speed factor at gpus[i] (1: not held
	// back by any port), the same on every node.
	factor []float64
	host   string
	pids   []int
}

// Generate simulates the scenario and returns the traces of the nodes it
// writes, in node order. It reads only the base trace; the result depends
// only on the scenario and the base.
func Generate(s *Scenario) ([]Trace, error) {
	base, err := readBase(s.BasePath())
	if err != nil {
		return nil, err
	}
	frames, err := extend(base, s.DurationSeconds, s.Loop)
	if err != nil {
		return nil, err
	}
	m := &sim{s: s, frames: frames, t0: frames[0].UnixNano}
	for _, f := range frames {
		m.t0 = min(m.t0, f.UnixNano)
	}
	if err := m.decodeGPUs(); err != nil {
		return nil, err
	}
	if len(s.NCCL.HCAOfGPU) != m.nGPU {
		return nil, fmt.Errorf("nccl.hca_of_gpu names %d GPUs; the base has %d", len(s.NCCL.HCAOfGPU), m.nGPU)
	}
	if m.lay, err = newLayout(s, m.nGPU); err != nil {
		return nil, err
	}
	m.busMap = map[string]string{}
	for k, d := range m.gpus[0].s.Devices {
		m.busMap[strings.ToLower(d.PCIBusID)] = m.lay.gpuBus(k)
	}
	m.hostAndPIDs()
	if err := m.computeScale(); err != nil {
		return nil, err
	}
	m.computeFactor()
	var out []Trace
	for n := range s.Nodes {
		if !s.writesNode(n) {
			continue
		}
		fr, err := m.node(n)
		if err != nil {
			return nil, fmt.Errorf("node %d: %w", n, err)
		}
		out = append(out, Trace{Node: n, Frames: fr})
	}
	return out, nil
}

func (m *sim) rel(t int64) float64 { return float64(t-m.t0) / 1e9 }

func (m *sim) decodeGPUs() error {
	for i, f := range m.frames {
		if f.Collector != sample.GPUKey.Name() {
			continue
		}
		var g sample.GPUs
		if err := json.Unmarshal(f.Sample, &g); err != nil {
			return fmt.Errorf("gpu frame %d: %w", i, err)
		}
		if len(g.Devices) == 0 {
			continue
		}
		if m.nGPU == 0 {
			m.nGPU = len(g.Devices)
		}
		if len(g.Devices) != m.nGPU {
			return fmt.Errorf("gpu frame %d has %d GPUs, the first had %d", i, len(g.Devices), m.nGPU)
		}
		m.gpus = append(m.gpus, gpuFrame{idx: i, t: m.rel(f.UnixNano), s: &g})
	}
	if len(m.gpus) == 0 {
		return errNoGPU
	}
	return nil
}

// hostAndPIDs takes the host name from the base's ncclproc samples and each
// GPU's process ID from its gpuprocess samples, so that the NCCL log's
// prefixes name the processes the other samples show.
func (m *sim) hostAndPIDs() {
	m.host = "vm"
	m.pids = make([]int, m.nGPU)
	for k := range m.pids {
		m.pids[k] = 4200 + k
	}
	gotHost, gotPID := false, make([]bool, m.nGPU)
	for _, f := range m.frames {
		switch f.Collector {
		case sample.NCCLProcKey.Name():
			var p sample.NCCLHostProcesses
			if gotHost || json.Unmarshal(f.Sample, &p) != nil {
				continue
			}
			for _, x := range p.Processes {
				if x.Hostname != "" {
					m.host, gotHost = sample.LogHostname(x.Hostname), true
					break
				}
			}
		case sample.GPUProcessKey.Name():
			var p sample.GPUProcesses
			if json.Unmarshal(f.Sample, &p) != nil {
				continue
			}
			for _, g := range p.GPUs {
				if g.GPU < 0 || g.GPU >= m.nGPU || gotPID[g.GPU] {
					continue
				}
				for _, x := range g.Processes {
					if x.OnGPU {
						m.pids[g.GPU], gotPID[g.GPU] = x.PID, true
						break
					}
				}
			}
		}
	}
}

// rateOf returns a GPU's recorded PCIe rates, 0 for unread ones.
func rateOf(d *sample.GPU) (tx, rx float64) {
	tx, _ = d.Values.Get(sample.PCIeTxBytesPerSecond)
	rx, _ = d.Values.Get(sample.PCIeRxBytesPerSecond)
	if math.IsNaN(tx) {
		tx = 0
	}
	if math.IsNaN(rx) {
		rx = 0
	}
	return tx, rx
}

// computeScale sets the traffic scale: Traffic.Scale, or the one reaching
// Traffic.TargetLineShare (see its doc).
func (m *sim) computeScale() error {
	t := m.s.Traffic
	switch {
	case t.Scale > 0:
		m.scale = t.Scale
		return nil
	case t.TargetLineShare == 0:
		m.scale = 1
		return nil
	}
	m.scale = math.Inf(1)
	for k := range m.nGPU {
		f := t.networkFraction(k)
		if f == 0 {
			continue
		}
		var busy []float64
		peak := 0.0
		for _, g := range m.gpus {
			tx, rx := rateOf(&g.s.Devices[k])
			busy = append(busy, max(tx, rx)*f)
			peak = max(peak, max(tx, rx)*f)
		}
		var active []float64
		for _, b := range busy {
			if b > 0.1*peak {
				active = append(active, b)
			}
		}
		if len(active) == 0 || peak == 0 {
			return fmt.Errorf("traffic.target_line_share: GPU %d has no PCIe traffic in the base to scale", k)
		}
		sort.Float64s(active)
		med := active[len(active)/2]
		line := m.s.HCAs[m.s.NCCL.HCAOfGPU[k]].RateGbps * 1e9 / 8
		m.scale = min(m.scale, t.TargetLineShare*line/med)
	}
	if math.IsInf(m.scale, 1) {
		return fmt.Errorf("traffic.target_line_share: no GPU sends to the network")
	}
	return nil
}

// window is the override in force for GPU k of node n at time t (nil: none).
func (m *sim) override(n, k int, t float64) *GPUOverride {
	var got *GPUOverride
	for i := range m.s.GPUOverrides {
		o := &m.s.GPUOverrides[i]
		if !appliesTo(o.Nodes, n) || (len(o.GPUs) > 0 && !containsInt(o.GPUs, k)) {
			continue
		}
		if t >= o.FromSeconds && (o.ToSeconds == 0 || t < o.ToSeconds) {
			got = o
		}
	}
	return got
}

func containsInt(list []int, x int) bool {
	for _, v := range list {
		if v == x {
			return true
		}
	}
	return false
}

// portRate is HCA j's signalling rate on node n, bytes/s, and whether it
// trained down.
func (m *sim) portRate(n, j int) (float64, bool) {
	rate := m.s.HCAs[j].RateGbps * 1e9 / 8
	for _, c := range m.s.Conditions {
		if c.Kind == CondTrainedDown && c.HCA == j && appliesTo(c.Nodes, n) {
			r := c.RateGbps * 1e9 / 8
			if r == 0 {
				r = rate / 2
			}
			return r, true
		}
	}
	return rate, false
}

// portCap is the most HCA j of node n can carry per direction, bytes/s:
// its rate × MaxLineShare, less the share of time it waits for credits
// (ib_congestion), times any congestion throughput factor.
func (m *sim) portCap(n, j int) float64 {
	rate, _ := m.portRate(n, j)
	share := m.s.Traffic.MaxLineShare
	f := 1.0
	for _, c := range m.s.Conditions {
		if c.HCA != j || !appliesTo(c.Nodes, n) {
			continue
		}
		switch c.Kind {
		case CondIBCongestion:
			share = min(share, 1-c.XmitWaitShare)
			f *= c.ThroughputFactor
		case CondRoCECongestion:
			f *= c.ThroughputFactor
		}
	}
	return rate * share * f
}

// peermem reports whether node n has the peer-memory module loaded.
func (m *sim) peermem(n int) bool {
	for _, c := range m.s.Conditions {
		if c.Kind == CondPeermemAbsent && appliesTo(c.Nodes, n) {
			return false
		}
	}
	return true
}

// demand is GPU k's PCIe traffic at gpus[i] at full speed: the base's ×
// scale.
func (m *sim) demand(k, i int) (tx, rx float64) {
	tx, rx = rateOf(&m.gpus[i].s.Devices[k])
	return tx * m.scale, rx * m.scale
}

// gdr reports whether GPU k's rank uses GPUDirect RDMA on node n: NCCL has
// it on, the peer-memory module is loaded, and the GPU is no farther from
// its HCA than NCCL_NET_GDR_LEVEL (default PXB: NCCL's ncclTopoCheckGdr,
// src/graph/paths.cc, disables GDR beyond it, so a NIC across the host
// bridge or the socket is used host-staged).
func (m *sim) gdr(n, k int) bool {
	if !m.s.NCCL.GDR || !m.peermem(n) {
		return false
	}
	d := m.lay.Distance(k, m.s.NCCL.HCAOfGPU[k])
	return d != "" && sample.PCIDistanceRank(d) <= sample.PCIDistanceRank(m.s.NCCL.GDRLevel)
}

// rankSpeed is how fast GPU k's rank of node n can go at gpus[i] relative
// to the base × scale: the host-staged factor without GDR (seeds F7:
// 30 vs 80 GB/s), times any override's traffic scale.
func (m *sim) rankSpeed(n, k, i int) float64 {
	f := 1.0
	if !m.gdr(n, k) {
		f = m.s.NCCL.HostStagedFactor
	}
	if o := m.override(n, k, m.gpus[i].t); o != nil && o.TrafficScale != nil {
		f *= *o.TrafficScale
	}
	return f
}

// computeFactor finds, for each gpu frame, the collective's speed factor
// relative to the base × scale. A collective moves at the pace of its
// slowest rank and link (every rank waits for the others' data), so one
// factor holds for every GPU of every node: the smallest rank speed
// (host-staged ranks, stopped ranks), and no more than lets every port of
// every node stay within its cap (cap / the port's full-speed demand).
// The GPUs' PCIe traffic is scaled by the same factor: a GPU sends no
// more than the network takes.
func (m *sim) computeFactor() {
	m.factor = make([]float64, len(m.gpus))
	for i := range m.gpus {
		c := 1.0
		for n := range m.s.Nodes {
			for k := range m.nGPU {
				c = min(c, m.rankSpeed(n, k, i))
			}
			for j := range m.s.HCAs {
				var tx, rx float64
				for k := range m.nGPU {
					if m.s.NCCL.HCAOfGPU[k] != j {
						continue
					}
					dtx, drx := m.demand(k, i)
					f := m.s.Traffic.networkFraction(k)
					tx += dtx * f
					rx += drx * f
				}
				if d := max(tx, rx); d > 0 {
					c = min(c, m.portCap(n, j)/d)
				}
			}
		}
		m.factor[i] = c
	}
}

// segment is a GPU's network traffic over one GPU sample interval.
type segment struct {
	from, to float64 // seconds from the trace's start
	tx, rx   float64 // bytes/s
}

// node builds node n's frames.
func (m *sim) node(n int) ([]record.Frame, error) {
	out := make([]record.Frame, 0, len(m.frames)+2*len(m.gpus))
	net := make([][]segment, m.nGPU) // per GPU
	gpuAt := map[int]int{}
	for i, g := range m.gpus {
		gpuAt[g.idx] = i
	}
	ncclSample, err := m.ncclSample(n)
	if err != nil {
		return nil, err
	}
	hasIB, hasNCCL := false, false
	for _, f := range m.frames {
		hasIB = hasIB || f.Collector == sample.InfiniBandKey.Name()
		hasNCCL = hasNCCL || f.Collector == sample.NCCLKey.Name()
	}
	// The GPUs' samples first: the HCAs' are integrated from them.
	gpuOut := map[int]json.RawMessage{}
	prev := make([]*sample.GPU, m.nGPU)
	for i, g := range m.gpus {
		s := m.rewriteGPUs(n, i, prev)
		for k := range s.Devices {
			d := &s.Devices[k]
			prev[k] = d
			if d.IntervalSeconds <= 0 {
				continue
			}
			tx, rx := rateOf(d)
			f := m.s.Traffic.networkFraction(k)
			net[k] = append(net[k], segment{from: g.t - d.IntervalSeconds, to: g.t, tx: tx * f, rx: rx * f})
		}
		b, err := json.Marshal(s)
		if err != nil {
			return nil, err
		}
		gpuOut[g.idx] = m.replaceBus(b)
	}
	ib := newIBState(m, n)
	for idx, f := range m.frames {
		t := m.rel(f.UnixNano)
		switch f.Collector {
		case sample.GPUKey.Name():
			if b, ok := gpuOut[idx]; ok {
				f.Sample = b
			} else {
				f.Sample = m.replaceBus(f.Sample)
			}
			out = append(out, f)
			if _, ok := gpuAt[idx]; ok {
				// Traces without infiniband or nccl frames get theirs
				// just after each GPU reading.
				if !hasIB {
					b, err := ib.sample(t+1e-6, net)
					if err != nil {
						return nil, err
					}
					out = append(out, record.Frame{Collector: sample.InfiniBandKey.Name(), UnixNano: f.UnixNano + 1000, Sample: b})
				}
				if !hasNCCL {
					out = append(out, record.Frame{Collector: sample.NCCLKey.Name(), UnixNano: f.UnixNano + 2000, Sample: ncclSample})
				}
			}
			continue
		case sample.InfiniBandKey.Name():
			b, err := ib.sample(t, net)
			if err != nil {
				return nil, err
			}
			f.Sample = b
		case sample.NCCLKey.Name():
			f.Sample = ncclSample
		case sample.NUMAKey.Name():
			b, err := m.rewriteNUMA(f.Sample)
			if err != nil {
				return nil, err
			}
			f.Sample = b
		case sample.GPUProcessKey.Name():
			b, err := m.rewriteGPUProcess(n, t, f.Sample)
			if err != nil {
				return nil, err
			}
			f.Sample = b
		case sample.NCCLProcKey.Name():
			b, err := m.rewriteNCCLProc(f.Sample)
			if err != nil {
				return nil, err
			}
			f.Sample = b
		default:
			f.Sample = m.replaceBus(f.Sample)
		}
		out = append(out, f)
	}
	return out, nil
}

// replaceBus rewrites the base's GPU bus IDs into the layout's.
func (m *sim) replaceBus(b []byte) json.RawMessage {
	s := string(b)
	keys := make([]string, 0, len(m.busMap))
	for k := range m.busMap {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		s = strings.ReplaceAll(s, `"`+k+`"`, `"`+m.busMap[k]+`"`)
		s = strings.ReplaceAll(s, `"`+strings.ToUpper(k)+`"`, `"`+m.busMap[k]+`"`)
	}
	return json.RawMessage(s)
}

// rewriteGPUs returns gpu frame i of node n: PCIe rates are the demand ×
// the collective's speed factor; NVLink rates scaled by any override;
// utilization and SM activity overridden; the integrated totals
// (PCIe, NVLink, SM-active seconds) re-integrated from the new rates so
// that they stay consistent (total += rate × interval).
func (m *sim) rewriteGPUs(n, i int, prev []*sample.GPU) *sample.GPUs {
	src := m.gpus[i]
	// A deep enough copy: Devices and their Links are rewritten.
	s := *src.s
	s.Devices = append([]sample.GPU(nil), src.s.Devices...)
	if src.s.Topology != nil {
		// The GPUs' PCIe path type follows their placement (PCIDistance);
		// their NVLinks stay the base's.
		topo := *src.s.Topology
		topo.Pairs = append([]sample.GPUPair(nil), topo.Pairs...)
		for p := range topo.Pairs {
			pr := &topo.Pairs[p]
			if pr.A < 0 || pr.B < 0 || pr.A >= m.nGPU || pr.B >= m.nGPU {
				continue
			}
			d := sample.PCIDistance(m.lay.gpuPath[pr.A], m.lay.gpuNUMA[pr.A], m.lay.gpuPath[pr.B], m.lay.gpuNUMA[pr.B])
			if pr.Link == pr.PCIePath {
				pr.Link = d
			}
			pr.PCIePath = d
		}
		s.Topology = &topo
	}
	for k := range s.Devices {
		d := &s.Devices[k]
		d.Links = append([]sample.NVLink(nil), d.Links...)
		o := m.override(n, k, src.t)
		ts := 1.0
		if o != nil && o.TrafficScale != nil {
			ts = *o.TrafficScale
		}
		if d.IntervalSeconds > 0 {
			tx, rx := m.demand(k, i)
			d.Values.Set(sample.PCIeTxBytesPerSecond, tx*m.factor[i])
			d.Values.Set(sample.PCIeRxBytesPerSecond, rx*m.factor[i])
			for _, f := range []sample.Field{sample.NVLinkTxBytesPerSecond, sample.NVLinkRxBytesPerSecond} {
				if v, ok := d.Values.Get(f); ok {
					d.Values.Set(f, v*ts)
				}
			}
			for l := range d.Links {
				d.Links[l].TxBytesPerSecond *= ts
				d.Links[l].RxBytesPerSecond *= ts
			}
			if o != nil {
				sm, _ := d.Values.Get(sample.SMActive)
				if o.SMActive != nil {
					for _, f := range []sample.Field{sample.SMOccupancy, sample.TensorActive, sample.TensorHMMAActive,
						sample.DRAMActive, sample.FP16Active, sample.FP32Active, sample.FP64Active} {
						if v, ok := d.Values.Get(f); ok && sm > 0 {
							d.Values.Set(f, v**o.SMActive/sm)
						} else if ok {
							d.Values.Set(f, 0)
						}
					}
					d.Values.Set(sample.SMActive, *o.SMActive)
				}
				if o.Utilization != nil {
					d.Values.Set(sample.Utilization, *o.Utilization)
				}
			}
		}
		p := prev[k]
		if p == nil || d.IntervalSeconds <= 0 {
			continue
		}
		iv := d.IntervalSeconds
		for _, pair := range [][2]sample.Field{
			{sample.PCIeTxBytesTotal, sample.PCIeTxBytesPerSecond},
			{sample.PCIeRxBytesTotal, sample.PCIeRxBytesPerSecond},
			{sample.NVLinkTxBytesTotal, sample.NVLinkTxBytesPerSecond},
			{sample.NVLinkRxBytesTotal, sample.NVLinkRxBytesPerSecond},
			{sample.SMActiveSecondsTotal, sample.SMActive},
		} {
			tot, ok1 := p.Values.Get(pair[0])
			r, ok2 := d.Values.Get(pair[1])
			if ok1 && ok2 {
				d.Values.Set(pair[0], tot+r*iv)
			}
		}
		for l := range d.Links {
			if l < len(p.Links) {
				if r := d.Links[l].TxBytesPerSecond; sample.Measured(r) {
					d.Links[l].TxBytesTotal = p.Links[l].TxBytesTotal + r*iv
				}
				if r := d.Links[l].RxBytesPerSecond; sample.Measured(r) {
					d.Links[l].RxBytesTotal = p.Links[l].RxBytesTotal + r*iv
				}
			}
		}
	}
	return &s
}

// rewriteNUMA places the GPUs (NUMA node, PCIe path) and adds any NUMA node
// an HCA or GPU is on that the base host lacks (a node without CPUs: the
// base host's CPUs stay where they were, so host analyzers see the same
// CPU layout).
func (m *sim) rewriteNUMA(raw json.RawMessage) (json.RawMessage, error) {
	var s sample.NUMA
	if err := json.Unmarshal(m.replaceBus(raw), &s); err != nil {
		return nil, fmt.Errorf("numa frame: %w", err)
	}
	for i := range s.GPUs {
		g := &s.GPUs[i]
		for k := range m.nGPU {
			if strings.EqualFold(g.PCIBusID, m.lay.gpuBus(k)) {
				g.NUMANode = m.lay.gpuNUMA[k]
				g.PCIPath = m.lay.gpuPath[k]
			}
		}
	}
	want := map[int]bool{}
	for _, x := range m.lay.gpuNUMA {
		want[x] = true
	}
	for _, x := range m.lay.hcaNUMA {
		want[x] = true
	}
	have := map[int]bool{}
	for _, nd := range s.Nodes {
		have[nd.Node] = true
	}
	var nodes []int
	for x := range want {
		if x >= 0 && !have[x] {
			nodes = append(nodes, x)
		}
	}
	sort.Ints(nodes)
	for _, x := range nodes {
		nd := sample.NUMANode{Node: x}
		if s.IntervalSeconds > 0 {
			nd.AllocationsPerSecond = &sample.NUMAAllocationRates{}
		}
		s.Nodes = append(s.Nodes, nd)
	}
	if len(nodes) > 0 {
		for i := range s.Nodes {
			nd := &s.Nodes[i]
			nd.Distances = nil
			for _, o := range s.Nodes {
				d := 20
				if o.Node == nd.Node {
					d = 10
				}
				nd.Distances = append(nd.Distances, sample.NUMADistance{PeerNode: o.Node, Distance: d})
			}
		}
	}
	return json.Marshal(&s)
}

// rewriteGPUProcess sets each GPU's NUMA node and, under an override with
// a process state, the state of the GPU's processes and of all their
// threads (a stopped process's threads are all stopped).
func (m *sim) rewriteGPUProcess(n int, t float64, raw json.RawMessage) (json.RawMessage, error) {
	var s sample.GPUProcesses
	if err := json.Unmarshal(m.replaceBus(raw), &s); err != nil {
		return nil, fmt.Errorf("gpuprocess frame: %w", err)
	}
	for i := range s.GPUs {
		g := &s.GPUs[i]
		if g.GPU < 0 || g.GPU >= m.nGPU {
			continue
		}
		g.NUMANode = m.lay.gpuNUMA[g.GPU]
		o := m.override(n, g.GPU, t)
		if o == nil || o.ProcessState == "" {
			continue
		}
		for j := range g.Processes {
			p := &g.Processes[j]
			p.State = o.ProcessState
			threads := 0
			for _, c := range p.ThreadStates {
				threads += c
			}
			if threads == 0 {
				threads = p.Threads
			}
			p.ThreadStates = map[string]int{o.ProcessState: threads}
			if p.CPUCoresUsed != nil && o.ProcessState == "T" {
				zero := 0.0
				p.CPUCoresUsed = &zero
			}
		}
		if o.ProcessState == "T" {
			g.CPUCoresUsed = 0
		}
	}
	return json.Marshal(&s)
}

// rewriteNCCLProc drops DropEnv's variables from the processes' environments.
func (m *sim) rewriteNCCLProc(raw json.RawMessage) (json.RawMessage, error) {
	raw = m.replaceBus(raw)
	if len(m.s.DropEnv) == 0 {
		return raw, nil
	}
	var s sample.NCCLHostProcesses
	if err := json.Unmarshal(raw, &s); err != nil {
		return nil, fmt.Errorf("ncclproc frame: %w", err)
	}
	for i := range s.Processes {
		p := &s.Processes[i]
		var env []sample.NCCLEnv
		for _, e := range p.Env {
			if !containsString(m.s.DropEnv, e.Name) {
				env = append(env, e)
			}
		}
		p.Env = env
	}
	return json.Marshal(&s)
}

func containsString(list []string, x string) bool {
	for _, v := range list {
		if v == x {
			return true
		}
	}
	return false
}
