// Package nvmlgpu reads GPUs through NVML (go-nvml). On Hopper and newer it
// takes SM, tensor, DRAM and link activity from GPM; elsewhere it falls back
// to NVML's utilization rates, PCIe throughput and NVLink field counters and
// says so in each GPU's ActivitySource and LinkSource.
package nvmlgpu

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"go.uber.org/zap"

	"github.com/gpudiag/gpudiag/gpu"
	"github.com/gpudiag/gpudiag/sample"
)

// gpmMinInterval is the shortest span GPM can compute metrics over: samples
// closer than this are rejected by the driver.
const gpmMinInterval = 100 * time.Millisecond

// maxNVLinks is NVML_NVLINK_MAX_LINKS on current drivers.
const maxNVLinks = 18

const mib = 1 << 20

// percent marks a GPM metric reported in percent.
const percent = 0

// Backend reads GPUs through NVML. Each query has a tier, the clock it is
// read on (why, at each interval's constant; TestNVMLCallsByTier holds the
// same table and checks it against a fake busy H200):
//
//	every sample        utilization (the liveness probe), SM and memory
//	                    clocks, clock event reasons, power, PCIe generation,
//	                    GPM sample and metrics (or the fallback counters),
//	                    MIG GPM
//	processListInterval process list, while the GPU is settled
//	SlowInterval        NVLink state, one GetFieldValues (memory temperature,
//	                    clock event times, ECC totals, PCIe replays, NVLink
//	                    errors when due), ECC by location, memory,
//	                    temperature, MPS clients, power limit, persistence
//	                    and compute modes, fabric, PCIe width, video engines,
//	                    remapped rows; per-process utilization while shared
//	linkErrorInterval   per-link NVLink errors: fields in the slow tier's
//	                    call, queries (the data CRC counter on Hopper)
//	modesInterval       ECC and MIG modes (MIG devices: every slow tick
//	                    while MIG is on)
//	energyInterval      energy counter
//	once                maximum clocks and PCIe link, the NVLinks that exist,
//	                    topology; planning (healthPlan) learns which health
//	                    counters the GPU answers, and is redone after a reset
//	                    or an ECC mode or NVLink state change
//
// A GPU reset reads every tier again at once; an XID reads the slow tier
// and the link errors at the next sample.
type Backend struct {
	lib    nvml.Interface
	log    *zap.Logger
	now    func() time.Time
	driver string
	// cuda is the newest CUDA version the driver supports (12080 = 12.8),
	// 0 when NVML does not say.
	cuda    int
	devices []*device
	events  nvml.EventSet // nil when XID events cannot be watched
	// topology is read once at Open and shared by every sample.
	topology *sample.Topology

	slowInterval time.Duration

	// busy serialises Sample and Close: Close must not free GPM buffers or
	// shut NVML down under a sample that is still running (a hung driver
	// call the engine gave up waiting for).
	busy   chan struct{}
	closed bool
}

// closeWait is how long Close waits for a running sample.
const closeWait = 2 * time.Second

type device struct {
	index int
	h     nvml.Device
	uuid  string
	bus   string
	model string
	links []int // NVLinks that exist on this GPU

	gpm *gpmState // nil when GPM is not available

	// Fallback state for GPUs without GPM.
	lastTime     time.Time
	lastNVLinkTx map[int]uint64 // KiB counters per link
	lastNVLinkRx map[int]uint64

	lastSample time.Time
	xids       map[uint64]uint64

	slow     sample.Values // cached slow fields, see readSlow
	slowTime time.Time
	linkUp   map[int]bool // NVLink state, read with the slow fields
	// mig lists the GPU's MIG devices by GPU instance, read with the
	// slow fields while MIG is on; migGPM holds each GPU instance's GPM
	// samples, migGPMOff says GPM per GPU instance is off (the flag, or
	// the GPU does not support it).
	mig       migLayout
	migGPM    map[int]*migGPM
	migGPMOff bool
	// health is the plan of the health counters the GPU reports (see
	// readHealth), unsupportedLogged the counters already logged as
	// unsupported; linkErrors and ecc are the newest read of the per-link
	// and per-location ones, carried between slow reads, the per-link ones
	// read at linkErrorsTime (see linkErrorInterval) and again at the next
	// slow read when linkErrorsDue.
	health            *healthPlan
	unsupportedLogged map[string]bool
	linkErrors        map[int]*sample.NVLinkErrors
	linkErrorsTime    time.Time
	linkErrorsDue     bool
	ecc               []sample.ECCCount
	// memV1 is set once GetMemoryInfo_v2 failed for want of the call (a
	// driver before R510): the v1 call has no reserved memory.
	memV1 bool
	// noEncoder and noDecoder are set once the GPU said it cannot
	// measure the engine (NOT_SUPPORTED).
	noEncoder, noDecoder bool
	// procUtil holds the SM share per PID from the newest per-process
	// utilization read (at procUtilTime); procUtilSeen is the newest
	// sample timestamp read so far (NVML's lastSeenTimeStamp).
	procUtil     map[uint32]float64
	procUtilTime time.Time
	procUtilSeen uint64
	// maxClocks are read once (board properties), and so are the link's
	// maximum PCIe generation and width (the GPU's and its slot's).
	maxClocks *sample.Values
	// energy is the energy counter as read at energyTime (see
	// energyInterval).
	energy     *float64
	energyTime time.Time
	// modes are the GPU's ECC and MIG modes as read at modesTime
	// (see modesInterval).
	modes     *sample.Values
	modesTime time.Time
	// procs is the process list as read at procsTime (procsOK: the query
	// succeeded), when the GPU's utilization was above zero or not
	// (procsBusy); see processListInterval.
	procs     []sample.Process
	procsOK   bool
	procsTime time.Time
	procsBusy bool
}

