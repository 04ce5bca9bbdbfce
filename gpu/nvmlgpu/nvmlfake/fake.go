// Package nvmlfake builds go-nvml mocks of Hopper-class GPUs whose readings a
// test controls: GPM metrics, utilization, links, a GPU that falls off the bus,
// a call that hangs. It is for unit tests and benchmarks, never for claims
// about real hardware.
package nvmlfake

import (
	"fmt"
	"sync"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// GPU is the state of one fake GPU. Change it under Lock between samples.
type GPU struct {
	sync.Mutex
	Index int
	UUID  string
	Name  string
	// Bus is the PCI bus number; the bus ID becomes 0000:<bus>:00.0.
	Bus uint32

	// Lost makes every query return ERROR_GPU_IS_LOST (identity queries,
	// which the backend makes once at open, still answer).
	Lost bool
	// Fail, when not SUCCESS (the zero value), makes every query that Lost
	// affects return it instead, as a driver that broke down does
	// (ERROR_UNKNOWN, ERROR_DRIVER_NOT_LOADED, ...). Lost takes precedence.
	Fail nvml.Return
	// Hang, when non-nil, blocks GetUtilizationRates (the backend's
	// liveness probe, made every sample) until it is closed.
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
	// Zero makes every NVLink query answer NOT_SUPPORTED, as a PCIe card or
	// a single-GPU VM does.
	NVLinks   int
	LinksDown map[int]bool
	// NVLinkVersion is what GetNvLinkVersion answers: an nvmlNvlinkVersion_t
	// (nvml.NVLINK_VERSION_4_0 on Hopper), not the major version.
	NVLinkVersion nvml.NvlinkVersion
	// Remote is the far end of each NVLink; a link without an entry answers
	// NOT_SUPPORTED to the remote queries.
	Remote map[int]NVLinkEnd
	// RemoteTypeUnsupported makes GetNvLinkRemoteDeviceType answer
	// NOT_SUPPORTED, leaving only the remote's bus ID to go by.
	RemoteTypeUnsupported bool
	// Socket and PCIeSwitch place the GPU on the PCIe tree: two GPUs behind
	// one switch are PIX, in one socket NODE, across sockets SYS (see
	// Lib.CommonAncestor to model other trees).
	Socket, PCIeSwitch int
	// PCIeMaxGen and PCIeMaxWidth are the best link the GPU and slot support.
	PCIeMaxGen, PCIeMaxWidth int
	// NVLinkKiB is the NVLink data counter per link (fallback path), TX and RX alike.
	NVLinkKiB map[int]uint64
	PIDs      []uint32
	// MIG, when set, turns MIG mode on with these MIG devices' UUIDs (at
	// indexes 0…; an empty string leaves that index free).
	MIG []string
	// MIGPendingChange makes the pending MIG mode the opposite of the
	// current one: an admin changed it and the GPU waits for a reset.
	MIGPendingChange bool
	// ComputeMode is what GetComputeMode answers (COMPUTEMODE_DEFAULT
	// unless set).
	ComputeMode nvml.ComputeMode
	// MPSPIDs are the processes GetMPSComputeRunningProcesses lists.
	MPSPIDs []uint32
	// ProcessSMUtil is the SM utilization (percent) GetProcessUtilization
	// reports per PID; nil answers NOT_SUPPORTED.
	ProcessSMUtil map[uint32]uint32
	// FabricState and FabricStatus are what GetGpuFabricInfo answers
	// (nvml.GPU_FABRIC_STATE_*, and SUCCESS or the probe's error).
	FabricState  uint8
	FabricStatus nvml.Return

	// MemReserved is the memory (bytes) the driver reserves, which
	// GetMemoryInfo_v2 reports apart from the used and free memory;
	// MemoryV2Unsupported makes GetMemoryInfo_v2 answer
	// ERROR_FUNCTION_NOT_FOUND, as a driver older than R510 does.
	MemReserved         uint64
	MemoryV2Unsupported bool
	// EncoderPct and DecoderPct are the video engines' utilization;
	// NoEncoder answers NOT_SUPPORTED for the encoder, as a GPU without
	// the query does (an H200 answers both: 0, idle or under a GEMM).
	EncoderPct, DecoderPct uint32
	NoEncoder              bool
	// Fields are what GetFieldValues answers for a field ID and scope
	// (the link, for per-link fields), besides the NVLink data counters
	// (NVLinkKiB), the PCIe replays (Replays) and the volatile and
	// aggregate ECC totals (ECCCorr, ECCUncorr, ECCCorrAgg, ECCUncorrAgg
	// while ECCOn): any other field
	// answers NOT_SUPPORTED. Hopper fills what an H200 answers.
	Fields map[FieldKey]uint64
	// ECCCorrAgg and ECCUncorrAgg are the aggregate (lifetime) ECC totals.
	ECCCorrAgg, ECCUncorrAgg uint64
	// MemoryErrors are what GetMemoryErrorCounter answers; any other
	// location answers NOT_SUPPORTED.
	MemoryErrors map[MemoryErrorKey]uint64
	// NVLinkErrors are what GetNvLinkErrorCounter answers per link and
	// counter; any other answers NOT_SUPPORTED.
	NVLinkErrors map[NVLinkErrorKey]uint64
	// MIGGPM holds what GpmMetricsGet answers for a pair of GPM samples
	// of one GPU instance (nvmlGpmMigSampleGet), by the GPU instance's ID;
	// an instance without an entry answers NOT_SUPPORTED to
	// GpmMigSampleGet. The GPU instance of MIG device i is MIGInstance[i]
	// (i+1 when not set).
	MIGGPM      map[int]map[nvml.GpmMetricId]float64
	MIGInstance []int

	// Calls counts the queries the backend made, by name, for tests that
	// check what is read how often.
	Calls map[string]int
}

// FieldKey names one field value: its ID and scope.
type FieldKey struct {
	ID    uint32
	Scope uint32
}

// MemoryErrorKey names one ECC counter of GetMemoryErrorCounter.
type MemoryErrorKey struct {
	Type     nvml.MemoryErrorType
	Counter  nvml.EccCounterType
	Location nvml.MemoryLocation
}

// NVLinkErrorKey names one counter of GetNvLinkErrorCounter.
type NVLinkErrorKey struct {
	Link    int
	Counter nvml.NvLinkErrorCounter
}

func (g *GPU) count(name string) {
	if g.Calls == nil {
		g.Calls = map[string]int{}
	}
	g.Calls[name]++
}

// CallCount returns how often the named query was made.
func (g *GPU) CallCount(name string) int {
	g.Lock()
	defer g.Unlock()
	return g.Calls[name]
}

// NVLinkEnd is the device at the far end of an NVLink.
type NVLinkEnd struct {
	Type nvml.IntNvLinkDeviceType // nvml.NVLINK_DEVICE_TYPE_GPU or _SWITCH
	Bus  uint32                   // its PCI bus number
	// OffBus makes the remote PCI query answer SUCCESS with every field
	// 0xFF, as the NVSwitch ends of an HGX H200 VM do (driver 580).
	OffBus bool
}

// Hopper returns a GPU with plausible H100 readings at idle, seated as GPU i
// of an HGX H100 board: 18 NVLinks to the board's 4 NVSwitches (reported as
// a real HGX H200 reported them: type SWITCH, no PCI address), its own PCIe
// Gen5 x16 switch, GPUs 0–3 on socket 0 and 4–7 on socket 1.
func Hopper(i int) *GPU {
	return &GPU{
		Index: i, UUID: fmt.Sprintf("GPU-00000000-0000-0000-0000-%012d", i), Name: "NVIDIA H100 80GB HBM3",
		Bus: uint32(0x18 + i), MemTotal: 80 << 30, MemUsed: 1 << 30, SMClockMHz: 1980, PowerMW: 70000,
		EnergyMJ: 1e9, TempC: 31, PCIeGen: 5, PCIeWidth: 16, ECCOn: true, NVLinks: 18,
		NVLinkVersion: nvml.NVLINK_VERSION_4_0, Remote: nvSwitchEnds(18), FabricState: nvml.GPU_FABRIC_STATE_COMPLETED,
		Socket: i / 4, PCIeSwitch: i, PCIeMaxGen: 5, PCIeMaxWidth: 16,
		GPM: map[nvml.GpmMetricId]float64{}, NVLinkKiB: map[int]uint64{},
		MemReserved: 512 << 20,
		Fields:      hopperFields(18), MemoryErrors: hopperMemoryErrors(),
		NVLinkErrors: map[NVLinkErrorKey]uint64{},
	}
}

// hopperFields are the health fields an H200 answers (driver 580): memory
// temperature, the clock event reasons' times (ns) and per link the replay,
// recovery and CRC error counters, all zero but the temperature.
func hopperFields(links int) map[FieldKey]uint64 {
	f := map[FieldKey]uint64{{ID: nvml.FI_DEV_MEMORY_TEMP}: 33}
	for _, id := range []uint32{nvml.FI_DEV_CLOCKS_EVENT_REASON_SW_POWER_CAP, nvml.FI_DEV_CLOCKS_EVENT_REASON_SYNC_BOOST,
		nvml.FI_DEV_CLOCKS_EVENT_REASON_SW_THERM_SLOWDOWN, nvml.FI_DEV_CLOCKS_EVENT_REASON_HW_THERM_SLOWDOWN,
		nvml.FI_DEV_CLOCKS_EVENT_REASON_HW_POWER_BRAKE_SLOWDOWN} {
		f[FieldKey{ID: id}] = 0
	}
	for l := range links {
		for _, id := range []uint32{nvml.FI_DEV_NVLINK_ERROR_DL_REPLAY, nvml.FI_DEV_NVLINK_ERROR_DL_RECOVERY, nvml.FI_DEV_NVLINK_ERROR_DL_CRC} {
			f[FieldKey{ID: id, Scope: uint32(l)}] = 0
		}
	}
	return f
}

// hopperMemoryErrors are the ECC counters by location a Hopper GPU
// reports: device memory (DRAM) and SRAM, volatile and aggregate, all 0.
func hopperMemoryErrors() map[MemoryErrorKey]uint64 {
	m := map[MemoryErrorKey]uint64{}
	for _, loc := range []nvml.MemoryLocation{nvml.MEMORY_LOCATION_DRAM, nvml.MEMORY_LOCATION_SRAM} {
		for _, c := range []nvml.EccCounterType{nvml.VOLATILE_ECC, nvml.AGGREGATE_ECC} {
			for _, t := range []nvml.MemoryErrorType{nvml.MEMORY_ERROR_TYPE_CORRECTED, nvml.MEMORY_ERROR_TYPE_UNCORRECTED} {
				m[MemoryErrorKey{Type: t, Counter: c, Location: loc}] = 0
			}
		}
	}
	return m
}

// NVSwitchBuses are PCI buses for the four NVSwitches of an HGX board, for
// tests of hosts where the switches are on the PCI bus (HGX A100).
var NVSwitchBuses = [4]uint32{0x05, 0x06, 0x07, 0x08}

// nvSwitchEnds spreads n links over the four NVSwitches the way DGX H100
// wires them (5, 4, 4 and 5 links).
func nvSwitchEnds(n int) map[int]NVLinkEnd {
	ends := make(map[int]NVLinkEnd, n)
	for l := 0; l < n; l++ {
		sw := 0
		switch {
		case l >= 13:
			sw = 3
		case l >= 9:
			sw = 2
		case l >= 5:
			sw = 1
		}
		ends[l] = NVLinkEnd{Type: nvml.NVLINK_DEVICE_TYPE_SWITCH, Bus: NVSwitchBuses[sw], OffBus: true}
	}
	return ends
}

// ReferenceBuses are the PCI bus numbers of GPUs 0–7 on the reference host
// of hostfs/testdata/host.
var ReferenceBuses = [8]uint32{0x18, 0x2a, 0x3a, 0x5d, 0x9a, 0xab, 0xba, 0xdb}

// HGX returns the 8 GPUs of an HGX H100 board on the reference host: NV18
// between every pair through the NVSwitches.
func HGX() []*GPU {
	gpus := make([]*GPU, 8)
	for i := range gpus {
		gpus[i] = Hopper(i)
		gpus[i].Bus = ReferenceBuses[i]
	}
	return gpus
}

// PCIeBox returns 8 PCIe Gen4 x16 cards without NVLink or GPM (L40S-like) on
// the reference host's buses, two behind each PCIe switch, GPUs 0–3 on
// socket 0 and 4–7 on socket 1: PIX within a switch, NODE within a socket,
// SYS across.
func PCIeBox() []*GPU {
	gpus := HGX()
	for i, g := range gpus {
		g.Name, g.MemTotal = "NVIDIA L40S", 48<<30
		g.NoGPM, g.NVLinks, g.Remote = true, 0, nil
		g.Fields = hopperFields(0)
		g.NVLinkVersion = nvml.NVLINK_VERSION_INVALID
		g.FabricState = nvml.GPU_FABRIC_STATE_NOT_SUPPORTED
		g.PCIeGen, g.PCIeMaxGen = 4, 4
		g.PCIeSwitch = i / 2
	}
	return gpus
}

// NVLinkPair returns two Hopper GPUs whose 18 NVLinks each lead straight to
// the other (no NVSwitch), in one socket behind different PCIe switches.
func NVLinkPair() []*GPU {
	a, b := Hopper(0), Hopper(1)
	a.Remote, b.Remote = map[int]NVLinkEnd{}, map[int]NVLinkEnd{}
	for l := 0; l < 18; l++ {
		a.Remote[l] = NVLinkEnd{Type: nvml.NVLINK_DEVICE_TYPE_GPU, Bus: b.Bus}
		b.Remote[l] = NVLinkEnd{Type: nvml.NVLINK_DEVICE_TYPE_GPU, Bus: a.Bus}
	}
	return []*GPU{a, b}
}

// sampleBuf is a GPM sample buffer; it remembers which GPU filled it.
type sampleBuf struct {
	lib   *Lib
	gpu   *GPU
	gi    int // the GPU instance whose sample it holds, -1 for the whole GPU
	freed bool
}

func (b *sampleBuf) Free() nvml.Return {
	b.lib.mu.Lock()
	defer b.lib.mu.Unlock()
	if !b.freed {
		b.freed = true
		b.lib.freed++
	}
	return nvml.SUCCESS
}
func (b *sampleBuf) Get(d nvml.Device) nvml.Return            { return d.GpmSampleGet(b) }
func (b *sampleBuf) MigGet(d nvml.Device, gi int) nvml.Return { return d.GpmMigSampleGet(gi, b) }

// Lib is a fake NVML library. It implements only the calls gpudiag makes; the
// embedded interface is nil, so any other call panics and a test notices.
// Unlike go-nvml's generated mocks it records no call history, so benchmarks
// run in constant memory.
type Lib struct {
	nvml.Interface
	GPUs []*GPU
	// Events, when set, replaces the default event set (which never
	// has events).
	Events func() (nvml.EventSet, nvml.Return)
	// CommonAncestor, when set, replaces the PCIe tree that GPU.Socket and
	// GPU.PCIeSwitch describe.
	CommonAncestor func(a, b *GPU) (nvml.GpuTopologyLevel, nvml.Return)
	// CUDAVersion is what SystemGetCudaDriverVersion_v2 answers; 0 means
	// 13000 (CUDA 13.0, as driver 580 reports).
	CUDAVersion int

	devs       []nvml.Device
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
	for _, g := range gpus {
		l.devs = append(l.devs, &device{g: g, lib: l})
	}
	return l
}

func (l *Lib) Init() nvml.Return {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.initCalls++
	return nvml.SUCCESS
}

func (l *Lib) Shutdown() nvml.Return {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.shutdowns++
	return nvml.SUCCESS
}

func (l *Lib) SystemGetDriverVersion() (string, nvml.Return) { return "580.159.04", nvml.SUCCESS }
func (l *Lib) DeviceGetCount() (int, nvml.Return)            { return len(l.devs), nvml.SUCCESS }

func (l *Lib) SystemGetCudaDriverVersion_v2() (int, nvml.Return) {
	if l.CUDAVersion == 0 {
		return 13000, nvml.SUCCESS
	}
	return l.CUDAVersion, nvml.SUCCESS
}

func (l *Lib) DeviceGetHandleByIndex(i int) (nvml.Device, nvml.Return) {
	if i < 0 || i >= len(l.devs) {
		return nil, nvml.ERROR_INVALID_ARGUMENT
	}
	return l.devs[i], nvml.SUCCESS
}

type noEvents struct{}

func (noEvents) Wait(uint32) (nvml.EventData, nvml.Return) {
	return nvml.EventData{}, nvml.ERROR_TIMEOUT
}
func (noEvents) Free() nvml.Return { return nvml.SUCCESS }

func (l *Lib) EventSetCreate() (nvml.EventSet, nvml.Return) {
	if l.Events != nil {
		return l.Events()
	}
	return noEvents{}, nvml.SUCCESS
}

func (l *Lib) GpmSampleAlloc() (nvml.GpmSample, nvml.Return) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.allocated++
	return &sampleBuf{lib: l}, nvml.SUCCESS
}

