// Package sample holds the plain data that collectors produce and analyzers
// read. It has no dependencies so that analyzers, recorders and tests can use
// it without a driver, a kernel or a registry.
//
// Samples are immutable once handed to the engine: the window, the metrics
// output and the analyzers share them without copying.
package sample

import (
	"encoding/json"
	"fmt"
	"math"
	"time"
)

// GPUKey is the gpu collector's key: its samples are *GPUs.
var GPUKey = NewKey[GPUs]("gpu")

// GPUs is one reading of every GPU on the node.
type GPUs struct {
	// Backend names the source of the reading: "nvml" or "dcgm".
	Backend string `json:"backend"`
	// DriverVersion is the kernel driver's version as the backend reports it.
	DriverVersion string `json:"driver_version,omitempty"`
	// CUDADriverVersion is the newest CUDA version the driver supports, as
	// NVML encodes it (1000 × major + 10 × minor: 12080 is CUDA 12.8); 0
	// when unknown.
	CUDADriverVersion int   `json:"cuda_driver_version,omitempty"`
	Devices           []GPU `json:"devices"`
	// Topology is read once when the backend opens and shared by every
	// sample of the run; nil when the backend does not report it (DCGM).
	Topology *Topology `json:"topology,omitempty"`

	// Fallback is set while the GPUs are read through a fallback backend
	// because the preferred one failed; nil when the preferred one serves.
	Fallback *BackendFallback `json:"fallback,omitempty"`
	// Switches counts the backend switches since the daemon started, for
	// the backends that can switch (DCGM falling back to NVML and back).
	Switches []BackendSwitch `json:"backend_switches,omitempty"`
}

// NoWork reports whether no GPU of the sample has work: every GPU answered,
// read an utilization of zero and listed no process, MPS clients included.
// Zero utilization alone is not enough (a job between kernels, loading its
// data), and a GPU that cannot say (lost, under MIG, a backend without a
// process list, a failed query) has work as far as anyone knows.
func (g *GPUs) NoWork() bool {
	if g == nil || len(g.Devices) == 0 {
		return false
	}
	for i := range g.Devices {
		d := &g.Devices[i]
		util, utilKnown := d.Values.Get(Utilization)
		procs, procsKnown := d.Values.Get(ComputeProcesses)
		mps, _ := d.Values.Get(MPSProcesses) // NaN where unread: no client known
		if !d.Up || len(d.MIGDevices) > 0 || !utilKnown || util > 0 || !procsKnown || procs > 0 || mps > 0 {
			return false
		}
	}
	return true
}

// BackendFallback says why the preferred GPU backend is not the one reading.
type BackendFallback struct {
	// Preferred is the backend the daemon would use: "dcgm".
	Preferred string `json:"preferred"`
	// Reason is the preferred backend's last error.
	Reason string `json:"reason"`
	// Since is when the preferred backend was given up.
	Since time.Time `json:"since"`
}

// BackendSwitch counts switches from one backend to another; To is "none"
// when nothing could take over.
type BackendSwitch struct {
	From  string `json:"from"`
	To    string `json:"to"`
	Count uint64 `json:"count"`
}

// ActivitySource says where the SM, tensor and DRAM activity signals of a GPU
// came from. Only SourceGPM and SourceDCGM measure SM activity; SourceNVML
// carries only NVML's coarse utilization, which reads 100% for a copy loop.
type ActivitySource string

const (
	SourceGPM  ActivitySource = "gpm"
	SourceDCGM ActivitySource = "dcgm"
	SourceNVML ActivitySource = "nvml"
)