// processListInterval is how often a GPU's process list is read while the
// GPU is in one of the two states where it is not expected to change soon:
// busy with one process (a training or serving job), or idle with none.
// With a process on the GPU the query is the costliest of a sample's but
// GPM's (128 µs a call under a GEMM on an H100, 66 without one:
// TestNVMLCallCost). A job starts or ends by turning the GPU busy or idle,
// so a sample whose utilization crossed zero reads the list at once: a new
// job's processes are known at its first kernel. In any other state (idle
// with processes, as a job tears down after its last kernel or loads before
// its first; busy with several or none visible; utilization unknown, as
// under MIG; the last query failed) it is read every sample. A second
// process joining a busy GPU shows within the interval.
const processListInterval = 5 * time.Second

// processesDue tells whether the sample at now reads the process list: every
// sample unless the GPU is settled (see processListInterval) as it was at
// the last read, then once processListInterval after it.
func (d *device) processesDue(now time.Time, busy, busyKnown bool) bool {
	settled := d.procsOK && busyKnown && busy == d.procsBusy &&
		((busy && len(d.procs) == 1) || (!busy && len(d.procs) == 0))
	return d.procsTime.IsZero() || !settled || now.Sub(d.procsTime) >= processListInterval
}

// gpmState holds the two GPM sample buffers of a GPU. The newest sample of one
// interval is reused as the first of the next, so each interval costs one
// GpmSampleGet per GPU.
type gpmState struct {
	prev, cur nvml.GpmSample
	prevTime  time.Time
	havePrev  bool
	// metrics is the request and answer of GpmMetricsGet, kept: 10 KB
	// (room for every GPM metric) a GPU a second otherwise.
	metrics nvml.GpmMetricsGetType
}

// Options configure the backend.
type Options struct {
	Logger *zap.Logger
	// Now is the clock; tests replace it.
	Now func() time.Time
	// DisableGPM forces the NVML fallback signals even where GPM works.
	DisableGPM bool
	// SlowInterval is how often health counters and the cheaper settings
	// are re-read (see readSlow; the costly modes every modesInterval,
	// energy every energyInterval). Zero means DefaultSlowInterval.
	SlowInterval time.Duration
}

// DefaultSlowInterval is how often slow fields are re-read.
const DefaultSlowInterval = 10 * time.Second

// Open initialises NVML and enumerates the GPUs. It fails when NVML cannot be
// loaded or initialised or no GPU is found, with an error that says which.
func Open(lib nvml.Interface, opts Options) (*Backend, error) {
	if opts.Logger == nil {
		opts.Logger = zap.NewNop()
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if ret := lib.Init(); ret != nvml.SUCCESS {
		if ret == nvml.ERROR_LIBRARY_NOT_FOUND {
			return nil, errors.New("NVML: libnvidia-ml.so.1 not found (no NVIDIA driver on this host?)")
		}
		return nil, fmt.Errorf("NVML init: %s", ret.Error())
	}
	if opts.SlowInterval <= 0 {
		opts.SlowInterval = DefaultSlowInterval
	}
	b := &Backend{lib: lib, log: opts.Logger, now: opts.Now, slowInterval: opts.SlowInterval, busy: make(chan struct{}, 1)}
	if v, ret := lib.SystemGetDriverVersion(); ret == nvml.SUCCESS {
		b.driver = v
	}
	if v, ret := lib.SystemGetCudaDriverVersion_v2(); ret == nvml.SUCCESS {
		b.cuda = v
	}
	n, ret := lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		lib.Shutdown()
		return nil, fmt.Errorf("NVML device count: %s", ret.Error())
	}
	if n == 0 {
		lib.Shutdown()
		return nil, errors.New("NVML: no GPU found")
	}
	for i := 0; i < n; i++ {
		h, ret := lib.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			// Keep the slot so the GPU shows as down rather than vanish.
			b.log.Warn("GPU handle", zap.Int("gpu", i), zap.String("error", ret.Error()))
			b.devices = append(b.devices, &device{index: i, xids: map[uint64]uint64{}})
			continue
		}
		b.devices = append(b.devices, b.openDevice(i, h, opts.DisableGPM))
	}
	b.topology = b.readTopology()
	b.watchXIDs()
	return b, nil
}

func (b *Backend) openDevice(i int, h nvml.Device, disableGPM bool) *device {
	d := &device{index: i, h: h, xids: map[uint64]uint64{},
		lastNVLinkTx: map[int]uint64{}, lastNVLinkRx: map[int]uint64{}}
	d.uuid, _ = h.GetUUID()
	d.model, _ = h.GetName()
	if pci, ret := h.GetPciInfo(); ret == nvml.SUCCESS {
		d.bus = busID(pci)
	}
	for l := 0; l < maxNVLinks; l++ {
		if _, ret := h.GetNvLinkState(l); ret == nvml.SUCCESS {
			d.links = append(d.links, l)
		}
	}
	if !disableGPM {
		d.gpm = b.openGPM(d)
	}
	d.migGPMOff = disableGPM
	return d
}