func (l *Lib) GpmMetricsGet(mg *nvml.GpmMetricsGetType) nvml.Return {
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
	values := g.GPM
	if s2.gi >= 0 {
		values = g.MIGGPM[s2.gi]
	}
	for i := 0; i < int(mg.NumMetrics); i++ {
		v, ok := values[nvml.GpmMetricId(mg.Metrics[i].MetricId)]
		if !ok {
			mg.Metrics[i].NvmlReturn = uint32(nvml.ERROR_NOT_SUPPORTED)
			continue
		}
		mg.Metrics[i].NvmlReturn = uint32(nvml.SUCCESS)
		mg.Metrics[i].Value = v
	}
	return nvml.SUCCESS
}

// Calls is every query made of the library and its GPUs since New, Open's
// included: what a test of the cost of a sample counts.
func (l *Lib) Calls() int {
	l.mu.Lock()
	n := l.metricGets
	l.mu.Unlock()
	for _, g := range l.GPUs {
		g.Lock()
		for _, c := range g.Calls {
			n += c
		}
		g.Unlock()
	}
	return n
}

// Counts reports GPM buffers allocated and freed, Init and Shutdown calls.
func (l *Lib) Counts() (allocated, freed, inits, shutdowns int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.allocated, l.freed, l.initCalls, l.shutdowns
}

