package collectors

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/common/expfmt"
	"go.uber.org/zap"

	"github.com/gpudiag/gpudiag/analyzers"
	"github.com/gpudiag/gpudiag/engine"
	"github.com/gpudiag/gpudiag/sample"
)

// Helpers shared by the infiniband, netdev and tuning tests.

const (
	rdmaFixtureProc = "../hostfs/testdata/host/proc"
	rdmaFixtureSys  = "../hostfs/testdata/host/sys"
)

func rdmaConfig(proc, sys string) Config {
	return Config{ProcPath: proc, SysPath: sys, Logger: zap.NewNop()}
}

// rdmaCopyTree copies a fixture tree into a temporary directory, keeping
// symlinks as symlinks (they are relative, so they stay inside the copy), for
// tests that change it.
func rdmaCopyTree(t *testing.T, src string) string {
	t.Helper()
	dst := t.TempDir()
	if err := copyTree(src, dst); err != nil {
		t.Fatal(err)
	}
	return dst
}

func rdmaWrite(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
}

func rdmaSymlink(t *testing.T, target, link string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(link), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
}

// rdmaEngine runs one sample of c through an engine, the way the daemon
// does, so the metrics tested are the ones a scrape would see.
func rdmaEngine(t *testing.T, c engine.Collector) *engine.Engine {
	t.Helper()
	e := engine.New(engine.Options{Interval: testEngineInterval})
	e.Add(c, 0)
	e.SampleOnce(context.Background())
	for _, st := range e.Statuses() {
		if !st.Success {
			t.Fatalf("collector %s failed: %s", st.Name, st.LastError)
		}
	}
	return e
}

// rdmaPromtool renders the metric families whose names start with prefix in
// the text format and fails the test on anything promtool check metrics
// says about them.
func rdmaPromtool(t *testing.T, g prometheus.Gatherer, prefix string) {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var text bytes.Buffer
	n := 0
	for _, mf := range mfs {
		if strings.HasPrefix(mf.GetName(), prefix) {
			if _, err := expfmt.MetricFamilyToText(&text, mf); err != nil {
				t.Fatal(err)
			}
			n++
		}
	}
	if n == 0 {
		t.Fatalf("no metric family starts with %s", prefix)
	}
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Skip("promtool not on PATH")
	}
	cmd := exec.Command(promtool, "check", "metrics")
	cmd.Stdin = &text
	out, err := cmd.CombinedOutput()
	if len(out) > 0 || err != nil {
		t.Fatalf("promtool check metrics: %v\n%s", err, out)
	}
}

