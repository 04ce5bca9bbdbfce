package fabricsim

import (
	"encoding/json"
	"fmt"
	"hash/fnv"
	"strings"

	"github.com/gpudiag/gpudiag/nccl"
	"github.com/gpudiag/gpudiag/sample"
)

// NCCLLog returns the NCCL_DEBUG=INFO log of the rank of GPU k on node n,
// as NCCL 2.28 writes it (line formats: nccl/testdata and NVIDIA/nccl
// issue logs; see docs/simulation.md). Ranks are numbered node-major
// (rank = node × local GPUs + k). Each rank talks to the rank of the same
// GPU index on the next node (send) and the previous node (receive) over
// its HCA, on every channel: a rail-aligned ring, so no intra-node
// traffic (the base's NVLink counters are zero).
func (m *sim) NCCLLog(n, k int) string {
	s := m.s
	local := m.nGPU
	nranks := s.Nodes * local
	rank := n*local + k
	pid := m.pids[k]
	prefix := fmt.Sprintf("%s:%d:%d [%d] NCCL INFO ", m.host, pid, pid, k)
	var b strings.Builder
	line := func(format string, a ...any) {
		b.WriteString(prefix)
		fmt.Fprintf(&b, format, a...)
		b.WriteByte('\n')
	}
	h := fnv.New64a()
	h.Write([]byte(s.Name))
	commID := h.Sum64()
	commPtr := 0x5500000 + uint64(k)*0x100000 + uint64(n)*0x10000

	line("NCCL version %s", s.NCCL.Version)
	var devs []string
	for i, x := range s.HCAs {
		ll := "IB"
		if x.LinkLayer == "Ethernet" {
			ll = "RoCE"
		}
		devs = append(devs, fmt.Sprintf("[%d]%s:%d/%s", i, x.Device, x.Port, ll))
	}
	first := s.HCAs[0]
	line("NET/IB : Using %s [RO]; OOB %s:10.%d.0.%d<0>", strings.Join(devs, " "), netDev(first, m.lay.hcaBus(0)), n/250, n%250+1)
	line("Using network IB")
	bus := busIDHex(m.lay.gpuBus(k))
	line("ncclCommInitRankConfig comm 0x%x rank %d nranks %d cudaDev %d nvmlDev %d busId %s commId 0x%016x - Init START",
		commPtr, rank, nranks, k, k, bus, commID)
	j := s.NCCL.HCAOfGPU[k]
	gdr := m.gdr(n, k)
	if s.NCCL.GDR && !m.peermem(n) || !s.NCCL.GDR {
		line(s.NCCL.GDRNote, j, s.HCAs[j].Device)
	}
	line("comm 0x%x rank %d nRanks %d nNodes %d localRanks %d localRank %d MNNVL 0", commPtr, rank, nranks, s.Nodes, local, k)
	if s.Nodes > 1 {
		next := ((n+1)%s.Nodes)*local + k
		prev := ((n-1+s.Nodes)%s.Nodes)*local + k
		path := fmt.Sprintf("NET/IB/%d", j)
		if gdr {
			path += "/GDRDMA"
		}
		for c := range s.NCCL.Channels {
			line("Channel %02d/0 : %d[%d] -> %d[%d] [receive] via %s", c, prev, k, rank, k, path)
			line("Channel %02d/0 : %d[%d] -> %d[%d] [send] via %s", c, rank, k, next, k, path)
		}
	}
	line("Connected all rings, use ring PXN 0 GDR %d", btoi(gdr))
	line("ncclCommInitRankConfig comm 0x%x rank %d nranks %d cudaDev %d nvmlDev %d busId %s commId 0x%016x - Init COMPLETE",
		commPtr, rank, nranks, k, k, bus, commID)
	return b.String()
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// busIDHex is a bus ID as NCCL prints busId: 0000:1b:00.0 → 1b000.
func busIDHex(bus string) string {
	var dom, b, d, f int
	fmt.Sscanf(bus, "%x:%x:%x.%x", &dom, &b, &d, &f)
	return fmt.Sprintf("%x", dom<<20|b<<12|d<<4|f)
}

// ncclSample is node n's nccl sample: each local rank's log parsed by
// package nccl (as the nccl collector parses the files it follows) and
// turned into the sample as the collector does (collectors/nccl.go,
// Summary.Sample), one file per rank, every GPU matched by bus ID.
func (m *sim) ncclSample(n int) (json.RawMessage, error) {
	out := sample.NCCL{}
	local := map[int]bool{}
	for k := range m.nGPU {
		local[n*m.nGPU+k] = true
	}
	isLocal := func(_ string, rank int) bool { return local[rank] }
	for k := range m.nGPU {
		text := m.NCCLLog(n, k)
		l := nccl.NewLog()
		for _, ln := range strings.Split(strings.TrimSuffix(text, "\n"), "\n") {
			l.Feed([]byte(ln))
		}
		sums := l.Summaries()
		if len(sums) != 1 {
			return nil, fmt.Errorf("NCCL log of GPU %d parsed into %d processes, want 1", k, len(sums))
		}
		file := sample.NCCLFile{
			Path:   fmt.Sprintf("/tmp/nccl-logs/%s.%s.%d.log", m.s.Name, m.host, m.pids[k]),
			Exists: true,
		}
		p := sums[0].Sample(sums[0].Fallbacks(isLocal))
		p.Current = true
		file.Processes = append(file.Processes, p)
		out.Files = append(out.Files, file)
		out.GPUs = append(out.GPUs, sample.NCCLGPU{GPU: k, PCIBusID: m.lay.gpuBus(k), Matched: true, File: k, Process: 0})
		out.LinesTotal += l.Lines()
		out.BytesTotal += uint64(len(text))
	}
	return json.Marshal(&out)
}