// GPU is one reading of one GPU.
type GPU struct {
	Index    int    `json:"index"`
	UUID     string `json:"uuid"`
	PCIBusID string `json:"pci_bus_id"`
	Model    string `json:"model"`

	// Up is false when the GPU did not answer (fell off the bus, lost, or
	// every query failed); Error then says why.
	Up    bool   `json:"up"`
	Error string `json:"error,omitempty"`

	// ActivitySource and LinkSource name where the activity ratios and the
	// PCIe/NVLink throughputs came from.
	ActivitySource ActivitySource `json:"activity_source,omitempty"`
	LinkSource     ActivitySource `json:"link_source,omitempty"`

	// IntervalSeconds is the span the rates and activity ratios average over.
	IntervalSeconds float64 `json:"interval_seconds,omitempty"`

	Values Values `json:"values"`

	// ClockEventReasons is NVML's bitmask of reasons the clocks are held
	// below their maximum (nvmlClocksEventReason*; the bits are named in
	// ClockEventReasons, the package variable).
	ClockEventReasons uint64 `json:"clock_event_reasons,omitempty"`

	Links []NVLink `json:"links,omitempty"`
	// MIGDevices are the UUIDs of the GPU's MIG devices while MIG is on
	// (what Kubernetes hands pods instead of the GPU's own UUID).
	MIGDevices []string `json:"mig_devices,omitempty"`
	// MIGInstances are the GPU instances of a GPU in MIG mode with their
	// own activity (GPM per GPU instance); none on a GPU without MIG.
	MIGInstances []MIGInstance `json:"mig_instances,omitempty"`
	Processes    []Process     `json:"processes,omitempty"`

	// ECCErrors are the memory ECC error counts by location, counter and
	// type, those the GPU reports (a Hopper GPU reports DRAM and SRAM);
	// the totals over every location are ECCCorrectedErrorsTotal and the
	// other ECC fields of Values.
	ECCErrors []ECCCount `json:"ecc_errors,omitempty"`

	// XIDErrors counts XID events seen since the daemon started, by XID.
	XIDErrors map[uint64]uint64 `json:"xid_errors,omitempty"`
}

// NVLink is one NVLink of a GPU.
type NVLink struct {
	Link int  `json:"link"`
	Up   bool `json:"up"`
	// Throughput over the sample interval, in bytes per second; NaN when the
	// backend cannot measure it per link.
	TxBytesPerSecond float64 `json:"tx_bps"`
	RxBytesPerSecond float64 `json:"rx_bps"`
	// Totals integrated by the collector since the daemon started.
	TxBytesTotal float64 `json:"tx_total"`
	RxBytesTotal float64 `json:"rx_total"`
	// Errors are the link's error counters since the driver loaded, those
	// the GPU reports.
	Errors NVLinkErrors `json:"errors,omitzero"`
}

// NVLinkErrorKind names one of a link's error counters.
type NVLinkErrorKind int

const (
	// NVLinkCRCFlit counts flow-control digits received with a bad CRC
	// (NVML_NVLINK_ERROR_DL_CRC_FLIT): the link layer replays them, so
	// nothing is lost but bandwidth, and a rising count is a marginal
	// link (cable, connector, NVSwitch tray).
	NVLinkCRCFlit NVLinkErrorKind = iota
	// NVLinkCRCData counts data flits received with a bad CRC (NVLink 1-3;
	// NVLink 4 protects data with ECC and does not count them).
	NVLinkCRCData
	// NVLinkReplay counts transmissions the link layer replayed.
	NVLinkReplay
	// NVLinkRecovery counts link recoveries: the link went down and
	// retrained, stalling its traffic meanwhile.
	NVLinkRecovery
	NumNVLinkErrorKinds
)

var nvlinkErrorNames = [NumNVLinkErrorKinds]string{"crc_flit", "crc_data", "replay", "recovery"}

func (k NVLinkErrorKind) String() string {
	if k < 0 || k >= NumNVLinkErrorKinds {
		return fmt.Sprintf("nvlink_error(%d)", int(k))
	}
	return nvlinkErrorNames[k]
}

// NVLinkErrors are a link's error counters. The zero value has none read,
// so a link built without them (an older trace, a backend that does not
// read them) says nothing rather than zero.
type NVLinkErrors struct {
	read   uint8
	counts [NumNVLinkErrorKinds]float64
}

// Set records the counter of kind k.
func (e *NVLinkErrors) Set(k NVLinkErrorKind, x float64) {
	e.read |= 1 << k
	e.counts[k] = x
}