func newFixtureInfiniBand(t *testing.T, sys string) *infinibandCollector {
	t.Helper()
	c, err := newInfiniBandCollector(rdmaConfig(rdmaFixtureProc, sys))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func sampleInfiniBand(t *testing.T, c *infinibandCollector) *sample.InfiniBand {
	return sampleAs[sample.InfiniBand](t, c)
}

func TestInfiniBandFixture(t *testing.T) {
	got := sampleInfiniBand(t, newFixtureInfiniBand(t, rdmaFixtureSys))
	want := &sample.InfiniBand{
		GPUDirectRDMAModule: "nvidia_peermem",
		Ports: []sample.InfiniBandPort{{
			Device: "mlx5_0", Port: 1, LinkLayer: "InfiniBand",
			State: "ACTIVE", StateID: 4, PhysState: "LinkUp", PhysStateID: 5,
			RateBytesPerSecond: 400e9 / 8, LinkWidth: 4, LinkSpeed: "NDR",
			HCAType: "MT4129", FirmwareVersion: "28.39.1002",
			NetDev: "ibp26s0", PCIBusID: "0000:1a:00.0", NUMANode: 0,
			PCIPath: sample.PCIPath{"pci0000:15", "0000:15:01.0", "0000:16:00.0", "0000:17:02.0", "0000:1a:00.0"},
			Counters: map[sample.InfiniBandCounter]uint64{
				// port_xmit_data 2500000000 words of 4 octets, once.
				sample.IBTransmitBytes:                10_000_000_000,
				sample.IBReceiveBytes:                 15_000_000_000,
				sample.IBTransmitPackets:              2441406,
				sample.IBReceivePackets:               3662110,
				sample.IBTransmitWait:                 123456,
				sample.IBTransmitDiscards:             7,
				sample.IBReceiveDiscards:              0,
				sample.IBReceiveErrors:                5,
				sample.IBReceiveRemotePhysicalErrors:  0,
				sample.IBSymbolErrors:                 3,
				sample.IBLinkDowned:                   1,
				sample.IBLinkErrorRecovery:            2,
				sample.IBLocalLinkIntegrityErrors:     0,
				sample.IBExcessiveBufferOverrunErrors: 0,
			},
		}, {
			Device: "mlx5_1", Port: 1, LinkLayer: "Ethernet",
			State: "ACTIVE", StateID: 4, PhysState: "LinkUp", PhysStateID: 5,
			// Slower than mlx5_0 but the only RoCE port: not degraded.
			RateBytesPerSecond: 200e9 / 8, LinkWidth: 4, LinkSpeed: "HDR",
			HCAType: "MT4129", FirmwareVersion: "28.39.1002",
			NetDev: "ens9c0np0", PCIBusID: "0000:9c:00.0", NUMANode: 1,
			PCIPath: sample.PCIPath{"pci0000:97", "0000:97:01.0", "0000:98:00.0", "0000:99:02.0", "0000:9c:00.0"},
			Counters: map[sample.InfiniBandCounter]uint64{
				sample.IBTransmitBytes:                2_000_000_000,
				sample.IBReceiveBytes:                 2_500_000_000,
				sample.IBTransmitPackets:              488281,
				sample.IBReceivePackets:               610351,
				sample.IBTransmitWait:                 0,
				sample.IBTransmitDiscards:             0,
				sample.IBReceiveDiscards:              0,
				sample.IBReceiveErrors:                0,
				sample.IBReceiveRemotePhysicalErrors:  0,
				sample.IBSymbolErrors:                 0,
				sample.IBLinkDowned:                   0,
				sample.IBLinkErrorRecovery:            0,
				sample.IBLocalLinkIntegrityErrors:     0,
				sample.IBExcessiveBufferOverrunErrors: 0,
				sample.IBECNMarkedRoCEPackets:         15020,
				sample.IBCNPSent:                      14980,
				sample.IBCNPHandled:                   22011,
				sample.IBOutOfSequence:                12,
				sample.IBPacketSequenceErrors:         9,
				sample.IBLocalAckTimeoutErrors:        4,
				sample.IBOutOfBuffer:                  31,
				sample.IBReqCQEErrors:                 0,
				sample.IBReqCQEFlushErrors:            0,
				sample.IBRespCQEErrors:                0,
				sample.IBRespCQEFlushErrors:           0,
				sample.IBRNRNAKs:                      0,
				sample.IBAdaptiveRetransmissions:      0,
				sample.IBAdaptiveRetransTimeouts:      0,
				sample.IBImpliedNAKSequenceErrors:     0,
				sample.IBDuplicateRequests:            0,
			},
		}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("sample:\n got %+v\nwant %+v", got, want)
	}
	if got.SizeBytes() <= 0 {
		t.Fatal("SizeBytes not positive")
	}
}

func TestInfiniBandMetrics(t *testing.T) {
	e := rdmaEngine(t, asEngine(newFixtureInfiniBand(t, rdmaFixtureSys)))
	want := `
# HELP gpudiag_gpudirect_rdma_module_loaded 1 when a GPUDirect RDMA peer-memory module (nvidia_peermem or legacy nv_peer_mem) is loaded, else 0. Without it (or DMA-BUF support) NCCL stages RDMA traffic through host memory.
# TYPE gpudiag_gpudirect_rdma_module_loaded gauge
gpudiag_gpudirect_rdma_module_loaded 1
# HELP gpudiag_infiniband_port_info InfiniBand or RoCE port identity and state; join on device and port. link_layer is InfiniBand or Ethernet (RoCE); netdev is the bound interface; numa_node -1 means unknown.
# TYPE gpudiag_infiniband_port_info gauge
gpudiag_infiniband_port_info{device="mlx5_0",firmware_version="28.39.1002",hca_type="MT4129",link_layer="InfiniBand",netdev="ibp26s0",numa_node="0",pci_bus_id="0000:1a:00.0",phys_state="LinkUp",port="1",state="ACTIVE"} 1
gpudiag_infiniband_port_info{device="mlx5_1",firmware_version="28.39.1002",hca_type="MT4129",link_layer="Ethernet",netdev="ens9c0np0",numa_node="1",pci_bus_id="0000:9c:00.0",phys_state="LinkUp",port="1",state="ACTIVE"} 1
# HELP gpudiag_infiniband_rate_bytes_per_second Negotiated link rate, one direction (400 Gb/s NDR = 5e10).
# TYPE gpudiag_infiniband_rate_bytes_per_second gauge
gpudiag_infiniband_rate_bytes_per_second{device="mlx5_0",port="1"} 5e+10
gpudiag_infiniband_rate_bytes_per_second{device="mlx5_1",port="1"} 2.5e+10
# HELP gpudiag_infiniband_port_rate_degraded 1 when the port is active and trained down: an InfiniBand port at 1X (or 2X below HDR; 2X HDR and NDR are splitter cables' HDR100 and NDR200), or a lower rate than the fastest active port of the same link layer and HCA model on the host; else 0.
# TYPE gpudiag_infiniband_port_rate_degraded gauge
gpudiag_infiniband_port_rate_degraded{device="mlx5_0",port="1"} 0
gpudiag_infiniband_port_rate_degraded{device="mlx5_1",port="1"} 0
# HELP gpudiag_infiniband_port_data_transmitted_bytes_total Data bytes transmitted on the port (port_xmit_data × 4).
# TYPE gpudiag_infiniband_port_data_transmitted_bytes_total counter
gpudiag_infiniband_port_data_transmitted_bytes_total{device="mlx5_0",port="1"} 1e+10
gpudiag_infiniband_port_data_transmitted_bytes_total{device="mlx5_1",port="1"} 2e+09
# HELP gpudiag_infiniband_np_cnp_sent_total Congestion notification packets sent to senders in reply to ECN marks.
# TYPE gpudiag_infiniband_np_cnp_sent_total counter
gpudiag_infiniband_np_cnp_sent_total{device="mlx5_1",port="1"} 14980
# HELP gpudiag_infiniband_state_id Logical port state (1 down, 2 init, 3 armed, 4 active, 5 active defer).
# TYPE gpudiag_infiniband_state_id gauge
gpudiag_infiniband_state_id{device="mlx5_0",port="1"} 4
gpudiag_infiniband_state_id{device="mlx5_1",port="1"} 4
`
	if err := testutil.GatherAndCompare(e, strings.NewReader(want),
		"gpudiag_gpudirect_rdma_module_loaded", "gpudiag_infiniband_port_info", "gpudiag_infiniband_rate_bytes_per_second",
		"gpudiag_infiniband_port_rate_degraded", "gpudiag_infiniband_port_data_transmitted_bytes_total",
		"gpudiag_infiniband_np_cnp_sent_total", "gpudiag_infiniband_state_id"); err != nil {
		t.Fatal(err)
	}
	// Every counter the fixture holds is exported: 14 per port, plus the 16
	// hw_counters of mlx5_1 (RoCE congestion and transport).
	total := 0
	for _, k := range infinibandCounters {
		n, err := testutil.GatherAndCount(e, rdmaDescName(k.desc))
		if err != nil {
			t.Fatal(err)
		}
		total += n
	}
	if total != 14+14+16 {
		t.Fatalf("%d counter series; want 44", total)
	}
}

func TestInfiniBandPromtool(t *testing.T) {
	e := rdmaEngine(t, asEngine(newFixtureInfiniBand(t, rdmaFixtureSys)))
	rdmaPromtool(t, e, "gpudiag_infiniband_")
	rdmaPromtool(t, e, "gpudiag_gpudirect_")
}

// rdmaDescName extracts the fully-qualified name from a Desc.
func rdmaDescName(d *prometheus.Desc) string {
	s := d.String()
	const p = `fqName: "`
	i := strings.Index(s, p) + len(p)
	return s[i : i+strings.Index(s[i:], `"`)]
}

func TestInfiniBandRatesResetSafe(t *testing.T) {
	sys := rdmaCopyTree(t, rdmaFixtureSys)
	c := newFixtureInfiniBand(t, sys)
	t0 := time.Unix(1_700_000_000, 0)
	c.now = func() time.Time { return t0 }
	first := sampleInfiniBand(t, c)
	if first.IntervalSeconds != 0 || first.Ports[0].Rates != nil {
		t.Fatalf("first sample has rates: %v %v", first.IntervalSeconds, first.Ports[0].Rates)
	}

	counters := filepath.Join(sys, "class/infiniband/mlx5_0/ports/1/counters")
	rdmaWrite(t, filepath.Join(counters, "port_xmit_data"), "2750000000") // +250e6 words = 1e9 bytes
	rdmaWrite(t, filepath.Join(counters, "port_xmit_wait"), "123556")     // +100 ticks
	rdmaWrite(t, filepath.Join(counters, "symbol_error"), "0")            // reset: 3 -> 0
	rdmaWrite(t, filepath.Join(sys, "class/infiniband/mlx5_1/ports/1/hw_counters/out_of_buffer"), "41")
	c.now = func() time.Time { return t0.Add(2 * time.Second) }
	s := sampleInfiniBand(t, c)

	if s.IntervalSeconds != 2 {
		t.Fatalf("interval %v; want 2", s.IntervalSeconds)
	}
	ib, roce := s.Ports[0].Rates, s.Ports[1].Rates
	for _, tc := range []struct {
		name string
		got  float64
		want float64
	}{
		{"transmit bytes/s", ib[sample.IBTransmitBytes], 5e8},
		{"receive bytes/s", ib[sample.IBReceiveBytes], 0},
		{"transmit wait/s", ib[sample.IBTransmitWait], 50},
		{"symbol errors/s after reset", ib[sample.IBSymbolErrors], 0},
		{"out_of_buffer/s", roce[sample.IBOutOfBuffer], 5},
	} {
		if tc.got != tc.want {
			t.Errorf("%s = %v; want %v", tc.name, tc.got, tc.want)
		}
	}
	if _, ok := ib[sample.IBOutOfBuffer]; ok {
		t.Error("InfiniBand port without hw_counters has an out_of_buffer rate")
	}
	if len(roce) != len(s.Ports[1].Counters) {
		t.Errorf("RoCE port has %d rates for %d counters", len(roce), len(s.Ports[1].Counters))
	}
}

// A third HCA of the same model on InfiniBand that trained down to HDR is
// flagged; a down port and the lone RoCE port are not.
func TestInfiniBandDegradedOnHost(t *testing.T) {
	sys := rdmaCopyTree(t, rdmaFixtureSys)
	addPort := func(dev, bdf, state, phys, rate string) {
		dir := filepath.Join(sys, "devices/pci0000:15/0000:15:01.0/0000:16:00.0/0000:17:01.0", bdf)
		rdmaWrite(t, filepath.Join(dir, "numa_node"), "0")
		ib := filepath.Join(dir, "infiniband", dev)
		rdmaSymlink(t, "../../../"+bdf, filepath.Join(ib, "device"))
		rdmaWrite(t, filepath.Join(ib, "fw_ver"), "28.39.1002")
		rdmaWrite(t, filepath.Join(ib, "hca_type"), "MT4129")
		port := filepath.Join(ib, "ports/1")
		rdmaWrite(t, filepath.Join(port, "link_layer"), "InfiniBand")
		rdmaWrite(t, filepath.Join(port, "state"), state)
		rdmaWrite(t, filepath.Join(port, "phys_state"), phys)
		rdmaWrite(t, filepath.Join(port, "rate"), rate)
		rdmaWrite(t, filepath.Join(port, "counters/port_xmit_data"), "0")
		rdmaSymlink(t, "../../devices/pci0000:15/0000:15:01.0/0000:16:00.0/0000:17:01.0/"+bdf+"/infiniband/"+dev,
			filepath.Join(sys, "class/infiniband", dev))
	}
	addPort("mlx5_2", "0000:19:00.0", "4: ACTIVE", "5: LinkUp", "200 Gb/sec (4X HDR)")
	addPort("mlx5_3", "0000:19:00.1", "1: DOWN", "3: Disabled", "10 Gb/sec (4X SDR)")

	e := rdmaEngine(t, asEngine(newFixtureInfiniBand(t, sys)))
	want := `
# HELP gpudiag_infiniband_port_rate_degraded 1 when the port is active and trained down: an InfiniBand port at 1X (or 2X below HDR; 2X HDR and NDR are splitter cables' HDR100 and NDR200), or a lower rate than the fastest active port of the same link layer and HCA model on the host; else 0.
# TYPE gpudiag_infiniband_port_rate_degraded gauge
gpudiag_infiniband_port_rate_degraded{device="mlx5_0",port="1"} 0
gpudiag_infiniband_port_rate_degraded{device="mlx5_1",port="1"} 0
gpudiag_infiniband_port_rate_degraded{device="mlx5_2",port="1"} 1
gpudiag_infiniband_port_rate_degraded{device="mlx5_3",port="1"} 0
`
	if err := testutil.GatherAndCompare(e, strings.NewReader(want), "gpudiag_infiniband_port_rate_degraded"); err != nil {
		t.Fatal(err)
	}
}

func TestMarkDegradedInfiniBandPorts(t *testing.T) {
	const ndr, hdr, edr = 50e9, 25e9, 12.5e9
	port := func(layer, hca string, state uint, rate float64) sample.InfiniBandPort {
		return sample.InfiniBandPort{LinkLayer: layer, HCAType: hca, StateID: state, RateBytesPerSecond: rate}
	}
	width := func(p sample.InfiniBandPort, lanes int, speed string) sample.InfiniBandPort {
		p.LinkWidth, p.LinkSpeed = lanes, speed
		return p
	}
	const active, down = 4, 1
	for _, tc := range []struct {
		name  string
		ports []sample.InfiniBandPort
		want  []bool
	}{
		{"all equal", []sample.InfiniBandPort{port("InfiniBand", "MT4129", active, ndr), port("InfiniBand", "MT4129", active, ndr)},
			[]bool{false, false}},
		{"one trained down", []sample.InfiniBandPort{port("InfiniBand", "MT4129", active, ndr), port("InfiniBand", "MT4129", active, hdr), port("InfiniBand", "MT4129", active, ndr)},
			[]bool{false, true, false}},
		{"single port", []sample.InfiniBandPort{port("InfiniBand", "MT4129", active, edr)},
			[]bool{false}},
		{"down port is not a peer nor degraded", []sample.InfiniBandPort{port("InfiniBand", "MT4129", down, ndr), port("InfiniBand", "MT4129", active, hdr), port("InfiniBand", "MT4129", down, edr)},
			[]bool{false, false, false}},
		{"link layers compared apart", []sample.InfiniBandPort{port("InfiniBand", "MT4129", active, ndr), port("Ethernet", "MT4129", active, hdr)},
			[]bool{false, false}},
		{"RoCE ports among themselves", []sample.InfiniBandPort{port("Ethernet", "MT4129", active, hdr), port("Ethernet", "MT4129", active, edr)},
			[]bool{false, true}},
		{"HCA models compared apart", []sample.InfiniBandPort{port("InfiniBand", "MT4129", active, ndr), port("InfiniBand", "MT4123", active, hdr)},
			[]bool{false, false}},
		{"no ports", nil, []bool{}},
		// Width, from the rate file: judged without peers, InfiniBand only.
		{"lone port at 1X", []sample.InfiniBandPort{width(port("InfiniBand", "MT4118", active, edr/4), 1, "EDR")},
			[]bool{true}},
		{"NDR200 pair on a splitter cable", []sample.InfiniBandPort{width(port("InfiniBand", "MT4129", active, ndr/2), 2, "NDR"), width(port("InfiniBand", "MT4129", active, ndr/2), 2, "NDR")},
			[]bool{false, false}},
		{"lone HDR100 port", []sample.InfiniBandPort{width(port("InfiniBand", "MT4123", active, hdr/2), 2, "HDR")},
			[]bool{false}},
		{"2X below HDR has lost lanes", []sample.InfiniBandPort{width(port("InfiniBand", "MT4119", active, edr/2), 2, "EDR")},
			[]bool{true}},
		{"2X NDR beside 4X NDR of its model", []sample.InfiniBandPort{width(port("InfiniBand", "MT4129", active, ndr), 4, "NDR"), width(port("InfiniBand", "MT4129", active, ndr/2), 2, "NDR")},
			[]bool{false, true}},
		{"1X NDR", []sample.InfiniBandPort{width(port("InfiniBand", "MT4129", active, ndr/4), 1, "NDR")},
			[]bool{true}},
		{"RoCE at 25GbE shows as 1X", []sample.InfiniBandPort{width(port("Ethernet", "MT4119", active, edr/4), 1, "EDR")},
			[]bool{false}},
		{"a down port at 1X", []sample.InfiniBandPort{width(port("InfiniBand", "MT4129", down, ndr/4), 1, "NDR")},
			[]bool{false}},
		{"unknown width or speed", []sample.InfiniBandPort{port("InfiniBand", "MT4129", active, ndr/4), width(port("InfiniBand", "MT4123", active, hdr/4), 1, "")},
			[]bool{false, false}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			markDegradedInfiniBandPorts(tc.ports)
			got := make([]bool, len(tc.ports))
			for i, p := range tc.ports {
				got[i] = p.RateDegraded
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("degraded %v; want %v", got, tc.want)
			}
		})
	}
}

func TestGPUDirectRDMAModule(t *testing.T) {
	for _, tc := range []struct {
		name    string
		modules map[string]string // module -> initstate ("" for no file)
		want    string
	}{
		{"none loaded", nil, ""},
		{"nvidia_peermem", map[string]string{"nvidia_peermem": "live"}, "nvidia_peermem"},
		{"legacy nv_peer_mem", map[string]string{"nv_peer_mem": ""}, "nv_peer_mem"},
		{"unloading module does not count", map[string]string{"nvidia_peermem": "going"}, ""},
		{"both: the current one wins", map[string]string{"nvidia_peermem": "live", "nv_peer_mem": "live"}, "nvidia_peermem"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// No class/infiniband at all: most CI hosts. The module fact
			// must still come out.
			sys := t.TempDir()
			for m, state := range tc.modules {
				if state == "" {
					rdmaWrite(t, filepath.Join(sys, "module", m, "refcnt"), "0")
				} else {
					rdmaWrite(t, filepath.Join(sys, "module", m, "initstate"), state)
				}
			}
			c := newFixtureInfiniBand(t, sys)
			s := sampleInfiniBand(t, c)
			if s.GPUDirectRDMAModule != tc.want || len(s.Ports) != 0 {
				t.Fatalf("module %q, %d ports; want %q, 0 ports", s.GPUDirectRDMAModule, len(s.Ports), tc.want)
			}
			e := rdmaEngine(t, asEngine(c))
			want := fmt.Sprintf(`
# HELP gpudiag_gpudirect_rdma_module_loaded 1 when a GPUDirect RDMA peer-memory module (nvidia_peermem or legacy nv_peer_mem) is loaded, else 0. Without it (or DMA-BUF support) NCCL stages RDMA traffic through host memory.
# TYPE gpudiag_gpudirect_rdma_module_loaded gauge
gpudiag_gpudirect_rdma_module_loaded %v
`, boolFloat(tc.want != ""))
			if err := testutil.GatherAndCompare(e, strings.NewReader(want), "gpudiag_gpudirect_rdma_module_loaded"); err != nil {
				t.Fatal(err)
			}
			if n, _ := testutil.GatherAndCount(e, "gpudiag_infiniband_port_info"); n != 0 {
				t.Fatalf("%d port_info series without InfiniBand", n)
			}
		})
	}
}

