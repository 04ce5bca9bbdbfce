package fabricsim

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gpudiag/gpudiag/record"
	"github.com/gpudiag/gpudiag/sample"
)

const (
	scenarioDir = "../../testdata/fabric"
	tracesDir   = "../../testdata/fabric/traces"
)

func scenarios(t *testing.T) map[string]*Scenario {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(scenarioDir, "*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no scenarios in %s: %v", scenarioDir, err)
	}
	out := map[string]*Scenario{}
	for _, f := range files {
		s, err := Load(f)
		if err != nil {
			t.Fatal(err)
		}
		if want := strings.TrimSuffix(filepath.Base(f), ".json"); s.Name != want {
			t.Errorf("%s: name %q, want the file's name %q", f, s.Name, want)
		}
		out[s.Name] = s
	}
	return out
}

// The brief's scenarios are all there.
func TestScenarioList(t *testing.T) {
	got := scenarios(t)
	for _, name := range []string{"healthy_gdr_line_rate", "host_staged", "port_trained_down", "roce_congestion",
		"ib_congestion", "link_errors", "sys_distance_nic", "rail_imbalance", "hung_collective",
		"compute_multinode", "peer_wait"} {
		if got[name] == nil {
			t.Errorf("scenario %s missing", name)
		}
	}
}

// The same scenario gives the same bytes, and the committed traces are
// what the committed scenarios give now: they cannot drift apart.
func TestCommittedTracesAreFresh(t *testing.T) {
	want := map[string]bool{}
	for name, s := range scenarios(t) {
		dir1, dir2 := t.TempDir(), t.TempDir()
		p1, err := WriteTraces(s, dir1)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if _, err := WriteTraces(s, dir2); err != nil {
			t.Fatal(err)
		}
		for _, p := range p1 {
			base := filepath.Base(p)
			want[base] = true
			a, _ := os.ReadFile(p)
			b, _ := os.ReadFile(filepath.Join(dir2, base))
			if !bytes.Equal(a, b) {
				t.Errorf("%s: two generations differ", base)
			}
			st, err := os.Stat(p)
			if err != nil || st.Mode().Perm() != 0o600 {
				t.Errorf("%s: mode %v, want 0600 (%v)", base, st.Mode().Perm(), err)
			}
			c, err := os.ReadFile(filepath.Join(tracesDir, base))
			if err != nil {
				t.Errorf("%s not committed: %v (run go run ./cmd/fabricsim -all testdata/fabric -out testdata/fabric/traces)", base, err)
				continue
			}
			if !bytes.Equal(a, c) {
				t.Errorf("%s: the committed trace differs from a fresh generation (regenerate: go run ./cmd/fabricsim -all testdata/fabric -out testdata/fabric/traces)", base)
			}
		}
	}
	committed, _ := filepath.Glob(filepath.Join(tracesDir, "*.gdrec"))
	for _, c := range committed {
		if !want[filepath.Base(c)] {
			t.Errorf("%s: no scenario writes it (stale)", c)
		}
	}
}

var decoders = map[string]func() any{
	sample.CPUKey.Name(): sample.CPUKey.New, sample.DiskstatsKey.Name(): sample.DiskstatsKey.New,
	sample.EBPFKey.Name(): sample.EBPFKey.New, sample.GPUKey.Name(): sample.GPUKey.New,
	sample.GPUProcessKey.Name(): sample.GPUProcessKey.New, sample.InfiniBandKey.Name(): sample.InfiniBandKey.New,
	sample.NCCLKey.Name(): sample.NCCLKey.New, sample.NCCLProcKey.Name(): sample.NCCLProcKey.New,
	sample.NetDevKey.Name(): sample.NetDevKey.New, sample.NUMAKey.Name(): sample.NUMAKey.New,
	sample.PressureKey.Name(): sample.PressureKey.New, sample.TCPKey.Name(): sample.TCPKey.New,
	sample.TuningKey.Name(): sample.TuningKey.New,
}

// trace is a committed trace, decoded.
type trace struct {
	name   string
	sc     *Scenario
	frames []record.Frame
	gpus   []*sample.GPUs
	gpuT   []float64
	ibs    []*sample.InfiniBand
	ibT    []float64
	nccl   *sample.NCCL
}

