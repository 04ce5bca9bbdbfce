// Package dcgmgpu reads GPUs through DCGM (go-dcgm), either embedded in this
// process or from a running nv-hostengine. DCGM's profiling fields give SM,
// tensor, DRAM and link activity on GPUs older than Hopper, where NVML has no
// GPM; without the profiling module the backend keeps the device fields and
// says so in each GPU's ActivitySource.
package dcgmgpu

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/NVIDIA/go-dcgm/pkg/dcgm"
	"go.uber.org/zap"

	"github.com/gpudiag/gpudiag/gpu"
	"github.com/gpudiag/gpudiag/sample"
)

// DefaultUpdateInterval is how often DCGM samples the watched fields. The
// profiling ratios and link rates DCGM reports average over this interval,
// not over the time between two Sample calls, so it should match the
// daemon's sampling interval.
const DefaultUpdateInterval = time.Second

// minKeepAge bounds DCGM's per-field cache: long enough that the latest value
// never ages out between two samples, short enough to stay small.
const minKeepAge = 30 * time.Second

// maxProfLinks is the number of NVLinks DCGM has per-link profiling fields
// for (DCGM_FI_PROF_NVLINK_L0..L17_{TX,RX}_BYTES).
const maxProfLinks = 18

const mib = 1 << 20

// Options configure the backend.
type Options struct {
	// Address of a running nv-hostengine ("host:port", "unix:///path");
	// empty starts DCGM embedded in this process.
	Address string
	Logger  *zap.Logger
	// Now is the clock; tests replace it.
	Now func() time.Time
	// UpdateInterval is DCGM's sampling period for the watched fields;
	// zero means DefaultUpdateInterval.
	UpdateInterval time.Duration
}

// Backend reads GPUs through DCGM.
type Backend struct {
	c        client
	log      *zap.Logger
	now      func() time.Time
	interval time.Duration
	driver   string

	mu      sync.Mutex // Sample and Close may run on different goroutines
	closed  bool
	devices []*device
	gpus    []uint
	fields  []dcgm.Short // everything read per sample: base plus profiling

	group     dcgm.GroupHandle
	base      dcgm.FieldHandle
	prof      dcgm.FieldHandle
	haveGroup bool
	haveBase  bool
	haveProf  bool // the profiling fields are watched
	profLinks bool // ... including the per-link NVLink fields
	// health is the field group of the health counters (health.go),
	// watched every healthInterval when haveHealth.
	health     dcgm.FieldHandle
	haveHealth bool

	lastSample time.Time
}

type device struct {
	id    uint // DCGM GPU ID
	uuid  string
	bus   string
	model string

	links     []int             // NVLinks this GPU has
	linkState map[int]bool      // last known state, true = up
	noProf    bool              // profiling unsupported on this GPU
	xidSeen   bool              // xidTS holds a baseline
	xidTS     int64             // timestamp of the last XID counted
	xids      map[uint64]uint64 // XID events since Open
}

// Open initialises DCGM, finds the GPUs and starts watching the fields. It
// fails when libdcgm.so.4 cannot be loaded, the hostengine cannot be reached
// or started, or DCGM finds no GPU, with an error that says which.
func Open(opts Options) (*Backend, error) {
	c, err := connect(opts.Address)
	if err != nil {
		return nil, err
	}
	return open(c, opts)
}