// device implements the nvml.Device calls gpudiag makes over a GPU's state.
type device struct {
	nvml.Device
	g   *GPU
	lib *Lib
}

// failure is what every query answers now: GPU_IS_LOST, Fail, or SUCCESS.
// g is locked.
func (g *GPU) failure() nvml.Return {
	if g.Lost {
		return nvml.ERROR_GPU_IS_LOST
	}
	return g.Fail
}

// read locks the GPU, counts the call and returns the failure the query
// must answer (SUCCESS when none).
func (d *device) read(name string) (fail nvml.Return, unlock func()) {
	d.g.Lock()
	d.g.count(name)
	return d.g.failure(), d.g.Unlock
}

// answer is the body of a query of one value: the failure every query
// answers now, else what get reads from the GPU's state, under its lock.
func answer[T any](d *device, name string, get func(g *GPU) (T, nvml.Return)) (T, nvml.Return) {
	fail, unlock := d.read(name)
	defer unlock()
	if fail != nvml.SUCCESS {
		var zero T
		return zero, fail
	}
	return get(d.g)
}

// value is answer for a query that answers whenever the GPU does.
func value[T any](d *device, name string, get func(g *GPU) T) (T, nvml.Return) {
	return answer(d, name, func(g *GPU) (T, nvml.Return) { return get(g), nvml.SUCCESS })
}