// Get returns the counter of kind k and whether it was read.
func (e *NVLinkErrors) Get(k NVLinkErrorKind) (float64, bool) {
	if e.read&(1<<k) == 0 {
		return 0, false
	}
	return e.counts[k], true
}

// IsZero reports whether no counter was read (omitzero in JSON).
func (e NVLinkErrors) IsZero() bool { return e.read == 0 }

// MarshalJSON writes the counters read, by name.
func (e NVLinkErrors) MarshalJSON() ([]byte, error) {
	m := make(map[string]float64, NumNVLinkErrorKinds)
	for k := range NumNVLinkErrorKinds {
		if x, ok := e.Get(k); ok {
			m[k.String()] = x
		}
	}
	return json.Marshal(m)
}

// UnmarshalJSON reads what MarshalJSON wrote; unknown names (from a newer
// version) are ignored.
func (e *NVLinkErrors) UnmarshalJSON(b []byte) error {
	var m map[string]float64
	if err := json.Unmarshal(b, &m); err != nil {
		return err
	}
	*e = NVLinkErrors{}
	for name, x := range m {
		for k := range NumNVLinkErrorKinds {
			if k.String() == name {
				e.Set(k, x)
			}
		}
	}
	return nil
}

// ECC counters, as NVML names them: volatile counts since the driver
// loaded, aggregate counts over the GPU's life (kept in its InfoROM).
const (
	ECCVolatile  = "volatile"
	ECCAggregate = "aggregate"
)

// ECC error types: corrected (single-bit, SBE) and uncorrected
// (double-bit, DBE) errors.
const (
	ECCCorrected   = "corrected"
	ECCUncorrected = "uncorrected"
)

// ECCLocations are the memory locations NVML counts ECC errors in
// (nvmlMemoryLocation_t, in its order), as gpudiag names them: dram is
// NVML_MEMORY_LOCATION_DRAM (device memory, HBM on datacenter GPUs).
var ECCLocations = []string{"l1_cache", "l2_cache", "dram", "register_file", "texture_memory", "texture_shm", "cbu", "sram"}

// ECCCount is one ECC error counter of a GPU: its errors of one type in
// one memory location, volatile or aggregate.
type ECCCount struct {
	Location string  `json:"location"` // one of ECCLocations
	Counter  string  `json:"counter"`  // ECCVolatile or ECCAggregate
	Type     string  `json:"type"`     // ECCCorrected or ECCUncorrected
	Count    float64 `json:"count"`
}

// MIGInstance is one GPU instance of a GPU in MIG mode and its activity
// over the last interval, measured by GPM per GPU instance
// (nvmlGpmMigSampleGet). A ratio is NaN when not measured.
type MIGInstance struct {
	// GPUInstance is the GPU instance's ID (nvmlDeviceGetGpuInstanceId).
	GPUInstance int `json:"gpu_instance"`
	// Devices are the UUIDs of its MIG devices (compute instances).
	Devices []string `json:"devices,omitempty"`
	// IntervalSeconds is the span the ratios average over.
	IntervalSeconds float64
	SMActive        float64
	SMOccupancy     float64
	TensorActive    float64
	DRAMActive      float64
	// SMActiveSecondsTotal is SMActive integrated by the collector since
	// the daemon started, as for the whole GPU.
	SMActiveSecondsTotal float64
}

type migInstanceJSON struct {
	GPUInstance          int      `json:"gpu_instance"`
	Devices              []string `json:"devices,omitempty"`
	IntervalSeconds      float64  `json:"interval_seconds,omitempty"`
	SMActive             *float64 `json:"sm_active"`
	SMOccupancy          *float64 `json:"sm_occupancy"`
	TensorActive         *float64 `json:"tensor_active"`
	DRAMActive           *float64 `json:"dram_active"`
	SMActiveSecondsTotal float64  `json:"sm_active_seconds_total"`
}

// MarshalJSON writes unmeasured ratios as null.
func (m MIGInstance) MarshalJSON() ([]byte, error) {
	return json.Marshal(migInstanceJSON{GPUInstance: m.GPUInstance, Devices: m.Devices, IntervalSeconds: m.IntervalSeconds,
		SMActive: optional(m.SMActive), SMOccupancy: optional(m.SMOccupancy), TensorActive: optional(m.TensorActive),
		DRAMActive: optional(m.DRAMActive), SMActiveSecondsTotal: m.SMActiveSecondsTotal})
}