// open does everything after the connection, on any client. On error the
// client is shut down.
func open(c client, opts Options) (_ *Backend, err error) {
	if opts.Logger == nil {
		opts.Logger = zap.NewNop()
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.UpdateInterval <= 0 {
		opts.UpdateInterval = DefaultUpdateInterval
	}
	b := &Backend{c: c, log: opts.Logger, now: opts.Now, interval: opts.UpdateInterval}
	defer func() {
		if err != nil {
			_ = b.release()
		}
	}()

	gpus, err := c.SupportedGPUs()
	if err != nil {
		return nil, fmt.Errorf("DCGM: list GPUs: %w", err)
	}
	if len(gpus) == 0 {
		return nil, errors.New("DCGM: no supported GPU found")
	}
	b.gpus = gpus
	identified := true
	for _, id := range gpus {
		d := &device{id: id, linkState: map[int]bool{}, xids: map[uint64]uint64{}}
		if info, err := c.DeviceInfo(id); err == nil {
			d.uuid, d.model, d.bus = info.UUID, info.Identifiers.Model, busID(info.PCI.BusID)
			if b.driver == "" {
				b.driver = info.Identifiers.DriverVersion
			}
		} else {
			b.log.Warn("DCGM device info", zap.Uint("gpu", id), zap.Error(err))
		}
		if d.uuid == "" || d.bus == "" || d.model == "" {
			identified = false
		}
		b.devices = append(b.devices, d)
	}
	b.openLinks()

	suffix := fmt.Sprintf("%d-%08x", os.Getpid(), rand.Uint32()) // a hostengine outlives us: names must not collide
	if b.group, err = c.CreateGroup("gpudiag-"+suffix, gpus); err != nil {
		return nil, fmt.Errorf("DCGM: create GPU group: %w", err)
	}
	b.haveGroup = true
	base := baseFields
	if !identified {
		base = append(append([]dcgm.Short(nil), baseFields...), identityFields...)
	}
	if b.base, err = b.watch("gpudiag-base-"+suffix, base); err != nil {
		return nil, fmt.Errorf("DCGM: watch fields: %w", err)
	}
	b.haveBase = true
	b.fields = base
	b.watchProf("gpudiag-prof-" + suffix)
	b.watchHealth("gpudiag-health-" + suffix)

	// Read once so that XIDs raised before we started are not counted.
	b.read()
	return b, nil
}

// openLinks records which NVLinks each GPU has, as nvmlgpu does at open.
func (b *Backend) openLinks() {
	st, err := b.c.NvLinkStatus()
	if err != nil {
		b.log.Info("DCGM NVLink status unavailable; no per-link readings", zap.Error(err))
		return
	}
	byID := b.byID()
	for _, l := range st {
		d := byID[l.ParentId]
		if l.ParentType != dcgm.FE_GPU || d == nil || l.State == dcgm.LS_NOT_SUPPORTED {
			continue
		}
		d.links = append(d.links, int(l.Index))
		d.linkState[int(l.Index)] = l.State == dcgm.LS_UP
	}
}

func (b *Backend) byID() map[uint]*device {
	m := make(map[uint]*device, len(b.devices))
	for _, d := range b.devices {
		m[d.id] = d
	}
	return m
}

// watch creates a field group and watches it on the GPU group every
// update interval.
func (b *Backend) watch(name string, fields []dcgm.Short) (dcgm.FieldHandle, error) {
	return b.watchEvery(name, fields, b.interval)
}

// watchEvery creates a field group and watches it on the GPU group, sampled
// every so often.
func (b *Backend) watchEvery(name string, fields []dcgm.Short, every time.Duration) (dcgm.FieldHandle, error) {
	f, err := b.c.CreateFieldGroup(name, fields)
	if err != nil {
		return f, err
	}
	if err := b.c.Watch(f, b.group, every, max(minKeepAge, 3*every)); err != nil {
		// The watch may be in place when only the first update failed.
		_ = b.c.Unwatch(f, b.group)
		_ = b.c.DestroyFieldGroup(f)
		return dcgm.FieldHandle{}, err
	}
	return f, nil
}

// watchProf watches the profiling fields, dropping first the per-link NVLink
// fields and then all but the core ones when DCGM refuses a set: the
// profiling module may be absent, or unable to collect a set at once on
// older GPUs. Without it the device fields still work.
func (b *Backend) watchProf(name string) {
	linkCount := 0
	for _, d := range b.devices {
		for _, l := range d.links {
			linkCount = max(linkCount, min(l+1, maxProfLinks))
		}
	}
	type tier struct {
		fields []dcgm.Short
		links  bool
	}
	var tiers []tier
	if linkCount > 0 {
		tiers = append(tiers, tier{append(append([]dcgm.Short(nil), profFields...), profLinkFields(linkCount)...), true})
	}
	tiers = append(tiers, tier{profFields, false}, tier{profCoreFields, false})
	var lastErr error
	for _, t := range tiers {
		f, err := b.watch(fmt.Sprintf("%s-%d", name, len(t.fields)), t.fields)
		if err == nil {
			b.prof, b.haveProf, b.profLinks = f, true, t.links
			b.fields = append(append([]dcgm.Short(nil), b.fields...), t.fields...)
			if len(t.fields) == len(profCoreFields) {
				b.log.Info("DCGM profiling: only SM, occupancy, tensor and DRAM activity could be watched", zap.Error(lastErr))
			}
			return
		}
		lastErr = err
		b.log.Debug("DCGM profiling fields refused", zap.Int("fields", len(t.fields)), zap.Error(err))
	}
	b.log.Info("DCGM profiling fields unavailable (profiling module missing, not permitted, or another tool holds the counters); SM, tensor, DRAM and link activity are off, NVML-level utilization only",
		zap.Error(lastErr))
}

// Name implements gpu.Backend.
func (b *Backend) Name() string { return "dcgm" }

// Close stops the watches, destroys the groups and shuts DCGM down.
func (b *Backend) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil
	}
	b.closed = true
	return b.release()
}

