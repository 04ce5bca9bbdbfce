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
	MIGDevices []string  `json:"mig_devices,omitempty"`
	Processes  []Process `json:"processes,omitempty"`

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

// ComputeModeName names a compute mode as nvidia-smi does.
func ComputeModeName(m float64) string {
	switch m {
	case ComputeModeDefault:
		return "Default"
	case ComputeModeExclusiveThread:
		return "Exclusive_Thread"
	case ComputeModeProhibited:
		return "Prohibited"
	case ComputeModeExclusiveProcess:
		return "Exclusive_Process"
	}
	return fmt.Sprintf("mode %.0f", m)
}

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
	SMActiveSecondsTotal:      "sm_active_seconds_total",
	TensorActiveSecondsTotal:  "tensor_active_seconds_total",
	DRAMActiveSecondsTotal:    "dram_active_seconds_total",
	PCIeTxBytesTotal:          "pcie_tx_bytes_total",
	PCIeRxBytesTotal:          "pcie_rx_bytes_total",
	NVLinkTxBytesTotal:        "nvlink_tx_bytes_total",
	NVLinkRxBytesTotal:        "nvlink_rx_bytes_total",
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
		n += len(d.Links)*48 + len(d.Processes)*16 + len(d.XIDErrors)*48
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
	Link    int      `json:"link"`
	Up      bool     `json:"up"`
	TxBps   *float64 `json:"tx_bps"`
	RxBps   *float64 `json:"rx_bps"`
	TxTotal float64  `json:"tx_total"`
	RxTotal float64  `json:"rx_total"`
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
		TxTotal: l.TxBytesTotal, RxTotal: l.RxBytesTotal})
}

// UnmarshalJSON reads null rates as NaN.
func (l *NVLink) UnmarshalJSON(b []byte) error {
	var j nvlinkJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	*l = NVLink{Link: j.Link, Up: j.Up, TxBytesPerSecond: orNaN(j.TxBps), RxBytesPerSecond: orNaN(j.RxBps),
		TxBytesTotal: j.TxTotal, RxBytesTotal: j.RxTotal}
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
