package nvmlgpu

import (
	"context"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpudiag/gpudiag/gpu/nvmlgpu/nvmlfake"
)

// busyH200Node is a 4-GPU node as the daemon sees it under a DDP job: each
// GPU an H200 with 18 NVLinks, busy with one process, answering the
// per-link data CRC error counter by query only, as H200s do on driver 580
// (its legacy per-link fields answer NOT_SUPPORTED; the replay, recovery
// and flit CRC counters answer as scoped fields).
func busyH200Node() *nvmlfake.Lib {
	gpus := make([]*nvmlfake.GPU, 4)
	for i := range gpus {
		g := nvmlfake.Hopper(i)
		g.Util = nvml.Utilization{Gpu: 100, Memory: 40}
		g.PIDs = []uint32{1000 + uint32(i)}
		for l := range g.NVLinks {
			g.NVLinkErrors[nvmlfake.NVLinkErrorKey{Link: l, Counter: nvml.NVLINK_ERROR_DL_CRC_DATA}] = uint64(l)
		}
		gpus[i] = g
	}
	return nvmlfake.New(gpus...)
}

// callsPerSample samples lib once a second for n seconds, after a first
// sample that plans what each GPU answers, and returns the NVML queries
// made per sample.
func callsPerSample(tb testing.TB, lib *nvmlfake.Lib, n int) float64 {
	tb.Helper()
	clk := newClock()
	b, err := Open(lib, Options{Now: clk.now})
	if err != nil {
		tb.Fatal(err)
	}
	defer b.Close()
	if _, err := b.Sample(context.Background()); err != nil {
		tb.Fatal(err)
	}
	before := lib.Calls()
	for range n {
		clk.advance(time.Second)
		if _, err := b.Sample(context.Background()); err != nil {
			tb.Fatal(err)
		}
	}
	return float64(lib.Calls()-before) / float64(n)
}

// BenchmarkNVMLCallsPerSample reports the NVML queries a sample of a busy
// 4-GPU H200 node makes, averaged over 10 minutes of samples: the count,
// not the time, is what the fake can tell (TestNVMLCallCost times the
// calls on real GPUs).
func BenchmarkNVMLCallsPerSample(b *testing.B) {
	var calls float64
	for b.Loop() {
		calls = callsPerSample(b, busyH200Node(), 600)
	}
	b.ReportMetric(calls, "calls/sample")
	b.ReportMetric(calls/4, "calls/sample/gpu")
}

// Every NVML query a sample of a busy H200 makes, by the tier that reads
// it: how many of each one read of the tier makes, and every how many
// samples (1 s apart) the tier reads. A query missing here fails the
// test: each has a tier. Before issue 41 the per-link NVLink error
// counters (18 data CRC queries here, and the flit CRC, replay and
// recovery fields) were read with the slow tier: 13.95 queries a GPU a
// sample against 12.35, and on an H200 ~34 ms of driver CPU every 10 s
// against every 60 s.
var nvmlCallTiers = []struct {
	tier  string
	every int // samples; 0: not after the first sample
	calls map[string]int
}{
	{"every sample", 1, map[string]int{"GetUtilizationRates": 1, "GetClockInfo": 2, "GetCurrentClocksEventReasons": 1,
		"GetPowerUsage": 1, "GetCurrPcieLinkGeneration": 1, "GpmSampleGet": 1}},
	{"process list, busy with one process (processListInterval)", 5, map[string]int{"GetComputeRunningProcesses": 1}},
	{"slow (DefaultSlowInterval)", 10, map[string]int{"GetNvLinkState": 18, "GetFieldValues": 1, "GetMemoryErrorCounter": 8,
		"GetMemoryInfo_v2": 1, "GetTemperature": 1, "GetMPSComputeRunningProcesses": 1, "GetEnforcedPowerLimit": 1,
		"GetPersistenceMode": 1, "GetComputeMode": 1, "GetGpuFabricInfo": 1, "GetCurrPcieLinkWidth": 1,
		"GetDecoderUtilization": 1, "GetEncoderUtilization": 1, "GetRemappedRows": 1}},
	// The flit CRC, replay and recovery fields ride in the slow tier's
	// GetFieldValues call.
	{"link errors (linkErrorInterval)", 60, map[string]int{"GetNvLinkErrorCounter": 18}},
	{"modes (modesInterval)", 60, map[string]int{"GetEccMode": 1, "GetMigMode": 1}},
	{"energy (energyInterval)", 60, map[string]int{"GetTotalEnergyConsumption": 1}},
	{"once (board and link facts, learnt at Open and the first read)", 0, map[string]int{"GetMaxClockInfo": 0,
		"GetMaxPcieLinkGeneration": 0, "GetMaxPcieLinkWidth": 0, "GetNvLinkVersion": 0, "GetNvLinkRemoteDeviceType": 0,
		"GetNvLinkRemotePciInfo": 0, "GetTopologyCommonAncestor": 0, "GetPcieReplayCounter": 0}},
}

func TestNVMLCallsByTier(t *testing.T) {
	const samples = 600
	lib := busyH200Node()
	for _, g := range lib.GPUs {
		g.Calls = nil
	}
	clk := newClock()
	b, err := Open(lib, Options{Now: clk.now})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if _, err := b.Sample(context.Background()); err != nil {
		t.Fatal(err)
	}
	atFirst := map[string]int{}
	for name, n := range lib.GPUs[0].Calls {
		atFirst[name] = n
	}
	for range samples {
		clk.advance(time.Second)
		if _, err := b.Sample(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	tierOf := map[string]string{}
	for _, tier := range nvmlCallTiers {
		for name, perRead := range tier.calls {
			tierOf[name] = tier.tier
			want := 0
			if tier.every > 0 {
				want = samples / tier.every * perRead
			}
			if n := lib.GPUs[0].CallCount(name) - atFirst[name]; n != want {
				t.Errorf("%s (%s): %d calls in %d samples; want %d", name, tier.tier, n, samples, want)
			}
		}
	}
	for name := range lib.GPUs[0].Calls {
		if _, ok := tierOf[name]; !ok {
			t.Errorf("%s has no tier in nvmlCallTiers", name)
		}
	}
}