func (b *Backend) release() error {
	var errs []error
	if b.haveHealth {
		errs = append(errs, b.c.Unwatch(b.health, b.group), b.c.DestroyFieldGroup(b.health))
		b.haveHealth = false
	}
	if b.haveProf {
		errs = append(errs, b.c.Unwatch(b.prof, b.group), b.c.DestroyFieldGroup(b.prof))
		b.haveProf = false
	}
	if b.haveBase {
		errs = append(errs, b.c.Unwatch(b.base, b.group), b.c.DestroyFieldGroup(b.base))
		b.haveBase = false
	}
	if b.haveGroup {
		errs = append(errs, b.c.DestroyGroup(b.group))
		b.haveGroup = false
	}
	if err := b.c.Shutdown(); err != nil {
		errs = append(errs, fmt.Errorf("DCGM shutdown: %w", err))
	}
	return errors.Join(errs...)
}

// Sample reads every GPU.
func (b *Backend) Sample(ctx context.Context) (*sample.GPUs, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil, errors.New("DCGM backend closed")
	}
	now := b.now()
	var interval float64
	if !b.lastSample.IsZero() {
		interval = now.Sub(b.lastSample).Seconds()
	}
	b.lastSample = now
	b.refreshLinks()

	out := &sample.GPUs{Backend: "dcgm", DriverVersion: b.driver, Devices: make([]sample.GPU, 0, len(b.devices))}
	up := 0
	for _, g := range b.read() {
		g.IntervalSeconds = interval
		if g.Up {
			up++
		}
		out.Devices = append(out.Devices, g)
	}
	if up == 0 {
		return out, fmt.Errorf("no GPU answered (%d known): %s", len(b.devices), out.Devices[0].Error)
	}
	return out, nil
}

// refreshLinks updates the NVLink states. A failed query keeps the last
// known states: one hostengine hiccup must not read as every link down.
func (b *Backend) refreshLinks() {
	has := false
	for _, d := range b.devices {
		has = has || len(d.links) > 0
	}
	if !has {
		return
	}
	st, err := b.c.NvLinkStatus()
	if err != nil {
		b.log.Debug("DCGM NVLink status", zap.Error(err))
		return
	}
	byID := b.byID()
	for _, l := range st {
		if d := byID[l.ParentId]; d != nil && l.ParentType == dcgm.FE_GPU {
			if _, ok := d.linkState[int(l.Index)]; ok {
				d.linkState[int(l.Index)] = l.State == dcgm.LS_UP
			}
		}
	}
}

// read fetches the latest values of every GPU in one call and maps them. When
// the call fails as a whole it retries per GPU, so that one bad GPU shows as
// down instead of taking the others with it.
func (b *Backend) read() []sample.GPU {
	failed := map[uint]string{}
	alive := make([]uint, 0, len(b.gpus))
	for _, d := range b.devices {
		// The entity status is DCGM's liveness probe: a lost GPU's cached
		// values may still look fine.
		switch st := b.c.GPUStatus(d.id); st {
		case dcgm.EntityStatusLost, dcgm.EntityStatusInaccessible, dcgm.EntityStatusDetached,
			dcgm.EntityStatusDisabled, dcgm.EntityStatusUnsupported:
			failed[d.id] = "DCGM GPU status: " + strings.ToLower(st.String())
		default:
			alive = append(alive, d.id)
		}
	}
	byGPU := map[uint]map[dcgm.Short]value{}
	add := func(vs []value) {
		for _, v := range vs {
			m := byGPU[v.gpu]
			if m == nil {
				m = make(map[dcgm.Short]value, len(b.fields))
				byGPU[v.gpu] = m
			}
			m[v.field] = v
		}
	}
	if len(alive) > 0 {
		vs, err := b.c.Latest(alive, b.fields)
		if err == nil {
			add(vs)
		} else {
			b.log.Debug("DCGM latest values, retrying per GPU", zap.Error(err))
			for _, id := range alive {
				vs, err := b.c.Latest([]uint{id}, b.fields)
				if err != nil {
					failed[id] = "DCGM read: " + err.Error()
					continue
				}
				add(vs)
			}
		}
	}
	out := make([]sample.GPU, 0, len(b.devices))
	for _, d := range b.devices {
		g := sample.GPU{Index: int(d.id), Values: sample.NewValues()}
		if why, ok := failed[d.id]; ok {
			g.Error = why
		} else {
			b.fill(d, &g, byGPU[d.id])
		}
		g.UUID, g.PCIBusID, g.Model = d.uuid, d.bus, d.model
		g.XIDErrors = gpu.CopyCounts(d.xids)
		out = append(out, g)
	}
	return out
}