// linkAnswer is answer for an NVLink query, which first answers NOT_SUPPORTED
// on a GPU without NVLink and INVALID_ARGUMENT for no such link.
func linkAnswer[T any](d *device, name string, l int, get func(g *GPU) (T, nvml.Return)) (T, nvml.Return) {
	return answer(d, name, func(g *GPU) (T, nvml.Return) {
		var zero T
		switch {
		case g.NVLinks == 0:
			return zero, nvml.ERROR_NOT_SUPPORTED
		case l < 0 || l >= g.NVLinks:
			return zero, nvml.ERROR_INVALID_ARGUMENT
		}
		return get(g)
	})
}

func (d *device) GetUUID() (string, nvml.Return) { return d.g.UUID, nvml.SUCCESS }
func (d *device) GetName() (string, nvml.Return) { return d.g.Name, nvml.SUCCESS }
func (d *device) GetPciInfo() (nvml.PciInfo, nvml.Return) {
	return nvml.PciInfo{Domain: 0, Bus: d.g.Bus, Device: 0}, nvml.SUCCESS
}
func (d *device) RegisterEvents(uint64, nvml.EventSet) nvml.Return { return nvml.SUCCESS }

func (d *device) GetNvLinkState(l int) (nvml.EnableState, nvml.Return) {
	return linkAnswer(d, "GetNvLinkState", l, func(g *GPU) (nvml.EnableState, nvml.Return) {
		if g.LinksDown[l] {
			return nvml.FEATURE_DISABLED, nvml.SUCCESS
		}
		return nvml.FEATURE_ENABLED, nvml.SUCCESS
	})
}

