package collectors

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/alecthomas/kingpin/v2"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/gpudiag/gpudiag/engine"
	"github.com/gpudiag/gpudiag/gpu"
	"github.com/gpudiag/gpudiag/gpu/dcgmgpu"
	"github.com/gpudiag/gpudiag/gpu/nvmlgpu"
	"github.com/gpudiag/gpudiag/sample"
)

// gpuFlags holds the flag values; kingpin sets them when flags are parsed,
// and the initial values serve code that builds collectors without parsing.
var gpuFlags = struct {
	backend     string
	dcgmAddress string
	nvmlLibrary string
	gpm         bool
	peerMaxGPUs int
}{peerMaxGPUs: defaultPeerMaxGPUs}

// defaultPeerMaxGPUs bounds the GPU pair metrics. Up to 16 GPUs the matrix is
// at most 3 × 240 constant series, fewer than the per-NVLink series the same
// GPUs already export (16 × 18 × 3); at 64 GPUs it would be 12,096 and
// dominate the node's exposition, while the analyzers read the matrix from
// the sample whatever this says.
const defaultPeerMaxGPUs = 16

func init() {
	register(collectorSpec[sample.GPUs, *gpuCollector]{
		key:       sample.GPUKey,
		defaultOn: true,
		help:      "GPU activity, links, clocks, health and processes through DCGM or NVML",
		flags: func(app *kingpin.Application) {
			app.Flag("collector.gpu.backend",
				"GPU backend: auto (DCGM if reachable, else NVML), dcgm, nvml or none.").
				Default("auto").EnumVar(&gpuFlags.backend, "auto", "dcgm", "nvml", "none")
			app.Flag("collector.gpu.dcgm-address",
				"nv-hostengine to connect to (host:port or unix:///path); empty runs DCGM embedded when libdcgm.so.4 is installed.").
				Default("").StringVar(&gpuFlags.dcgmAddress)
			app.Flag("collector.gpu.nvml-library",
				"Path of libnvidia-ml.so.1; empty uses the dynamic loader's search path.").
				Default("").StringVar(&gpuFlags.nvmlLibrary)
			app.Flag("collector.gpu.gpm",
				"Use GPM (Hopper and newer) for SM, tensor, DRAM and link activity.").
				Default("true").BoolVar(&gpuFlags.gpm)
			app.Flag("collector.gpu.peer-metrics-max-gpus",
				"Export the GPU pair metrics (gpudiag_gpu_peer_*, one series per ordered pair) only on nodes with at most this many GPUs; 0 never.").
				Default(strconv.Itoa(defaultPeerMaxGPUs)).IntVar(&gpuFlags.peerMaxGPUs)
		},
		newCollector: func(cfg Config) (*gpuCollector, error) {
			b, why := gpu.Open(gpuFlags.backend, gpuOptions(cfg))
			c := newGPUCollector(b, why, cfg.Logger)
			c.shared = cfg.Shared
			return c, nil
		},
		metrics: (&gpuCollector{}).Metrics,
	})
}

// gpuOptions are cfg.GPU with what it leaves empty taken from cfg and the
// --collector.gpu.* flags: the real backends and the daemon's logger.
func gpuOptions(cfg Config) gpu.Options {
	o := cfg.GPU
	if o.OpenDCGM == nil {
		o.OpenDCGM = func() (gpu.Backend, error) {
			// DCGM averages its profiling fields over its own update period:
			// match the daemon's sampling interval so both mean the same span.
			return dcgmgpu.Open(dcgmgpu.Options{Address: gpuFlags.dcgmAddress, Logger: cfg.Logger, UpdateInterval: cfg.Interval})
		}
	}
	if o.OpenNVML == nil {
		o.OpenNVML = func() (gpu.Backend, error) {
			var lib []nvml.LibraryOption // none: the dynamic loader's search path
			if gpuFlags.nvmlLibrary != "" {
				lib = append(lib, nvml.WithLibraryPath(gpuFlags.nvmlLibrary))
			}
			return nvmlgpu.Open(nvml.New(lib...), nvmlgpu.Options{Logger: cfg.Logger, DisableGPM: !gpuFlags.gpm})
		}
	}
	if o.Logger == nil {
		o.Logger = cfg.Logger
	}
	return o
}

