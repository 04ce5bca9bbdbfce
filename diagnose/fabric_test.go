package diagnose

import (
	"math"
	"slices"
	"testing"
	"time"

	"github.com/gpudiag/gpudiag/analyzers"
	"github.com/gpudiag/gpudiag/engine"
	"github.com/gpudiag/gpudiag/sample"
)

func TestNetDeviceIndex(t *testing.T) {
	for path, want := range map[string]int{"NET/IB/0/GDRDMA": 0, "NET/IB/1": 1, "NET/IB/12(3)/GDRDMA(PCI)/Shared": 12} {
		if got, ok := netDeviceIndex(path); !ok || got != want {
			t.Errorf("%s: %d %v", path, got, ok)
		}
	}
	for _, path := range []string{"NET/Socket/0", "P2P/CUMEM", "NET/IB/", "NET/IB/x"} {
		if _, ok := netDeviceIndex(path); ok {
			t.Errorf("%s read as a device index", path)
		}
	}
}

// Two GPUs under the switches of mlx5_0 and mlx5_1; NCCL's log says GPU 0's
// rank uses mlx5_1 with GDRDMA in a 4-node communicator.
func TestFabricEvidence(t *testing.T) {
	w := engine.NewWindow(time.Hour, 64<<20)
	t0 := time.Unix(1000, 0)
	path := func(bridge, dev string) sample.PCIPath {
		return sample.PCIPath{"pci0000:" + bridge, "0000:" + bridge + ":01.0", dev}
	}
	port := func(dev string, node int, p sample.PCIPath, tx, wait float64) sample.InfiniBandPort {
		return sample.InfiniBandPort{Device: dev, Port: 1, LinkLayer: "InfiniBand", StateID: 4, RateBytesPerSecond: 50e9,
			HCAType: "MT4129", NUMANode: node, PCIPath: p,
			Rates: map[sample.InfiniBandCounter]float64{sample.IBTransmitBytes: tx, sample.IBReceiveBytes: tx, sample.IBTransmitWait: wait}}
	}
	for i := 1; i <= 10; i++ {
		put(w, sample.InfiniBandKey, t0.Add(time.Duration(i)*time.Second), &sample.InfiniBand{
			IntervalSeconds: 1, GPUDirectRDMAModule: "nvidia_peermem",
			Ports: []sample.InfiniBandPort{port("mlx5_0", 0, path("15", "0000:15:01.1"), 0, 0),
				port("mlx5_1", 1, path("97", "0000:97:01.1"), 40e9, 0.5e9)}})
	}
	put(w, sample.NUMAKey, t0, &sample.NUMA{GPUs: []sample.GPUNUMA{
		{GPU: 0, NUMANode: 0, PCIPath: path("15", "0000:15:01.2")}, {GPU: 1, NUMANode: 1, PCIPath: path("97", "0000:97:01.2")}}})
	put(w, sample.NCCLKey, t0, &sample.NCCL{
		GPUs: []sample.NCCLGPU{{GPU: 0, Matched: true}},
		Files: []sample.NCCLFile{{Processes: []sample.NCCLProcess{{Host: "n1", PID: 7, Current: true,
			Comms:      []sample.NCCLComm{{CommID: "c", Rank: 3, NRanks: 16, NVMLDev: 0, NNodes: 4}},
			Transports: []sample.NCCLTransport{{Transport: "NET/IB+GDRDMA", Connections: 2}},
			IBDevices:  []string{"mlx5_0:1/IB", "mlx5_1:1/IB"},
			Peers: []sample.NCCLPeer{{CommID: "c", Rank: 3, Peer: 4, Transport: "NET/IB+GDRDMA", Path: "NET/IB/1/GDRDMA"},
				{CommID: "c", Rank: 2, Peer: 3, Transport: "NET/IB+GDRDMA", Path: "NET/IB/0/GDRDMA"}}}}}}})
	in := analyzers.Input{GPUs: []analyzers.GPUWindow{{Index: 0}, {Index: 1}}, Node: analyzers.NaNNode()}
	gpuNICs(readInto(w, t0.Add(5*time.Second), &in, rdmaPortEvidence, numaEvidence, ncclEvidence))
	if len(in.Node.RDMAPorts) != 2 || !in.Node.RDMAMeasured || in.Node.GPUDirectModule != "nvidia_peermem" {
		t.Fatalf("node %+v", in.Node)
	}
	p := in.Node.RDMAPorts[1]
	if p.Name != "mlx5_1/1" || p.TxBytes != 40e9 || math.Abs(p.XmitWaitShare-0.08) > 1e-9 || !math.IsNaN(p.ECNMarkedShare) {
		t.Errorf("port %+v", p)
	}
	g0 := in.GPUs[0]
	if g0.NCCLNetGDR != "gdr" || g0.JobNodes != 4 {
		t.Errorf("GPU 0: gdr %q nodes %d", g0.NCCLNetGDR, g0.JobNodes)
	}
	// GPU 0's rank (rank 3) uses device 1 only; mlx5_0 is its nearest.
	want := []analyzers.GPUNIC{{Port: 0, Distance: sample.LinkPIX}, {Port: 1, Distance: sample.LinkSYS, NCCL: true}}
	if !slices.Equal(g0.NICs, want) {
		t.Errorf("GPU 0 NICs %+v; want %+v", g0.NICs, want)
	}
	if g1 := in.GPUs[1]; g1.NCCLNetGDR != "" || len(g1.NICs) != 2 || g1.NICs[0].Port != 1 || g1.NICs[0].NCCL {
		t.Errorf("GPU 1 %+v", g1)
	}
}
