package main

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpudiag/gpudiag/engine"
	"github.com/gpudiag/gpudiag/sample"
)

// --metrics.gpu-identity-labels reaches /metrics' gatherer: off, a GPU
// series has its gpu label alone; on, the GPU's uuid, model, pod,
// namespace and container too (collectors.TestGPUIdentityLabels checks
// every GPU series of every collector).
func TestGPUIdentityLabelsFlag(t *testing.T) {
	for _, on := range []bool{false, true} {
		args := []string{}
		if on {
			args = append(args, "--metrics.gpu-identity-labels")
		}
		o, err := parseFlags(args)
		if err != nil {
			t.Fatal(err)
		}
		if o.gpuIdentity != on {
			t.Fatalf("flag %v parsed as %v", on, o.gpuIdentity)
		}
		w := engine.NewWindow(time.Minute, 1<<20)
		now := time.Unix(1_700_000_000, 0)
		w.Add(sample.GPUKey.Name(), now, &sample.GPUs{Devices: []sample.GPU{{Index: 0, UUID: "GPU-1234", Model: "NVIDIA H200", Up: true, Values: sample.NewValues()}}})
		w.Add(sample.PodResourcesKey.Name(), now, &sample.PodResources{Available: true, Assignments: []sample.DeviceAssignment{
			{Namespace: "ml", Pod: "train-0", Container: "main", DeviceID: "GPU-1234"}}})
		reg := prometheus.NewRegistry()
		power := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "gpudiag_gpu_test_watts", Help: "A GPU series."}, []string{"gpu"})
		power.WithLabelValues("0").Set(300)
		reg.MustRegister(power)
		d := &daemon{o: o, window: w, reg: reg, eng: engine.New(engine.Options{Interval: time.Second}), now: func() time.Time { return now }}
		mfs, err := d.gatherer().Gather()
		if err != nil {
			t.Fatal(err)
		}
		found := false
		for _, mf := range mfs {
			if mf.GetName() != "gpudiag_gpu_test_watts" {
				continue
			}
			found = true
			got := map[string]string{}
			for _, lp := range mf.GetMetric()[0].GetLabel() {
				got[lp.GetName()] = lp.GetValue()
			}
			want := map[string]string{"gpu": "0"}
			if on {
				want = map[string]string{"gpu": "0", "uuid": "GPU-1234", "model": "NVIDIA H200", "pod": "train-0", "namespace": "ml", "container": "main"}
			}
			if len(got) != len(want) {
				t.Errorf("identity labels %v: %v; want %v", on, got, want)
			}
			for k, v := range want {
				if got[k] != v {
					t.Errorf("identity labels %v: %s=%q; want %q", on, k, got[k], v)
				}
			}
		}
		if !found {
			t.Fatal("the GPU series is missing")
		}
	}
}