// UnmarshalJSON reads null ratios as NaN.
func (m *MIGInstance) UnmarshalJSON(b []byte) error {
	var j migInstanceJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	*m = MIGInstance{GPUInstance: j.GPUInstance, Devices: j.Devices, IntervalSeconds: j.IntervalSeconds,
		SMActive: orNaN(j.SMActive), SMOccupancy: orNaN(j.SMOccupancy), TensorActive: orNaN(j.TensorActive),
		DRAMActive: orNaN(j.DRAMActive), SMActiveSecondsTotal: j.SMActiveSecondsTotal}
	return nil
}

// Process is a compute process running on a GPU. PIDs are kept for the
// analyzers and /diagnose; they never become metric labels.
type Process struct {
	PID             uint32 `json:"pid"`
	UsedMemoryBytes uint64 `json:"used_memory_bytes"`
	// SMUtil is the process's share of the GPU's SM time (0–1) over the
	// backend's last process-utilization window (nvmlDeviceGetProcess
	// Utilization), nil when not measured. Evidence only.
	SMUtil *float64 `json:"sm_util,omitempty"`
}

// Compute modes, as NVML numbers them (nvmlComputeMode_t).
const (
	ComputeModeDefault          = 0
	ComputeModeExclusiveThread  = 1
	ComputeModeProhibited       = 2
	ComputeModeExclusiveProcess = 3
)

// GPU fabric states, as NVML numbers them (NVML_GPU_FABRIC_STATE_*).
const (
	FabricNotSupported = 0
	FabricNotStarted   = 1
	FabricInProgress   = 2
	FabricCompleted    = 3
)

// CUDAVersionString renders NVML's CUDA version encoding (12080) as 12.8.
func CUDAVersionString(v int) string {
	return fmt.Sprintf("%d.%d", v/1000, v%1000/10)
}

// Field names one scalar reading of a GPU. Ratios are 0–1, rates are in bytes
// per second, everything else in base units.
type Field int