// fill maps one GPU's values into g. The GPU is up when at least one value
// was read, blank or not.
func (b *Backend) fill(d *device, g *sample.GPU, vals map[dcgm.Short]value) {
	ok := 0
	worst := 0
	for _, v := range vals {
		if v.status == dcgm.DCGM_ST_OK {
			ok++
		} else if worst == 0 || v.status == dcgm.DCGM_ST_GPU_IS_LOST {
			worst = v.status
		}
	}
	if ok == 0 {
		if worst != 0 {
			g.Error = "DCGM: every field failed: " + statusString(worst)
		} else {
			g.Error = "DCGM returned no values for this GPU"
		}
		return
	}
	g.Up = true
	b.identify(d, vals)

	v := &g.Values
	for _, m := range fieldMap {
		if x, ok := number(vals[m.id]); ok {
			v.Set(m.field, m.conv.apply(x))
		}
	}
	if x, ok := number(vals[dcgm.DCGM_FI_DEV_BOARD_POWER_LIMIT_ENFORCED_WATTS]); ok {
		v.Set(sample.PowerLimitWatts, x)
	} else if x, ok := number(vals[dcgm.DCGM_FI_DEV_BOARD_POWER_LIMIT_REQUESTED_WATTS]); ok {
		v.Set(sample.PowerLimitWatts, x)
	}
	// Volatile ECC counts mean nothing with ECC off; nvmlgpu leaves them
	// unset too.
	if ecc, ok := v.Get(sample.ECCEnabled); ok && ecc == 0 {
		v.Set(sample.ECCCorrectedErrorsTotal, math.NaN())
		v.Set(sample.ECCUncorrectedErrorsTotal, math.NaN())
	}
	if x, ok := number(vals[dcgm.DCGM_FI_DEV_CLOCKS_EVENT_REASONS]); ok {
		g.ClockEventReasons = uint64(x)
	}
	b.countXID(d, vals[dcgm.DCGM_FI_DEV_XID_ERROR])
	if x, ok := number(vals[dcgm.DCGM_FI_DEV_FABRIC_MANAGER_STATUS]); ok {
		code, _ := number(vals[dcgm.DCGM_FI_DEV_FABRIC_MANAGER_ERROR_CODE])
		setFabric(v, x, code)
	}

	if sm := vals[dcgm.DCGM_FI_PROF_SM_UTIL_RATIO]; b.haveProf && !d.noProf && profUnsupported(sm) {
		d.noProf = true
		why := "value reads not supported"
		if sm.status != dcgm.DCGM_ST_OK {
			why = statusString(sm.status)
		}
		b.log.Info("DCGM profiling not supported on this GPU; SM, tensor, DRAM and link activity are off for it",
			zap.Uint("gpu", d.id), zap.String("model", d.model), zap.String("why", why))
	}
	if b.haveProf && !d.noProf {
		g.ActivitySource, g.LinkSource = sample.SourceDCGM, sample.SourceDCGM
	} else {
		g.ActivitySource = sample.SourceNVML
	}

	for _, l := range d.links {
		link := sample.NVLink{Link: l, Up: d.linkState[l], TxBytesPerSecond: math.NaN(), RxBytesPerSecond: math.NaN()}
		if b.profLinks && l < maxProfLinks {
			tx, rx := profLinkIDs(l)
			if x, ok := number(vals[tx]); ok {
				link.TxBytesPerSecond = x
			}
			if x, ok := number(vals[rx]); ok {
				link.RxBytesPerSecond = x
			}
		}
		g.Links = append(g.Links, link)
	}
	fillHealth(g, vals)
}

// identify fills identity that GetDeviceInfo could not give from the string
// fields, which are watched only in that case.
func (b *Backend) identify(d *device, vals map[dcgm.Short]value) {
	str := func(id dcgm.Short) string {
		v, ok := vals[id]
		if !ok || v.status != dcgm.DCGM_ST_OK || v.kind != dcgm.DCGM_FT_STRING || strings.HasPrefix(v.s, "<<<") {
			return ""
		}
		return v.s
	}
	if d.uuid == "" {
		d.uuid = str(dcgm.DCGM_FI_DEV_GPU_UUID)
	}
	if d.model == "" {
		d.model = str(dcgm.DCGM_FI_DEV_GPU_NAME)
	}
	if d.bus == "" {
		d.bus = busID(str(dcgm.DCGM_FI_DEV_PCI_BUS_ID))
	}
}

