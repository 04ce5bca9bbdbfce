package collectors

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"

	"github.com/gpudiag/gpudiag/engine"
	"github.com/gpudiag/gpudiag/sample"
)

func labelsOf(m *dto.Metric) map[string]string {
	out := map[string]string{}
	for _, lp := range m.GetLabel() {
		out[lp.GetName()] = lp.GetValue()
	}
	return out
}

func staticGatherer(mfs []*dto.MetricFamily) prometheus.Gatherer {
	return prometheus.GathererFunc(func() ([]*dto.MetricFamily, error) { return mfs, nil })
}

// Off (the gatherer as the daemon serves it by default), no GPU series but
// gpudiag_gpu_info carries an identity label; on, every gpudiag_gpu_*
// series with a gpu label carries all five, with the GPU's UUID and model
// and the pod the kubelet assigned it (empty for the GPU no pod holds),
// and the families the engine keeps are left as they were.
func TestGPUIdentityLabels(t *testing.T) {
	mfs, w := gatherAllWindow(t)
	for _, mf := range mfs {
		if !strings.HasPrefix(mf.GetName(), "gpudiag_gpu_") || mf.GetName() == "gpudiag_gpu_info" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, name := range GPUIdentityLabels {
				if _, ok := labelsOf(m)[name]; ok {
					t.Fatalf("off: %s has %s", mf.GetName(), name)
				}
			}
		}
	}
	gpus, _ := engine.Latest(w, sample.GPUKey)
	uuid0, uuid1 := gpus.Sample.Devices[0].UUID, gpus.Sample.Devices[1].UUID
	w.Add(sample.PodResourcesKey.Name(), time.Now(), &sample.PodResources{Available: true, Assignments: []sample.DeviceAssignment{
		{Namespace: "team-a", Pod: "train-0", Container: "worker", Resource: "nvidia.com/gpu", DeviceID: uuid0}}})

	on, err := WithGPUIdentityLabels(staticGatherer(mfs), w, time.Now).Gather()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]map[string]string{
		"0": {"uuid": uuid0, "model": "NVIDIA H100 80GB HBM3", "namespace": "team-a", "pod": "train-0", "container": "worker"},
		"1": {"uuid": uuid1, "model": "NVIDIA H100 80GB HBM3", "namespace": "", "pod": "", "container": ""},
	}
	families := 0
	for _, mf := range on {
		if !strings.HasPrefix(mf.GetName(), "gpudiag_gpu_") {
			continue
		}
		labelled := false
		for _, m := range mf.GetMetric() {
			l := labelsOf(m)
			gpu, ok := l["gpu"]
			if !ok || gpu == "" {
				continue
			}
			labelled = true
			for name, v := range want[gpu] {
				if got, ok := l[name]; !ok || got != v {
					t.Errorf("%s{gpu=%q}: %s=%q (present %v); want %q", mf.GetName(), gpu, name, got, ok, v)
				}
			}
			for i := 1; i < len(m.GetLabel()); i++ {
				if m.GetLabel()[i-1].GetName() >= m.GetLabel()[i].GetName() {
					t.Errorf("%s: labels not sorted: %v", mf.GetName(), m.GetLabel())
				}
			}
		}
		if labelled {
			families++
		}
	}
	if families < 50 {
		t.Errorf("only %d GPU families labelled", families)
	}
	var b strings.Builder
	for _, mf := range on {
		if _, err := expfmt.MetricFamilyToText(&b, mf); err != nil {
			t.Fatalf("%s: %v", mf.GetName(), err)
		}
	}
	// The engine's own families are untouched.
	for _, mf := range mfs {
		if mf.GetName() == "gpudiag_gpu_power_watts" {
			if _, ok := labelsOf(mf.GetMetric()[0])["pod"]; ok {
				t.Fatal("the wrapped gatherer's family was changed")
			}
		}
	}
}

// A MIG GPU instance's series name the pods of its own MIG devices; the
// GPU's series, every pod on the GPU; gpu_info keeps its own uuid and
// model; series without a GPU, or of another subsystem, are as they were.
// A kubelet answer that aged out names no pod.
func TestGPUIdentityLabelsMIG(t *testing.T) {
	w := engine.NewWindow(time.Minute, 1<<20)
	now := time.Unix(1_700_000_000, 0)
	w.Add(sample.GPUKey.Name(), now, &sample.GPUs{Devices: []sample.GPU{{Index: 0, UUID: "GPU-x", Model: "NVIDIA H200", Up: true,
		Values: sample.NewValues(), MIGDevices: []string{"MIG-a", "MIG-b"},
		MIGInstances: []sample.MIGInstance{{GPUInstance: 1, Devices: []string{"MIG-a"}}, {GPUInstance: 2, Devices: []string{"MIG-b"}}}}}})
	w.Add(sample.PodResourcesKey.Name(), now, &sample.PodResources{Available: true, IntervalSeconds: 10, Assignments: []sample.DeviceAssignment{
		{Namespace: "ns", Pod: "b", Container: "c", DeviceID: "MIG-b"},
		{Namespace: "ns", Pod: "a", Container: "c", DeviceID: "MIG-a"}}})
	gauge := func(name string, labels ...string) *dto.MetricFamily {
		mf := &dto.MetricFamily{Name: &name, Type: dto.MetricType_GAUGE.Enum()}
		m := &dto.Metric{Gauge: &dto.Gauge{Value: new(float64)}}
		for i := 0; i < len(labels); i += 2 {
			m.Label = append(m.Label, &dto.LabelPair{Name: &labels[i], Value: &labels[i+1]})
		}
		mf.Metric = []*dto.Metric{m}
		return mf
	}
	in := []*dto.MetricFamily{
		gauge("gpudiag_gpu_info", "gpu", "0", "model", "own", "uuid", "own"),
		gauge("gpudiag_gpu_mig_sm_active_ratio", "gpu", "0", "gpu_instance", "1"),
		gauge("gpudiag_gpu_mig_sm_active_ratio", "gpu", "0", "gpu_instance", "2"),
		gauge("gpudiag_gpu_numa_info", "gpu", ""),
		gauge("gpudiag_gpu_power_watts", "gpu", "0"),
		gauge("gpudiag_node_bottleneck", "class", "idle"),
	}
	gather := func(at time.Time) []map[string]string {
		out, err := WithGPUIdentityLabels(staticGatherer(in), w, func() time.Time { return at }).Gather()
		if err != nil {
			t.Fatal(err)
		}
		var ls []map[string]string
		for _, mf := range out {
			ls = append(ls, labelsOf(mf.GetMetric()[0]))
		}
		return ls
	}
	got := gather(now.Add(time.Second))
	for i, want := range []map[string]string{
		{"uuid": "own", "model": "own", "pod": "a,b"},
		{"pod": "a", "namespace": "ns", "uuid": "GPU-x", "model": "NVIDIA H200"},
		{"pod": "b"},
		{"pod": "<absent>"},
		{"pod": "a,b", "container": "c"},
		{"pod": "<absent>"},
	} {
		for k, v := range want {
			g, ok := got[i][k]
			if !ok {
				g = "<absent>"
			}
			if g != v {
				t.Errorf("%s: %s=%q; want %q", *in[i].Name, k, g, v)
			}
		}
	}
	if aged := gather(now.Add(time.Minute)); aged[4]["pod"] != "" || aged[4]["uuid"] != "GPU-x" {
		t.Errorf("aged-out kubelet answer: %v", aged[4])
	}
}
