// Package nvmlfake builds go-nvml mocks of Hopper-class GPUs whose readings a
// test controls: GPM metrics, utilization, links, a GPU that falls off the bus,
// a call that hangs. It is for unit tests and benchmarks, never for claims
// about real hardware.
package nvmlfake

import (
	"fmt"
	"sync"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
)

// GPU is the state of one fake GPU. Change it under Lock between samples.
type GPU struct {
	sync.Mutex
	Index int
	UUID  string
	Name  string
	// Bus is the PCI bus number; the bus ID becomes 0000:<bus>:00.0.
	Bus uint32

	// Lost makes every query return ERROR_GPU_IS_LOST.
	Lost bool
	// Hang, when non-nil, blocks GetMemoryInfo until it is closed.
	Hang chan struct{}

	// NoGPM makes GPM sampling unsupported (pre-Hopper).
	NoGPM bool
	// GPM holds the value GpmMetricsGet returns per metric ID (percent or
	// MiB/s, as NVML reports them); IDs not present return NOT_SUPPORTED.
	GPM map[nvml.GpmMetricId]float64

	Util        nvml.Utilization
	MemUsed     uint64
	MemTotal    uint64
	SMClockMHz  uint32
	PowerMW     uint32
	EnergyMJ    uint64
	TempC       uint32
	PCIeGen     int
	PCIeWidth   int
	PCIeTxKBps  uint32
	PCIeRxKBps  uint32
	Replays     int
	ECCOn       bool
	ECCCorr     uint64
	ECCUncorr   uint64
	ClockEvents uint64
	// NVLinks is the number of NVLinks; all are up unless listed in LinksDown.
	NVLinks   int
	LinksDown map[int]bool
	// NVLinkKiB is the NVLink data counter per link (fallback path), TX and RX alike.
	NVLinkKiB map[int]uint64
	PIDs      []uint32
}

// Hopper returns a GPU with plausible H100 readings at idle.
func Hopper(i int) *GPU {
	return &GPU{
		Index: i, UUID: fmt.Sprintf("GPU-00000000-0000-0000-0000-%012d", i), Name: "NVIDIA H100 80GB HBM3",
		Bus: uint32(0x18 + i), MemTotal: 80 << 30, MemUsed: 1 << 30, SMClockMHz: 1980, PowerMW: 70000,
		EnergyMJ: 1e9, TempC: 31, PCIeGen: 5, PCIeWidth: 16, ECCOn: true, NVLinks: 18,
		GPM: map[nvml.GpmMetricId]float64{}, NVLinkKiB: map[int]uint64{},
	}
}

type sampleBuf struct {
	mock.GpmSample
	gpu   *GPU
	freed bool
}

// Lib is a fake NVML library.
type Lib struct {
	*mock.Interface
	GPUs []*GPU

	mu         sync.Mutex
	allocated  int
	freed      int
	initCalls  int
	shutdowns  int
	metricGets int
}