// countXID counts an XID each time the timestamp of DCGM's last-XID field
// changes. The first reading is the baseline: an XID from before Open is not
// an event of this run. Several XIDs within one update interval count as one,
// the last.
func (b *Backend) countXID(d *device, v value) {
	if v.status != dcgm.DCGM_ST_OK {
		return
	}
	x, ok := number(v)
	if !d.xidSeen {
		d.xidSeen = true
		if ok {
			d.xidTS = v.ts
		}
		return
	}
	if !ok || v.ts == d.xidTS {
		return
	}
	d.xidTS = v.ts
	d.xids[uint64(x)]++
	b.log.Warn("XID event", zap.Uint("gpu", d.id), zap.Uint64("xid", uint64(x)))
}

// profUnsupported tells a GPU without profiling support from one whose
// profiling values are merely blank until DCGM's first update.
func profUnsupported(v value) bool {
	switch v.status {
	case dcgm.DCGM_ST_NOT_SUPPORTED, dcgm.DCGM_ST_PROFILING_NOT_SUPPORTED, dcgm.DCGM_ST_NO_PERMISSION,
		dcgm.DCGM_ST_MODULE_NOT_LOADED, dcgm.DCGM_ST_REQUIRES_ROOT:
		return true
	case dcgm.DCGM_ST_OK:
		return v.kind == dcgm.DCGM_FT_DOUBLE && (v.f == dcgm.DCGM_FT_FP64_NOT_SUPPORTED || v.f == dcgm.DCGM_FT_FP64_NOT_PERMISSIONED)
	}
	return false
}

// number returns a read value as a float, or false for an error status or
// one of DCGM's blank sentinels (blank, not found, not supported, not
// permitted).
func number(v value) (float64, bool) {
	if v.status != dcgm.DCGM_ST_OK {
		return 0, false
	}
	switch v.kind {
	case dcgm.DCGM_FT_DOUBLE:
		if math.IsNaN(v.f) || math.IsInf(v.f, 0) || v.f >= dcgm.DCGM_FT_FP64_BLANK {
			return 0, false
		}
		return v.f, true
	case dcgm.DCGM_FT_INT64, dcgm.DCGM_FT_TIMESTAMP:
		// 32-bit fields carry the 32-bit sentinels in the int64 slot.
		if dcgm.IsInt64Blank(v.i) || (v.i >= dcgm.DCGM_FT_INT32_BLANK && v.i <= dcgm.DCGM_FT_INT32_NOT_PERMISSIONED) {
			return 0, false
		}
		return float64(v.i), true
	}
	return 0, false
}

// conv converts a DCGM unit to the base unit sample.Values holds.
type conv int

const (
	same    conv = iota
	ratio        // already 0–1; clamped, as DCGM can overshoot slightly
	percent      // 0–100 → 0–1
	mibToB       // MiB → bytes
	mhzToHz      // MHz → Hz
	mJToJ        // mJ → J
	flag         // 0/1, any non-zero as 1
)

func (c conv) apply(x float64) float64 {
	switch c {
	case ratio:
		return gpu.Clamp01(x)
	case percent:
		return gpu.Clamp01(x / 100)
	case mibToB:
		return x * mib
	case mhzToHz:
		return x * 1e6
	case mJToJ:
		return x / 1e3
	case flag:
		if x != 0 {
			return 1
		}
		return 0
	}
	return x
}