func TestInfiniBandMalformedNamesFile(t *testing.T) {
	sys := rdmaCopyTree(t, rdmaFixtureSys)
	rdmaWrite(t, filepath.Join(sys, "class/infiniband/mlx5_1/ports/1/rate"), "fast")
	_, err := newFixtureInfiniBand(t, sys).Sample(context.Background())
	if err == nil || !strings.Contains(err.Error(), "mlx5_1/ports/1") {
		t.Fatalf("error %v; want one naming mlx5_1/ports/1", err)
	}
}

func TestInfiniBandPortNetDev(t *testing.T) {
	dev := t.TempDir()
	netdev := func(name, devPort, physPortName string) {
		rdmaWrite(t, filepath.Join(dev, "net", name, "dev_port"), devPort)
		if physPortName != "" {
			rdmaWrite(t, filepath.Join(dev, "net", name, "phys_port_name"), physPortName)
		}
	}
	// A dual-port HCA in switchdev mode: a VF representor sorts first.
	netdev("ens1f0r0", "0", "pf0vf0")
	netdev("ens1f0np0", "0", "p0")
	netdev("ens1f1np1", "1", "p1")
	for port, want := range map[uint]string{1: "ens1f0np0", 2: "ens1f1np1", 3: ""} {
		if got := infinibandPortNetDev(dev, port); got != want {
			t.Errorf("port %d: %q; want %q", port, got, want)
		}
	}
	for name, want := range map[string]bool{"pf0vf3": true, "pf1sf12": true, "c1pf0vf2": true, "p0": false, "": false, "pf0": false} {
		if got := infinibandIsRepresentor(name); got != want {
			t.Errorf("infinibandIsRepresentor(%q) = %v", name, got)
		}
	}
}