// New returns a fake NVML library serving the given GPUs.
func New(gpus ...*GPU) *Lib {
	l := &Lib{GPUs: gpus}
	devs := make([]nvml.Device, len(gpus))
	for i, g := range gpus {
		devs[i] = newDevice(g)
	}
	l.Interface = &mock.Interface{
		InitFunc: func() nvml.Return {
			l.mu.Lock()
			defer l.mu.Unlock()
			l.initCalls++
			return nvml.SUCCESS
		},
		ShutdownFunc: func() nvml.Return {
			l.mu.Lock()
			defer l.mu.Unlock()
			l.shutdowns++
			return nvml.SUCCESS
		},
		SystemGetDriverVersionFunc: func() (string, nvml.Return) { return "580.159.04", nvml.SUCCESS },
		DeviceGetCountFunc:         func() (int, nvml.Return) { return len(devs), nvml.SUCCESS },
		DeviceGetHandleByIndexFunc: func(i int) (nvml.Device, nvml.Return) {
			if i < 0 || i >= len(devs) {
				return nil, nvml.ERROR_INVALID_ARGUMENT
			}
			return devs[i], nvml.SUCCESS
		},
		EventSetCreateFunc: func() (nvml.EventSet, nvml.Return) {
			return &mock.EventSet{
				WaitFunc: func(uint32) (nvml.EventData, nvml.Return) { return nvml.EventData{}, nvml.ERROR_TIMEOUT },
				FreeFunc: func() nvml.Return { return nvml.SUCCESS },
			}, nvml.SUCCESS
		},
		GpmSampleAllocFunc: func() (nvml.GpmSample, nvml.Return) {
			l.mu.Lock()
			defer l.mu.Unlock()
			l.allocated++
			b := &sampleBuf{}
			b.FreeFunc = func() nvml.Return {
				l.mu.Lock()
				defer l.mu.Unlock()
				if !b.freed {
					b.freed = true
					l.freed++
				}
				return nvml.SUCCESS
			}
			return b, nvml.SUCCESS
		},
		GpmMetricsGetFunc: func(mg *nvml.GpmMetricsGetType) nvml.Return {
			l.mu.Lock()
			l.metricGets++
			l.mu.Unlock()
			s2, ok := mg.Sample2.(*sampleBuf)
			if !ok || s2.gpu == nil {
				return nvml.ERROR_INVALID_ARGUMENT
			}
			g := s2.gpu
			g.Lock()
			defer g.Unlock()
			for i := 0; i < int(mg.NumMetrics); i++ {
				v, ok := g.GPM[nvml.GpmMetricId(mg.Metrics[i].MetricId)]
				if !ok {
					mg.Metrics[i].NvmlReturn = uint32(nvml.ERROR_NOT_SUPPORTED)
					continue
				}
				mg.Metrics[i].NvmlReturn = uint32(nvml.SUCCESS)
				mg.Metrics[i].Value = v
			}
			return nvml.SUCCESS
		},
	}
	return l
}

// Counts reports GPM buffers allocated and freed, Init and Shutdown calls.
func (l *Lib) Counts() (allocated, freed, inits, shutdowns int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.allocated, l.freed, l.initCalls, l.shutdowns
}

