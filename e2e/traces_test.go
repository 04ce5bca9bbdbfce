package e2e

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"testing"
	"time"

	"github.com/gpudiag/gpudiag/gpu/nvmlgpu/nvmlfake"
	"github.com/gpudiag/gpudiag/record"
	"github.com/gpudiag/gpudiag/sample"
)

// readTrace reads a recorded trace whole.
func readTrace(t *testing.T, path string) []record.Frame {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r, err := record.NewReader(f)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	var out []record.Frame
	for {
		fr, err := r.Next()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		out = append(out, fr)
	}
}

// writeTrace writes frames to a new trace, each frame's sample transformed
// by edit (nil keeps it) and its time moved by shift. A replayed trace
// carries the time it was recorded at; shifted to start now and replayed at
// speed 1, the daemon's clock, its freshness and its
// gpudiag_collector_last_success_timestamp_seconds follow the wall clock as
// on a live node.
func writeTrace(t *testing.T, path string, frames []record.Frame, shift time.Duration,
	edit func(collector string, at time.Duration, raw json.RawMessage) any) {
	t.Helper()
	w, err := record.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	start := frames[0].Time()
	for _, fr := range frames {
		var s any = fr.Sample
		if edit != nil {
			if e := edit(fr.Collector, fr.Time().Sub(start), fr.Sample); e != nil {
				s = e
			}
		}
		if err := w.Write(fr.Collector, fr.Time().Add(shift), s); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
}

// Fake 8-GPU node: what it is built from and how it differs.
const (
	fakeGPUs = 8
	// fakeNVLinks and fakeNVLinkBytesPerSecond model an HGX H100/H200 board:
	// 18 NVLink 4 links of 25 GB/s one way per GPU, through NVSwitches.
	fakeNVLinks              = 18
	fakeNVLinkBytesPerSecond = 25e9
	// fakeStragglerGPU computes at fakeStragglerScale of its peers' SM
	// activity and CPU time: with the GEMM's ~0.88, about 0.40, which is
	// compute by the daemon's rules (≥ SMActiveStarved, its process under
	// one core) and below StragglerRatio (0.6) of the median.
	fakeStragglerGPU   = 7
	fakeStragglerScale = 0.45
	// fakeXIDGPU reports fakeXID (31, a GPU memory page fault: an
	// application error, so a warning) from the middle of the trace on.
	fakeXIDGPU = 3
	fakeXID    = 31
	// fakeNVLinkErrorGPU's link fakeNVLinkErrorLink counts fakeNVLinkReplays
	// replayed transmissions from the middle of the trace on; every other
	// link reports its error counters at zero, as a healthy Hopper does.
	fakeNVLinkErrorGPU  = 5
	fakeNVLinkErrorLink = 2
	fakeNVLinkReplays   = 3
)

// fakeEightGPUNode turns a single-GPU trace into an 8-GPU HGX-like node: the
// recorded GPU's readings copied to 8 GPUs on the reference host's PCI buses,
// with 18 NVLinks each and an NVSwitch topology, one straggling GPU, one
// XID and one link that starts replaying. Host collectors' samples are kept (the GPU processes' groups copied to
// every GPU). It is a fake built from real readings: it exercises the rules,
// dashboards and series counts of an 8-GPU node, and proves nothing about
// real 8-GPU hardware.
func fakeEightGPUNode(t *testing.T, frames []record.Frame) func(string, time.Duration, json.RawMessage) any {
	t.Helper()
	var span time.Duration
	if len(frames) > 0 {
		span = frames[len(frames)-1].Time().Sub(frames[0].Time())
	}
	return func(collector string, at time.Duration, raw json.RawMessage) any {
		switch collector {
		case "gpu":
			var s sample.GPUs
			if err := json.Unmarshal(raw, &s); err != nil || len(s.Devices) == 0 {
				t.Fatalf("gpu sample: %v", err)
			}
			src := s.Devices[0]
			s.Devices = make([]sample.GPU, fakeGPUs)
			topo := &sample.Topology{}
			var pcieMax float64
			if g, ok := s.Topology.GPU(src.Index); ok {
				pcieMax = g.PCIeMaxBytesPerSecond
			}
			for i := range s.Devices {
				g := src
				g.Index = i
				g.UUID = fmt.Sprintf("GPU-fa6e0000-0000-0000-0000-%012d", i)
				g.PCIBusID = fmt.Sprintf("0000:%02x:00.0", nvmlfake.ReferenceBuses[i])
				g.Links = make([]sample.NVLink, fakeNVLinks)
				for l := range g.Links {
					g.Links[l] = sample.NVLink{Link: l, Up: true}
					for k := range sample.NumNVLinkErrorKinds {
						g.Links[l].Errors.Set(k, 0)
					}
					if i == fakeNVLinkErrorGPU && l == fakeNVLinkErrorLink && at >= span/2 {
						g.Links[l].Errors.Set(sample.NVLinkReplay, fakeNVLinkReplays)
					}
				}
				if i == fakeStragglerGPU {
					for _, f := range []sample.Field{sample.SMActive, sample.SMOccupancy, sample.TensorActive,
						sample.TensorHMMAActive, sample.SMActiveSecondsTotal, sample.TensorActiveSecondsTotal} {
						if x, ok := g.Values.Get(f); ok {
							g.Values.Set(f, x*fakeStragglerScale)
						}
					}
				}
				if i == fakeXIDGPU && at >= span/2 {
					g.XIDErrors = map[uint64]uint64{fakeXID: 1}
				}
				s.Devices[i] = g
				topo.GPUs = append(topo.GPUs, sample.GPULinkCapacity{Index: i, PCIeMaxBytesPerSecond: pcieMax,
					NVLinks: fakeNVLinks, NVLinkMaxBytesPerSecond: fakeNVLinks * fakeNVLinkBytesPerSecond})
				for j := i + 1; j < fakeGPUs; j++ {
					path := sample.LinkNODE
					if i/4 != j/4 {
						path = sample.LinkSYS
					}
					topo.Pairs = append(topo.Pairs, sample.GPUPair{A: i, B: j, Link: fmt.Sprintf("NV%d", fakeNVLinks),
						NVLinks: fakeNVLinks, ViaSwitch: true, PCIePath: path,
						ExpectedBytesPerSecond: fakeNVLinks * fakeNVLinkBytesPerSecond})
				}
			}
			s.Topology = topo
			return &s
		case "gpuprocess":
			var s sample.GPUProcesses
			if err := json.Unmarshal(raw, &s); err != nil {
				t.Fatalf("gpuprocess sample: %v", err)
			}
			if len(s.GPUs) == 0 {
				return nil
			}
			// The recording VM does not know its GPU's NUMA node; the fake
			// puts GPUs 0-3 on node 0 and 4-7 on node 1 as the reference host
			// does, with the processes' memory local and their CPUs
			// unpinned (allowed on both nodes), so the placement series exist.
			src := s.GPUs[0]
			s.GPUs = make([]sample.GPUProcessGroup, fakeGPUs)
			local, offNode := 0.0, 0.5
			for i := range s.GPUs {
				g := src
				g.GPU = i
				g.PCIBusID = fmt.Sprintf("0000:%02x:00.0", nvmlfake.ReferenceBuses[i])
				g.NUMANode = i / 4
				g.RemoteMemoryRatio, g.CPUsOffNodeRatio = &local, &offNode
				if i == fakeStragglerGPU {
					// Its process launches fewer kernels, and spins less.
					g.CPUCoresUsed *= fakeStragglerScale
					g.UserSecondsTotal *= fakeStragglerScale
					g.SystemSecondsTotal *= fakeStragglerScale
				}
				s.GPUs[i] = g
			}
			return &s
		case "tcp":
			var s sample.TCP
			if err := json.Unmarshal(raw, &s); err != nil {
				t.Fatalf("tcp sample: %v", err)
			}
			if len(s.GPUs) == 0 {
				return nil
			}
			src := s.GPUs[0]
			s.GPUs = make([]sample.TCPGPU, fakeGPUs)
			for i := range s.GPUs {
				g := src
				g.Index = i
				s.GPUs[i] = g
			}
			return &s
		}
		return nil
	}
}