func (d *device) GetNvLinkVersion(l int) (uint32, nvml.Return) {
	return linkAnswer(d, "GetNvLinkVersion", l, func(g *GPU) (uint32, nvml.Return) {
		return uint32(g.NVLinkVersion), nvml.SUCCESS
	})
}

func (d *device) GetNvLinkRemoteDeviceType(l int) (nvml.IntNvLinkDeviceType, nvml.Return) {
	return linkAnswer(d, "GetNvLinkRemoteDeviceType", l, func(g *GPU) (nvml.IntNvLinkDeviceType, nvml.Return) {
		end, ok := g.Remote[l]
		if !ok || g.RemoteTypeUnsupported {
			return 0, nvml.ERROR_NOT_SUPPORTED
		}
		return end.Type, nvml.SUCCESS
	})
}

func (d *device) GetNvLinkRemotePciInfo(l int) (nvml.PciInfo, nvml.Return) {
	return linkAnswer(d, "GetNvLinkRemotePciInfo", l, func(g *GPU) (nvml.PciInfo, nvml.Return) {
		end, ok := g.Remote[l]
		switch {
		case !ok:
			return nvml.PciInfo{}, nvml.ERROR_NOT_SUPPORTED
		case end.OffBus:
			return nvml.PciInfo{Domain: 0xffffffff, Bus: 0xff, Device: 0xff, PciDeviceId: 0xffffffff}, nvml.SUCCESS
		}
		return nvml.PciInfo{Domain: 0, Bus: end.Bus, Device: 0}, nvml.SUCCESS
	})
}

// GetTopologyCommonAncestor derives the PCIe path from the two GPUs'
// Socket and PCIeSwitch, unless Lib.CommonAncestor says otherwise.
func (d *device) GetTopologyCommonAncestor(other nvml.Device) (nvml.GpuTopologyLevel, nvml.Return) {
	o, ok := other.(*device)
	if !ok || o.g == d.g {
		return 0, nvml.ERROR_INVALID_ARGUMENT
	}
	if d.lib.CommonAncestor != nil {
		return d.lib.CommonAncestor(d.g, o.g)
	}
	o.g.Lock()
	socket, sw := o.g.Socket, o.g.PCIeSwitch
	o.g.Unlock()
	fail, unlock := d.read("GetTopologyCommonAncestor")
	defer unlock()
	switch {
	case fail != nvml.SUCCESS:
		return 0, fail
	case d.g.Socket != socket:
		return nvml.TOPOLOGY_SYSTEM, nvml.SUCCESS
	case d.g.PCIeSwitch != sw:
		return nvml.TOPOLOGY_NODE, nvml.SUCCESS
	}
	return nvml.TOPOLOGY_SINGLE, nvml.SUCCESS
}