// gpuCollector wraps a backend. It integrates the backend's per-interval
// rates and ratios into counters, so that rate() over any scrape interval is
// exact even when Prometheus scrapes far less often than we sample.
type gpuCollector struct {
	backend gpu.Backend // nil when no backend could be opened
	why     string
	log     *zap.Logger
	totals  map[string]*gpuTotals
	shared  *Shared // nil in tests that do not need it

	peerBoundLogged bool
}

type gpuTotals struct {
	smActive, tensorActive, dramActive float64
	pcieTx, pcieRx, nvlinkTx, nvlinkRx float64
	linkTx, linkRx                     map[int]float64
	migSMActive                        map[int]float64 // by GPU instance
}

func newGPUCollector(b gpu.Backend, why string, log *zap.Logger) *gpuCollector {
	return &gpuCollector{backend: b, why: why, log: log, totals: map[string]*gpuTotals{}}
}

func (c *gpuCollector) Name() string { return sample.GPUKey.Name() }

// WatchesForWork keeps the GPUs on their clock while the node is quiet
// (engine.Sentinel): their samples say when work starts.
func (c *gpuCollector) WatchesForWork() bool { return true }

// Close releases the backend.
func (c *gpuCollector) Close() error {
	if c.backend == nil {
		return nil
	}
	return c.backend.Close()
}

func (c *gpuCollector) Sample(ctx context.Context) (*sample.GPUs, error) {
	if c.backend == nil {
		return &sample.GPUs{Backend: "none"}, nil
	}
	s, err := c.backend.Sample(ctx)
	if s == nil {
		if err == nil {
			err = errors.New("backend returned no reading")
		}
		return nil, err
	}
	for i := range s.Devices {
		c.integrate(&s.Devices[i])
	}
	if c.shared != nil {
		c.shared.publishGPUs(s)
	}
	if t := s.Topology; t != nil && len(t.Pairs) > 0 && len(t.GPUs) > gpuFlags.peerMaxGPUs && !c.peerBoundLogged {
		c.log.Info("GPU pair metrics not exported: more GPUs than --collector.gpu.peer-metrics-max-gpus",
			zap.Int("gpus", len(t.GPUs)), zap.Int("max", gpuFlags.peerMaxGPUs))
		c.peerBoundLogged = true
	}
	// A partial failure (some GPUs down) is still a good sample: the down
	// GPUs show as gpudiag_gpu_up 0. Only "no GPU answered" fails.
	return s, err
}

func (c *gpuCollector) integrate(g *sample.GPU) {
	key := g.UUID
	if key == "" {
		key = "index:" + strconv.Itoa(g.Index)
	}
	t, ok := c.totals[key]
	if !ok {
		t = &gpuTotals{linkTx: map[int]float64{}, linkRx: map[int]float64{}, migSMActive: map[int]float64{}}
		c.totals[key] = t
	}
	dt := g.IntervalSeconds
	v := &g.Values
	add := func(acc *float64, rate sample.Field, out sample.Field) {
		if x, ok := v.Get(rate); ok && dt > 0 && x >= 0 {
			*acc += x * dt
		}
		v.Set(out, *acc)
	}
	if g.Up {
		add(&t.smActive, sample.SMActive, sample.SMActiveSecondsTotal)
		add(&t.tensorActive, sample.TensorActive, sample.TensorActiveSecondsTotal)
		add(&t.dramActive, sample.DRAMActive, sample.DRAMActiveSecondsTotal)
		add(&t.pcieTx, sample.PCIeTxBytesPerSecond, sample.PCIeTxBytesTotal)
		add(&t.pcieRx, sample.PCIeRxBytesPerSecond, sample.PCIeRxBytesTotal)
		add(&t.nvlinkTx, sample.NVLinkTxBytesPerSecond, sample.NVLinkTxBytesTotal)
		add(&t.nvlinkRx, sample.NVLinkRxBytesPerSecond, sample.NVLinkRxBytesTotal)
	}
	for i := range g.Links {
		l := &g.Links[i]
		if dt > 0 && !math.IsNaN(l.TxBytesPerSecond) && l.TxBytesPerSecond >= 0 {
			t.linkTx[l.Link] += l.TxBytesPerSecond * dt
		}
		if dt > 0 && !math.IsNaN(l.RxBytesPerSecond) && l.RxBytesPerSecond >= 0 {
			t.linkRx[l.Link] += l.RxBytesPerSecond * dt
		}
		l.TxBytesTotal, l.RxBytesTotal = t.linkTx[l.Link], t.linkRx[l.Link]
	}
	for i := range g.MIGInstances {
		m := &g.MIGInstances[i]
		if m.IntervalSeconds > 0 && !math.IsNaN(m.SMActive) && m.SMActive >= 0 {
			t.migSMActive[m.GPUInstance] += m.SMActive * m.IntervalSeconds
		}
		m.SMActiveSecondsTotal = t.migSMActive[m.GPUInstance]
	}
}