func TestInfiniBandLive(t *testing.T) {
	c, err := newInfiniBandCollector(rdmaConfig("/proc", "/sys"))
	if err != nil {
		t.Fatal(err)
	}
	s := sampleInfiniBand(t, c)
	for _, p := range s.Ports {
		if p.Device == "" || p.Port == 0 || p.RateBytesPerSecond < 0 || p.LinkLayer == "" {
			t.Errorf("implausible port %+v", p)
		}
	}
	t.Logf("%d RDMA ports, GPUDirect RDMA module %q", len(s.Ports), s.GPUDirectRDMAModule)
	rdmaEngine(t, asEngine(c))
}

// Every logical and physical port state the kernel prints (drivers/infiniband/
// core/sysfs.c: state_show, phys_state_show) is read as its name and number;
// only ACTIVE carries traffic, and only an active port can be called
// degraded.
func TestInfiniBandEveryPortState(t *testing.T) {
	states := []struct {
		state, phys string
		id, physID  uint
		name, pname string
	}{
		{"1: DOWN", "3: Disabled", 1, 3, "DOWN", "Disabled"},
		{"1: DOWN", "2: Polling", 1, 2, "DOWN", "Polling"},
		{"1: DOWN", "1: Sleep", 1, 1, "DOWN", "Sleep"},
		{"2: INIT", "5: LinkUp", 2, 5, "INIT", "LinkUp"},
		{"3: ARMED", "5: LinkUp", 3, 5, "ARMED", "LinkUp"},
		{"4: ACTIVE", "5: LinkUp", 4, 5, "ACTIVE", "LinkUp"},
		{"5: ACTIVE_DEFER", "5: LinkUp", 5, 5, "ACTIVE_DEFER", "LinkUp"},
		{"1: DOWN", "4: PortConfigurationTraining", 1, 4, "DOWN", "PortConfigurationTraining"},
		{"4: ACTIVE", "6: LinkErrorRecovery", 4, 6, "ACTIVE", "LinkErrorRecovery"},
		{"1: DOWN", "7: Phy Test", 1, 7, "DOWN", "Phy Test"},
	}
	for i, st := range states {
		t.Run(st.name+"/"+st.pname, func(t *testing.T) {
			sys := rdmaCopyTree(t, rdmaFixtureSys)
			bdf := fmt.Sprintf("0000:19:00.%d", i%8)
			dir := filepath.Join(sys, "devices/pci0000:15/0000:15:01.0/0000:16:00.0/0000:17:01.0", bdf)
			rdmaWrite(t, filepath.Join(dir, "numa_node"), "0")
			ib := filepath.Join(dir, "infiniband/mlx5_9")
			rdmaSymlink(t, "../../../"+bdf, filepath.Join(ib, "device"))
			rdmaWrite(t, filepath.Join(ib, "fw_ver"), "28.39.1002")
			rdmaWrite(t, filepath.Join(ib, "hca_type"), "MT4129")
			port := filepath.Join(ib, "ports/1")
			rdmaWrite(t, filepath.Join(port, "link_layer"), "InfiniBand")
			rdmaWrite(t, filepath.Join(port, "state"), st.state)
			rdmaWrite(t, filepath.Join(port, "phys_state"), st.phys)
			rdmaWrite(t, filepath.Join(port, "rate"), "100 Gb/sec (4X EDR)")
			rdmaWrite(t, filepath.Join(port, "counters/port_xmit_data"), "0")
			rdmaSymlink(t, "../../devices/pci0000:15/0000:15:01.0/0000:16:00.0/0000:17:01.0/"+bdf+"/infiniband/mlx5_9",
				filepath.Join(sys, "class/infiniband/mlx5_9"))
			s := sampleInfiniBand(t, newFixtureInfiniBand(t, sys))
			var p *sample.InfiniBandPort
			for j := range s.Ports {
				if s.Ports[j].Device == "mlx5_9" {
					p = &s.Ports[j]
				}
			}
			if p == nil {
				t.Fatal("port not read")
			}
			if p.StateID != st.id || p.State != st.name || p.PhysStateID != st.physID || p.PhysState != st.pname {
				t.Errorf("state %d %q phys %d %q", p.StateID, p.State, p.PhysStateID, p.PhysState)
			}
			if p.Active() != (st.id == 4) {
				t.Errorf("Active() = %v", p.Active())
			}
			// 100 Gb/s next to mlx5_0's 400 Gb/s of the same model.
			if p.RateDegraded != (st.id == 4) {
				t.Errorf("degraded = %v", p.RateDegraded)
			}
		})
	}
}