func (d *device) GpmSampleGet(s nvml.GpmSample) nvml.Return {
	fail, unlock := d.read("GpmSampleGet")
	defer unlock()
	if fail != nvml.SUCCESS {
		return fail
	}
	if d.g.NoGPM {
		return nvml.ERROR_NOT_SUPPORTED
	}
	buf := s.(*sampleBuf)
	buf.gpu, buf.gi = d.g, -1
	return nvml.SUCCESS
}

// GpmMigSampleGet samples GPU instance gi, which must have an entry in
// MIGGPM.
func (d *device) GpmMigSampleGet(gi int, s nvml.GpmSample) nvml.Return {
	fail, unlock := d.read("GpmMigSampleGet")
	defer unlock()
	if fail != nvml.SUCCESS {
		return fail
	}
	if _, ok := d.g.MIGGPM[gi]; !ok || d.g.NoGPM {
		return nvml.ERROR_NOT_SUPPORTED
	}
	buf := s.(*sampleBuf)
	buf.gpu, buf.gi = d.g, gi
	return nvml.SUCCESS
}

func (d *device) GetMemoryInfo() (nvml.Memory, nvml.Return) {
	return value(d, "GetMemoryInfo", func(g *GPU) nvml.Memory {
		return nvml.Memory{Total: g.MemTotal, Used: g.MemUsed + g.MemReserved, Free: g.MemTotal - g.MemUsed - g.MemReserved}
	})
}

func (d *device) GetMemoryInfo_v2() (nvml.Memory_v2, nvml.Return) {
	return answer(d, "GetMemoryInfo_v2", func(g *GPU) (nvml.Memory_v2, nvml.Return) {
		if g.MemoryV2Unsupported {
			return nvml.Memory_v2{}, nvml.ERROR_FUNCTION_NOT_FOUND
		}
		return nvml.Memory_v2{Total: g.MemTotal, Reserved: g.MemReserved, Used: g.MemUsed, Free: g.MemTotal - g.MemUsed - g.MemReserved}, nvml.SUCCESS
	})
}

func (d *device) GetEncoderUtilization() (uint32, uint32, nvml.Return) {
	fail, unlock := d.read("GetEncoderUtilization")
	defer unlock()
	switch {
	case fail != nvml.SUCCESS:
		return 0, 0, fail
	case d.g.NoEncoder:
		return 0, 0, nvml.ERROR_NOT_SUPPORTED
	}
	return d.g.EncoderPct, 167000, nvml.SUCCESS
}

func (d *device) GetDecoderUtilization() (uint32, uint32, nvml.Return) {
	fail, unlock := d.read("GetDecoderUtilization")
	defer unlock()
	if fail != nvml.SUCCESS {
		return 0, 0, fail
	}
	return d.g.DecoderPct, 167000, nvml.SUCCESS
}

func (d *device) GetMemoryErrorCounter(t nvml.MemoryErrorType, c nvml.EccCounterType, loc nvml.MemoryLocation) (uint64, nvml.Return) {
	return answer(d, "GetMemoryErrorCounter", func(g *GPU) (uint64, nvml.Return) {
		n, ok := g.MemoryErrors[MemoryErrorKey{Type: t, Counter: c, Location: loc}]
		if !ok || !g.ECCOn {
			return 0, nvml.ERROR_NOT_SUPPORTED
		}
		return n, nvml.SUCCESS
	})
}

func (d *device) GetNvLinkErrorCounter(l int, c nvml.NvLinkErrorCounter) (uint64, nvml.Return) {
	return linkAnswer(d, "GetNvLinkErrorCounter", l, func(g *GPU) (uint64, nvml.Return) {
		n, ok := g.NVLinkErrors[NVLinkErrorKey{Link: l, Counter: c}]
		if !ok {
			return 0, nvml.ERROR_NOT_SUPPORTED
		}
		return n, nvml.SUCCESS
	})
}

func (d *device) GetUtilizationRates() (nvml.Utilization, nvml.Return) {
	d.g.Lock()
	hang := d.g.Hang
	d.g.Unlock()
	if hang != nil {
		<-hang
	}
	return value(d, "GetUtilizationRates", func(g *GPU) nvml.Utilization { return g.Util })
}

func (d *device) GetClockInfo(nvml.ClockType) (uint32, nvml.Return) {
	return value(d, "GetClockInfo", func(g *GPU) uint32 { return g.SMClockMHz })
}

func (d *device) GetMaxClockInfo(nvml.ClockType) (uint32, nvml.Return) {
	return value(d, "GetMaxClockInfo", func(*GPU) uint32 { return 1980 })
}

func (d *device) GetCurrentClocksEventReasons() (uint64, nvml.Return) {
	return value(d, "GetCurrentClocksEventReasons", func(g *GPU) uint64 { return g.ClockEvents })
}