func loadTraces(t *testing.T) []*trace {
	t.Helper()
	var out []*trace
	for name, s := range scenarios(t) {
		for n := range s.Nodes {
			if !s.writesNode(n) {
				continue
			}
			p := filepath.Join(tracesDir, FileName(name, n))
			frames, err := ReadFrames(p)
			if err != nil {
				t.Fatal(err)
			}
			tr := &trace{name: filepath.Base(p), sc: s, frames: frames}
			t0 := frames[0].UnixNano
			for i, f := range frames {
				dec, ok := decoders[f.Collector]
				if !ok {
					t.Fatalf("%s frame %d: unknown collector %q", tr.name, i, f.Collector)
				}
				v := dec()
				d := json.NewDecoder(bytes.NewReader(f.Sample))
				if err := d.Decode(v); err != nil {
					t.Fatalf("%s frame %d (%s): %v", tr.name, i, f.Collector, err)
				}
				if i > 0 && f.UnixNano < frames[i-1].UnixNano-int64(1e8) {
					t.Errorf("%s frame %d: time goes back by %d ns", tr.name, i, frames[i-1].UnixNano-f.UnixNano)
				}
				ts := float64(f.UnixNano-t0) / 1e9
				switch x := v.(type) {
				case *sample.GPUs:
					tr.gpus = append(tr.gpus, x)
					tr.gpuT = append(tr.gpuT, ts)
				case *sample.InfiniBand:
					tr.ibs = append(tr.ibs, x)
					tr.ibT = append(tr.ibT, ts)
				case *sample.NCCL:
					tr.nccl = x
				}
			}
			if len(tr.gpus) == 0 || len(tr.ibs) == 0 || tr.nccl == nil {
				t.Fatalf("%s: %d gpu, %d infiniband frames, nccl %v", tr.name, len(tr.gpus), len(tr.ibs), tr.nccl != nil)
			}
			out = append(out, tr)
		}
	}
	slices.SortFunc(out, func(a, b *trace) int { return strings.Compare(a.name, b.name) })
	return out
}

// Port counters only rise, their Rates are the increase over the
// interval, and no port carries more than its line rate.
func TestPortCounters(t *testing.T) {
	for _, tr := range loadTraces(t) {
		t.Run(tr.name, func(t *testing.T) {
			for i := 1; i < len(tr.ibs); i++ {
				prev, cur := tr.ibs[i-1], tr.ibs[i]
				iv := cur.IntervalSeconds
				if iv <= 0 {
					t.Fatalf("infiniband frame %d: no interval", i)
				}
				if d := tr.ibT[i] - tr.ibT[i-1]; math.Abs(d-iv) > 1e-6 {
					t.Fatalf("infiniband frame %d: interval %v, timestamps %v apart", i, iv, d)
				}
				for j, p := range cur.Ports {
					q := prev.Ports[j]
					if p.Device != q.Device || !p.Active() {
						t.Fatalf("port %d: %s then %s, active %v", j, q.Device, p.Device, p.Active())
					}
					for c, v := range p.Counters {
						if v < q.Counters[c] {
							t.Fatalf("%s %s went back at frame %d", p.Device, c, i)
						}
						if got, want := p.Rates[c]*iv, float64(v-q.Counters[c]); math.Abs(got-want) > 1e-6*max(1, want) {
							t.Fatalf("%s %s at frame %d: rate × interval %v, increase %v", p.Device, c, i, got, want)
						}
					}
					for _, c := range []sample.InfiniBandCounter{sample.IBTransmitBytes, sample.IBReceiveBytes} {
						if r := p.Rates[c]; r > p.RateBytesPerSecond*1.0001 {
							t.Fatalf("%s %s %.4g B/s above the line rate %.4g", p.Device, c, r, p.RateBytesPerSecond)
						}
					}
					// Packets: bytes / MTU (4096 in every scenario).
					if b, pk := p.Rates[sample.IBTransmitBytes], p.Rates[sample.IBTransmitPackets]; b > 1e9 && math.Abs(pk*4096/b-1) > 1e-3 {
						t.Fatalf("%s: %v packets/s for %v B/s", p.Device, pk, b)
					}
				}
			}
		})
	}
}

// The GPUs' integrated totals follow their rates.
func TestGPUTotals(t *testing.T) {
	for _, tr := range loadTraces(t) {
		for i := 1; i < len(tr.gpus); i++ {
			for k, d := range tr.gpus[i].Devices {
				p := tr.gpus[i-1].Devices[k]
				for _, pair := range [][2]sample.Field{{sample.PCIeTxBytesTotal, sample.PCIeTxBytesPerSecond},
					{sample.PCIeRxBytesTotal, sample.PCIeRxBytesPerSecond}, {sample.SMActiveSecondsTotal, sample.SMActive}} {
					tot, ok1 := d.Values.Get(pair[0])
					pt, ok2 := p.Values.Get(pair[0])
					r, ok3 := d.Values.Get(pair[1])
					if !ok1 || !ok2 || !ok3 || d.IntervalSeconds <= 0 {
						continue
					}
					if want := pt + r*d.IntervalSeconds; math.Abs(tot-want) > 1e-6*max(1, want) {
						t.Fatalf("%s GPU %d frame %d: %s %v, want %v", tr.name, k, i, pair[0], tot, want)
					}
				}
				if e, ok := d.Values.Get(sample.EnergyJoulesTotal); ok {
					if pe, _ := p.Values.Get(sample.EnergyJoulesTotal); e < pe {
						t.Fatalf("%s GPU %d frame %d: energy went back", tr.name, k, i)
					}
				}
			}
		}
	}
}