// widthFixtureSys is a tree of lone and paired ports of several widths
// (testdata/infiniband/NOTICE): procfs's mlx5_0, a lone InfiniBand port at
// "25 Gb/sec (1X EDR)"; an NDR200 pair on a splitter cable (2X NDR); a 4X
// HDR port; and a 25GbE RoCE port, which mlx5 renders as 1X EDR.
const widthFixtureSys = "testdata/infiniband/sys"

// A port that trained at fewer lanes than an HCA port trains is degraded
// with no peer to compare with; the splitter pair and RoCE's rendering of
// Ethernet speeds are not.
func TestInfiniBandWidthFixture(t *testing.T) {
	s := sampleInfiniBand(t, newFixtureInfiniBand(t, widthFixtureSys))
	want := map[string]struct {
		width    int
		speed    string
		degraded bool
	}{
		"mlx5_0": {1, "EDR", true},  // lone 1X: lanes failed
		"mlx5_1": {2, "NDR", false}, // NDR200: two lanes of a split switch port
		"mlx5_2": {2, "NDR", false},
		"mlx5_3": {4, "HDR", false},
		"mlx5_4": {1, "EDR", false}, // RoCE at 25GbE
	}
	if len(s.Ports) != len(want) {
		t.Fatalf("%d ports; want %d", len(s.Ports), len(want))
	}
	for _, p := range s.Ports {
		w := want[p.Device]
		if p.LinkWidth != w.width || p.LinkSpeed != w.speed || p.RateDegraded != w.degraded {
			t.Errorf("%s: width %d speed %q degraded %v; want %d %q %v", p.Device, p.LinkWidth, p.LinkSpeed, p.RateDegraded, w.width, w.speed, w.degraded)
		}
	}

	e := rdmaEngine(t, asEngine(newFixtureInfiniBand(t, widthFixtureSys)))
	exp := `
# HELP gpudiag_infiniband_link_width_lanes Active link width in lanes, from the rate file (4X = 4); absent when the kernel does not say. On RoCE ports the driver's rendering of the Ethernet speed (25GbE shows as 1X), not lanes.
# TYPE gpudiag_infiniband_link_width_lanes gauge
gpudiag_infiniband_link_width_lanes{device="mlx5_0",port="1",speed="EDR"} 1
gpudiag_infiniband_link_width_lanes{device="mlx5_1",port="1",speed="NDR"} 2
gpudiag_infiniband_link_width_lanes{device="mlx5_2",port="1",speed="NDR"} 2
gpudiag_infiniband_link_width_lanes{device="mlx5_3",port="1",speed="HDR"} 4
gpudiag_infiniband_link_width_lanes{device="mlx5_4",port="1",speed="EDR"} 1
# HELP gpudiag_infiniband_port_rate_degraded 1 when the port is active and trained down: an InfiniBand port at 1X (or 2X below HDR; 2X HDR and NDR are splitter cables' HDR100 and NDR200), or a lower rate than the fastest active port of the same link layer and HCA model on the host; else 0.
# TYPE gpudiag_infiniband_port_rate_degraded gauge
gpudiag_infiniband_port_rate_degraded{device="mlx5_0",port="1"} 1
gpudiag_infiniband_port_rate_degraded{device="mlx5_1",port="1"} 0
gpudiag_infiniband_port_rate_degraded{device="mlx5_2",port="1"} 0
gpudiag_infiniband_port_rate_degraded{device="mlx5_3",port="1"} 0
gpudiag_infiniband_port_rate_degraded{device="mlx5_4",port="1"} 0
`
	if err := testutil.GatherAndCompare(e, strings.NewReader(exp), "gpudiag_infiniband_link_width_lanes", "gpudiag_infiniband_port_rate_degraded"); err != nil {
		t.Fatal(err)
	}
}

