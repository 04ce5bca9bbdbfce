package collectors

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/gpudiag/gpudiag/engine"
	"github.com/gpudiag/gpudiag/gpu/nvmlgpu/nvmlfake"
)

// The health signals a dcgm-exporter user expects, in base units and
// Prometheus' conventions: counters for the NVLink errors by link and
// kind, the time held down per clock event reason (s) and ECC by location
// and counter; gauges for the memory temperature, free and reserved memory
// and the decoder (0-1). What the GPU does not report (NVLink data CRC
// errors and ECC locations other than DRAM and SRAM, as on an H200; here
// the encoder too) has no series at all.
func TestGPUHealthMetricsExposition(t *testing.T) {
	g := nvmlfake.Hopper(0)
	g.NVLinks = 2
	g.Fields = map[nvmlfake.FieldKey]uint64{
		{ID: nvml.FI_DEV_MEMORY_TEMP}:                           45,
		{ID: nvml.FI_DEV_CLOCKS_EVENT_REASON_SW_POWER_CAP}:      1_500_000_000,
		{ID: nvml.FI_DEV_CLOCKS_EVENT_REASON_HW_THERM_SLOWDOWN}: 0,
		{ID: nvml.FI_DEV_NVLINK_ERROR_DL_CRC, Scope: 0}:         0,
		{ID: nvml.FI_DEV_NVLINK_ERROR_DL_CRC, Scope: 1}:         12,
		{ID: nvml.FI_DEV_NVLINK_ERROR_DL_REPLAY, Scope: 0}:      0,
		{ID: nvml.FI_DEV_NVLINK_ERROR_DL_REPLAY, Scope: 1}:      4,
		{ID: nvml.FI_DEV_NVLINK_ERROR_DL_RECOVERY, Scope: 0}:    0,
		{ID: nvml.FI_DEV_NVLINK_ERROR_DL_RECOVERY, Scope: 1}:    1,
	}
	g.ECCCorr, g.ECCCorrAgg, g.ECCUncorrAgg = 3, 10, 1
	g.MemoryErrors = map[nvmlfake.MemoryErrorKey]uint64{
		{Type: nvml.MEMORY_ERROR_TYPE_CORRECTED, Counter: nvml.VOLATILE_ECC, Location: nvml.MEMORY_LOCATION_DRAM}:    3,
		{Type: nvml.MEMORY_ERROR_TYPE_UNCORRECTED, Counter: nvml.AGGREGATE_ECC, Location: nvml.MEMORY_LOCATION_SRAM}: 1,
	}
	g.MemTotal, g.MemUsed, g.MemReserved = 80<<30, 10<<30, 512<<20
	g.DecoderPct = 20
	g.NoEncoder = true
	c, clk := newFakeGPUCollector(t, g)
	clk.t = clk.t.Add(time.Second)
	e := engine.New(engine.Options{Interval: testEngineInterval})
	e.Add(asEngine(c), 0)
	e.SampleOnce(context.Background())

	want := `
# HELP gpudiag_gpu_clock_event_seconds_total Time the clocks were held down for the reason since the driver loaded (NVML clock event reason counters, sw_power_cap, sync_boost, sw_thermal_slowdown, hw_thermal_slowdown, hw_power_brake_slowdown); rate() is the fraction of time held down. Read every 10 s.
# TYPE gpudiag_gpu_clock_event_seconds_total counter
gpudiag_gpu_clock_event_seconds_total{gpu="0",reason="hw_thermal_slowdown"} 0
gpudiag_gpu_clock_event_seconds_total{gpu="0",reason="sw_power_cap"} 1.5
# HELP gpudiag_gpu_decoder_utilization_ratio Video decoder (NVDEC) utilization over NVML's sampling period. Read every 10 s.
# TYPE gpudiag_gpu_decoder_utilization_ratio gauge
gpudiag_gpu_decoder_utilization_ratio{gpu="0"} 0.2
# HELP gpudiag_gpu_ecc_aggregate_errors_total Memory ECC errors over the GPU's life (aggregate, kept in its InfoROM across driver reloads and resets), by type (corrected, uncorrected).
# TYPE gpudiag_gpu_ecc_aggregate_errors_total counter
gpudiag_gpu_ecc_aggregate_errors_total{gpu="0",type="corrected"} 10
gpudiag_gpu_ecc_aggregate_errors_total{gpu="0",type="uncorrected"} 1
# HELP gpudiag_gpu_ecc_errors_total Memory ECC errors since the driver loaded (volatile), by type (corrected, uncorrected).
# TYPE gpudiag_gpu_ecc_errors_total counter
gpudiag_gpu_ecc_errors_total{gpu="0",type="corrected"} 3
gpudiag_gpu_ecc_errors_total{gpu="0",type="uncorrected"} 0
# HELP gpudiag_gpu_ecc_location_aggregate_errors_total Memory ECC errors over the GPU's life (aggregate), by memory location and type, as ecc_location_errors_total.
# TYPE gpudiag_gpu_ecc_location_aggregate_errors_total counter
gpudiag_gpu_ecc_location_aggregate_errors_total{gpu="0",location="sram",type="uncorrected"} 1
# HELP gpudiag_gpu_ecc_location_errors_total Memory ECC errors since the driver loaded (volatile), by memory location (dram, sram, l1_cache, l2_cache, register_file, texture_memory, texture_shm, cbu: those the GPU reports; Hopper reports dram and sram) and type; summed over location, ecc_errors_total.
# TYPE gpudiag_gpu_ecc_location_errors_total counter
gpudiag_gpu_ecc_location_errors_total{gpu="0",location="dram",type="corrected"} 3
# HELP gpudiag_gpu_memory_free_bytes Device memory free: memory_bytes less memory_used_bytes and memory_reserved_bytes. Read every 10 s.
# TYPE gpudiag_gpu_memory_free_bytes gauge
gpudiag_gpu_memory_free_bytes{gpu="0"} 7.4625056768e+10
# HELP gpudiag_gpu_memory_reserved_bytes Device memory the driver and firmware reserve, which no process can use (NVML memory info v2). Read every 10 s.
# TYPE gpudiag_gpu_memory_reserved_bytes gauge
gpudiag_gpu_memory_reserved_bytes{gpu="0"} 5.36870912e+08
# HELP gpudiag_gpu_memory_temperature_celsius Device memory (HBM) temperature. Read every 10 s.
# TYPE gpudiag_gpu_memory_temperature_celsius gauge
gpudiag_gpu_memory_temperature_celsius{gpu="0"} 45
# HELP gpudiag_gpu_nvlink_errors_total NVLink errors since the driver loaded, by link and kind: crc_flit (flow-control flits received with a bad CRC) and crc_data (data flits, NVLink 1-3), replayed by the link layer; replay (transmissions replayed); recovery (the link went down and retrained). Only the counters the GPU reports. Read every minute, and at once after an XID or a link state change.
# TYPE gpudiag_gpu_nvlink_errors_total counter
gpudiag_gpu_nvlink_errors_total{gpu="0",kind="crc_flit",link="0"} 0
gpudiag_gpu_nvlink_errors_total{gpu="0",kind="crc_flit",link="1"} 12
gpudiag_gpu_nvlink_errors_total{gpu="0",kind="recovery",link="0"} 0
gpudiag_gpu_nvlink_errors_total{gpu="0",kind="recovery",link="1"} 1
gpudiag_gpu_nvlink_errors_total{gpu="0",kind="replay",link="0"} 0
gpudiag_gpu_nvlink_errors_total{gpu="0",kind="replay",link="1"} 4
`
	names := []string{"gpudiag_gpu_clock_event_seconds_total", "gpudiag_gpu_decoder_utilization_ratio", "gpudiag_gpu_encoder_utilization_ratio",
		"gpudiag_gpu_ecc_aggregate_errors_total", "gpudiag_gpu_ecc_errors_total", "gpudiag_gpu_ecc_location_aggregate_errors_total",
		"gpudiag_gpu_ecc_location_errors_total", "gpudiag_gpu_memory_reserved_bytes", "gpudiag_gpu_memory_free_bytes",
		"gpudiag_gpu_memory_temperature_celsius", "gpudiag_gpu_nvlink_errors_total"}
	if err := testutil.GatherAndCompare(e, strings.NewReader(want), names...); err != nil {
		t.Fatal(err)
	}
	// On a GPU without MIG, nothing of MIG.
	for _, name := range []string{"gpudiag_gpu_mig_sm_active_ratio", "gpudiag_gpu_mig_device_info", "gpudiag_gpu_mig_sm_active_seconds_total"} {
		if n, _ := testutil.GatherAndCount(e, name); n != 0 {
			t.Errorf("%d %s series on a GPU without MIG", n, name)
		}
	}
}

