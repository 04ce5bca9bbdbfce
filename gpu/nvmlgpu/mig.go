package nvmlgpu

import (
	"math"
	"slices"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"go.uber.org/zap"

	"github.com/gpudiag/gpudiag/gpu"
	"github.com/gpudiag/gpudiag/sample"
)

// A GPU in MIG mode is split into GPU instances, each a job's own GPU:
// the whole GPU's activity says little about any of them. GPM samples each
// GPU instance on its own (nvmlGpmMigSampleGet, Hopper and newer), and the
// backend reads them every interval as it reads the whole GPU's: one
// sample per instance, its metrics against the instance's previous one.

// migGPMMetrics are what one GPU instance's GpmMetricsGet asks for.
var migGPMMetrics = []nvml.GpmMetricId{
	nvml.GPM_METRIC_SM_UTIL,
	nvml.GPM_METRIC_SM_OCCUPANCY,
	nvml.GPM_METRIC_ANY_TENSOR_UTIL,
	nvml.GPM_METRIC_DRAM_BW_UTIL,
}

// migLayout lists a GPU's MIG devices by GPU instance: what the slow tier
// reads while MIG is on.
type migLayout struct {
	uuids     []string         // every MIG device, in index order
	instances map[int][]string // GPU instance → its MIG devices' UUIDs
}

// readMIGLayout lists a GPU in MIG mode's MIG devices (MIG-…): what the
// device plugin hands out and the kubelet's PodResources API names, in MIG
// mode, instead of the GPU's UUID, with the GPU instance of each.
func readMIGLayout(h nvml.Device) migLayout {
	var out migLayout
	n, ret := h.GetMaxMigDeviceCount()
	if ret != nvml.SUCCESS {
		return out
	}
	for i := 0; i < n; i++ {
		mig, ret := h.GetMigDeviceHandleByIndex(i)
		if ret != nvml.SUCCESS {
			continue // NOT_FOUND: no MIG device at this index
		}
		uuid, ret := mig.GetUUID()
		if ret != nvml.SUCCESS {
			continue
		}
		out.uuids = append(out.uuids, uuid)
		if gi, ret := mig.GetGpuInstanceId(); ret == nvml.SUCCESS && gi >= 0 && gi < sample.MaxGPUInstanceID {
			if out.instances == nil {
				out.instances = map[int][]string{}
			}
			out.instances[gi] = append(out.instances[gi], uuid)
		}
	}
	return out
}

// migGPM is one GPU instance's GPM sample pair, as gpmState for the GPU.
type migGPM struct {
	prev, cur nvml.GpmSample
	prevTime  time.Time
	havePrev  bool
	// metrics is kept, as gpmState's: 10 KB an instance a second
	// otherwise.
	metrics nvml.GpmMetricsGetType
}

func (m *migGPM) free() {
	m.prev.Free()
	m.cur.Free()
}

// freeMIG frees the buffers of every GPU instance.
func (d *device) freeMIG() {
	for gi, m := range d.migGPM {
		m.free()
		delete(d.migGPM, gi)
	}
}

// readMIG fills the GPU's instances and, unless GPM per GPU instance is
// off or unsupported on the GPU, their activity over the interval.
func (b *Backend) readMIG(d *device, g *sample.GPU, now time.Time) {
	if len(d.mig.instances) == 0 {
		d.freeMIG()
		return
	}
	ids := make([]int, 0, len(d.mig.instances))
	for gi := range d.mig.instances {
		ids = append(ids, gi)
	}
	slices.Sort(ids)
	if len(ids) > sample.MaxMIGInstances {
		ids = ids[:sample.MaxMIGInstances]
	}
	// Instances destroyed since (nvidia-smi mig -dgi) free their buffers.
	for gi, m := range d.migGPM {
		if _, ok := d.mig.instances[gi]; !ok {
			m.free()
			delete(d.migGPM, gi)
		}
	}
	g.MIGInstances = make([]sample.MIGInstance, 0, len(ids))
	for _, gi := range ids {
		inst := sample.MIGInstance{GPUInstance: gi, Devices: d.mig.instances[gi],
			SMActive: math.NaN(), SMOccupancy: math.NaN(), TensorActive: math.NaN(), DRAMActive: math.NaN()}
		if !d.migGPMOff {
			b.readMIGGPM(d, gi, &inst, now)
		}
		g.MIGInstances = append(g.MIGInstances, inst)
	}
}

// readMIGGPM takes GPU instance gi's GPM sample and, against its previous
// one, its activity. A GPU that does not support GPM per GPU instance has
// it turned off, said once in the log.
func (b *Backend) readMIGGPM(d *device, gi int, inst *sample.MIGInstance, now time.Time) {
	m := d.migGPM[gi]
	if m == nil {
		s1, ret := b.lib.GpmSampleAlloc()
		if ret != nvml.SUCCESS {
			return
		}
		s2, ret := b.lib.GpmSampleAlloc()
		if ret != nvml.SUCCESS {
			s1.Free()
			return
		}
		m = &migGPM{prev: s1, cur: s2}
		if d.migGPM == nil {
			d.migGPM = map[int]*migGPM{}
		}
		d.migGPM[gi] = m
	}
	if ret := d.h.GpmMigSampleGet(gi, m.cur); ret != nvml.SUCCESS {
		if ret == nvml.ERROR_NOT_SUPPORTED {
			b.log.Info("GPM per GPU instance not supported on this GPU; MIG instances' activity is not exported",
				zap.Int("gpu", d.index), zap.String("model", d.model))
			d.migGPMOff = true
			d.freeMIG()
		}
		return
	}
	if !m.havePrev || now.Sub(m.prevTime) < gpmMinInterval {
		if !m.havePrev {
			m.prev, m.cur, m.prevTime, m.havePrev = m.cur, m.prev, now, true
		}
		return
	}
	elapsed := now.Sub(m.prevTime)
	mg := &m.metrics
	*mg = nvml.GpmMetricsGetType{Sample1: m.prev, Sample2: m.cur, NumMetrics: uint32(len(migGPMMetrics))}
	for i, id := range migGPMMetrics {
		mg.Metrics[i].MetricId = uint32(id)
	}
	ret := b.lib.GpmMetricsGet(mg)
	m.prev, m.cur, m.prevTime = m.cur, m.prev, now
	if ret != nvml.SUCCESS {
		return
	}
	out := []*float64{&inst.SMActive, &inst.SMOccupancy, &inst.TensorActive, &inst.DRAMActive}
	for i := range migGPMMetrics {
		r := mg.Metrics[i]
		if nvml.Return(r.NvmlReturn) == nvml.SUCCESS && !math.IsNaN(r.Value) {
			*out[i] = gpu.Clamp01(r.Value / 100)
		}
	}
	inst.IntervalSeconds = elapsed.Seconds()
}
