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