// openGPM allocates the two GPM buffers and takes the first sample. Support is
// decided by trying: go-nvml's GpmQueryDeviceSupport returns a version
// mismatch on some drivers although GPM works.
func (b *Backend) openGPM(d *device) *gpmState {
	s1, ret := b.lib.GpmSampleAlloc()
	if ret != nvml.SUCCESS {
		b.log.Debug("GPM unavailable", zap.Int("gpu", d.index), zap.String("error", ret.Error()))
		return nil
	}
	s2, ret := b.lib.GpmSampleAlloc()
	if ret != nvml.SUCCESS {
		s1.Free()
		return nil
	}
	if ret := d.h.GpmSampleGet(s1); ret != nvml.SUCCESS {
		b.log.Info("GPM not supported on this GPU; using NVML utilization and counters",
			zap.Int("gpu", d.index), zap.String("model", d.model), zap.String("error", ret.Error()))
		s1.Free()
		s2.Free()
		return nil
	}
	return &gpmState{prev: s1, cur: s2, prevTime: b.now(), havePrev: true}
}

func (g *gpmState) free() {
	g.prev.Free()
	g.cur.Free()
}

// watchXIDs registers for critical XID events on every GPU that allows it.
func (b *Backend) watchXIDs() {
	set, ret := b.lib.EventSetCreate()
	if ret != nvml.SUCCESS {
		b.log.Info("XID events unavailable", zap.String("error", ret.Error()))
		return
	}
	registered := 0
	for _, d := range b.devices {
		if d.h == nil {
			continue
		}
		if ret := d.h.RegisterEvents(nvml.EventTypeXidCriticalError, set); ret == nvml.SUCCESS {
			registered++
		} else {
			b.log.Debug("XID events not supported", zap.Int("gpu", d.index), zap.String("error", ret.Error()))
		}
	}
	if registered == 0 {
		set.Free()
		return
	}
	b.events = set
}

// Name implements gpu.Backend.
func (b *Backend) Name() string { return "nvml" }

// Close frees GPM buffers and the event set and shuts NVML down. If a sample
// is still stuck in the driver it leaves NVML alone rather than wait forever.
func (b *Backend) Close() error {
	select {
	case b.busy <- struct{}{}:
	case <-time.After(closeWait):
		return errors.New("NVML: a sample is still running in the driver; not shutting NVML down")
	}
	defer func() { <-b.busy }()
	if b.closed {
		return nil
	}
	b.closed = true
	for _, d := range b.devices {
		if d.gpm != nil {
			d.gpm.free()
			d.gpm = nil
		}
		d.freeMIG()
	}
	if b.events != nil {
		b.events.Free()
		b.events = nil
	}
	if ret := b.lib.Shutdown(); ret != nvml.SUCCESS {
		return fmt.Errorf("NVML shutdown: %s", ret.Error())
	}
	return nil
}

