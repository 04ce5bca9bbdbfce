package nvmlgpu

import (
	"fmt"
	"math"
	"sort"
	"strings"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"go.uber.org/zap"

	"github.com/gpudiag/gpudiag/gpu"
	"github.com/gpudiag/gpudiag/sample"
)

// readTopology reads every GPU's NVLink ends, PCIe capability and the PCIe
// path between every pair, once. Every query may answer NOT_SUPPORTED (a
// single-GPU VM has no NVLink state at all); what is missing stays unknown.
// GPUs without a handle are left out.
func (b *Backend) readTopology() *sample.Topology {
	var gpus []gpu.TopologyGPU
	handles := map[int]nvml.Device{}
	for _, d := range b.devices {
		if d.h == nil {
			continue
		}
		handles[d.index] = d.h
		g := gpu.TopologyGPU{Index: d.index, BusID: d.bus}
		if x, ret := d.h.GetMaxPcieLinkGeneration(); ret == nvml.SUCCESS {
			g.PCIeMaxGeneration = x
		}
		if x, ret := d.h.GetMaxPcieLinkWidth(); ret == nvml.SUCCESS {
			g.PCIeMaxWidth = x
		}
		for _, l := range d.links {
			if st, ret := d.h.GetNvLinkState(l); ret != nvml.SUCCESS || st != nvml.FEATURE_ENABLED {
				continue
			}
			g.NVLinks = append(g.NVLinks, b.readNVLinkEnd(d, l))
		}
		gpus = append(gpus, g)
	}
	t := gpu.BuildTopology(gpus, func(a, c int) string {
		level, ret := handles[a].GetTopologyCommonAncestor(handles[c])
		if ret != nvml.SUCCESS {
			b.log.Debug("GPU topology common ancestor", zap.Int("gpu", a), zap.Int("peer_gpu", c),
				zap.String("error", ret.Error()))
			return ""
		}
		return pciePathName(level)
	})
	b.log.Info("GPU topology", zap.String("pairs", summarizePairs(t)))
	return t
}

func (b *Backend) readNVLinkEnd(d *device, l int) gpu.NVLinkEnd {
	var end gpu.NVLinkEnd
	if typ, ret := d.h.GetNvLinkRemoteDeviceType(l); ret == nvml.SUCCESS {
		switch typ {
		case nvml.NVLINK_DEVICE_TYPE_GPU:
			end.Remote = gpu.RemoteGPU
		case nvml.NVLINK_DEVICE_TYPE_SWITCH:
			end.Remote = gpu.RemoteSwitch
		case nvml.NVLINK_DEVICE_TYPE_IBMNPU:
			end.Remote = gpu.RemoteOther
		}
	}
	// On an HGX H200 VM every NVSwitch end answers SUCCESS with all fields
	// 0xFF: the switch is not on this host's PCI bus, so no bus ID.
	if pci, ret := d.h.GetNvLinkRemotePciInfo(l); ret == nvml.SUCCESS && pci.Domain != math.MaxUint32 {
		end.RemoteBusID = busID(pci)
	} else if ret != nvml.SUCCESS {
		b.log.Debug("NVLink remote PCI info", zap.Int("gpu", d.index), zap.Int("link", l),
			zap.String("error", ret.Error()))
	}
	if v, ret := d.h.GetNvLinkVersion(l); ret == nvml.SUCCESS {
		end.Generation = nvlinkGeneration(v)
	}
	return end
}

// nvlinkGeneration maps what nvmlDeviceGetNvLinkVersion returns, an
// nvmlNvlinkVersion_t (A100 answers 5, "3.1"; H100 6, "4.0"), to the NVLink
// major version. It is not the major version itself, although its name says
// so (hwloc #658 tripped on the same).
func nvlinkGeneration(v uint32) int {
	switch nvml.NvlinkVersion(v) {
	case nvml.NVLINK_VERSION_1_0:
		return 1
	case nvml.NVLINK_VERSION_2_0, nvml.NVLINK_VERSION_2_2:
		return 2
	case nvml.NVLINK_VERSION_3_0, nvml.NVLINK_VERSION_3_1:
		return 3
	case nvml.NVLINK_VERSION_4_0:
		return 4
	case nvml.NVLINK_VERSION_5_0:
		return 5
	case nvml.NVLINK_VERSION_6_0:
		return 6
	}
	return 0
}

// pciePathName names an NVML topology level as nvidia-smi topo -m does.
// INTERNAL (two GPUs on one board) sits behind the board's own switch: PIX.
func pciePathName(level nvml.GpuTopologyLevel) string {
	switch level {
	case nvml.TOPOLOGY_INTERNAL, nvml.TOPOLOGY_SINGLE:
		return sample.LinkPIX
	case nvml.TOPOLOGY_MULTIPLE:
		return sample.LinkPXB
	case nvml.TOPOLOGY_HOSTBRIDGE:
		return sample.LinkPHB
	case nvml.TOPOLOGY_NODE:
		return sample.LinkNODE
	case nvml.TOPOLOGY_SYSTEM:
		return sample.LinkSYS
	}
	return ""
}

// summarizePairs counts pairs by link type for the log: "NV18:28" on an HGX
// board, "PIX:4 NODE:8 SYS:16" on a PCIe-only one.
func summarizePairs(t *sample.Topology) string {
	if len(t.Pairs) == 0 {
		return "none (one GPU)"
	}
	n := map[string]int{}
	for _, p := range t.Pairs {
		link := p.Link
		if link == "" {
			link = "unknown"
		}
		n[link]++
	}
	parts := make([]string, 0, len(n))
	for link, c := range n {
		parts = append(parts, fmt.Sprintf("%s:%d", link, c))
	}
	sort.Strings(parts)
	return strings.Join(parts, " ")
}