// An unreadable width leaves the port reported, its width unknown and not
// judged: procfs has read the rate already.
func TestInfiniBandWidthUnknown(t *testing.T) {
	sys := rdmaCopyTree(t, widthFixtureSys)
	rdmaWrite(t, filepath.Join(sys, "class/infiniband/mlx5_0/ports/1/rate"), "25 Gb/sec")
	s := sampleInfiniBand(t, newFixtureInfiniBand(t, sys))
	p := s.Ports[0]
	if p.Device != "mlx5_0" || p.LinkWidth != 0 || p.LinkSpeed != "" || p.RateDegraded || p.RateBytesPerSecond != 25e9/8 {
		t.Fatalf("port %+v", p)
	}
}

func TestParseInfiniBandWidth(t *testing.T) {
	for _, tc := range []struct {
		rate  string
		width int
		speed string
	}{
		// The rate files of procfs's and node_exporter's fixtures, and the
		// kernel's other widths and speeds.
		{"100 Gb/sec (4X EDR)\n", 4, "EDR"},
		{"25 Gb/sec (1X EDR)\n", 1, "EDR"},
		{"40 Gb/sec (4X QDR)\n", 4, "QDR"},
		{"10 Gb/sec (4X)\n", 4, "SDR"}, // kernels that name no speed for SDR
		{"10 Gb/sec (4X SDR)\n", 4, "SDR"},
		{"400 Gb/sec (4X NDR)\n", 4, "NDR"},
		{"200 Gb/sec (2X NDR)\n", 2, "NDR"},
		{"100 Gb/sec (2X HDR)\n", 2, "HDR"},
		{"56 Gb/sec (4X FDR)\n", 4, "FDR"},
		{"40 Gb/sec (4X FDR10)\n", 4, "FDR10"},
		{"800 Gb/sec (4X XDR)\n", 4, "XDR"},
		{"2.5 Gb/sec (1X SDR)\n", 1, "SDR"},
		{"300 Gb/sec (12X EDR)\n", 12, "EDR"},
		{"200 Gb/sec (8X EDR)\n", 8, "EDR"},
		// Anything else is no width.
		{"", 0, ""},
		{"fast", 0, ""},
		{"25 Gb/sec\n", 0, ""},
		{"75 Gb/sec (3X EDR)\n", 0, ""},
		{"25 Gb/sec (X EDR)\n", 0, ""},
		{"25 Gb/sec (1 EDR)\n", 0, ""},
		{"25 Gb/sec (1X EDR\n", 0, ""},
		{"25 Gb/sec (1X edr)\n", 0, ""},
		{"25 Gb/sec (1X \x1b[2JEDR)\n", 0, ""},
		{"25 Gb/sec (1X VERYLONGNAME)\n", 0, ""},
		{"25 Gb/sec (-1X EDR)\n", 0, ""},
	} {
		width, speed, ok := parseInfiniBandWidth(tc.rate)
		if width != tc.width || speed != tc.speed || ok != (tc.width > 0) {
			t.Errorf("%q: %d %q %v; want %d %q", tc.rate, width, speed, ok, tc.width, tc.speed)
		}
	}
}