// Sample reads every GPU.
func (b *Backend) Sample(ctx context.Context) (*sample.GPUs, error) {
	select {
	case b.busy <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	defer func() { <-b.busy }()
	if b.closed {
		return nil, errors.New("NVML backend closed")
	}
	b.drainXIDs()
	out := &sample.GPUs{Backend: "nvml", DriverVersion: b.driver, CUDADriverVersion: b.cuda, Devices: make([]sample.GPU, 0, len(b.devices)),
		Topology: b.topology}
	up := 0
	for _, d := range b.devices {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		g := b.readDevice(d)
		if g.Up {
			up++
		}
		out.Devices = append(out.Devices, g)
	}
	if up == 0 && len(b.devices) > 0 {
		return out, fmt.Errorf("no GPU answered (%d known): %s", len(b.devices), out.Devices[0].Error)
	}
	return out, nil
}

// drainXIDs counts the XID events queued since the last sample without
// waiting for new ones.
func (b *Backend) drainXIDs() {
	if b.events == nil {
		return
	}
	for range 1024 { // bound the loop against an event storm
		e, ret := b.events.Wait(0)
		if ret != nvml.SUCCESS {
			return
		}
		if e.EventType != nvml.EventTypeXidCriticalError {
			continue
		}
		for _, d := range b.devices {
			if d.h != nil && sameDevice(d, e.Device) {
				d.xids[e.EventData]++
				// What the error did to the GPU's counters (an
				// NVLink's errors for XID 74, ECC for 48, ...)
				// shows with the XID rather than a slow interval
				// or linkErrorInterval later.
				d.slowTime, d.linkErrorsDue = time.Time{}, true
				b.log.Warn("XID event", zap.Int("gpu", d.index), zap.Uint64("xid", e.EventData))
			}
		}
	}
}

func sameDevice(d *device, h nvml.Device) bool {
	if h == nil {
		return false
	}
	if h == d.h {
		return true
	}
	u, ret := h.GetUUID()
	return ret == nvml.SUCCESS && u == d.uuid
}

// readDevice reads one GPU. Any single query may be unsupported; only a GPU
// whose basic memory query fails for another reason than that counts as
// down.
func (b *Backend) readDevice(d *device) sample.GPU {
	g := sample.GPU{Index: d.index, UUID: d.uuid, PCIBusID: d.bus, Model: d.model,
		Values: sample.NewValues(), XIDErrors: gpu.CopyCounts(d.xids)}
	if d.h == nil {
		g.Error = "no NVML handle for this GPU"
		return g
	}
	now := b.now()
	v := &g.Values
	h := d.h

	// The utilization query doubles as the liveness probe: it fails with
	// GPU_IS_LOST when the GPU fell off the bus, and a GPU that cannot
	// report it (MIG mode) answers NOT_SUPPORTED, an answer.
	u, ret := h.GetUtilizationRates()
	if !answered(ret) {
		g.Error = "utilization: " + ret.Error()
		// A GPU comes back from a reset with the MIG and ECC modes
		// that were pending, and may report other health counters:
		// read everything slow again then, and plan them again.
		d.slowTime, d.modes, d.procsTime, d.health = time.Time{}, nil, time.Time{}, nil
		return g
	}
	g.Up = true
	g.Error = ""
	busyKnown := ret == nvml.SUCCESS
	if busyKnown {
		v.Set(sample.Utilization, float64(u.Gpu)/100)
		v.Set(sample.MemoryUtilization, float64(u.Memory)/100)
	}
	busy := busyKnown && u.Gpu > 0
	// Memory, temperature and the MPS clients are read with the slow
	// fields (readSlow): no verdict reads them second by second, and a
	// scrape every 15 s or more sees them at most one slow interval old.
	// Power and the clocks stay here: read every 10 s instead of every
	// second, a query cost as much CPU a second (power 479 µs a call
	// against 41, the SM clock 126 against 12, H100, TestNVMLCallCost),
	// as if the driver's work grew with the time since the last one.
	setUint(v, sample.SMClockHertz, 1e6)(h.GetClockInfo(nvml.CLOCK_SM))
	setUint(v, sample.MemoryClockHertz, 1e6)(h.GetClockInfo(nvml.CLOCK_MEM))
	if r, ret := h.GetCurrentClocksEventReasons(); ret == nvml.SUCCESS {
		g.ClockEventReasons = r
	}
	setUint(v, sample.PowerWatts, 1e-3)(h.GetPowerUsage())
	// The generation drops at idle to save power and comes back under
	// load, so it is read every sample; the width (in the slow tier) is
	// what the link trained to.
	setInt(v, sample.PCIeLinkGeneration)(h.GetCurrPcieLinkGeneration())

	// Settings, health counters and the energy counter change slowly and
	// some of their queries cost milliseconds (energy 3-4 ms, ECC mode
	// 1.8 ms once a second on an H100), so they are refreshed every
	// SlowInterval, the costliest less often (readSlow), and the cached
	// values carried in between.
	if d.slowTime.IsZero() || now.Sub(d.slowTime) >= b.slowInterval {
		// Link state is slow too: 18 queries cost ~2.5 ms a second per GPU
		// in the daemon on an H200 host, and a link that goes down also
		// shows at once as NVLink traffic falling to zero. It is read
		// first: the health counters are planned again when it changes.
		// A link that went down or came back has its error counters
		// read at once.
		if d.linkUp == nil {
			d.linkUp = map[int]bool{}
		}
		for _, l := range d.links {
			st, ret := h.GetNvLinkState(l)
			up := ret == nvml.SUCCESS && st == nvml.FEATURE_ENABLED
			if was, known := d.linkUp[l]; known && was != up {
				d.linkErrorsDue = true
			}
			d.linkUp[l] = up
		}
		d.slow = b.readSlow(d, now)
		d.slowTime = now
	}
	g.MIGDevices = d.mig.uuids
	g.ECCErrors = d.ecc
	for f, x := range d.slow {
		if !math.IsNaN(x) {
			v[f] = x
		}
	}
	if d.processesDue(now, busy, busyKnown) {
		procs, ret := h.GetComputeRunningProcesses()
		d.procs, d.procsOK = d.procs[:0], ret == nvml.SUCCESS
		if d.procsOK {
			for _, p := range procs {
				d.procs = append(d.procs, sample.Process{PID: p.Pid, UsedMemoryBytes: p.UsedGpuMemory})
			}
		}
		d.procsTime, d.procsBusy = now, busy
	}
	if d.procsOK {
		v.Set(sample.ComputeProcesses, float64(len(d.procs)))
		// The window keeps each sample: it gets a copy of its own.
		g.Processes = append([]sample.Process(nil), d.procs...)
		// Several processes share the GPU: their SM shares tell who
		// gets the time (evidence for time-slicing). The query costs
		// ~2 ms on an H100 (driver 580), so it runs with the slow fields,
		// and only while the GPU is shared.
		if len(g.Processes) >= 2 {
			if d.procUtilTime.IsZero() || now.Sub(d.procUtilTime) >= b.slowInterval {
				b.readProcessUtilization(d)
				d.procUtilTime = now
			}
			for i := range g.Processes {
				if x, ok := d.procUtil[g.Processes[i].PID]; ok {
					g.Processes[i].SMUtil = &x
				}
			}
		} else {
			d.procUtil, d.procUtilTime = nil, time.Time{}
		}
	}
	if len(d.links) > 0 {
		g.Links = make([]sample.NVLink, 0, len(d.links)) // kept by the window: sized once
	}
	for _, l := range d.links {
		link := sample.NVLink{Link: l, Up: d.linkUp[l], TxBytesPerSecond: math.NaN(), RxBytesPerSecond: math.NaN()}
		if e := d.linkErrors[l]; e != nil {
			link.Errors = *e
		}
		g.Links = append(g.Links, link)
	}
	b.readMIG(d, &g, now)

	if d.gpm != nil && b.readGPM(d, &g, now) {
		g.ActivitySource, g.LinkSource = sample.SourceGPM, sample.SourceGPM
	} else if d.gpm == nil {
		b.readFallback(d, &g, now)
	}
	d.lastSample = now
	return g
}

// readProcessUtilization keeps each process's SM share from the newest
// per-process utilization sample NVML kept since the last read. A process
// without a sample gets none; NOT_FOUND (no sample since) and NOT_SUPPORTED
// leave none at all.
func (b *Backend) readProcessUtilization(d *device) {
	d.procUtil = nil
	samples, ret := d.h.GetProcessUtilization(d.procUtilSeen)
	if ret != nvml.SUCCESS {
		return
	}
	newest := map[uint32]nvml.ProcessUtilizationSample{}
	for _, s := range samples {
		if s.TimeStamp > d.procUtilSeen {
			d.procUtilSeen = s.TimeStamp
		}
		if old, ok := newest[s.Pid]; !ok || s.TimeStamp >= old.TimeStamp {
			newest[s.Pid] = s
		}
	}
	d.procUtil = make(map[uint32]float64, len(newest))
	for pid, s := range newest {
		d.procUtil[pid] = gpu.Clamp01(float64(s.SmUtil) / 100)
	}
}

// answered tells a GPU that answered a query with a refusal from one that
// could not be asked: lost, driver not loaded, timed out, unknown. Counting
// only a few codes as down once let a broken driver's GPUs read as up with
// no values at all.
func answered(ret nvml.Return) bool {
	return ret == nvml.SUCCESS || ret == nvml.ERROR_NOT_SUPPORTED || ret == nvml.ERROR_NO_PERMISSION
}

// linkErrorInterval is how often the per-link NVLink error counters are
// read: the costliest reads of the daemon, by far, because the driver
// fetches a link's counters for each call that asks for any of them, ~0.75
// ms of CPU a link (H200, driver 580.159: 18 links' replay, recovery and
// flit CRC fields in one GetFieldValues cost 14 ms; the data CRC counter,
// which has no field there, 18 queries of ~1.1 ms). Every 10 s that was
// half of the daemon's CPU on a 2-GPU host (issue 41). They are corrected
// errors, only read as an increase: by the GPUDiagNVLinkErrors alert
// over 15 minutes, and by the nvlink_errors finding, which sees an increase
// within linkErrorInterval instead of a slow interval. What needs them at
// once reads them at once: an XID (74 is the NVLink's) and a link that
// goes down or comes back (the state is still read every slow interval,
// 18 queries for 0.1 ms) read them at the next sample or slow read. The
// last read is exported in between, so every series stays, and a counter
// never goes back.
const linkErrorInterval = time.Minute

// energyInterval is how often the energy counter is read: the costliest
// single NVML query (4 ms on an H200, against microseconds for a sample's
// other fields), and a counter no verdict uses; rate() over a minute or
// more, as energy accounting uses it, loses nothing.
const energyInterval = time.Minute

// readSlow reads the fields that change rarely or cost milliseconds.
func (b *Backend) readSlow(d *device, now time.Time) sample.Values {
	h := d.h
	v := sample.NewValues()
	// Maximum clocks are properties of the board: read once. On an H200
	// host GetMaxClockInfo was the costliest call left (a quarter of the
	// daemon's CPU when read every 10 s).
	if d.maxClocks == nil {
		m := sample.NewValues()
		setUint(&m, sample.SMClockMaxHertz, 1e6)(h.GetMaxClockInfo(nvml.CLOCK_SM))
		setUint(&m, sample.MemoryClockMaxHertz, 1e6)(h.GetMaxClockInfo(nvml.CLOCK_MEM))
		setInt(&m, sample.PCIeLinkMaxGeneration)(h.GetMaxPcieLinkGeneration())
		setInt(&m, sample.PCIeLinkMaxWidth)(h.GetMaxPcieLinkWidth())
		d.maxClocks = &m
	}
	for _, f := range []sample.Field{sample.SMClockMaxHertz, sample.MemoryClockMaxHertz, sample.PCIeLinkMaxGeneration, sample.PCIeLinkMaxWidth} {
		v[f] = d.maxClocks[f]
	}
	if d.modes == nil || now.Sub(d.modesTime) >= modesInterval {
		d.modes, d.modesTime = readModes(h), now
	}
	// MIG devices come and go without a reset (nvidia-smi mig -cgi):
	// listed every slow tick while MIG is on.
	d.mig = migLayout{}
	if mig, ok := d.modes.Get(sample.MIGModeEnabled); ok && mig == 1 {
		d.mig = readMIGLayout(h)
	}
	for f, x := range *d.modes {
		if !math.IsNaN(x) {
			v[f] = x
		}
	}
	// What a dashboard shows and no verdict reads second by second:
	// memory, temperature, the MPS clients (once a second on an H100 101
	// µs of CPU a second together; every 10 s, 10 µs).
	b.readMemory(d, &v)
	setUint(&v, sample.TemperatureCelsius, 1)(h.GetTemperature(nvml.TEMPERATURE_GPU))
	if procs, ret := h.GetMPSComputeRunningProcesses(); ret == nvml.SUCCESS {
		v.Set(sample.MPSProcesses, float64(len(procs)))
	}
	// Cheap settings (tens of microseconds) and the fabric state, which
	// the fabric manager moves from in-progress to completed after boot,
	// every slow tick.
	setUint(&v, sample.PowerLimitWatts, 1e-3)(h.GetEnforcedPowerLimit())
	if m, ret := h.GetPersistenceMode(); ret == nvml.SUCCESS {
		v.Set(sample.PersistenceModeEnabled, enabled(m))
	}
	if m, ret := h.GetComputeMode(); ret == nvml.SUCCESS {
		v.Set(sample.ComputeMode, float64(m))
	}
	// The fabric state is read through the v1 call: it carries the state
	// and status, all that is read here, on every driver since R525, and
	// GetGpuFabricInfoV's handler (a struct over go-nvml's own device
	// type) cannot be served by a fake.
	if fi, ret := h.GetGpuFabricInfo(); ret == nvml.SUCCESS {
		v.Set(sample.FabricState, float64(fi.State))
		v.Set(sample.FabricStatus, float64(fi.Status))
	}
	// The current link width is fixed when the link trains: a link that
	// trained narrow stays so until a reset. At 34 us it was the costliest
	// query of every second after the GPM sample (H100, pynvml).
	setInt(&v, sample.PCIeLinkWidth)(h.GetCurrPcieLinkWidth())
	if d.energyTime.IsZero() || now.Sub(d.energyTime) >= energyInterval {
		d.energy, d.energyTime = nil, now
		if e, ret := h.GetTotalEnergyConsumption(); ret == nvml.SUCCESS {
			j := float64(e) / 1e3
			d.energy = &j
		}
	}
	if d.energy != nil {
		v.Set(sample.EnergyJoulesTotal, *d.energy)
	}
	// Health counters: every slow tick, the per-link NVLink ones every
	// linkErrorInterval. The ECC totals, the memory temperature, the
	// clock event reasons' times, the PCIe replays and the NVLink and
	// ECC-by-location counters come in one field-value call (readHealth).
	ecc, ok := v.Get(sample.ECCEnabled)
	readLinks := d.linkErrorsDue || d.linkErrorsTime.IsZero() || now.Sub(d.linkErrorsTime) >= linkErrorInterval
	d.ecc = nil
	hv := b.readHealth(d, ok && ecc == 1, readLinks)
	switch {
	case hv == nil:
		d.linkErrors = nil
	case hv.linksRead:
		d.linkErrors, d.linkErrorsTime, d.linkErrorsDue = hv.links, now, false
	}
	if hv != nil {
		for f, x := range hv.values {
			if !math.IsNaN(x) {
				v[f] = x
			}
		}
		d.ecc = hv.ecc
	}
	b.readCodecs(d, &v)
	if corr, unc, pending, failed, ret := h.GetRemappedRows(); ret == nvml.SUCCESS {
		v.Set(sample.RemappedRowsCorrectable, float64(corr))
		v.Set(sample.RemappedRowsUncorrectable, float64(unc))
		v.Set(sample.RowRemapPending, boolFloat(pending))
		v.Set(sample.RowRemapFailed, boolFloat(failed))
	}
	return v
}

// readMemory reads device memory as nvidia-smi shows it: total, reserved
// (by the driver and firmware), used and free (nvmlDeviceGetMemoryInfo_v2).
// A driver without the v2 call (before R510) gives total, used and free,
// reserved counted as used.
func (b *Backend) readMemory(d *device, v *sample.Values) {
	if !d.memV1 {
		mem, ret := d.h.GetMemoryInfo_v2()
		switch ret {
		case nvml.SUCCESS:
			v.Set(sample.MemoryUsedBytes, float64(mem.Used))
			v.Set(sample.MemoryTotalBytes, float64(mem.Total))
			v.Set(sample.MemoryFreeBytes, float64(mem.Free))
			v.Set(sample.MemoryReservedBytes, float64(mem.Reserved))
			return
		case nvml.ERROR_FUNCTION_NOT_FOUND, nvml.ERROR_ARGUMENT_VERSION_MISMATCH, nvml.ERROR_NOT_SUPPORTED:
			d.memV1 = true
		default:
			return
		}
	}
	if mem, ret := d.h.GetMemoryInfo(); ret == nvml.SUCCESS {
		v.Set(sample.MemoryUsedBytes, float64(mem.Used))
		v.Set(sample.MemoryTotalBytes, float64(mem.Total))
		v.Set(sample.MemoryFreeBytes, float64(mem.Free))
	}
}

// readCodecs reads the video engines' utilization, which NVML averages
// over its own sampling period; a GPU that cannot measure one is not asked
// again, and says so once in the log. (An H200, which has no NVENC,
// answers 0 for the encoder: 3 µs a call.)
func (b *Backend) readCodecs(d *device, v *sample.Values) {
	for _, e := range []struct {
		name  string
		off   *bool
		field sample.Field
		read  func() (uint32, uint32, nvml.Return)
	}{
		{"encoder_utilization", &d.noEncoder, sample.EncoderUtilization, d.h.GetEncoderUtilization},
		{"decoder_utilization", &d.noDecoder, sample.DecoderUtilization, d.h.GetDecoderUtilization},
	} {
		if *e.off {
			continue
		}
		u, _, ret := e.read()
		switch ret {
		case nvml.SUCCESS:
			v.Set(e.field, gpu.Clamp01(float64(u)/100))
		case nvml.ERROR_NOT_SUPPORTED, nvml.ERROR_FUNCTION_NOT_FOUND:
			*e.off = true
			b.log.Info("GPU health counters not supported; not exported",
				zap.Int("gpu", d.index), zap.String("model", d.model), zap.String("counters", e.name))
		}
	}
}

// modesInterval is how often a GPU's ECC and MIG modes (and its MIG
// devices) are read: what an administrator sets, taking effect at the next
// reset (after which they are read at once). They are the costliest queries
// of the slow tier once a second on an H100 (ECC mode 1.8 ms, MIG mode
// 0.34 ms of CPU, TestNVMLCallCost), and a change shows within a minute.
const modesInterval = time.Minute

// readModes reads the GPU's ECC and MIG modes.
func readModes(h nvml.Device) *sample.Values {
	v := sample.NewValues()
	if cur, _, ret := h.GetEccMode(); ret == nvml.SUCCESS {
		v.Set(sample.ECCEnabled, enabled(cur))
	}
	if cur, pending, ret := h.GetMigMode(); ret == nvml.SUCCESS {
		v.Set(sample.MIGModeEnabled, boolFloat(cur == nvml.DEVICE_MIG_ENABLE))
		v.Set(sample.MIGModePending, boolFloat(pending == nvml.DEVICE_MIG_ENABLE))
	}
	return &v
}

// gpmMetrics is what one GpmMetricsGet asks for, besides per-link NVLink.
// GPM_METRIC_GRAPHICS_UTIL is left out on purpose: on an H200 (driver 580)
// it alone made the call cost 1.5 ms instead of 6 µs, which was half of the
// daemon's CPU time, and SM activity says more for compute work.
var gpmMetrics = []struct {
	id    nvml.GpmMetricId
	field sample.Field
	scale float64 // to base units: MiB/s → B/s; 0 marks a percentage (→ ratio)
}{
	{nvml.GPM_METRIC_SM_UTIL, sample.SMActive, percent},
	{nvml.GPM_METRIC_SM_OCCUPANCY, sample.SMOccupancy, percent},
	{nvml.GPM_METRIC_ANY_TENSOR_UTIL, sample.TensorActive, percent},
	{nvml.GPM_METRIC_HMMA_TENSOR_UTIL, sample.TensorHMMAActive, percent},
	{nvml.GPM_METRIC_DRAM_BW_UTIL, sample.DRAMActive, percent},
	{nvml.GPM_METRIC_FP64_UTIL, sample.FP64Active, percent},
	{nvml.GPM_METRIC_FP32_UTIL, sample.FP32Active, percent},
	{nvml.GPM_METRIC_FP16_UTIL, sample.FP16Active, percent},
	{nvml.GPM_METRIC_PCIE_TX_PER_SEC, sample.PCIeTxBytesPerSecond, mib},
	{nvml.GPM_METRIC_PCIE_RX_PER_SEC, sample.PCIeRxBytesPerSecond, mib},
	{nvml.GPM_METRIC_NVLINK_TOTAL_TX_PER_SEC, sample.NVLinkTxBytesPerSecond, mib},
	{nvml.GPM_METRIC_NVLINK_TOTAL_RX_PER_SEC, sample.NVLinkRxBytesPerSecond, mib},
}

// nvlinkGPMIDs returns the per-link RX and TX GPM metric IDs of link l.
func nvlinkGPMIDs(l int) (rx, tx nvml.GpmMetricId) {
	rx = nvml.GPM_METRIC_NVLINK_L0_RX_PER_SEC + nvml.GpmMetricId(2*l)
	return rx, rx + 1
}

// readGPM takes this interval's GPM sample and computes metrics against the
// previous one. It reports whether g now holds GPM values.
func (b *Backend) readGPM(d *device, g *sample.GPU, now time.Time) bool {
	s := d.gpm
	if ret := d.h.GpmSampleGet(s.cur); ret != nvml.SUCCESS {
		b.log.Debug("GPM sample", zap.Int("gpu", d.index), zap.String("error", ret.Error()))
		if ret == nvml.ERROR_NOT_SUPPORTED {
			b.disableGPM(d, ret)
		}
		return false
	}
	if !s.havePrev {
		s.prev, s.cur, s.prevTime, s.havePrev = s.cur, s.prev, now, true
		return false
	}
	elapsed := now.Sub(s.prevTime)
	if elapsed < gpmMinInterval {
		// Too close to the previous sample for GPM; keep the older one
		// as the start of the next pair.
		return false
	}

	mg := &s.metrics
	*mg = nvml.GpmMetricsGetType{Sample1: s.prev, Sample2: s.cur}
	n := 0
	for _, m := range gpmMetrics {
		mg.Metrics[n].MetricId = uint32(m.id)
		n++
	}
	for _, l := range d.links {
		rx, tx := nvlinkGPMIDs(l)
		mg.Metrics[n].MetricId = uint32(rx)
		mg.Metrics[n+1].MetricId = uint32(tx)
		n += 2
	}
	mg.NumMetrics = uint32(n)
	ret := b.lib.GpmMetricsGet(mg)
	// This sample becomes the start of the next pair whatever happened.
	s.prev, s.cur, s.prevTime = s.cur, s.prev, now
	if ret != nvml.SUCCESS {
		if ret == nvml.ERROR_NOT_SUPPORTED {
			b.disableGPM(d, ret)
		}
		b.log.Debug("GPM metrics", zap.Int("gpu", d.index), zap.String("error", ret.Error()))
		return false
	}

	v := &g.Values
	// Read each metric's own return: one unsupported metric must not hide
	// the others.
	for i, m := range gpmMetrics {
		r := mg.Metrics[i]
		if nvml.Return(r.NvmlReturn) == nvml.SUCCESS && !math.IsNaN(r.Value) {
			// Divide rather than multiply by 0.01 so 96.4% is exactly 0.964.
			x := r.Value * m.scale
			if m.scale == percent {
				x = gpu.Clamp01(r.Value / 100)
			}
			v.Set(m.field, x)
		}
	}
	for j := range d.links {
		rx, tx := mg.Metrics[len(gpmMetrics)+2*j], mg.Metrics[len(gpmMetrics)+2*j+1]
		if nvml.Return(rx.NvmlReturn) == nvml.SUCCESS {
			g.Links[j].RxBytesPerSecond = rx.Value * mib
		}
		if nvml.Return(tx.NvmlReturn) == nvml.SUCCESS {
			g.Links[j].TxBytesPerSecond = tx.Value * mib
		}
	}
	g.IntervalSeconds = elapsed.Seconds()
	return true
}

func (b *Backend) disableGPM(d *device, ret nvml.Return) {
	b.log.Info("GPM not supported on this GPU; using NVML utilization and counters",
		zap.Int("gpu", d.index), zap.String("model", d.model), zap.String("error", ret.Error()))
	d.gpm.free()
	d.gpm = nil
}

// readFallback fills throughput from the pre-GPM NVML queries: PCIe
// throughput (a 20 ms window, KB/s) and the NVLink data counters (KiB).
func (b *Backend) readFallback(d *device, g *sample.GPU, now time.Time) {
	v := &g.Values
	g.ActivitySource, g.LinkSource = sample.SourceNVML, sample.SourceNVML
	if tx, ret := d.h.GetPcieThroughput(nvml.PCIE_UTIL_TX_BYTES); ret == nvml.SUCCESS {
		v.Set(sample.PCIeTxBytesPerSecond, float64(tx)*1e3)
	}
	if rx, ret := d.h.GetPcieThroughput(nvml.PCIE_UTIL_RX_BYTES); ret == nvml.SUCCESS {
		v.Set(sample.PCIeRxBytesPerSecond, float64(rx)*1e3)
	}
	if len(d.links) == 0 {
		d.lastTime = now
		g.IntervalSeconds = intervalSince(d.lastSample, now)
		return
	}
	fv := make([]nvml.FieldValue, 0, 2*len(d.links))
	for _, l := range d.links {
		fv = append(fv,
			nvml.FieldValue{FieldId: nvml.FI_DEV_NVLINK_THROUGHPUT_DATA_TX, ScopeId: uint32(l)},
			nvml.FieldValue{FieldId: nvml.FI_DEV_NVLINK_THROUGHPUT_DATA_RX, ScopeId: uint32(l)})
	}
	elapsed := now.Sub(d.lastTime).Seconds()
	if ret := d.h.GetFieldValues(fv); ret == nvml.SUCCESS {
		var txSum, rxSum float64
		haveAll := true
		for j, l := range d.links {
			tx, okTx := fieldUint(fv[2*j])
			rx, okRx := fieldUint(fv[2*j+1])
			prevTx, hadTx := d.lastNVLinkTx[l]
			prevRx, hadRx := d.lastNVLinkRx[l]
			if okTx {
				d.lastNVLinkTx[l] = tx
			}
			if okRx {
				d.lastNVLinkRx[l] = rx
			}
			if !okTx || !okRx || !hadTx || !hadRx || d.lastTime.IsZero() || elapsed <= 0 {
				haveAll = false
				continue
			}
			g.Links[j].TxBytesPerSecond = counterRate(prevTx, tx, elapsed) * 1024
			g.Links[j].RxBytesPerSecond = counterRate(prevRx, rx, elapsed) * 1024
			txSum += g.Links[j].TxBytesPerSecond
			rxSum += g.Links[j].RxBytesPerSecond
		}
		if haveAll {
			v.Set(sample.NVLinkTxBytesPerSecond, txSum)
			v.Set(sample.NVLinkRxBytesPerSecond, rxSum)
		}
	}
	d.lastTime = now
	if elapsed > 0 {
		g.IntervalSeconds = elapsed
	}
}

// counterRate is the per-second rate of a counter; a counter that went
// backwards (driver reload, wrap) yields 0 for that interval, never negative.
func counterRate(prev, cur uint64, seconds float64) float64 {
	if cur < prev || seconds <= 0 {
		return 0
	}
	return float64(cur-prev) / seconds
}

func intervalSince(prev, now time.Time) float64 {
	if prev.IsZero() {
		return 0
	}
	return now.Sub(prev).Seconds()
}

func fieldUint(f nvml.FieldValue) (uint64, bool) {
	if nvml.Return(f.NvmlReturn) != nvml.SUCCESS {
		return 0, false
	}
	b := f.Value
	var x uint64
	for i := 7; i >= 0; i-- { // little-endian union, as NVML fills it on x86-64 and arm64
		x = x<<8 | uint64(b[i])
	}
	switch nvml.ValueType(f.ValueType) {
	case nvml.VALUE_TYPE_UNSIGNED_INT:
		return x & 0xffffffff, true
	case nvml.VALUE_TYPE_UNSIGNED_LONG, nvml.VALUE_TYPE_UNSIGNED_LONG_LONG:
		return x, true
	default:
		return x, true
	}
}

func setUint(v *sample.Values, f sample.Field, scale float64) func(uint32, nvml.Return) {
	return func(x uint32, ret nvml.Return) {
		if ret == nvml.SUCCESS {
			v.Set(f, float64(x)*scale)
		}
	}
}

func setInt(v *sample.Values, f sample.Field) func(int, nvml.Return) {
	return func(x int, ret nvml.Return) {
		if ret == nvml.SUCCESS {
			v.Set(f, float64(x))
		}
	}
}

func enabled(s nvml.EnableState) float64 { return boolFloat(s == nvml.FEATURE_ENABLED) }

func boolFloat(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// busID formats the PCI bus ID as the kernel does (0000:3b:00.0), the form
// /sys/bus/pci/devices uses, so host collectors can join on it.
func busID(p nvml.PciInfo) string {
	return fmt.Sprintf("%04x:%02x:%02x.0", p.Domain, p.Bus, p.Device)
}
