package fabricsim

import (
	"fmt"

	"github.com/gpudiag/gpudiag/sample"
)

// layout is where the GPUs and HCAs of a node sit.
type layout struct {
	gpuPath []sample.PCIPath
	gpuNUMA []int
	hcaPath []sample.PCIPath
	hcaNUMA []int
}

// Default PCIe tree, as on a DGX-style server where each GPU and its NIC
// share a PCIe switch (S004 §2.6: GPU <--> PCIe Switch <--> NIC):
//
//	GPU k, root bus r = 0x10 + 0x20·k:
//	  pci0000:r / 0000:r:01.0 (root port) / 0000:r+1:00.0 (switch upstream)
//	    / 0000:r+2:00.0 (downstream) / 0000:r+3:00.0 (the GPU)
//	HCA under GPU k's switch:
//	    … / 0000:r+2:(08+j).0 (another downstream port) / 0000:r+4+j:00.0
//	HCA j on its own host bridge, root bus h = 0xc0 + 0x08·j (a NIC
//	attached to a CPU root port, on its NUMA node):
//	  pci0000:h / 0000:h:01.0 / 0000:h+1:00.0
//
// sample.PCIDistance then gives PIX between a GPU and the HCA under its
// switch, NODE between different host bridges of one NUMA node and SYS
// across NUMA nodes, as NCCL and nvidia-smi topo -m name them.
func gpuDefaultPath(k int) sample.PCIPath {
	r := 0x10 + 0x20*k
	return sample.PCIPath{
		fmt.Sprintf("pci0000:%02x", r),
		fmt.Sprintf("0000:%02x:01.0", r),
		fmt.Sprintf("0000:%02x:00.0", r+1),
		fmt.Sprintf("0000:%02x:00.0", r+2),
		fmt.Sprintf("0000:%02x:00.0", r+3),
	}
}

func newLayout(s *Scenario, nGPU int) (*layout, error) {
	if nGPU > 7 {
		return nil, fmt.Errorf("base has %d GPUs: the default PCIe layout places at most 7", nGPU)
	}
	l := &layout{gpuPath: make([]sample.PCIPath, nGPU), gpuNUMA: make([]int, nGPU)}
	for k := range nGPU {
		l.gpuPath[k] = gpuDefaultPath(k)
	}
	for _, p := range s.GPUs {
		if p.GPU < 0 || p.GPU >= nGPU {
			return nil, fmt.Errorf("gpus: GPU %d is not in the base (it has %d)", p.GPU, nGPU)
		}
		if len(p.PCIPath) > 0 {
			l.gpuPath[p.GPU] = sample.PCIPath(p.PCIPath)
		}
		if p.NUMANode != nil {
			l.gpuNUMA[p.GPU] = *p.NUMANode
		}
	}
	for j, h := range s.HCAs {
		var path sample.PCIPath
		numa := 0
		switch {
		case len(h.PCIPath) > 0:
			path = sample.PCIPath(h.PCIPath)
		case h.SameSwitchAsGPU != nil:
			k := *h.SameSwitchAsGPU
			if k < 0 || k >= nGPU {
				return nil, fmt.Errorf("hcas[%d] (%s): same_switch_as_gpu %d is not in the base (it has %d GPUs)", j, h.Device, k, nGPU)
			}
			g := l.gpuPath[k]
			if len(g) < 3 {
				return nil, fmt.Errorf("hcas[%d] (%s): GPU %d's PCIe path %v has no switch", j, h.Device, k, g)
			}
			var r int
			if _, err := fmt.Sscanf(g[len(g)-1], "0000:%x:00.0", &r); err != nil {
				return nil, fmt.Errorf("hcas[%d] (%s): GPU %d's bus ID %q: %v", j, h.Device, k, g[len(g)-1], err)
			}
			// A sibling of the GPU's downstream port, past the GPU's bus.
			down := g[len(g)-2]
			path = append(sample.PCIPath{}, g[:len(g)-2]...)
			path = append(path, down[:len(down)-4]+fmt.Sprintf("%02x.0", 0x08+j), fmt.Sprintf("0000:%02x:00.0", r+1+j))
			numa = l.gpuNUMA[k]
		default:
			r := 0xc0 + 0x08*j
			path = sample.PCIPath{fmt.Sprintf("pci0000:%02x", r), fmt.Sprintf("0000:%02x:01.0", r), fmt.Sprintf("0000:%02x:00.0", r+1)}
		}
		if h.NUMANode != nil {
			numa = *h.NUMANode
		}
		l.hcaPath = append(l.hcaPath, path)
		l.hcaNUMA = append(l.hcaNUMA, numa)
	}
	seen := map[string]string{}
	for k, p := range l.gpuPath {
		seen[p[len(p)-1]] = fmt.Sprintf("GPU %d", k)
	}
	for j, p := range l.hcaPath {
		if who, ok := seen[p[len(p)-1]]; ok {
			return nil, fmt.Errorf("hcas[%d] (%s): bus ID %s is also %s's", j, s.HCAs[j].Device, p[len(p)-1], who)
		}
		seen[p[len(p)-1]] = s.HCAs[j].Device
	}
	return l, nil
}

// gpuBus is GPU k's PCI bus ID.
func (l *layout) gpuBus(k int) string { return l.gpuPath[k][len(l.gpuPath[k])-1] }

// hcaBus is HCA j's PCI bus ID.
func (l *layout) hcaBus(j int) string { return l.hcaPath[j][len(l.hcaPath[j])-1] }

// Distance is the PCIe distance (PIX … SYS) between GPU k and HCA j.
func (l *layout) Distance(k, j int) string {
	return sample.PCIDistance(l.gpuPath[k], l.gpuNUMA[k], l.hcaPath[j], l.hcaNUMA[j])
}