func gpuDesc(name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc(engine.Namespace+"_gpu_"+name, help, append([]string{"gpu"}, labels...), nil)
}

var (
	gpuUpDesc   = gpuDesc("up", "Whether the GPU answered the last sample (1) or not (0: lost, fallen off the bus, or every query failed).")
	gpuInfoDesc = gpuDesc("info", "GPU identity; join on gpu. activity_source is gpm or dcgm when SM activity is measured, nvml when only NVML's coarse utilization is available.",
		"uuid", "pci_bus_id", "model", "activity_source", "link_source")
	gpuBackendDesc = prometheus.NewDesc(engine.Namespace+"_gpu_backend_info",
		"The GPU backend in use (dcgm, nvml or none) and the driver version.", []string{"backend", "driver_version"}, nil)
	gpuDriverCUDADesc = prometheus.NewDesc(engine.Namespace+"_gpu_driver_cuda_version",
		"Newest CUDA version the driver supports, as NVML encodes it: 1000 × major + 10 × minor (12080 is CUDA 12.8).", nil, nil)
	gpuBackendSwitchesDesc = prometheus.NewDesc(engine.Namespace+"_gpu_backend_switches_total",
		"Times the GPU readings moved from one backend to another since the daemon started: from dcgm to nvml (or none) when the DCGM hostengine failed, back when it answered again.",
		[]string{"from", "to"}, nil)
	gpuClockEventDesc = gpuDesc("clock_event_active",
		"Whether the clocks are held down for this reason (NVML clock event reasons).", "reason")
	gpuLinkUpDesc = gpuDesc("nvlink_link_up", "Whether the NVLink is active.", "link")
	gpuLinkTxDesc = gpuDesc("nvlink_link_transmit_bytes_total",
		"Bytes sent on the NVLink, integrated from the per-link throughput since the daemon started.", "link")
	gpuLinkRxDesc = gpuDesc("nvlink_link_receive_bytes_total",
		"Bytes received on the NVLink, integrated from the per-link throughput since the daemon started.", "link")
	gpuXIDDesc = gpuDesc("xid_errors_total", "XID events reported by the driver since the daemon started, by XID.", "xid")
	gpuECCDesc = gpuDesc("ecc_errors_total",
		"Memory ECC errors since the driver loaded (volatile), by type (corrected, uncorrected).", "type")
	gpuECCAggregateDesc = gpuDesc("ecc_aggregate_errors_total",
		"Memory ECC errors over the GPU's life (aggregate, kept in its InfoROM across driver reloads and resets), by type (corrected, uncorrected).", "type")
	gpuECCLocationDesc = gpuDesc("ecc_location_errors_total",
		"Memory ECC errors since the driver loaded (volatile), by memory location (dram, sram, l1_cache, l2_cache, register_file, texture_memory, texture_shm, cbu: those the GPU reports; Hopper reports dram and sram) and type; summed over location, ecc_errors_total.", "location", "type")
	gpuECCLocationAggregateDesc = gpuDesc("ecc_location_aggregate_errors_total",
		"Memory ECC errors over the GPU's life (aggregate), by memory location and type, as ecc_location_errors_total.", "location", "type")
	gpuClockEventSecondsDesc = gpuDesc("clock_event_seconds_total",
		"Time the clocks were held down for the reason since the driver loaded (NVML clock event reason counters, sw_power_cap, sync_boost, sw_thermal_slowdown, hw_thermal_slowdown, hw_power_brake_slowdown); rate() is the fraction of time held down. Read every 10 s.", "reason")
	gpuNVLinkErrorsDesc = gpuDesc("nvlink_errors_total",
		"NVLink errors since the driver loaded, by link and kind: crc_flit (flow-control flits received with a bad CRC) and crc_data (data flits, NVLink 1-3), replayed by the link layer; replay (transmissions replayed); recovery (the link went down and retrained). Only the counters the GPU reports. Read every minute, and at once after an XID or a link state change.", "link", "kind")
	gpuMIGSMActiveDesc = gpuDesc("mig_sm_active_ratio",
		"Fraction of time at least one warp was resident on an SM of the MIG GPU instance, over the last sampling interval (GPM per GPU instance, Hopper and newer); only on GPUs in MIG mode.", "gpu_instance")
	gpuMIGSMOccupancyDesc = gpuDesc("mig_sm_occupancy_ratio",
		"Resident warps over the maximum on the MIG GPU instance's SMs, over the last sampling interval.", "gpu_instance")
	gpuMIGTensorDesc = gpuDesc("mig_tensor_active_ratio",
		"Fraction of cycles any tensor pipe of the MIG GPU instance was active, over the last sampling interval.", "gpu_instance")
	gpuMIGDRAMDesc = gpuDesc("mig_dram_active_ratio",
		"The MIG GPU instance's device memory bandwidth used over its maximum, over the last sampling interval.", "gpu_instance")
	gpuMIGSMSecondsDesc = gpuDesc("mig_sm_active_seconds_total",
		"The MIG GPU instance's SM activity integrated over time; rate() gives the mean mig_sm_active_ratio over any range.", "gpu_instance")
	gpuMIGDeviceDesc = gpuDesc("mig_device_info",
		"A MIG device (compute instance) of the GPU instance, by its UUID: what the device plugin hands pods and the kubelet names; join on (gpu, gpu_instance).", "gpu_instance", "mig_uuid")
	gpuRemappedDesc = gpuDesc("remapped_rows", "Memory rows remapped, by cause (correctable, uncorrectable).", "cause")

	gpuPCIeCapacityDesc = gpuDesc("pcie_link_capacity_bytes_per_second",
		"One-way data rate of the best PCIe link the GPU and its slot support (max generation and width, after line encoding): the ceiling for PCIe transmit or receive throughput. Gen5 x16 is 63.0e9.")
	gpuNVLinkCapacityDesc = gpuDesc("nvlink_capacity_bytes_per_second",
		"One-way data rate of the GPU's NVLinks active at start, summed (per link 25e9 on NVLink 2–4, 50e9 on NVLink 5): the ceiling for NVLink transmit or receive throughput.")
	gpuPeerLinkInfoDesc = gpuDesc("peer_link_info",
		"Best path from gpu to peer_gpu, named as nvidia-smi topo -m does: NV<links> over NVLink (directly or through NVSwitches), else PIX, PXB, PHB, NODE or SYS over PCIe (fastest to slowest).",
		"peer_gpu", "link")
	gpuPeerNVLinksDesc = gpuDesc("peer_nvlinks",
		"NVLinks between gpu and peer_gpu (through NVSwitches: the lesser of the two GPUs' switch links); 0 when they talk over PCIe.", "peer_gpu")
	gpuPeerCapacityDesc = gpuDesc("peer_link_capacity_bytes_per_second",
		"One-way theoretical bandwidth of the best path from gpu to peer_gpu: NVLinks × per-link rate, else the slower GPU's PCIe link rate (across sockets the inter-socket link is not measured).",
		"peer_gpu")
)