// setFabric maps DCGM's fabric manager status (dcgmFabricManagerStatus_t:
// 0 not supported, 1 not started, 2 in progress, 3 success, 4 failure,
// 5 unrecognized, 6 NVML too old) onto NVML's fabric state and status, as
// the NVML backend reads them: a failure is the completed state with the
// error code DCGM gives (an nvmlReturn_t), NVML_ERROR_UNKNOWN (999) when it
// gives none. DCGM's own "unrecognized" and "NVML too old" say nothing of
// the fabric and leave both unset.
//
// The other facts the GPU configuration checks read have no DCGM field the
// backend can use as it is: the pending MIG mode, MPS processes and
// per-process SM shares have none; DCGM_FI_DEV_COMPUTE_MODE (65) is not
// documented to use NVML's numbering (DCGM's own configuration API numbers
// the modes differently: DCGM_CONFIG_COMPUTEMODE_*), and
// DCGM_FI_CUDA_DRIVER_VERSION (5) is a global field, outside the per-GPU
// field group. Under DCGM those checks stay silent (not measured).
func setFabric(v *sample.Values, status, code float64) {
	switch status {
	case 0, 1, 2:
		v.Set(sample.FabricState, status) // the status means something once completed
	case 3:
		v.Set(sample.FabricState, sample.FabricCompleted)
		v.Set(sample.FabricStatus, 0)
	case 4:
		if code == 0 || math.IsNaN(code) {
			code = 999
		}
		v.Set(sample.FabricState, sample.FabricCompleted)
		v.Set(sample.FabricStatus, code)
	}
}

// fieldMap maps DCGM fields one to one onto sample fields. Power limit,
// clock event reasons, XID and identity need more than a unit change and are
// handled in fill.
var fieldMap = []struct {
	id    dcgm.Short
	field sample.Field
	conv  conv
}{
	{dcgm.DCGM_FI_PROF_GR_ENGINE_UTIL_RATIO, sample.GraphicsActive, ratio},
	{dcgm.DCGM_FI_PROF_SM_UTIL_RATIO, sample.SMActive, ratio},
	{dcgm.DCGM_FI_PROF_SM_OCCUPANCY_RATIO, sample.SMOccupancy, ratio},
	{dcgm.DCGM_FI_PROF_TENSOR_UTIL_RATIO, sample.TensorActive, ratio},
	{dcgm.DCGM_FI_PROF_HMMA_UTIL_RATIO, sample.TensorHMMAActive, ratio},
	{dcgm.DCGM_FI_PROF_DRAM_UTIL_RATIO, sample.DRAMActive, ratio},
	{dcgm.DCGM_FI_PROF_FP64_UTIL_RATIO, sample.FP64Active, ratio},
	{dcgm.DCGM_FI_PROF_FP32_UTIL_RATIO, sample.FP32Active, ratio},
	{dcgm.DCGM_FI_PROF_FP16_UTIL_RATIO, sample.FP16Active, ratio},
	// The *_BYTES profiling fields are rates (B/s) despite their names.
	{dcgm.DCGM_FI_PROF_PCIE_TX_BYTES, sample.PCIeTxBytesPerSecond, same},
	{dcgm.DCGM_FI_PROF_PCIE_RX_BYTES, sample.PCIeRxBytesPerSecond, same},
	{dcgm.DCGM_FI_PROF_NVLINK_TX_BYTES, sample.NVLinkTxBytesPerSecond, same},
	{dcgm.DCGM_FI_PROF_NVLINK_RX_BYTES, sample.NVLinkRxBytesPerSecond, same},

	// Field 203 kept its ID and its percent unit through the rename to
	// *_UTIL_RATIO; fields whose unit changed got new IDs.
	{dcgm.DCGM_FI_DEV_GPU_UTIL_RATIO, sample.Utilization, percent},
	{dcgm.DCGM_FI_DEV_MEM_COPY_UTIL, sample.MemoryUtilization, percent},
	{dcgm.DCGM_FI_DEV_FB_USED, sample.MemoryUsedBytes, mibToB},
	{dcgm.DCGM_FI_DEV_FB_TOTAL, sample.MemoryTotalBytes, mibToB},
	{dcgm.DCGM_FI_DEV_SM_CLOCK, sample.SMClockHertz, mhzToHz},
	{dcgm.DCGM_FI_DEV_MAX_SM_CLOCK, sample.SMClockMaxHertz, mhzToHz},
	{dcgm.DCGM_FI_DEV_MEM_CLOCK, sample.MemoryClockHertz, mhzToHz},
	{dcgm.DCGM_FI_DEV_MAX_MEM_CLOCK, sample.MemoryClockMaxHertz, mhzToHz},
	{dcgm.DCGM_FI_DEV_BOARD_POWER_WATTS, sample.PowerWatts, same},
	{dcgm.DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION, sample.EnergyJoulesTotal, mJToJ},
	{dcgm.DCGM_FI_DEV_GPU_TEMP_CELSIUS, sample.TemperatureCelsius, same},
	{dcgm.DCGM_FI_DEV_PCIE_LINK_GEN, sample.PCIeLinkGeneration, same},
	{dcgm.DCGM_FI_DEV_PCIE_MAX_LINK_GEN, sample.PCIeLinkMaxGeneration, same},
	{dcgm.DCGM_FI_DEV_PCIE_LINK_WIDTH, sample.PCIeLinkWidth, same},
	{dcgm.DCGM_FI_DEV_PCIE_MAX_LINK_WIDTH, sample.PCIeLinkMaxWidth, same},
	{dcgm.DCGM_FI_DEV_PCIE_REPLAY_TOTAL, sample.PCIeReplaysTotal, same},
	{dcgm.DCGM_FI_DEV_ECC_MODE, sample.ECCEnabled, flag},
	{dcgm.DCGM_FI_DEV_ECC_SBE_VOL_TOTAL, sample.ECCCorrectedErrorsTotal, same},
	{dcgm.DCGM_FI_DEV_ECC_DBE_VOL_TOTAL, sample.ECCUncorrectedErrorsTotal, same},
	{dcgm.DCGM_FI_DEV_ROW_REMAP_CORRECTABLE_TOTAL, sample.RemappedRowsCorrectable, same},
	{dcgm.DCGM_FI_DEV_ROW_REMAP_UNCORRECTABLE_TOTAL, sample.RemappedRowsUncorrectable, same},
	{dcgm.DCGM_FI_DEV_ROW_REMAP_PENDING, sample.RowRemapPending, flag},
	{dcgm.DCGM_FI_DEV_ROW_REMAP_FAILED, sample.RowRemapFailed, flag},
	{dcgm.DCGM_FI_DEV_GPU_PERSISTENCE_MODE, sample.PersistenceModeEnabled, flag},
	{dcgm.DCGM_FI_DEV_MIG_MODE, sample.MIGModeEnabled, flag},
}