func newDevice(g *GPU) *mock.Device {
	lost := func() bool { g.Lock(); defer g.Unlock(); return g.Lost }
	d := &mock.Device{}
	d.GetUUIDFunc = func() (string, nvml.Return) { return g.UUID, nvml.SUCCESS }
	d.GetNameFunc = func() (string, nvml.Return) { return g.Name, nvml.SUCCESS }
	d.GetPciInfoFunc = func() (nvml.PciInfo, nvml.Return) {
		return nvml.PciInfo{Domain: 0, Bus: g.Bus, Device: 0}, nvml.SUCCESS
	}
	d.GetNvLinkStateFunc = func(l int) (nvml.EnableState, nvml.Return) {
		if lost() {
			return 0, nvml.ERROR_GPU_IS_LOST
		}
		if l >= g.NVLinks {
			return 0, nvml.ERROR_INVALID_ARGUMENT
		}
		if g.LinksDown[l] {
			return nvml.FEATURE_DISABLED, nvml.SUCCESS
		}
		return nvml.FEATURE_ENABLED, nvml.SUCCESS
	}
	d.GpmSampleGetFunc = func(s nvml.GpmSample) nvml.Return {
		g.Lock()
		defer g.Unlock()
		if g.Lost {
			return nvml.ERROR_GPU_IS_LOST
		}
		if g.NoGPM {
			return nvml.ERROR_NOT_SUPPORTED
		}
		s.(*sampleBuf).gpu = g
		return nvml.SUCCESS
	}
	d.RegisterEventsFunc = func(uint64, nvml.EventSet) nvml.Return { return nvml.SUCCESS }
	d.GetMemoryInfoFunc = func() (nvml.Memory, nvml.Return) {
		g.Lock()
		hang := g.Hang
		g.Unlock()
		if hang != nil {
			<-hang
		}
		g.Lock()
		defer g.Unlock()
		if g.Lost {
			return nvml.Memory{}, nvml.ERROR_GPU_IS_LOST
		}
		return nvml.Memory{Total: g.MemTotal, Used: g.MemUsed, Free: g.MemTotal - g.MemUsed}, nvml.SUCCESS
	}
	d.GetUtilizationRatesFunc = func() (nvml.Utilization, nvml.Return) {
		g.Lock()
		defer g.Unlock()
		return g.Util, nvml.SUCCESS
	}
	d.GetClockInfoFunc = func(nvml.ClockType) (uint32, nvml.Return) { return g.SMClockMHz, nvml.SUCCESS }
	d.GetMaxClockInfoFunc = func(nvml.ClockType) (uint32, nvml.Return) { return 1980, nvml.SUCCESS }
	d.GetCurrentClocksEventReasonsFunc = func() (uint64, nvml.Return) { return g.ClockEvents, nvml.SUCCESS }
	d.GetPowerUsageFunc = func() (uint32, nvml.Return) { return g.PowerMW, nvml.SUCCESS }
	d.GetEnforcedPowerLimitFunc = func() (uint32, nvml.Return) { return 700000, nvml.SUCCESS }
	d.GetTotalEnergyConsumptionFunc = func() (uint64, nvml.Return) { return g.EnergyMJ, nvml.SUCCESS }
	d.GetTemperatureFunc = func(nvml.TemperatureSensors) (uint32, nvml.Return) { return g.TempC, nvml.SUCCESS }
	d.GetCurrPcieLinkGenerationFunc = func() (int, nvml.Return) { return g.PCIeGen, nvml.SUCCESS }
	d.GetMaxPcieLinkGenerationFunc = func() (int, nvml.Return) { return 5, nvml.SUCCESS }
	d.GetCurrPcieLinkWidthFunc = func() (int, nvml.Return) { return g.PCIeWidth, nvml.SUCCESS }
	d.GetMaxPcieLinkWidthFunc = func() (int, nvml.Return) { return 16, nvml.SUCCESS }
	d.GetPcieReplayCounterFunc = func() (int, nvml.Return) { return g.Replays, nvml.SUCCESS }
	d.GetPcieThroughputFunc = func(c nvml.PcieUtilCounter) (uint32, nvml.Return) {
		if c == nvml.PCIE_UTIL_TX_BYTES {
			return g.PCIeTxKBps, nvml.SUCCESS
		}
		return g.PCIeRxKBps, nvml.SUCCESS
	}
	d.GetEccModeFunc = func() (nvml.EnableState, nvml.EnableState, nvml.Return) {
		if g.ECCOn {
			return nvml.FEATURE_ENABLED, nvml.FEATURE_ENABLED, nvml.SUCCESS
		}
		return nvml.FEATURE_DISABLED, nvml.FEATURE_DISABLED, nvml.SUCCESS
	}
	d.GetTotalEccErrorsFunc = func(t nvml.MemoryErrorType, _ nvml.EccCounterType) (uint64, nvml.Return) {
		if t == nvml.MEMORY_ERROR_TYPE_CORRECTED {
			return g.ECCCorr, nvml.SUCCESS
		}
		return g.ECCUncorr, nvml.SUCCESS
	}
	d.GetRemappedRowsFunc = func() (int, int, bool, bool, nvml.Return) { return 0, 0, false, false, nvml.SUCCESS }
	d.GetPersistenceModeFunc = func() (nvml.EnableState, nvml.Return) { return nvml.FEATURE_ENABLED, nvml.SUCCESS }
	d.GetMigModeFunc = func() (int, int, nvml.Return) { return nvml.DEVICE_MIG_DISABLE, nvml.DEVICE_MIG_DISABLE, nvml.SUCCESS }
	d.GetComputeRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) {
		g.Lock()
		defer g.Unlock()
		out := make([]nvml.ProcessInfo, len(g.PIDs))
		for i, p := range g.PIDs {
			out[i] = nvml.ProcessInfo{Pid: p, UsedGpuMemory: 1 << 30}
		}
		return out, nvml.SUCCESS
	}
	d.GetFieldValuesFunc = func(fv []nvml.FieldValue) nvml.Return {
		g.Lock()
		defer g.Unlock()
		for i := range fv {
			x := g.NVLinkKiB[int(fv[i].ScopeId)]
			fv[i].ValueType = uint32(nvml.VALUE_TYPE_UNSIGNED_LONG_LONG)
			fv[i].NvmlReturn = uint32(nvml.SUCCESS)
			for b := 0; b < 8; b++ {
				fv[i].Value[b] = byte(x >> (8 * b))
			}
		}
		return nvml.SUCCESS
	}
	return d
}