// A MIG GPU's GPU instances: their MIG devices by UUID, their activity as
// ratios, and SM activity integrated into a counter per instance, as the
// whole GPU's.
func TestGPUMIGInstanceMetrics(t *testing.T) {
	g := nvmlfake.Hopper(0)
	g.MIG = []string{"MIG-aaaa", "MIG-bbbb"}
	g.MIGInstance = []int{3, 5}
	g.MIGGPM = map[int]map[nvml.GpmMetricId]float64{
		3: {nvml.GPM_METRIC_SM_UTIL: 50, nvml.GPM_METRIC_ANY_TENSOR_UTIL: 40, nvml.GPM_METRIC_DRAM_BW_UTIL: 10, nvml.GPM_METRIC_SM_OCCUPANCY: 5},
		5: {nvml.GPM_METRIC_SM_UTIL: 100},
	}
	c, clk := newFakeGPUCollector(t, g)
	e := engine.New(engine.Options{Interval: testEngineInterval})
	e.Add(asEngine(c), 0)
	for range 3 { // the first sample of each instance starts its pair
		clk.t = clk.t.Add(2 * time.Second)
		e.SampleOnce(context.Background())
	}
	want := `
# HELP gpudiag_gpu_mig_device_info A MIG device (compute instance) of the GPU instance, by its UUID: what the device plugin hands pods and the kubelet names; join on (gpu, gpu_instance).
# TYPE gpudiag_gpu_mig_device_info gauge
gpudiag_gpu_mig_device_info{gpu="0",gpu_instance="3",mig_uuid="MIG-aaaa"} 1
gpudiag_gpu_mig_device_info{gpu="0",gpu_instance="5",mig_uuid="MIG-bbbb"} 1
# HELP gpudiag_gpu_mig_sm_active_ratio Fraction of time at least one warp was resident on an SM of the MIG GPU instance, over the last sampling interval (GPM per GPU instance, Hopper and newer); only on GPUs in MIG mode.
# TYPE gpudiag_gpu_mig_sm_active_ratio gauge
gpudiag_gpu_mig_sm_active_ratio{gpu="0",gpu_instance="3"} 0.5
gpudiag_gpu_mig_sm_active_ratio{gpu="0",gpu_instance="5"} 1
# HELP gpudiag_gpu_mig_sm_active_seconds_total The MIG GPU instance's SM activity integrated over time; rate() gives the mean mig_sm_active_ratio over any range.
# TYPE gpudiag_gpu_mig_sm_active_seconds_total counter
gpudiag_gpu_mig_sm_active_seconds_total{gpu="0",gpu_instance="3"} 2
gpudiag_gpu_mig_sm_active_seconds_total{gpu="0",gpu_instance="5"} 4
# HELP gpudiag_gpu_mig_tensor_active_ratio Fraction of cycles any tensor pipe of the MIG GPU instance was active, over the last sampling interval.
# TYPE gpudiag_gpu_mig_tensor_active_ratio gauge
gpudiag_gpu_mig_tensor_active_ratio{gpu="0",gpu_instance="3"} 0.4
`
	if err := testutil.GatherAndCompare(e, strings.NewReader(want), "gpudiag_gpu_mig_device_info", "gpudiag_gpu_mig_sm_active_ratio",
		"gpudiag_gpu_mig_sm_active_seconds_total", "gpudiag_gpu_mig_tensor_active_ratio"); err != nil {
		t.Fatal(err)
	}
}
