package collectors

import (
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/gpudiag/gpudiag/engine"
	"github.com/gpudiag/gpudiag/safetext"
	"github.com/gpudiag/gpudiag/sample"
)

// GPUIdentityLabels are the labels --metrics.gpu-identity-labels puts on
// every gpudiag_gpu_* series with a gpu label, as dcgm-exporter labels its
// series: the GPU's UUID and model, and the Kubernetes pod, namespace and
// container holding it (from the kubelet's PodResources API; empty when no
// pod holds the GPU, or off Kubernetes). A series of a MIG GPU instance
// (gpu_instance) is labelled with the pods of that instance's MIG devices.
// A GPU shared by several pods (time-slicing, MIG without gpu_instance)
// has their names joined by commas, sorted.
//
// Under a ServiceMonitor, namespace, pod and container are also the
// target's labels: set honorLabels: true, as dcgm-exporter asks, or
// Prometheus renames these exported_namespace, exported_pod and
// exported_container.
var GPUIdentityLabels = []string{"container", "model", "namespace", "pod", "uuid"}

// gpuIdentity is the label pairs of GPUIdentityLabels for one GPU or GPU
// instance, in that order; made once a scrape and shared by its series
// (the encoder only reads them).
type gpuIdentity [5]*dto.LabelPair

// WithGPUIdentityLabels wraps the gatherer of /metrics so that every
// gpudiag_gpu_* series with a non-empty gpu label carries
// GPUIdentityLabels, from the newest GPU and podresources samples of the
// window (the pods only while the kubelet's answer has not aged out at
// now). A series that has a label of the same name already (gpu_info's
// uuid and model) keeps its own. The families the wrapped gatherer
// returns are not changed: the engine keeps them from one scrape to the
// next.
//
// The cost is the labels' cardinality: every GPU series gains five label
// values, and a series of a GPU that a new pod takes is a new series (as
// under dcgm-exporter); the number of series is unchanged.
func WithGPUIdentityLabels(g prometheus.Gatherer, w *engine.Window, now func() time.Time) prometheus.Gatherer {
	return prometheus.GathererFunc(func() ([]*dto.MetricFamily, error) {
		mfs, err := g.Gather()
		ids := gpuIdentities(w, now())
		if len(ids) == 0 {
			return mfs, err
		}
		out := make([]*dto.MetricFamily, len(mfs))
		for i, mf := range mfs {
			out[i] = labelGPUFamily(mf, ids)
		}
		return out, err
	})
}

// gpuIdentities maps "gpu" and "gpu/gpu_instance" label values to their
// identity.
func gpuIdentities(w *engine.Window, now time.Time) map[string]gpuIdentity {
	gs, ok := engine.Latest(w, sample.GPUKey)
	if !ok || gs.Sample == nil || len(gs.Sample.Devices) == 0 {
		return nil
	}
	holders := map[string][]sample.DeviceAssignment{}
	if pr, ok := engine.Latest(w, sample.PodResourcesKey); ok && pr.Sample != nil && !pr.Sample.AgedOut(pr.Time, now) {
		for _, a := range pr.Sample.Assignments {
			holders[a.DeviceID] = append(holders[a.DeviceID], a)
		}
	}
	ids := make(map[string]gpuIdentity, len(gs.Sample.Devices))
	for i := range gs.Sample.Devices {
		d := &gs.Sample.Devices[i]
		gpu := strconv.Itoa(d.Index)
		devices := append([]string{d.UUID}, d.MIGDevices...)
		ids[gpu] = identityOf(d, devices, holders)
		for _, m := range d.MIGInstances {
			ids[gpu+"/"+strconv.Itoa(m.GPUInstance)] = identityOf(d, m.Devices, holders)
		}
	}
	return ids
}

// identityOf is a GPU's identity with the pods holding any of devices.
func identityOf(d *sample.GPU, devices []string, holders map[string][]sample.DeviceAssignment) gpuIdentity {
	var ns, pods, containers []string
	for _, dev := range devices {
		for _, a := range holders[dev] {
			ns, pods, containers = append(ns, a.Namespace), append(pods, a.Pod), append(containers, a.Container)
		}
	}
	join := func(vs []string) string {
		slices.Sort(vs)
		return strings.Join(slices.Compact(vs), ",")
	}
	var id gpuIdentity
	for i, v := range []string{join(containers), d.Model, join(ns), join(pods), d.UUID} {
		id[i] = &dto.LabelPair{Name: &GPUIdentityLabels[i], Value: ptrTo(safetext.Label(v))}
	}
	return id
}

func ptrTo(s string) *string { return &s }

// labelGPUFamily returns mf with the identity labels on each of its
// series that has a gpu label the identities know, or mf itself when it
// is not a GPU family.
func labelGPUFamily(mf *dto.MetricFamily, ids map[string]gpuIdentity) *dto.MetricFamily {
	if !strings.HasPrefix(mf.GetName(), engine.Namespace+"_gpu_") {
		return mf
	}
	metrics := make([]*dto.Metric, len(mf.Metric))
	changed := false
	for i, m := range mf.Metric {
		metrics[i] = m
		var gpu, gi string
		for _, lp := range m.Label {
			switch lp.GetName() {
			case "gpu":
				gpu = lp.GetValue()
			case "gpu_instance":
				gi = lp.GetValue()
			}
		}
		id, ok := ids[gpu]
		if gi != "" {
			if iid, iok := ids[gpu+"/"+gi]; iok {
				id, ok = iid, true
			}
		}
		if gpu == "" || !ok {
			continue
		}
		labels := slices.Clone(m.Label)
		for j, name := range GPUIdentityLabels {
			if slices.ContainsFunc(m.Label, func(lp *dto.LabelPair) bool { return lp.GetName() == name }) {
				continue
			}
			labels = append(labels, id[j])
		}
		sort.Slice(labels, func(a, b int) bool { return labels[a].GetName() < labels[b].GetName() })
		// A new series sharing the value: the engine's stays as it was.
		metrics[i] = &dto.Metric{Label: labels, Gauge: m.Gauge, Counter: m.Counter, Summary: m.Summary, Untyped: m.Untyped,
			Histogram: m.Histogram, TimestampMs: m.TimestampMs}
		changed = true
	}
	if !changed {
		return mf
	}
	return &dto.MetricFamily{Name: mf.Name, Help: mf.Help, Type: mf.Type, Unit: mf.Unit, Metric: metrics}
}