// gpuFieldMetrics maps sample fields to one metric each (label gpu only).
var gpuFieldMetrics = []struct {
	field sample.Field
	desc  *prometheus.Desc
	typ   prometheus.ValueType
}{
	{sample.SMActive, gpuDesc("sm_active_ratio", "Fraction of time at least one warp was resident on an SM, averaged over SMs and the last sampling interval (GPM SM_UTIL, DCGM PROF_SM_ACTIVE). The signal that tells real compute from copies and waits."), prometheus.GaugeValue},
	{sample.SMOccupancy, gpuDesc("sm_occupancy_ratio", "Resident warps over the maximum, averaged over SMs and the last sampling interval."), prometheus.GaugeValue},
	{sample.TensorActive, gpuDesc("tensor_active_ratio", "Fraction of cycles any tensor pipe was active over the last sampling interval."), prometheus.GaugeValue},
	{sample.TensorHMMAActive, gpuDesc("tensor_hmma_active_ratio", "Fraction of cycles the half-precision (HMMA) tensor pipe was active over the last sampling interval."), prometheus.GaugeValue},
	{sample.DRAMActive, gpuDesc("dram_active_ratio", "Device memory bandwidth used over its maximum, over the last sampling interval."), prometheus.GaugeValue},
	{sample.FP64Active, gpuDesc("fp64_active_ratio", "Fraction of cycles the FP64 pipe was active over the last sampling interval."), prometheus.GaugeValue},
	{sample.FP32Active, gpuDesc("fp32_active_ratio", "Fraction of cycles the FP32 pipe was active over the last sampling interval."), prometheus.GaugeValue},
	{sample.FP16Active, gpuDesc("fp16_active_ratio", "Fraction of cycles the FP16 (non-tensor) pipe was active over the last sampling interval."), prometheus.GaugeValue},
	{sample.GraphicsActive, gpuDesc("graphics_engine_active_ratio", "Fraction of time the graphics or compute engine was busy over the last sampling interval."), prometheus.GaugeValue},
	{sample.Utilization, gpuDesc("utilization_ratio", "NVML utilization.gpu: fraction of time any kernel or copy ran. Reads 1 for a pure copy loop or a collective stalled on the network; use sm_active_ratio to judge compute."), prometheus.GaugeValue},
	{sample.MemoryUtilization, gpuDesc("memory_controller_utilization_ratio", "NVML utilization.memory: fraction of time device memory was read or written."), prometheus.GaugeValue},

	{sample.SMActiveSecondsTotal, gpuDesc("sm_active_seconds_total", "SM activity integrated over time; rate() gives the mean sm_active_ratio over any range."), prometheus.CounterValue},
	{sample.TensorActiveSecondsTotal, gpuDesc("tensor_active_seconds_total", "Tensor pipe activity integrated over time; rate() gives the mean tensor_active_ratio."), prometheus.CounterValue},
	{sample.DRAMActiveSecondsTotal, gpuDesc("dram_active_seconds_total", "DRAM bandwidth utilization integrated over time; rate() gives the mean dram_active_ratio."), prometheus.CounterValue},
	{sample.PCIeTxBytesTotal, gpuDesc("pcie_transmit_bytes_total", "Bytes sent by the GPU over PCIe (device to host or peer), integrated from the measured throughput."), prometheus.CounterValue},
	{sample.PCIeRxBytesTotal, gpuDesc("pcie_receive_bytes_total", "Bytes received by the GPU over PCIe (host or peer to device), integrated from the measured throughput."), prometheus.CounterValue},
	{sample.NVLinkTxBytesTotal, gpuDesc("nvlink_transmit_bytes_total", "Bytes sent over all NVLinks, integrated from the measured throughput."), prometheus.CounterValue},
	{sample.NVLinkRxBytesTotal, gpuDesc("nvlink_receive_bytes_total", "Bytes received over all NVLinks, integrated from the measured throughput."), prometheus.CounterValue},

	{sample.MemoryUsedBytes, gpuDesc("memory_used_bytes", "Device memory in use."), prometheus.GaugeValue},
	{sample.MemoryTotalBytes, gpuDesc("memory_bytes", "Device memory in all."), prometheus.GaugeValue},
	{sample.MemoryFreeBytes, gpuDesc("memory_free_bytes", "Device memory free: memory_bytes less memory_used_bytes and memory_reserved_bytes. Read every 10 s."), prometheus.GaugeValue},
	{sample.MemoryReservedBytes, gpuDesc("memory_reserved_bytes", "Device memory the driver and firmware reserve, which no process can use (NVML memory info v2). Read every 10 s."), prometheus.GaugeValue},
	{sample.MemoryTemperatureCelsius, gpuDesc("memory_temperature_celsius", "Device memory (HBM) temperature. Read every 10 s."), prometheus.GaugeValue},
	{sample.EncoderUtilization, gpuDesc("encoder_utilization_ratio", "Video encoder (NVENC) utilization over NVML's sampling period; not exported where NVML cannot measure it (an H200, which has no NVENC, reads 0). Read every 10 s."), prometheus.GaugeValue},
	{sample.DecoderUtilization, gpuDesc("decoder_utilization_ratio", "Video decoder (NVDEC) utilization over NVML's sampling period. Read every 10 s."), prometheus.GaugeValue},
	{sample.SMClockHertz, gpuDesc("sm_clock_hertz", "Current SM clock."), prometheus.GaugeValue},
	{sample.SMClockMaxHertz, gpuDesc("sm_clock_max_hertz", "Maximum SM clock."), prometheus.GaugeValue},
	{sample.MemoryClockHertz, gpuDesc("memory_clock_hertz", "Current memory clock."), prometheus.GaugeValue},
	{sample.MemoryClockMaxHertz, gpuDesc("memory_clock_max_hertz", "Maximum memory clock."), prometheus.GaugeValue},
	{sample.PowerWatts, gpuDesc("power_watts", "Power draw."), prometheus.GaugeValue},
	{sample.PowerLimitWatts, gpuDesc("power_limit_watts", "Enforced power limit."), prometheus.GaugeValue},
	{sample.EnergyJoulesTotal, gpuDesc("energy_joules_total", "Energy consumed since the driver loaded; read every minute (the query costs milliseconds), so take rate() over 2m or more."), prometheus.CounterValue},
	{sample.TemperatureCelsius, gpuDesc("temperature_celsius", "GPU die temperature."), prometheus.GaugeValue},
	{sample.PCIeLinkGeneration, gpuDesc("pcie_link_generation", "Current PCIe link generation (drops at idle on some GPUs to save power)."), prometheus.GaugeValue},
	{sample.PCIeLinkMaxGeneration, gpuDesc("pcie_link_max_generation", "Highest PCIe generation the GPU and its slot support."), prometheus.GaugeValue},
	{sample.PCIeLinkWidth, gpuDesc("pcie_link_width", "Current PCIe link width (lanes)."), prometheus.GaugeValue},
	{sample.PCIeLinkMaxWidth, gpuDesc("pcie_link_max_width", "Widest PCIe link the GPU and its slot support (lanes)."), prometheus.GaugeValue},
	{sample.PCIeReplaysTotal, gpuDesc("pcie_replays_total", "PCIe replays (link-level retransmissions); a rising count means a marginal link."), prometheus.CounterValue},
	{sample.ECCEnabled, gpuDesc("ecc_enabled", "Whether ECC is enabled (current mode)."), prometheus.GaugeValue},
	{sample.RowRemapPending, gpuDesc("row_remap_pending", "Whether a row remap waits for a GPU reset."), prometheus.GaugeValue},
	{sample.RowRemapFailed, gpuDesc("row_remap_failed", "Whether a row remap failed (the GPU needs service)."), prometheus.GaugeValue},
	{sample.PersistenceModeEnabled, gpuDesc("persistence_mode_enabled", "Whether persistence mode is on."), prometheus.GaugeValue},
	{sample.MIGModeEnabled, gpuDesc("mig_mode_enabled", "Whether MIG mode is on."), prometheus.GaugeValue},
	{sample.ComputeProcesses, gpuDesc("compute_processes", "Compute processes running on the GPU, as the driver sees them."), prometheus.GaugeValue},
	{sample.ComputeMode, gpuDesc("compute_mode", "NVML compute mode: 0 Default (several processes time-slice the GPU), 1 Exclusive_Thread, 2 Prohibited, 3 Exclusive_Process."), prometheus.GaugeValue},
	{sample.MIGModePending, gpuDesc("mig_mode_pending", "The MIG mode the GPU takes at its next reset (1 on); differing from mig_mode_enabled, a reset is due."), prometheus.GaugeValue},
	{sample.MPSProcesses, gpuDesc("mps_processes", "Processes the driver lists as MPS compute processes; above 0 the GPU is shared through an MPS server."), prometheus.GaugeValue},
	{sample.FabricState, gpuDesc("fabric_state", "NVLink fabric state of the GPU on NVSwitch systems (NVML GPU fabric info): 0 not supported, 1 not started, 2 in progress, 3 completed. Below 3 on an NVSwitch system, CUDA fails with error 802."), prometheus.GaugeValue},
	{sample.FabricStatus, gpuDesc("fabric_status", "Result of the GPU's fabric registration (an nvmlReturn_t: 0 success), meaningful once fabric_state is 3."), prometheus.GaugeValue},
}