// Where every rank uses GDR, each port's bytes are the network fraction of
// the PCIe bytes of the GPUs that use it, within 1%, over the trace: the
// GPU's PCIe link carries exactly what the HCA sends and receives.
func TestGDRBytesFollowPCIe(t *testing.T) {
	checked := 0
	for _, tr := range loadTraces(t) {
		allGDR := true
		for _, f := range tr.nccl.Files {
			for _, p := range f.Processes {
				for _, path := range p.Paths {
					allGDR = allGDR && strings.HasSuffix(path, "/GDRDMA")
				}
			}
		}
		if !allGDR {
			continue
		}
		checked++
		s := tr.sc
		for j := range s.HCAs {
			var hca, pcie [2]float64
			a, b := tr.ibT[0], tr.ibT[len(tr.ibT)-1]
			last, first := tr.ibs[len(tr.ibs)-1].Ports[j], tr.ibs[0].Ports[j]
			hca[0] = float64(last.Counters[sample.IBTransmitBytes] - first.Counters[sample.IBTransmitBytes])
			hca[1] = float64(last.Counters[sample.IBReceiveBytes] - first.Counters[sample.IBReceiveBytes])
			for i, g := range tr.gpus {
				for k, d := range g.Devices {
					if s.NCCL.HCAOfGPU[k] != j || d.IntervalSeconds <= 0 {
						continue
					}
					lo, hi := max(tr.gpuT[i]-d.IntervalSeconds, a), min(tr.gpuT[i], b)
					if hi <= lo {
						continue
					}
					f := s.Traffic.networkFraction(k)
					tx, rx := rateOf(&d)
					pcie[0] += f * tx * (hi - lo)
					pcie[1] += f * rx * (hi - lo)
				}
			}
			for dir := range 2 {
				if pcie[dir] == 0 && hca[dir] == 0 {
					continue
				}
				if math.Abs(hca[dir]/pcie[dir]-1) > 0.01 {
					t.Errorf("%s %s dir %d: HCA %.4g bytes, network share of PCIe %.4g", tr.name, s.HCAs[j].Device, dir, hca[dir], pcie[dir])
				}
			}
		}
	}
	if checked < 5 {
		t.Errorf("only %d GDR traces checked", checked)
	}
}

// The nccl sample names every GPU, with the HCA and GDR the scenario says.
func TestNCCLSample(t *testing.T) {
	for _, tr := range loadTraces(t) {
		if len(tr.nccl.GPUs) != len(tr.gpus[0].Devices) {
			t.Fatalf("%s: nccl names %d GPUs, the trace has %d", tr.name, len(tr.nccl.GPUs), len(tr.gpus[0].Devices))
		}
		for _, g := range tr.nccl.GPUs {
			p := tr.nccl.Process(g)
			if !p.Current || len(p.Comms) != 1 || p.Comms[0].NNodes != tr.sc.Nodes || p.Network != "IB" {
				t.Fatalf("%s GPU %d: %+v", tr.name, g.GPU, p)
			}
			if len(p.Paths) != 1 || !strings.HasPrefix(p.Paths[0], "NET/IB/") {
				t.Fatalf("%s GPU %d: paths %v", tr.name, g.GPU, p.Paths)
			}
			if g.PCIBusID != tr.gpus[0].Devices[g.GPU].PCIBusID {
				t.Fatalf("%s GPU %d: nccl bus %s, gpu sample %s", tr.name, g.GPU, g.PCIBusID, tr.gpus[0].Devices[g.GPU].PCIBusID)
			}
		}
	}
}