// baseFields are watched on every GPU; they need no profiling module.
var baseFields = []dcgm.Short{
	dcgm.DCGM_FI_DEV_GPU_UTIL_RATIO,
	dcgm.DCGM_FI_DEV_MEM_COPY_UTIL,
	dcgm.DCGM_FI_DEV_FB_USED,
	dcgm.DCGM_FI_DEV_FB_TOTAL,
	dcgm.DCGM_FI_DEV_SM_CLOCK,
	dcgm.DCGM_FI_DEV_MAX_SM_CLOCK,
	dcgm.DCGM_FI_DEV_MEM_CLOCK,
	dcgm.DCGM_FI_DEV_MAX_MEM_CLOCK,
	dcgm.DCGM_FI_DEV_CLOCKS_EVENT_REASONS,
	dcgm.DCGM_FI_DEV_BOARD_POWER_WATTS,
	dcgm.DCGM_FI_DEV_BOARD_POWER_LIMIT_ENFORCED_WATTS,
	dcgm.DCGM_FI_DEV_BOARD_POWER_LIMIT_REQUESTED_WATTS,
	dcgm.DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION,
	dcgm.DCGM_FI_DEV_GPU_TEMP_CELSIUS,
	dcgm.DCGM_FI_DEV_PCIE_LINK_GEN,
	dcgm.DCGM_FI_DEV_PCIE_MAX_LINK_GEN,
	dcgm.DCGM_FI_DEV_PCIE_LINK_WIDTH,
	dcgm.DCGM_FI_DEV_PCIE_MAX_LINK_WIDTH,
	dcgm.DCGM_FI_DEV_PCIE_REPLAY_TOTAL,
	dcgm.DCGM_FI_DEV_ECC_MODE,
	dcgm.DCGM_FI_DEV_ECC_SBE_VOL_TOTAL,
	dcgm.DCGM_FI_DEV_ECC_DBE_VOL_TOTAL,
	dcgm.DCGM_FI_DEV_ROW_REMAP_CORRECTABLE_TOTAL,
	dcgm.DCGM_FI_DEV_ROW_REMAP_UNCORRECTABLE_TOTAL,
	dcgm.DCGM_FI_DEV_ROW_REMAP_PENDING,
	dcgm.DCGM_FI_DEV_ROW_REMAP_FAILED,
	dcgm.DCGM_FI_DEV_GPU_PERSISTENCE_MODE,
	dcgm.DCGM_FI_DEV_MIG_MODE,
	dcgm.DCGM_FI_DEV_FABRIC_MANAGER_STATUS,
	dcgm.DCGM_FI_DEV_FABRIC_MANAGER_ERROR_CODE,
	dcgm.DCGM_FI_DEV_XID_ERROR,
}

// identityFields stand in for GetDeviceInfo when it fails.
var identityFields = []dcgm.Short{
	dcgm.DCGM_FI_DEV_GPU_UUID,
	dcgm.DCGM_FI_DEV_GPU_NAME,
	dcgm.DCGM_FI_DEV_PCI_BUS_ID,
}

