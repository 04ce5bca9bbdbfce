package sample

import "testing"

// A 4-GPU node: 0–1 NV18, 2–3 NV12, the rest over PCIe.
func fourGPUs() *Topology {
	return &Topology{
		GPUs: []GPULinkCapacity{{Index: 0}, {Index: 1}, {Index: 2}, {Index: 3}},
		Pairs: []GPUPair{
			{A: 0, B: 1, Link: "NV18", NVLinks: 18, ExpectedBytesPerSecond: 450e9},
			{A: 0, B: 2, Link: LinkNODE, ExpectedBytesPerSecond: 63e9},
			{A: 0, B: 3, Link: LinkSYS, ExpectedBytesPerSecond: 63e9},
			{A: 1, B: 2, Link: LinkPIX, ExpectedBytesPerSecond: 63e9},
			{A: 1, B: 3, Link: ""},
			{A: 2, B: 3, Link: "NV12", NVLinks: 12, ExpectedBytesPerSecond: 300e9},
		},
	}
}

func TestTopologyPairEitherOrder(t *testing.T) {
	topo := fourGPUs()
	p, ok := topo.Pair(3, 0)
	if !ok || p.Link != LinkSYS {
		t.Fatalf("Pair(3, 0) = %+v, %v", p, ok)
	}
	if _, ok := topo.Pair(0, 9); ok {
		t.Fatal("pair with an unknown GPU found")
	}
	var none *Topology
	if _, ok := none.Pair(0, 1); ok {
		t.Fatal("pair found in a nil topology")
	}
	if _, ok := none.GPU(0); ok {
		t.Fatal("GPU found in a nil topology")
	}
	if g, ok := topo.GPU(2); !ok || g.Index != 2 {
		t.Fatalf("GPU(2) = %+v, %v", g, ok)
	}
}

// A job is held to its slowest path: SYS beats any PCIe or NVLink path,
// fewer NVLinks are slower than more, unknown paths are skipped.
func TestTopologySlowestPair(t *testing.T) {
	topo := fourGPUs()
	for _, tc := range []struct {
		gpus []int
		want string
		ok   bool
	}{
		{[]int{0, 1}, "NV18", true},
		{[]int{0, 1, 2, 3}, LinkSYS, true},
		{[]int{0, 1, 2}, LinkNODE, true},
		{[]int{2, 3, 0, 1}, LinkSYS, true},
		{[]int{1, 3}, "", false},
		{[]int{3}, "", false},
		{nil, "", false},
	} {
		p, ok := topo.SlowestPair(tc.gpus)
		if ok != tc.ok || p.Link != tc.want {
			t.Errorf("SlowestPair(%v) = %q, %v; want %q, %v", tc.gpus, p.Link, ok, tc.want, tc.ok)
		}
	}
	nv := &Topology{Pairs: []GPUPair{
		{A: 0, B: 1, Link: "NV18", NVLinks: 18, ExpectedBytesPerSecond: 450e9},
		{A: 0, B: 2, Link: "NV18", NVLinks: 18, ExpectedBytesPerSecond: 450e9},
		{A: 1, B: 2, Link: "NV12", NVLinks: 12, ExpectedBytesPerSecond: 300e9},
	}}
	if p, _ := nv.SlowestPair([]int{0, 1, 2}); p.Link != "NV12" {
		t.Errorf("slowest NVLink path %q; want NV12", p.Link)
	}
}