// The rate file is the kernel's, or whatever a tree given as --path.sysfs
// holds: the width is a lane count the kernel prints or nothing, and the
// speed, which reaches the findings' text, is a short upper-case name.
func FuzzParseInfiniBandWidth(f *testing.F) {
	for _, s := range []string{"100 Gb/sec (4X EDR)\n", "10 Gb/sec (4X)\n", "200 Gb/sec (2X NDR)", "25 Gb/sec (1X \x1b]0;x\x07)"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, rate string) {
		width, speed, ok := parseInfiniBandWidth(rate)
		if !ok {
			if width != 0 || speed != "" {
				t.Fatalf("%q: not ok but %d %q", rate, width, speed)
			}
			return
		}
		if !sample.ValidInfiniBandWidth(width) || speed == "" || len(speed) > 8 || strings.Trim(speed, "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789") != "" {
			t.Fatalf("%q: width %d speed %q", rate, width, speed)
		}
	})
}

// ibTransportCounters writes the mlx5_0 fixture port's hw_counters.
func ibTransportCounters(t *testing.T, sys string, values map[string]uint64) {
	t.Helper()
	for name, v := range values {
		rdmaWrite(t, filepath.Join(sys, "class/infiniband/mlx5_0/ports/1/hw_counters", name), strconv.FormatUint(v, 10))
	}
}