func (c *gpuCollector) Metrics(r *sample.GPUs, emit func(prometheus.Metric)) {
	emit(engine.NewSeries(gpuBackendDesc, prometheus.GaugeValue, 1, r.Backend, r.DriverVersion))
	if r.CUDADriverVersion > 0 {
		emit(engine.NewSeries(gpuDriverCUDADesc, prometheus.GaugeValue, float64(r.CUDADriverVersion)))
	}
	for _, sw := range r.Switches {
		emit(engine.NewSeries(gpuBackendSwitchesDesc, prometheus.CounterValue, float64(sw.Count), sw.From, sw.To))
	}
	topologyMetrics(r.Topology, gpuFlags.peerMaxGPUs, emit)
	for i := range r.Devices {
		g := &r.Devices[i]
		id := strconv.Itoa(g.Index)
		emit(engine.NewSeries(gpuInfoDesc, prometheus.GaugeValue, 1,
			id, g.UUID, g.PCIBusID, g.Model, string(g.ActivitySource), string(g.LinkSource)))
		emit(engine.NewSeries(gpuUpDesc, prometheus.GaugeValue, boolFloat(g.Up), id))
		if !g.Up {
			continue
		}
		for _, m := range gpuFieldMetrics {
			if x, ok := g.Values.Get(m.field); ok {
				emit(engine.NewSeries(m.desc, m.typ, x, id))
			}
		}
		if x, ok := g.Values.Get(sample.ECCCorrectedErrorsTotal); ok {
			emit(engine.NewSeries(gpuECCDesc, prometheus.CounterValue, x, id, "corrected"))
		}
		if x, ok := g.Values.Get(sample.ECCUncorrectedErrorsTotal); ok {
			emit(engine.NewSeries(gpuECCDesc, prometheus.CounterValue, x, id, "uncorrected"))
		}
		if x, ok := g.Values.Get(sample.ECCCorrectedAggregateTotal); ok {
			emit(engine.NewSeries(gpuECCAggregateDesc, prometheus.CounterValue, x, id, sample.ECCCorrected))
		}
		if x, ok := g.Values.Get(sample.ECCUncorrectedAggregateTotal); ok {
			emit(engine.NewSeries(gpuECCAggregateDesc, prometheus.CounterValue, x, id, sample.ECCUncorrected))
		}
		for _, ecc := range g.ECCErrors {
			desc := gpuECCLocationDesc
			if ecc.Counter == sample.ECCAggregate {
				desc = gpuECCLocationAggregateDesc
			}
			emit(engine.NewSeries(desc, prometheus.CounterValue, ecc.Count, id, ecc.Location, ecc.Type))
		}
		for _, ev := range sample.ClockEventDurations {
			if x, ok := g.Values.Get(ev.Field); ok {
				emit(engine.NewSeries(gpuClockEventSecondsDesc, prometheus.CounterValue, x, id, ev.Reason))
			}
		}
		if x, ok := g.Values.Get(sample.RemappedRowsCorrectable); ok {
			emit(engine.NewSeries(gpuRemappedDesc, prometheus.GaugeValue, x, id, "correctable"))
		}
		if x, ok := g.Values.Get(sample.RemappedRowsUncorrectable); ok {
			emit(engine.NewSeries(gpuRemappedDesc, prometheus.GaugeValue, x, id, "uncorrectable"))
		}
		if _, ok := g.Values.Get(sample.SMClockHertz); ok {
			for _, reason := range sample.ClockEventReasons {
				emit(engine.NewSeries(gpuClockEventDesc, prometheus.GaugeValue,
					boolFloat(g.ClockEventReasons&reason.Bit != 0), id, reason.Name))
			}
		}
		for _, l := range g.Links {
			link := strconv.Itoa(l.Link)
			emit(engine.NewSeries(gpuLinkUpDesc, prometheus.GaugeValue, boolFloat(l.Up), id, link))
			if !math.IsNaN(l.TxBytesPerSecond) || l.TxBytesTotal > 0 {
				emit(engine.NewSeries(gpuLinkTxDesc, prometheus.CounterValue, l.TxBytesTotal, id, link))
			}
			if !math.IsNaN(l.RxBytesPerSecond) || l.RxBytesTotal > 0 {
				emit(engine.NewSeries(gpuLinkRxDesc, prometheus.CounterValue, l.RxBytesTotal, id, link))
			}
			for k := range sample.NumNVLinkErrorKinds {
				if x, ok := l.Errors.Get(k); ok {
					emit(engine.NewSeries(gpuNVLinkErrorsDesc, prometheus.CounterValue, x, id, link, k.String()))
				}
			}
		}
		migMetrics(g, id, emit)
		for xid, n := range g.XIDErrors {
			emit(engine.NewSeries(gpuXIDDesc, prometheus.CounterValue, float64(n), id, strconv.FormatUint(xid, 10)))
		}
	}
}

