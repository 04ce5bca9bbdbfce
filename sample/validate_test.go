package sample

import (
	"math"
	"strings"
	"testing"
)

func gpuWith(f Field, x float64) *GPUs {
	v := NewValues()
	v.Set(f, x)
	return &GPUs{Devices: []GPU{{Values: v}}}
}

func ptr(x float64) *float64 { return &x }

func nvlinkErrors(k NVLinkErrorKind, x float64) NVLinkErrors {
	var e NVLinkErrors
	e.Set(k, x)
	return e
}

func eccWith(cs ...ECCCount) *GPUs {
	return &GPUs{Devices: []GPU{{Values: NewValues(), ECCErrors: cs}}}
}

func migWith(ms ...MIGInstance) *GPUs {
	return &GPUs{Devices: []GPU{{Values: NewValues(), MIGInstances: ms}}}
}

// Each sample type's Validate refuses the values no reading has and names
// the field; NaN (not measured) and the edges of each range pass.
func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		name  string
		s     interface{ Validate() error }
		field string // "" when valid
	}{
		{"unmeasured", &GPUs{Devices: []GPU{{Values: NewValues()}}}, ""},
		{"ratio at 1", gpuWith(SMActive, 1), ""},
		{"ratio past 1", gpuWith(TensorActive, 1.5), "devices[0].values.tensor_active"},
		{"negative ratio", gpuWith(MemoryUtilization, -0.1), "devices[0].values.memory_utilization"},
		{"cold GPU", gpuWith(TemperatureCelsius, -40), ""},
		{"below absolute zero", gpuWith(TemperatureCelsius, -300), "devices[0].values.temperature_celsius"},
		{"molten GPU", gpuWith(TemperatureCelsius, 1e308), "devices[0].values.temperature_celsius"},
		{"negative energy", gpuWith(EnergyJoulesTotal, -1e308), "devices[0].values.energy_joules_total"},
		{"infinite rate", gpuWith(PCIeRxBytesPerSecond, math.Inf(1)), "devices[0].values.pcie_rx_bps"},
		{"unmeasured link rate", &GPUs{Devices: []GPU{{Values: NewValues(), Links: []NVLink{{TxBytesPerSecond: math.NaN()}}}}}, ""},
		{"negative link total", &GPUs{Devices: []GPU{{Values: NewValues(), Links: []NVLink{{RxBytesTotal: -1}}}}}, "devices[0].links[0].rx_total"},
		{"hot HBM", gpuWith(MemoryTemperatureCelsius, 95), ""},
		{"HBM below absolute zero", gpuWith(MemoryTemperatureCelsius, -274), "devices[0].values.memory_temperature_celsius"},
		{"encoder past 1", gpuWith(EncoderUtilization, 1.01), "devices[0].values.encoder_utilization"},
		{"decoder ratio", gpuWith(DecoderUtilization, 0.3), ""},
		{"negative throttle time", gpuWith(ClockEventHWThermalSecondsTotal, -1), "devices[0].values.clock_event_hw_thermal_slowdown_seconds_total"},
		{"negative NVLink errors", &GPUs{Devices: []GPU{{Values: NewValues(), Links: []NVLink{{Errors: nvlinkErrors(NVLinkReplay, -1)}}}}}, "devices[0].links[0].errors.replay"},
		{"NVLink errors", &GPUs{Devices: []GPU{{Values: NewValues(), Links: []NVLink{{Errors: nvlinkErrors(NVLinkReplay, 12)}}}}}, ""},
		{"ECC location", eccWith(ECCCount{"sram", ECCVolatile, ECCUncorrected, 1}), ""},
		{"made-up ECC location", eccWith(ECCCount{"pod-1234", ECCVolatile, ECCCorrected, 1}), "devices[0].ecc_errors[0].location"},
		{"made-up ECC counter", eccWith(ECCCount{"dram", "lifetime", ECCCorrected, 1}), "devices[0].ecc_errors[0].counter"},
		{"made-up ECC type", eccWith(ECCCount{"dram", ECCVolatile, "sbe", 1}), "devices[0].ecc_errors[0].type"},
		{"negative ECC count", eccWith(ECCCount{"dram", ECCVolatile, ECCCorrected, -1}), "devices[0].ecc_errors[0].count"},
		{"ECC counter twice", eccWith(ECCCount{"dram", ECCVolatile, ECCCorrected, 1}, ECCCount{"dram", ECCVolatile, ECCCorrected, 2}), "devices[0].ecc_errors[1]"},
		{"MIG instance", migWith(MIGInstance{GPUInstance: 1, SMActive: 0.5, SMOccupancy: math.NaN()}), ""},
		{"MIG ratio past 1", migWith(MIGInstance{GPUInstance: 1, TensorActive: 2}), "devices[0].mig_instances[0].tensor_active"},
		{"MIG instance ID out of range", migWith(MIGInstance{GPUInstance: 1 << 20}), "devices[0].mig_instances[0].gpu_instance"},
		{"MIG instance twice", migWith(MIGInstance{GPUInstance: 2}, MIGInstance{GPUInstance: 2}), "devices[0].mig_instances[1].gpu_instance"},
		{"more MIG instances than a GPU has", migWith(make([]MIGInstance, 8)...), "devices[0].mig_instances"},
		{"process SM share", &GPUs{Devices: []GPU{{Values: NewValues(), Processes: []Process{{SMUtil: ptr(2)}}}}}, "devices[0].processes[0].sm_util"},
		{"group ratio", &GPUProcesses{GPUs: []GPUProcessGroup{{RemoteMemoryRatio: ptr(1.01)}}}, "gpus[0].remote_memory_ratio"},
		{"group total", &GPUProcesses{GPUs: []GPUProcessGroup{{UserSecondsTotal: -1}}}, "gpus[0].user_seconds_total"},
		{"process cores", &GPUProcesses{GPUs: []GPUProcessGroup{{Processes: []GPUProcess{{CPUCoresUsed: ptr(-2)}}}}}, "gpus[0].processes[0].cpu_cores_used"},
		{"throttled seconds per second past 1", &GPUProcesses{GPUs: []GPUProcessGroup{{CPUThrottledSecondsPerSecond: ptr(3)}}}, ""},
		{"NCCL GPU of a file not held", &NCCL{GPUs: []NCCLGPU{{File: 1}}, Files: []NCCLFile{{}}}, "gpus[0].file"},
		{"NCCL GPU of a process not held", &NCCL{GPUs: []NCCLGPU{{Process: 1}}, Files: []NCCLFile{{Processes: []NCCLProcess{{}}}}}, "gpus[0].process"},
		{"NCCL GPU held", &NCCL{GPUs: []NCCLGPU{{}}, Files: []NCCLFile{{Processes: []NCCLProcess{{}}}}}, ""},
		{"stall past 100%", &Pressure{Resources: []PressureResource{{Full: &PressureLine{Avg10: 101}}}}, "resources[0].full.avg10"},
		{"busy past 1", &CPU{Interval: &CPUInterval{BusyRatio: 1.2}}, "interval.busy_ratio"},
		{"other node past 1", &NUMA{Nodes: []NUMANode{{OtherNodeRatio: ptr(-1)}}}, "nodes[0].other_node_ratio"},
	} {
		err := tc.s.Validate()
		switch {
		case tc.field == "" && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.field != "" && (err == nil || !strings.HasPrefix(err.Error(), tc.field+": ")):
			t.Errorf("%s: %v; want an error naming %s", tc.name, err, tc.field)
		}
	}
}