// The transport counters read from two samples of the fixture reach the
// rdma_transport_errors finding when they grow, not when they stay flat or
// go back (a reset, counted from zero: nothing since). The names are the
// mlx5 hw_counters files of procfs's fixture (testdata/infiniband/NOTICE).
func TestInfiniBandTransportCountersFinding(t *testing.T) {
	// The fixture's values: req_cqe_error 3481, req_cqe_flush_error 80,
	// resp_cqe_error 8109, resp_cqe_flush_error 4708, roce_adp_retrans 99,
	// packet_seq_err 1, out_of_sequence 1, duplicate_request 41.
	for _, tc := range []struct {
		name string
		next map[string]uint64
		want string // kind:severity of each finding, sorted
	}{
		{"flat", nil, ""},
		{"a queue pair broke", map[string]uint64{"req_cqe_error": 3481 + 7, "req_cqe_flush_error": 80 + 6}, "completion_errors:warning"},
		{"a job ended: its receives flushed", map[string]uint64{"resp_cqe_error": 8109 + 512, "resp_cqe_flush_error": 4708 + 512}, ""},
		{"lossy path", map[string]uint64{"roce_adp_retrans": 99 + 40, "packet_seq_err": 1 + 3}, "retransmissions:warning"},
		{"receiver not ready", map[string]uint64{"rnr_nak_retry_err": 5}, "rnr_naks:info"},
		{"reordered", map[string]uint64{"out_of_sequence": 1 + 9, "duplicate_request": 41 + 1}, "sequence_errors:info"},
		{"counters reset", map[string]uint64{"req_cqe_error": 0, "req_cqe_flush_error": 0, "resp_cqe_error": 0, "resp_cqe_flush_error": 0,
			"roce_adp_retrans": 0, "packet_seq_err": 0, "out_of_sequence": 0, "duplicate_request": 0}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sys := rdmaCopyTree(t, widthFixtureSys)
			c := newFixtureInfiniBand(t, sys)
			first := sampleInfiniBand(t, c)
			ibTransportCounters(t, sys, tc.next)
			last := sampleInfiniBand(t, c)
			var got []string
			for _, f := range analyzers.Audit(analyzers.AuditInput{IBReadings: []*sample.InfiniBand{first, last}, LastIB: last}) {
				if f.Check == "rdma_transport_errors" {
					if f.Device != "mlx5_0/1" {
						t.Errorf("finding on %s", f.Device)
					}
					got = append(got, f.Kind+":"+string(f.Severity))
				}
			}
			if strings.Join(got, ",") != tc.want {
				t.Fatalf("findings %v; want %q", got, tc.want)
			}
		})
	}
}