func (d *device) GetPowerUsage() (uint32, nvml.Return) {
	return value(d, "GetPowerUsage", func(g *GPU) uint32 { return g.PowerMW })
}

func (d *device) GetEnforcedPowerLimit() (uint32, nvml.Return) {
	return value(d, "GetEnforcedPowerLimit", func(*GPU) uint32 { return 700000 })
}

func (d *device) GetTotalEnergyConsumption() (uint64, nvml.Return) {
	return value(d, "GetTotalEnergyConsumption", func(g *GPU) uint64 { return g.EnergyMJ })
}

func (d *device) GetTemperature(nvml.TemperatureSensors) (uint32, nvml.Return) {
	return value(d, "GetTemperature", func(g *GPU) uint32 { return g.TempC })
}

func (d *device) GetCurrPcieLinkGeneration() (int, nvml.Return) {
	return value(d, "GetCurrPcieLinkGeneration", func(g *GPU) int { return g.PCIeGen })
}

func (d *device) GetMaxPcieLinkGeneration() (int, nvml.Return) {
	return value(d, "GetMaxPcieLinkGeneration", func(g *GPU) int { return g.PCIeMaxGen })
}

func (d *device) GetCurrPcieLinkWidth() (int, nvml.Return) {
	return value(d, "GetCurrPcieLinkWidth", func(g *GPU) int { return g.PCIeWidth })
}

func (d *device) GetMaxPcieLinkWidth() (int, nvml.Return) {
	return value(d, "GetMaxPcieLinkWidth", func(g *GPU) int { return g.PCIeMaxWidth })
}

func (d *device) GetPcieReplayCounter() (int, nvml.Return) {
	return value(d, "GetPcieReplayCounter", func(g *GPU) int { return g.Replays })
}

func (d *device) GetPcieThroughput(c nvml.PcieUtilCounter) (uint32, nvml.Return) {
	return value(d, "GetPcieThroughput", func(g *GPU) uint32 {
		if c == nvml.PCIE_UTIL_TX_BYTES {
			return g.PCIeTxKBps
		}
		return g.PCIeRxKBps
	})
}

func (d *device) GetEccMode() (nvml.EnableState, nvml.EnableState, nvml.Return) {
	fail, unlock := d.read("GetEccMode")
	defer unlock()
	if fail != nvml.SUCCESS {
		return 0, 0, fail
	}
	if d.g.ECCOn {
		return nvml.FEATURE_ENABLED, nvml.FEATURE_ENABLED, nvml.SUCCESS
	}
	return nvml.FEATURE_DISABLED, nvml.FEATURE_DISABLED, nvml.SUCCESS
}

func (d *device) GetTotalEccErrors(t nvml.MemoryErrorType, _ nvml.EccCounterType) (uint64, nvml.Return) {
	return value(d, "GetTotalEccErrors", func(g *GPU) uint64 {
		if t == nvml.MEMORY_ERROR_TYPE_CORRECTED {
			return g.ECCCorr
		}
		return g.ECCUncorr
	})
}

func (d *device) GetRemappedRows() (int, int, bool, bool, nvml.Return) {
	fail, unlock := d.read("GetRemappedRows")
	defer unlock()
	return 0, 0, false, false, fail
}

func (d *device) GetPersistenceMode() (nvml.EnableState, nvml.Return) {
	return value(d, "GetPersistenceMode", func(*GPU) nvml.EnableState { return nvml.FEATURE_ENABLED })
}

func (d *device) GetMigMode() (int, int, nvml.Return) {
	fail, unlock := d.read("GetMigMode")
	defer unlock()
	if fail != nvml.SUCCESS {
		return 0, 0, fail
	}
	cur := nvml.DEVICE_MIG_DISABLE
	if len(d.g.MIG) > 0 {
		cur = nvml.DEVICE_MIG_ENABLE
	}
	pending := cur
	if d.g.MIGPendingChange {
		pending = 1 - cur
	}
	return cur, pending, nvml.SUCCESS
}

func (d *device) GetComputeMode() (nvml.ComputeMode, nvml.Return) {
	return value(d, "GetComputeMode", func(g *GPU) nvml.ComputeMode { return g.ComputeMode })
}

func (d *device) GetGpuFabricInfo() (nvml.GpuFabricInfo, nvml.Return) {
	return value(d, "GetGpuFabricInfo", func(g *GPU) nvml.GpuFabricInfo {
		return nvml.GpuFabricInfo{State: g.FabricState, Status: uint32(g.FabricStatus)}
	})
}

func (d *device) GetMPSComputeRunningProcesses() ([]nvml.ProcessInfo, nvml.Return) {
	return value(d, "GetMPSComputeRunningProcesses", func(g *GPU) []nvml.ProcessInfo {
		out := make([]nvml.ProcessInfo, len(g.MPSPIDs))
		for i, p := range g.MPSPIDs {
			out[i] = nvml.ProcessInfo{Pid: p, UsedGpuMemory: 1 << 30}
		}
		return out
	})
}