// migMetrics emits a MIG GPU's GPU instances: their MIG devices, and
// their activity where GPM measured it.
func migMetrics(g *sample.GPU, id string, emit func(prometheus.Metric)) {
	for i := range g.MIGInstances {
		m := &g.MIGInstances[i]
		gi := strconv.Itoa(m.GPUInstance)
		for _, u := range m.Devices {
			emit(engine.NewSeries(gpuMIGDeviceDesc, prometheus.GaugeValue, 1, id, gi, u))
		}
		measured := false
		for _, r := range []struct {
			desc *prometheus.Desc
			x    float64
		}{{gpuMIGSMActiveDesc, m.SMActive}, {gpuMIGSMOccupancyDesc, m.SMOccupancy}, {gpuMIGTensorDesc, m.TensorActive}, {gpuMIGDRAMDesc, m.DRAMActive}} {
			if !math.IsNaN(r.x) {
				measured = true
				emit(engine.NewSeries(r.desc, prometheus.GaugeValue, r.x, id, gi))
			}
		}
		if measured || m.SMActiveSecondsTotal > 0 {
			emit(engine.NewSeries(gpuMIGSMSecondsDesc, prometheus.CounterValue, m.SMActiveSecondsTotal, id, gi))
		}
	}
}

// topologyMetrics emits the static topology: capacities per GPU, and per
// ordered pair (so that a query on gpu="3" finds all of GPU 3's peers) when
// the node has at most peerMaxGPUs GPUs
// (--collector.gpu.peer-metrics-max-gpus).
func topologyMetrics(t *sample.Topology, peerMaxGPUs int, emit func(prometheus.Metric)) {
	if t == nil {
		return
	}
	for _, g := range t.GPUs {
		id := strconv.Itoa(g.Index)
		if g.PCIeMaxBytesPerSecond > 0 {
			emit(engine.NewSeries(gpuPCIeCapacityDesc, prometheus.GaugeValue, g.PCIeMaxBytesPerSecond, id))
		}
		if g.NVLinkMaxBytesPerSecond > 0 {
			emit(engine.NewSeries(gpuNVLinkCapacityDesc, prometheus.GaugeValue, g.NVLinkMaxBytesPerSecond, id))
		}
	}
	if len(t.GPUs) > peerMaxGPUs {
		return
	}
	for _, p := range t.Pairs {
		a, b := strconv.Itoa(p.A), strconv.Itoa(p.B)
		for _, ends := range [2][2]string{{a, b}, {b, a}} {
			if p.Link != "" {
				emit(engine.NewSeries(gpuPeerLinkInfoDesc, prometheus.GaugeValue, 1, ends[0], ends[1], p.Link))
			}
			emit(engine.NewSeries(gpuPeerNVLinksDesc, prometheus.GaugeValue, float64(p.NVLinks), ends[0], ends[1]))
			if p.ExpectedBytesPerSecond > 0 {
				emit(engine.NewSeries(gpuPeerCapacityDesc, prometheus.GaugeValue, p.ExpectedBytesPerSecond, ends[0], ends[1]))
			}
		}
	}
}

// String describes the collector's backend for logs and /diagnose.
func (c *gpuCollector) String() string {
	if c.backend == nil {
		return fmt.Sprintf("gpu: no backend (%s)", c.why)
	}
	return "gpu: " + c.backend.Name()
}
