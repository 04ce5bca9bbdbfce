package sample

import "testing"

func TestPCIDistance(t *testing.T) {
	sw := func(down, dev string) PCIPath {
		return PCIPath{"pci0000:17", "0000:17:01.0", "0000:18:00.0", down, dev}
	}
	for _, tc := range []struct {
		name  string
		a     PCIPath
		an    int
		b     PCIPath
		bn    int
		want  string
		exact bool
	}{
		{"one switch", sw("0000:19:01.0", "0000:1a:00.0"), 0, sw("0000:19:02.0", "0000:1b:00.0"), 0, LinkPIX, true},
		{"two functions of one device", sw("0000:19:01.0", "0000:1a:00.0"), 0, sw("0000:19:01.0", "0000:1a:00.1"), 0, LinkPIX, true},
		{"two switch levels", PCIPath{"pci0000:17", "0000:17:01.0", "0000:18:00.0", "0000:19:01.0", "0000:1a:00.0", "0000:1b:01.0", "0000:1c:00.0"}, 0,
			sw("0000:19:02.0", "0000:1d:00.0"), 0, LinkPXB, true},
		{"root ports of one host bridge", PCIPath{"pci0000:17", "0000:17:01.0", "0000:18:00.0"}, 0,
			PCIPath{"pci0000:17", "0000:17:02.0", "0000:19:00.0"}, 0, LinkPHB, true},
		{"host bridges of one node", PCIPath{"pci0000:17", "0000:17:01.0", "0000:18:00.0"}, 0,
			PCIPath{"pci0000:38", "0000:38:01.0", "0000:39:00.0"}, 0, LinkNODE, true},
		{"two nodes", PCIPath{"pci0000:17", "0000:17:01.0", "0000:18:00.0"}, 0,
			PCIPath{"pci0000:b8", "0000:b8:01.0", "0000:b9:00.0"}, 1, LinkSYS, true},
		{"no paths, NUMA known", nil, 0, nil, 1, LinkSYS, true},
		{"no paths, same node", nil, 1, nil, 1, LinkNODE, true},
		{"NUMA unknown across host bridges", PCIPath{"pci0000:17", "0000:17:01.0"}, -1,
			PCIPath{"pci0000:38", "0000:38:01.0"}, -1, "", true},
		{"NUMA unknown under one switch", sw("0000:19:01.0", "0000:1a:00.0"), -1, sw("0000:19:02.0", "0000:1b:00.0"), -1, LinkPIX, true},
	} {
		if got := PCIDistance(tc.a, tc.an, tc.b, tc.bn); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
		if got := PCIDistance(tc.b, tc.bn, tc.a, tc.an); got != tc.want {
			t.Errorf("%s (swapped): %q, want %q", tc.name, got, tc.want)
		}
	}
	for i, d := range []string{LinkPIX, LinkPXB, LinkPHB, LinkNODE, LinkSYS, ""} {
		if PCIDistanceRank(d) != i {
			t.Errorf("rank of %q = %d, want %d", d, PCIDistanceRank(d), i)
		}
	}
}
