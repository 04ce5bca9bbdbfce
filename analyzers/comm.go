package analyzers

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/gpudiag/gpudiag/engine"
	"github.com/gpudiag/gpudiag/sample"
)

// Evidence about the communication path: TCP bytes of the GPU processes
// (tcp collector) and what NCCL's own log says it did (nccl collector).
func init() {
	hostEvidence = append(hostEvidence, tcpEvidence, ncclEvidence)
}

// tcpEvidence is the exact mean TCP throughput (both directions, both
// scopes) of each GPU's processes over the span: (last total − first total)
// divided by the time between the two readings.
func tcpEvidence(w *engine.Window, since time.Time, in *Input) {
	es := w.Range("tcp", since)
	if len(es) < 2 {
		return
	}
	first, ok1 := es[0].Sample.(*sample.TCP)
	last, ok2 := es[len(es)-1].Sample.(*sample.TCP)
	secs := es[len(es)-1].Time.Sub(es[0].Time).Seconds()
	if !ok1 || !ok2 || secs <= 0 {
		return
	}
	total := func(g sample.TCPGPU) float64 {
		return float64(g.Loopback.TransmitBytesTotal + g.Loopback.ReceiveBytesTotal + g.Network.TransmitBytesTotal + g.Network.ReceiveBytesTotal)
	}
	before := map[int]float64{}
	for _, g := range first.GPUs {
		before[g.Index] = total(g)
	}
	for _, g := range last.GPUs {
		b, ok := before[g.Index]
		if !ok {
			continue
		}
		for i := range in.GPUs {
			if in.GPUs[i].Index == g.Index {
				in.GPUs[i].ProcessTCPBytes = sample.CounterDelta(b, total(g)) / secs
			}
		}
	}
}

// ncclEvidence attaches the newest NCCL facts of each GPU: transports used
// and fallbacks, and keeps the sample for the audit.
func ncclEvidence(w *engine.Window, since time.Time, in *Input) {
	e, ok := w.Latest("nccl")
	if !ok {
		return
	}
	s, ok := e.Sample.(*sample.NCCL)
	if !ok || len(s.GPUs) == 0 {
		return
	}
	in.Audit.NCCL = s
	for _, g := range s.GPUs {
		p := s.Process(g)
		if !p.Current {
			continue
		}
		for i := range in.GPUs {
			if in.GPUs[i].Index != g.GPU {
				continue
			}
			for _, t := range p.Transports {
				in.GPUs[i].NCCLTransports = append(in.GPUs[i].NCCLTransports, t.Transport)
			}
			for _, f := range p.Fallbacks {
				in.GPUs[i].NCCLFallbacks = append(in.GPUs[i].NCCLFallbacks, f.Kind)
			}
		}
	}
}

// ncclOverrides are the settings that, set by hand, make NCCL take a slower
// path than the hardware offers; the audit names them.
var ncclOverrides = map[string]string{
	"NCCL_P2P_DISABLE":   "1",
	"NCCL_SHM_DISABLE":   "1",
	"NCCL_IB_DISABLE":    "1",
	"NCCL_NET":           "Socket",
	"NCCL_NET_GDR_LEVEL": "",
	"NCCL_P2P_LEVEL":     "",
	"NCCL_ALGO":          "",
	"NCCL_PROTO":         "",
}

// auditNCCL reports each fallback NCCL's log shows, naming the process, the
// path it took and the path it should have taken, and the environment
// overrides behind it.
func auditNCCL(s *sample.NCCL) []Finding {
	var out []Finding
	for _, g := range s.GPUs {
		p := s.Process(g)
		if !p.Current {
			continue
		}
		idx := g.GPU
		for _, f := range p.Fallbacks {
			taken := f.Taken
			if taken == "" {
				taken = "a slower path"
			}
			out = append(out, Finding{Check: "nccl_fallback", Severity: SeverityWarning, GPU: &idx, Device: f.Kind,
				Summary: fmt.Sprintf("NCCL (pid %d on %s) uses %s where %s was expected: %s", p.PID, p.Host, taken, f.Expected, f.Evidence),
				Fix:     ncclFix(f.Kind)})
		}
		var set []string
		for _, e := range p.Env {
			want, ok := ncclOverrides[e.Name]
			if ok && (want == "" || strings.EqualFold(e.Value, want)) {
				set = append(set, e.Name+"="+e.Value)
			}
		}
		if len(set) > 0 {
			sort.Strings(set)
			out = append(out, Finding{Check: "nccl_env_override", Severity: SeverityInfo, GPU: &idx,
				Summary: fmt.Sprintf("NCCL settings forced by environment in pid %d: %s", p.PID, strings.Join(set, ", ")),
				Fix:     "remove the override unless it works around a known problem; NCCL's defaults pick the fastest path the topology offers"})
		}
	}
	return out
}

func ncclFix(kind string) string {
	switch kind {
	case "p2p_disabled":
		return "GPU-to-GPU traffic goes through host shared memory: unset NCCL_P2P_DISABLE (and any restrictive NCCL_P2P_LEVEL) and check that the GPUs can reach each other (nvidia-smi topo -p2p r)"
	case "shm_disabled":
		return "unset NCCL_SHM_DISABLE: without P2P and shared memory NCCL falls back to sockets"
	case "socket_instead_of_ib":
		return "NCCL uses TCP sockets: check NCCL_NET/NCCL_IB_DISABLE, that the RDMA ports are active (ibstat), and that the container sees /dev/infiniband"
	case "ib_without_gdr":
		return "load nvidia_peermem (or use DMA-BUF), check NCCL_NET_GDR_LEVEL and that GPU and NIC share a PCIe switch"
	case "p2p_copy_fallback":
		return "P2P could not be enabled between these GPUs: check IOMMU/ACS settings and that the GPUs are in the same PCIe or NVLink domain"
	case "net_within_node":
		return "ranks on one node talk over the network: give the job's containers the same host network/IPC namespace or hostname so NCCL sees them as one node"
	}
	return "read the NCCL_DEBUG=INFO log of the process"
}