const (
	// Activity, 0–1, averaged over IntervalSeconds.
	SMActive Field = iota
	SMOccupancy
	TensorActive
	TensorHMMAActive
	DRAMActive
	FP64Active
	FP32Active
	FP16Active
	GraphicsActive
	// NVML's coarse utilization (the fraction of time any kernel ran) and
	// memory-controller utilization, 0–1.
	Utilization
	MemoryUtilization

	// Link throughput, bytes/s, averaged over IntervalSeconds. TX is
	// device-to-host (PCIe) or outgoing (NVLink), from the GPU's view.
	PCIeTxBytesPerSecond
	PCIeRxBytesPerSecond
	NVLinkTxBytesPerSecond
	NVLinkRxBytesPerSecond

	MemoryUsedBytes
	MemoryTotalBytes
	SMClockHertz
	SMClockMaxHertz
	MemoryClockHertz
	MemoryClockMaxHertz
	PowerWatts
	PowerLimitWatts
	EnergyJoulesTotal
	TemperatureCelsius

	PCIeLinkGeneration
	PCIeLinkMaxGeneration
	PCIeLinkWidth
	PCIeLinkMaxWidth
	PCIeReplaysTotal

	ECCEnabled
	ECCCorrectedErrorsTotal
	ECCUncorrectedErrorsTotal
	RemappedRowsCorrectable
	RemappedRowsUncorrectable
	RowRemapPending
	RowRemapFailed

	PersistenceModeEnabled
	MIGModeEnabled
	ComputeProcesses
	// ComputeMode is NVML's compute mode (ComputeModeDefault …
	// ComputeModeExclusiveProcess, NVML's numbering).
	ComputeMode
	// MIGModePending is the MIG mode the GPU takes at its next reset (1
	// on); differing from MIGModeEnabled, a reset is due.
	MIGModePending
	// MPSProcesses counts the processes NVML lists as MPS compute
	// processes (nvmlDeviceGetMPSComputeRunningProcesses): above 0, the
	// GPU is shared through an MPS server.
	MPSProcesses
	// FabricState and FabricStatus are the GPU's NVLink fabric state on
	// NVSwitch systems (nvmlDeviceGetGpuFabricInfo): FabricState* and an
	// nvmlReturn_t (0 success) that says whether the fabric manager
	// registered the GPU.
	FabricState
	FabricStatus

	// MemoryTemperatureCelsius is the memory's (HBM's) temperature
	// (NVML_FI_DEV_MEMORY_TEMP, DCGM_FI_DEV_MEMORY_TEMP_CELSIUS).
	MemoryTemperatureCelsius
	// MemoryFreeBytes and MemoryReservedBytes split device memory as
	// nvidia-smi does: total = reserved (held by the driver and firmware)
	// + used + free (nvmlDeviceGetMemoryInfo_v2).
	MemoryFreeBytes
	MemoryReservedBytes
	// EncoderUtilization and DecoderUtilization are the video engines'
	// utilization, 0–1, over NVML's own sampling period.
	EncoderUtilization
	DecoderUtilization
	// ECCCorrectedAggregateTotal and ECCUncorrectedAggregateTotal are the
	// ECC errors over the GPU's life (aggregate counters, kept in its
	// InfoROM across driver reloads).
	ECCCorrectedAggregateTotal
	ECCUncorrectedAggregateTotal
	// Time the clocks were held down for each reason since the driver
	// loaded, in seconds (NVML_FI_DEV_CLOCKS_EVENT_REASON_*, reported in
	// ns); ClockEventDurations names them.
	ClockEventSWPowerCapSecondsTotal
	ClockEventSyncBoostSecondsTotal
	ClockEventSWThermalSecondsTotal
	ClockEventHWThermalSecondsTotal
	ClockEventHWPowerBrakeSecondsTotal

	// Counters integrated by the collector from the activity ratios and link
	// rates above, so that rate() over any scrape interval is exact.
	SMActiveSecondsTotal
	TensorActiveSecondsTotal
	DRAMActiveSecondsTotal
	PCIeTxBytesTotal
	PCIeRxBytesTotal
	NVLinkTxBytesTotal
	NVLinkRxBytesTotal

	NumFields
)

