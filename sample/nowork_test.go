package sample

import (
	"math"
	"testing"
)

func TestGPUsNoWork(t *testing.T) {
	idle := func() GPU {
		g := GPU{Up: true, Values: NewValues()}
		g.Values.Set(Utilization, 0)
		g.Values.Set(ComputeProcesses, 0)
		return g
	}
	with := func(change func(*GPU)) GPU {
		g := idle()
		change(&g)
		return g
	}
	for _, c := range []struct {
		name string
		gpus []GPU
		want bool
	}{
		{"every GPU idle without a process", []GPU{idle(), idle()}, true},
		{"one GPU running kernels", []GPU{idle(), with(func(g *GPU) { g.Values.Set(Utilization, 0.01) })}, false},
		{"a process between kernels", []GPU{idle(), with(func(g *GPU) { g.Values.Set(ComputeProcesses, 1) })}, false},
		{"process list unknown (DCGM, a failed query)", []GPU{with(func(g *GPU) { g.Values = NewValues(); g.Values.Set(Utilization, 0) })}, false},
		{"utilization unknown", []GPU{with(func(g *GPU) { g.Values = NewValues(); g.Values.Set(ComputeProcesses, 0) })}, false},
		{"a GPU lost", []GPU{idle(), with(func(g *GPU) { g.Up = false })}, false},
		{"an MPS client", []GPU{with(func(g *GPU) { g.Values.Set(MPSProcesses, 1) })}, false},
		{"MPS clients not read yet", []GPU{with(func(g *GPU) { g.Values.Set(MPSProcesses, math.NaN()) })}, true},
		{"MIG on", []GPU{with(func(g *GPU) { g.MIGDevices = []string{"MIG-1"} })}, false},
		{"no GPU", nil, false},
	} {
		if got := (&GPUs{Devices: c.gpus}).NoWork(); got != c.want {
			t.Errorf("%s: NoWork() = %v, want %v", c.name, got, c.want)
		}
	}
	if (*GPUs)(nil).NoWork() {
		t.Error("no sample: NoWork() = true")
	}
}