// GetProcessUtilization reports one sample per PID in ProcessSMUtil, at a
// timestamp after lastSeen.
func (d *device) GetProcessUtilization(lastSeen uint64) ([]nvml.ProcessUtilizationSample, nvml.Return) {
	return answer(d, "GetProcessUtilization", func(g *GPU) ([]nvml.ProcessUtilizationSample, nvml.Return) {
		if g.ProcessSMUtil == nil {
			return nil, nvml.ERROR_NOT_SUPPORTED
		}
		var out []nvml.ProcessUtilizationSample
		for pid, u := range g.ProcessSMUtil {
			out = append(out, nvml.ProcessUtilizationSample{Pid: pid, TimeStamp: lastSeen + 1, SmUtil: u})
		}
		return out, nvml.SUCCESS
	})
}

// GetMaxMigDeviceCount answers 7, an H100's most MIG devices.
func (d *device) GetMaxMigDeviceCount() (int, nvml.Return) {
	return answer(d, "GetMaxMigDeviceCount", func(g *GPU) (int, nvml.Return) { return 7, nvml.SUCCESS })
}

// GetMigDeviceHandleByIndex returns the MIG device at i, NOT_FOUND where
// there is none.
func (d *device) GetMigDeviceHandleByIndex(i int) (nvml.Device, nvml.Return) {
	return answer(d, "GetMigDeviceHandleByIndex", func(g *GPU) (nvml.Device, nvml.Return) {
		if i < 0 || i >= len(g.MIG) || g.MIG[i] == "" {
			return nil, nvml.ERROR_NOT_FOUND
		}
		gi := i + 1
		if i < len(g.MIGInstance) {
			gi = g.MIGInstance[i]
		}
		return migDevice{uuid: g.MIG[i], gi: gi}, nvml.SUCCESS
	})
}

// migDevice is one MIG device: it tells its UUID and GPU instance.
type migDevice struct {
	nvml.Device
	uuid string
	gi   int
}

func (m migDevice) GetUUID() (string, nvml.Return)       { return m.uuid, nvml.SUCCESS }
func (m migDevice) GetGpuInstanceId() (int, nvml.Return) { return m.gi, nvml.SUCCESS }

func (d *device) GetComputeRunningProcesses() ([]nvml.ProcessInfo, nvml.Return) {
	return value(d, "GetComputeRunningProcesses", func(g *GPU) []nvml.ProcessInfo {
		out := make([]nvml.ProcessInfo, len(g.PIDs))
		for i, p := range g.PIDs {
			out[i] = nvml.ProcessInfo{Pid: p, UsedGpuMemory: 1 << 30}
		}
		return out
	})
}

func (d *device) GetFieldValues(fv []nvml.FieldValue) nvml.Return {
	fail, unlock := d.read("GetFieldValues")
	defer unlock()
	if fail != nvml.SUCCESS {
		return fail
	}
	for i := range fv {
		x, ret := d.g.field(fv[i].FieldId, fv[i].ScopeId)
		fv[i].ValueType = uint32(nvml.VALUE_TYPE_UNSIGNED_LONG_LONG)
		fv[i].NvmlReturn = uint32(ret)
		for b := 0; b < 8; b++ {
			fv[i].Value[b] = byte(x >> (8 * b))
		}
	}
	return nvml.SUCCESS
}

// field answers one field value; g is locked.
func (g *GPU) field(id, scope uint32) (uint64, nvml.Return) {
	ecc := map[uint32]uint64{nvml.FI_DEV_ECC_SBE_VOL_TOTAL: g.ECCCorr, nvml.FI_DEV_ECC_DBE_VOL_TOTAL: g.ECCUncorr,
		nvml.FI_DEV_ECC_SBE_AGG_TOTAL: g.ECCCorrAgg, nvml.FI_DEV_ECC_DBE_AGG_TOTAL: g.ECCUncorrAgg}
	switch x, isECC := ecc[id]; {
	case id == nvml.FI_DEV_NVLINK_THROUGHPUT_DATA_TX, id == nvml.FI_DEV_NVLINK_THROUGHPUT_DATA_RX:
		return g.NVLinkKiB[int(scope)], nvml.SUCCESS
	case isECC && g.ECCOn:
		return x, nvml.SUCCESS
	case isECC:
		return 0, nvml.ERROR_NOT_SUPPORTED
	case id == nvml.FI_DEV_PCIE_REPLAY_COUNTER: // as an H200 answers it
		return uint64(g.Replays), nvml.SUCCESS
	}
	x, ok := g.Fields[FieldKey{ID: id, Scope: scope}]
	if !ok {
		return 0, nvml.ERROR_NOT_SUPPORTED
	}
	return x, nvml.SUCCESS
}