var fieldNames = [NumFields]string{
	SMActive:                  "sm_active",
	SMOccupancy:               "sm_occupancy",
	TensorActive:              "tensor_active",
	TensorHMMAActive:          "tensor_hmma_active",
	DRAMActive:                "dram_active",
	FP64Active:                "fp64_active",
	FP32Active:                "fp32_active",
	FP16Active:                "fp16_active",
	GraphicsActive:            "graphics_active",
	Utilization:               "utilization",
	MemoryUtilization:         "memory_utilization",
	PCIeTxBytesPerSecond:      "pcie_tx_bps",
	PCIeRxBytesPerSecond:      "pcie_rx_bps",
	NVLinkTxBytesPerSecond:    "nvlink_tx_bps",
	NVLinkRxBytesPerSecond:    "nvlink_rx_bps",
	MemoryUsedBytes:           "memory_used_bytes",
	MemoryTotalBytes:          "memory_total_bytes",
	SMClockHertz:              "sm_clock_hz",
	SMClockMaxHertz:           "sm_clock_max_hz",
	MemoryClockHertz:          "memory_clock_hz",
	MemoryClockMaxHertz:       "memory_clock_max_hz",
	PowerWatts:                "power_watts",
	PowerLimitWatts:           "power_limit_watts",
	EnergyJoulesTotal:         "energy_joules_total",
	TemperatureCelsius:        "temperature_celsius",
	PCIeLinkGeneration:        "pcie_link_gen",
	PCIeLinkMaxGeneration:     "pcie_link_max_gen",
	PCIeLinkWidth:             "pcie_link_width",
	PCIeLinkMaxWidth:          "pcie_link_max_width",
	PCIeReplaysTotal:          "pcie_replays_total",
	ECCEnabled:                "ecc_enabled",
	ECCCorrectedErrorsTotal:   "ecc_corrected_total",
	ECCUncorrectedErrorsTotal: "ecc_uncorrected_total",
	RemappedRowsCorrectable:   "remapped_rows_correctable",
	RemappedRowsUncorrectable: "remapped_rows_uncorrectable",
	RowRemapPending:           "row_remap_pending",
	RowRemapFailed:            "row_remap_failed",
	PersistenceModeEnabled:    "persistence_mode",
	MIGModeEnabled:            "mig_mode",
	ComputeProcesses:          "compute_processes",
	ComputeMode:               "compute_mode",
	MIGModePending:            "mig_mode_pending",
	MPSProcesses:              "mps_processes",
	FabricState:               "fabric_state",
	FabricStatus:              "fabric_status",

	MemoryTemperatureCelsius:           "memory_temperature_celsius",
	MemoryFreeBytes:                    "memory_free_bytes",
	MemoryReservedBytes:                "memory_reserved_bytes",
	EncoderUtilization:                 "encoder_utilization",
	DecoderUtilization:                 "decoder_utilization",
	ECCCorrectedAggregateTotal:         "ecc_corrected_aggregate_total",
	ECCUncorrectedAggregateTotal:       "ecc_uncorrected_aggregate_total",
	ClockEventSWPowerCapSecondsTotal:   "clock_event_sw_power_cap_seconds_total",
	ClockEventSyncBoostSecondsTotal:    "clock_event_sync_boost_seconds_total",
	ClockEventSWThermalSecondsTotal:    "clock_event_sw_thermal_slowdown_seconds_total",
	ClockEventHWThermalSecondsTotal:    "clock_event_hw_thermal_slowdown_seconds_total",
	ClockEventHWPowerBrakeSecondsTotal: "clock_event_hw_power_brake_slowdown_seconds_total",

	SMActiveSecondsTotal:     "sm_active_seconds_total",
	TensorActiveSecondsTotal: "tensor_active_seconds_total",
	DRAMActiveSecondsTotal:   "dram_active_seconds_total",
	PCIeTxBytesTotal:         "pcie_tx_bytes_total",
	PCIeRxBytesTotal:         "pcie_rx_bytes_total",
	NVLinkTxBytesTotal:       "nvlink_tx_bytes_total",
	NVLinkRxBytesTotal:       "nvlink_rx_bytes_total",
}

func (f Field) String() string {
	if f < 0 || f >= NumFields {
		return fmt.Sprintf("field(%d)", int(f))
	}
	return fieldNames[f]
}

// FieldByName returns the field with the given name.
func FieldByName(name string) (Field, bool) {
	for f, n := range fieldNames {
		if n == name {
			return Field(f), true
		}
	}
	return 0, false
}

// Values holds one reading of every field; a field the backend could not read
// is NaN. A fixed array keeps a GPU's reading small and allocation-free.
type Values [NumFields]float64

// NewValues returns Values with every field unavailable.
func NewValues() Values {
	var v Values
	for i := range v {
		v[i] = math.NaN()
	}
	return v
}

// Get returns the field's value and whether it was read.
func (v *Values) Get(f Field) (float64, bool) {
	x := v[f]
	return x, !math.IsNaN(x)
}

// Set stores a value.
func (v *Values) Set(f Field, x float64) { v[f] = x }

// MarshalJSON writes only the fields that were read (Measured), by name, so
// records stay compact and readable across versions that add fields.
func (v Values) MarshalJSON() ([]byte, error) {
	m := make(map[string]float64, len(v))
	for f, x := range v {
		if Measured(x) {
			m[fieldNames[f]] = x
		}
	}
	return json.Marshal(m)
}

// UnmarshalJSON reads what MarshalJSON wrote; unknown names (from a newer
// version) are ignored and missing ones stay unavailable.
func (v *Values) UnmarshalJSON(b []byte) error {
	var m map[string]float64
	if err := json.Unmarshal(b, &m); err != nil {
		return err
	}
	*v = NewValues()
	for name, x := range m {
		if f, ok := FieldByName(name); ok {
			v[f] = x
		}
	}
	return nil
}

