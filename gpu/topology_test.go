package gpu

import (
	"math"
	"testing"

	"github.com/gpudiag/gpudiag/sample"
)

func TestPCIeBytesPerSecond(t *testing.T) {
	for _, tc := range []struct {
		gen, width int
		want       float64 // GB/s, one way
	}{
		{1, 16, 4.0}, {2, 16, 8.0}, {3, 16, 15.754}, {4, 16, 31.508}, {5, 16, 63.015}, {5, 8, 31.508},
		{6, 16, 121.0}, {4, 1, 1.969}, {5, 0, 0}, {0, 16, 0}, {7, 16, 0},
	} {
		if got := PCIeBytesPerSecond(tc.gen, tc.width) / 1e9; math.Abs(got-tc.want) > 0.0005 {
			t.Errorf("Gen%d x%d: %.4f GB/s; want %.3f", tc.gen, tc.width, got, tc.want)
		}
	}
}

func TestNVLinkBytesPerSecond(t *testing.T) {
	for gen, want := range map[int]float64{0: 0, 1: 20e9, 2: 25e9, 3: 25e9, 4: 25e9, 5: 50e9, 6: 0} {
		if got := NVLinkBytesPerSecond(gen); got != want {
			t.Errorf("NVLink %d: %v; want %v", gen, got, want)
		}
	}
}

func links(n int, end NVLinkEnd) []NVLinkEnd {
	out := make([]NVLinkEnd, n)
	for i := range out {
		out[i] = end
	}
	return out
}

func noPath(int, int) string { return "" }

// GPU 2 has 8 direct links to GPU 0 and 4 NVSwitch links; GPU 1 has 6
// switch links and one link whose far end is a GPU we cannot see (another
// container's). GPU 3 reports NVLink 5 on its switch links.
func TestBuildTopologyMixedLinks(t *testing.T) {
	switchEnd := NVLinkEnd{Remote: RemoteSwitch, RemoteBusID: "0000:05:00.0", Generation: 4}
	gpus := []TopologyGPU{
		{Index: 2, BusID: "0000:3a:00.0", NVLinks: append(links(8, NVLinkEnd{Remote: RemoteGPU, RemoteBusID: "0000:18:00.0", Generation: 4}), links(4, switchEnd)...)},
		{Index: 0, BusID: "0000:18:00.0", NVLinks: links(8, NVLinkEnd{Remote: RemoteGPU, RemoteBusID: "0000:3a:00.0", Generation: 4})},
		{Index: 1, BusID: "0000:2a:00.0", NVLinks: append(links(6, switchEnd), NVLinkEnd{Remote: RemoteGPU, RemoteBusID: "0000:99:00.0", Generation: 4})},
		{Index: 3, BusID: "0000:5d:00.0", NVLinks: links(6, NVLinkEnd{Remote: RemoteSwitch, RemoteBusID: "0000:06:00.0", Generation: 5})},
	}
	topo := BuildTopology(gpus, func(a, b int) string { return sample.LinkSYS })
	for _, tc := range []struct {
		a, b      int
		link      string
		viaSwitch bool
		bps       float64
	}{
		{0, 1, "SYS", false, 0}, // no PCIe capacity given
		{0, 2, "NV8", false, 8 * 25e9},
		{1, 2, "NV4", true, 4 * 25e9},
		{1, 3, "NV6", true, 6 * 25e9}, // the slower GPU's links bound the path
		{2, 3, "NV4", true, 4 * 25e9},
	} {
		p, ok := topo.Pair(tc.b, tc.a)
		if !ok || p.Link != tc.link || p.ViaSwitch != tc.viaSwitch || p.ExpectedBytesPerSecond != tc.bps {
			t.Errorf("pair %d-%d: %+v; want %s switch=%v %v", tc.a, tc.b, p, tc.link, tc.viaSwitch, tc.bps)
		}
	}
	if g, _ := topo.GPU(1); g.NVLinks != 7 || g.NVLinkMaxBytesPerSecond != 7*25e9 {
		t.Errorf("GPU 1 counts every active link for its own capacity: %+v", g)
	}
	if g, _ := topo.GPU(3); g.NVLinkMaxBytesPerSecond != 6*50e9 {
		t.Errorf("GPU 3: %+v", g)
	}
	if topo.GPUs[0].Index != 0 || topo.Pairs[0].A != 0 || topo.Pairs[0].B != 1 {
		t.Errorf("not in index order: %+v %+v", topo.GPUs[0], topo.Pairs[0])
	}
}

// A query that failed on one side must not hide links the other side saw;
// unknown remote types fall back to the bus ID; links of unknown version
// count but have no known rate.
func TestBuildTopologyPartialAnswers(t *testing.T) {
	gpus := []TopologyGPU{
		{Index: 0, BusID: "0000:18:00.0", PCIeMaxGeneration: 5, PCIeMaxWidth: 16,
			NVLinks: append(links(2, NVLinkEnd{Remote: RemoteUnknown, RemoteBusID: "0000:2a:00.0"}), links(2, NVLinkEnd{})...)},
		{Index: 1, BusID: "0000:2a:00.0", PCIeMaxGeneration: 5, PCIeMaxWidth: 16,
			NVLinks: links(4, NVLinkEnd{Remote: RemoteGPU, RemoteBusID: "0000:18:00.0"})},
	}
	p, _ := BuildTopology(gpus, noPath).Pair(0, 1)
	if p.Link != "NV4" || p.NVLinks != 4 || p.ViaSwitch || p.ExpectedBytesPerSecond != 0 {
		t.Fatalf("pair %+v; want NV4 direct, rate unknown", p)
	}
}

func TestBuildTopologyEmpty(t *testing.T) {
	topo := BuildTopology(nil, noPath)
	if len(topo.GPUs) != 0 || len(topo.Pairs) != 0 {
		t.Fatalf("%+v", topo)
	}
}