func TestBadScenarios(t *testing.T) {
	good := `{"name":"x","nodes":2,"base":"../traces/idle.gdrec","hcas":[{"device":"mlx5_0","rate_gbps":400}],"nccl":{"gdr":true,"hca_of_gpu":[0]}}`
	if _, err := Parse([]byte(good)); err != nil {
		t.Fatalf("good scenario: %v", err)
	}
	for _, tc := range []struct{ name, json, want string }{
		{"unknown field", strings.Replace(good, `"nodes"`, `"nodez":1,"nodes"`, 1), `unknown field "nodez"`},
		{"missing base", strings.Replace(good, `"base":"../traces/idle.gdrec",`, "", 1), "base: missing"},
		{"HCA without rate", strings.Replace(good, `,"rate_gbps":400`, "", 1), "rate_gbps missing"},
		{"HCA out of range", strings.Replace(good, `"hca_of_gpu":[0]`, `"hca_of_gpu":[3]`, 1), "HCA 3 is not in hcas"},
		{"unknown condition", strings.Replace(good, `"nccl"`, `"conditions":[{"kind":"melted"}],"nccl"`, 1), `unknown kind "melted"`},
		{"GDR without module", strings.Replace(good, `"nccl"`, `"conditions":[{"kind":"peermem_absent"}],"nccl"`, 1), "without the peer-memory module"},
		{"bad link layer", strings.Replace(good, `"rate_gbps"`, `"link_layer":"Omni","rate_gbps"`, 1), "link_layer"},
	} {
		if _, err := Parse([]byte(tc.json)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one saying %q", tc.name, err, tc.want)
		}
	}
	// A base that does not exist is named.
	dir := t.TempDir()
	p := filepath.Join(dir, "x.json")
	os.WriteFile(p, []byte(strings.Replace(good, "../traces/idle.gdrec", "nope.gdrec", 1)), 0o600)
	if _, err := Load(p); err == nil || !strings.Contains(err.Error(), "nope.gdrec") {
		t.Errorf("absent base: %v", err)
	}
	// A base longer than the trace needs a loop.
	s, err := Parse([]byte(strings.Replace(good, `"nodes"`, `"duration_s":300,"nodes"`, 1)))
	if err != nil {
		t.Fatal(err)
	}
	s.dir = scenarioDir
	if _, err := Generate(s); err == nil || !strings.Contains(err.Error(), "set loop") {
		t.Errorf("long duration without loop: %v", err)
	}
	// hca_of_gpu must name every GPU of the base (allreduce has 2).
	s, _ = Parse([]byte(strings.Replace(good, "idle", "allreduce_p2p_disabled", 1)))
	s.dir = scenarioDir
	if _, err := Generate(s); err == nil || !strings.Contains(err.Error(), "the base has 2") {
		t.Errorf("hca_of_gpu too short: %v", err)
	}
}

// Looping carries counters on: the hang's 150 s trace repeats 18 s of the
// base, and no counter of any collector goes back at a seam (values that go
// back in the real base itself are left out).
func TestLoopKeepsCountersRising(t *testing.T) {
	decreases := func(frames []record.Frame, skip map[string]bool) map[string]string {
		out := map[string]string{}
		last := map[string]map[string]float64{}
		for i, f := range frames {
			l, err := leaves(f.Sample)
			if err != nil {
				t.Fatal(err)
			}
			prev := last[f.Collector]
			cur := map[string]float64{}
			for p, n := range l {
				x, err := n.Float64()
				if err != nil {
					continue
				}
				cur[p] = x
				key := f.Collector + p
				if !strings.HasSuffix(p, "_total") && !strings.Contains(p, "/counters/") || skip[key] {
					continue
				}
				if old, ok := prev[p]; ok && x < old-1e-6*math.Abs(old) {
					out[key] = fmt.Sprintf("frame %d: %v to %v", i, old, x)
				}
			}
			last[f.Collector] = cur
		}
		return out
	}
	s := scenarios(t)["hung_collective"]
	base, err := ReadFrames(s.BasePath())
	if err != nil {
		t.Fatal(err)
	}
	inBase := map[string]bool{}
	for k := range decreases(base, nil) {
		inBase[k] = true
	}
	frames, err := ReadFrames(filepath.Join(tracesDir, "hung_collective-node0.gdrec"))
	if err != nil {
		t.Fatal(err)
	}
	if len(frames) < 4*len(base) {
		t.Fatalf("%d frames for a 150 s trace from a %d-frame base", len(frames), len(base))
	}
	for k, v := range decreases(frames, inBase) {
		t.Errorf("%s went back: %s", k, v)
	}
}

func TestLayoutDistances(t *testing.T) {
	s := scenarios(t)["sys_distance_nic"]
	l, err := newLayout(s, 2)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		gpu, hca int
		want     string
	}{{0, 0, sample.LinkPIX}, {1, 1, sample.LinkPIX}, {0, 1, sample.LinkNODE}, {0, 2, sample.LinkSYS}} {
		if got := l.Distance(tc.gpu, tc.hca); got != tc.want {
			t.Errorf("GPU %d to HCA %d: %s, want %s", tc.gpu, tc.hca, got, tc.want)
		}
	}
}