// SizeBytes estimates the memory a reading holds, for the window's budget.
// The Topology is not counted: every sample points at the same one, so it
// costs its few kilobytes once however many samples the window keeps, and
// charging it per sample would shorten the window for memory it does not use.
func (s *GPUs) SizeBytes() int {
	n := 64 + len(s.Backend) + len(s.DriverVersion) + len(s.Switches)*48
	if s.Fallback != nil {
		n += 64 + len(s.Fallback.Reason)
	}
	for i := range s.Devices {
		d := &s.Devices[i]
		n += 200 + len(d.UUID) + len(d.PCIBusID) + len(d.Model) + len(d.Error)
		n += len(d.Links)*88 + len(d.Processes)*16 + len(d.XIDErrors)*48 + len(d.ECCErrors)*56
		for _, m := range d.MIGInstances {
			n += 96 + 16*len(m.Devices)
			for _, u := range m.Devices {
				n += len(u)
			}
		}
		for _, p := range d.Processes {
			if p.SMUtil != nil {
				n += 8
			}
		}
		for _, m := range d.MIGDevices {
			n += 16 + len(m)
		}
	}
	return n
}

// nvlinkJSON is NVLink on the wire: an unmeasured rate is written as null
// and read back as NaN (Measured).
type nvlinkJSON struct {
	Link    int          `json:"link"`
	Up      bool         `json:"up"`
	TxBps   *float64     `json:"tx_bps"`
	RxBps   *float64     `json:"rx_bps"`
	TxTotal float64      `json:"tx_total"`
	RxTotal float64      `json:"rx_total"`
	Errors  NVLinkErrors `json:"errors,omitzero"`
}

func optional(x float64) *float64 {
	if !Measured(x) {
		return nil
	}
	return &x
}

func orNaN(p *float64) float64 {
	if p == nil {
		return math.NaN()
	}
	return *p
}

// MarshalJSON writes unmeasured rates as null.
func (l NVLink) MarshalJSON() ([]byte, error) {
	return json.Marshal(nvlinkJSON{Link: l.Link, Up: l.Up, TxBps: optional(l.TxBytesPerSecond), RxBps: optional(l.RxBytesPerSecond),
		TxTotal: l.TxBytesTotal, RxTotal: l.RxBytesTotal, Errors: l.Errors})
}

// UnmarshalJSON reads null rates as NaN.
func (l *NVLink) UnmarshalJSON(b []byte) error {
	var j nvlinkJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	*l = NVLink{Link: j.Link, Up: j.Up, TxBytesPerSecond: orNaN(j.TxBps), RxBytesPerSecond: orNaN(j.RxBps),
		TxBytesTotal: j.TxTotal, RxBytesTotal: j.RxTotal, Errors: j.Errors}
	return nil
}

// ClockEventReasons names the clock event reason bits, as NVML numbers them
// (nvmlClocksEventReason*). DCGM reports the same bits in
// DCGM_FI_DEV_CLOCKS_EVENT_REASONS.
var ClockEventReasons = []struct {
	Bit  uint64
	Name string
}{
	{0x1, "gpu_idle"},
	{0x2, "applications_clocks_setting"},
	{0x4, "sw_power_cap"},
	{0x8, "hw_slowdown"},
	{0x10, "sync_boost"},
	{0x20, "sw_thermal_slowdown"},
	{0x40, "hw_thermal_slowdown"},
	{0x80, "hw_power_brake_slowdown"},
	{0x100, "display_clock_setting"},
}

// ClockEventDurations pairs the clock event reasons NVML times (the
// reason's name as in ClockEventReasons) with the field holding the time.
var ClockEventDurations = []struct {
	Reason string
	Field  Field
}{
	{"sw_power_cap", ClockEventSWPowerCapSecondsTotal},
	{"sync_boost", ClockEventSyncBoostSecondsTotal},
	{"sw_thermal_slowdown", ClockEventSWThermalSecondsTotal},
	{"hw_thermal_slowdown", ClockEventHWThermalSecondsTotal},
	{"hw_power_brake_slowdown", ClockEventHWPowerBrakeSecondsTotal},
}