// profCoreFields are what the classification needs most; the last resort
// when DCGM cannot collect the full set together.
var profCoreFields = []dcgm.Short{
	dcgm.DCGM_FI_PROF_SM_UTIL_RATIO,
	dcgm.DCGM_FI_PROF_SM_OCCUPANCY_RATIO,
	dcgm.DCGM_FI_PROF_TENSOR_UTIL_RATIO,
	dcgm.DCGM_FI_PROF_DRAM_UTIL_RATIO,
}

var profFields = append(append([]dcgm.Short(nil), profCoreFields...),
	dcgm.DCGM_FI_PROF_GR_ENGINE_UTIL_RATIO,
	dcgm.DCGM_FI_PROF_HMMA_UTIL_RATIO,
	dcgm.DCGM_FI_PROF_FP64_UTIL_RATIO,
	dcgm.DCGM_FI_PROF_FP32_UTIL_RATIO,
	dcgm.DCGM_FI_PROF_FP16_UTIL_RATIO,
	dcgm.DCGM_FI_PROF_PCIE_TX_BYTES,
	dcgm.DCGM_FI_PROF_PCIE_RX_BYTES,
	dcgm.DCGM_FI_PROF_NVLINK_TX_BYTES,
	dcgm.DCGM_FI_PROF_NVLINK_RX_BYTES,
)

// profLinkIDs returns the per-link profiling fields of link l (< 18); DCGM
// numbers them L0 TX, L0 RX, L1 TX, ...
func profLinkIDs(l int) (tx, rx dcgm.Short) {
	tx = dcgm.DCGM_FI_PROF_NVLINK_L0_TX_BYTES + dcgm.Short(2*l)
	return tx, tx + 1
}

func profLinkFields(n int) []dcgm.Short {
	out := make([]dcgm.Short, 0, 2*n)
	for l := range n {
		tx, rx := profLinkIDs(l)
		out = append(out, tx, rx)
	}
	return out
}

// busID formats DCGM's PCI bus ID ("00000000:3B:00.0") as the kernel does
// ("0000:3b:00.0"), the form nvmlgpu and /sys/bus/pci/devices use, so host
// collectors can join on it. Unparseable IDs are returned lower-cased.
func busID(s string) string {
	var domain, bus, dev, fn uint64
	if _, err := fmt.Sscanf(s, "%x:%x:%x.%x", &domain, &bus, &dev, &fn); err != nil {
		return strings.ToLower(s)
	}
	return fmt.Sprintf("%04x:%02x:%02x.%x", domain, bus, dev, fn)
}

var statusNames = map[int]string{
	dcgm.DCGM_ST_NOT_SUPPORTED:               "not supported",
	dcgm.DCGM_ST_NVML_ERROR:                  "NVML error",
	dcgm.DCGM_ST_UNINITIALIZED:               "DCGM not initialized",
	dcgm.DCGM_ST_TIMEOUT:                     "timeout",
	dcgm.DCGM_ST_UNKNOWN_FIELD:               "unknown field",
	dcgm.DCGM_ST_NO_DATA:                     "no data",
	dcgm.DCGM_ST_STALE_DATA:                  "stale data",
	dcgm.DCGM_ST_NOT_WATCHED:                 "field not watched",
	dcgm.DCGM_ST_NO_PERMISSION:               "no permission",
	dcgm.DCGM_ST_GPU_IS_LOST:                 "GPU is lost",
	dcgm.DCGM_ST_RESET_REQUIRED:              "GPU reset required",
	dcgm.DCGM_ST_CONNECTION_NOT_VALID:        "hostengine connection lost",
	dcgm.DCGM_ST_GPU_NOT_SUPPORTED:           "GPU not supported by DCGM",
	dcgm.DCGM_ST_REQUIRES_ROOT:               "requires root",
	dcgm.DCGM_ST_MODULE_NOT_LOADED:           "module not loaded",
	dcgm.DCGM_ST_PROFILING_NOT_SUPPORTED:     "profiling not supported",
	dcgm.DCGM_ST_INSUFFICIENT_DRIVER_VERSION: "driver too old",
	dcgm.DCGM_ST_NVML_DRIVER_TIMEOUT:         "NVML driver timeout",
}

func statusString(st int) string {
	if s, ok := statusNames[st]; ok {
		return s
	}
	return fmt.Sprintf("DCGM error %d", st)
}
