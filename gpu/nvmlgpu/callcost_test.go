package nvmlgpu

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"runtime"
	"sort"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"golang.org/x/sys/unix"
)

// callCostSecondsEnv runs TestNVMLCallCost on a host with NVIDIA GPUs for
// that many seconds; callCostOutEnv names the JSON file it writes.
const (
	callCostSecondsEnv = "GPUDIAG_NVML_CALL_COST_SECONDS"
	callCostOutEnv     = "GPUDIAG_NVML_CALL_COST_OUT"
)

// TestNVMLCallCost samples the real GPUs through the backend once a second,
// as the daemon does, and times each NVML query of the per-second path by
// the CPU time of the calling thread (user and system, what the process is
// charged for the call) and by wall time. It also reports the process's
// whole CPU time over the run: what NVML spends on threads of its own, or
// between calls, is the difference. Without the variable it is skipped.
func TestNVMLCallCost(t *testing.T) {
	secs, _ := strconv.Atoi(os.Getenv(callCostSecondsEnv))
	if secs <= 0 {
		t.Skip("set " + callCostSecondsEnv + " on a host with NVIDIA GPUs")
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	costs := &callCosts{byName: map[string]*callCost{}}
	b, err := Open(&timedLib{Interface: nvml.New(), costs: costs}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	costs.reset() // Open's own queries are not the per-second path

	var ru0, ru1 unix.Rusage
	_ = unix.Getrusage(unix.RUSAGE_SELF, &ru0)
	start := time.Now()
	var sampleCPU, sampleWall time.Duration
	samples := 0
	for i := 0; i < secs; i++ {
		c0, w0 := threadCPU(), time.Now()
		if _, err := b.Sample(context.Background()); err != nil {
			t.Fatalf("sample %d: %v", i, err)
		}
		sampleCPU += threadCPU() - c0
		sampleWall += time.Since(w0)
		samples++
		time.Sleep(time.Until(start.Add(time.Duration(i+1) * time.Second)))
	}
	elapsed := time.Since(start)
	_ = unix.Getrusage(unix.RUSAGE_SELF, &ru1)
	processCPU := time.Duration(ru1.Utime.Nano()+ru1.Stime.Nano()-ru0.Utime.Nano()-ru0.Stime.Nano()) * time.Nanosecond

	pct := func(d time.Duration) float64 { return 100 * d.Seconds() / elapsed.Seconds() }
	type row struct {
		Name           string  `json:"name"`
		Calls          int     `json:"calls"`
		CPUMicrosPer   float64 `json:"cpu_us_per_call"`
		WallMicrosPer  float64 `json:"wall_us_per_call"`
		CPUPercentCore float64 `json:"cpu_percent_of_core"`
	}
	out := struct {
		Seconds           float64 `json:"seconds"`
		GPUs              int     `json:"gpus"`
		Samples           int     `json:"samples"`
		ProcessCPUPercent float64 `json:"process_cpu_percent_of_core"`
		SampleCPUPercent  float64 `json:"sample_cpu_percent_of_core"`
		SampleWallMs      float64 `json:"sample_wall_ms_per_call"`
		CallsCPUPercent   float64 `json:"timed_calls_cpu_percent_of_core"`
		Calls             []row   `json:"calls"`
	}{Seconds: elapsed.Seconds(), GPUs: len(b.devices), Samples: samples,
		ProcessCPUPercent: pct(processCPU), SampleCPUPercent: pct(sampleCPU),
		SampleWallMs: sampleWall.Seconds() * 1000 / float64(samples)}
	costs.mu.Lock()
	for name, c := range costs.byName {
		out.Calls = append(out.Calls, row{Name: name, Calls: c.calls,
			CPUMicrosPer:   float64(c.cpu.Microseconds()) / float64(c.calls),
			WallMicrosPer:  float64(c.wall.Microseconds()) / float64(c.calls),
			CPUPercentCore: pct(c.cpu)})
		out.CallsCPUPercent += pct(c.cpu)
	}
	costs.mu.Unlock()
	sort.Slice(out.Calls, func(i, j int) bool { return out.Calls[i].CPUPercentCore > out.Calls[j].CPUPercentCore })
	for _, r := range out.Calls {
		t.Logf("%-34s %5d calls  %8.1f us CPU  %8.1f us wall  %.4f%% of a core", r.Name, r.Calls, r.CPUMicrosPer, r.WallMicrosPer, r.CPUPercentCore)
	}
	t.Logf("%d GPUs, %d samples in %.0f s: process %.3f%% of a core, Sample() %.3f%% (%.2f ms each), timed calls %.3f%%",
		out.GPUs, samples, out.Seconds, out.ProcessCPUPercent, out.SampleCPUPercent, out.SampleWallMs, out.CallsCPUPercent)
	if path := os.Getenv(callCostOutEnv); path != "" {
		j, _ := json.MarshalIndent(out, "", " ")
		if err := os.WriteFile(path, j, 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

func threadCPU() time.Duration {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts); err != nil {
		return 0
	}
	return time.Duration(ts.Nano())
}

type callCost struct {
	calls     int
	cpu, wall time.Duration
}

type callCosts struct {
	mu     sync.Mutex
	byName map[string]*callCost
}

func (c *callCosts) reset() {
	c.mu.Lock()
	defer c.mu.Unlock()
	clear(c.byName)
}

// time runs fn on the calling thread (the test locks it) and charges it to
// name.
func (c *callCosts) time(name string, fn func()) {
	c0, w0 := threadCPU(), time.Now()
	fn()
	cpu, wall := threadCPU()-c0, time.Since(w0)
	c.mu.Lock()
	defer c.mu.Unlock()
	cc := c.byName[name]
	if cc == nil {
		cc = &callCost{}
		c.byName[name] = cc
	}
	cc.calls++
	cc.cpu += cpu
	cc.wall += wall
}

// timedLib and timedDevice time the queries of the per-second path; every
// other query passes through untimed.
type timedLib struct {
	nvml.Interface
	costs *callCosts
}

func (l *timedLib) DeviceGetHandleByIndex(i int) (nvml.Device, nvml.Return) {
	h, ret := l.Interface.DeviceGetHandleByIndex(i)
	if ret != nvml.SUCCESS {
		return h, ret
	}
	return &timedDevice{Device: h, costs: l.costs}, ret
}

func (l *timedLib) GpmMetricsGet(m *nvml.GpmMetricsGetType) (ret nvml.Return) {
	l.costs.time(fmt.Sprintf("GpmMetricsGet(%d metrics)", m.NumMetrics), func() { ret = l.Interface.GpmMetricsGet(m) })
	return ret
}

func (l *timedLib) EventSetCreate() (nvml.EventSet, nvml.Return) {
	s, ret := l.Interface.EventSetCreate()
	if ret != nvml.SUCCESS {
		return s, ret
	}
	return &timedEvents{EventSet: s, costs: l.costs}, ret
}

type timedEvents struct {
	nvml.EventSet
	costs *callCosts
}

func (e *timedEvents) Wait(ms uint32) (d nvml.EventData, ret nvml.Return) {
	e.costs.time("EventSetWait(0)", func() { d, ret = e.EventSet.Wait(ms) })
	return d, ret
}

type timedDevice struct {
	nvml.Device
	costs *callCosts
}

func (d *timedDevice) GetMemoryInfo() (m nvml.Memory, ret nvml.Return) {
	d.costs.time("GetMemoryInfo", func() { m, ret = d.Device.GetMemoryInfo() })
	return m, ret
}

func (d *timedDevice) GetUtilizationRates() (u nvml.Utilization, ret nvml.Return) {
	d.costs.time("GetUtilizationRates", func() { u, ret = d.Device.GetUtilizationRates() })
	return u, ret
}

func (d *timedDevice) GetClockInfo(c nvml.ClockType) (v uint32, ret nvml.Return) {
	d.costs.time("GetClockInfo("+strconv.Itoa(int(c))+")", func() { v, ret = d.Device.GetClockInfo(c) })
	return v, ret
}

func (d *timedDevice) GetCurrentClocksEventReasons() (v uint64, ret nvml.Return) {
	d.costs.time("GetCurrentClocksEventReasons", func() { v, ret = d.Device.GetCurrentClocksEventReasons() })
	return v, ret
}

func (d *timedDevice) GetPowerUsage() (v uint32, ret nvml.Return) {
	d.costs.time("GetPowerUsage", func() { v, ret = d.Device.GetPowerUsage() })
	return v, ret
}

func (d *timedDevice) GetTemperature(s nvml.TemperatureSensors) (v uint32, ret nvml.Return) {
	d.costs.time("GetTemperature", func() { v, ret = d.Device.GetTemperature(s) })
	return v, ret
}

func (d *timedDevice) GetCurrPcieLinkGeneration() (v int, ret nvml.Return) {
	d.costs.time("GetCurrPcieLinkGeneration", func() { v, ret = d.Device.GetCurrPcieLinkGeneration() })
	return v, ret
}

func (d *timedDevice) GetComputeRunningProcesses() (p []nvml.ProcessInfo, ret nvml.Return) {
	d.costs.time("GetComputeRunningProcesses", func() { p, ret = d.Device.GetComputeRunningProcesses() })
	return p, ret
}

func (d *timedDevice) GetMPSComputeRunningProcesses() (p []nvml.ProcessInfo, ret nvml.Return) {
	d.costs.time("GetMPSComputeRunningProcesses", func() { p, ret = d.Device.GetMPSComputeRunningProcesses() })
	return p, ret
}

func (d *timedDevice) GpmSampleGet(s nvml.GpmSample) (ret nvml.Return) {
	d.costs.time("GpmSampleGet", func() { ret = d.Device.GpmSampleGet(s) })
	return ret
}

func (d *timedDevice) GetPcieThroughput(c nvml.PcieUtilCounter) (v uint32, ret nvml.Return) {
	d.costs.time("GetPcieThroughput", func() { v, ret = d.Device.GetPcieThroughput(c) })
	return v, ret
}

func (d *timedDevice) GetFieldValues(v []nvml.FieldValue) (ret nvml.Return) {
	d.costs.time("GetFieldValues", func() { ret = d.Device.GetFieldValues(v) })
	return ret
}

// RegisterEvents hands the driver's own event set to the real device, which
// accepts no other.
func (d *timedDevice) RegisterEvents(types uint64, s nvml.EventSet) nvml.Return {
	if t, ok := s.(*timedEvents); ok {
		s = t.EventSet
	}
	return d.Device.RegisterEvents(types, s)
}

// The slow tier's queries.

func (d *timedDevice) GetEnforcedPowerLimit() (v uint32, ret nvml.Return) {
	d.costs.time("slow: GetEnforcedPowerLimit", func() { v, ret = d.Device.GetEnforcedPowerLimit() })
	return v, ret
}

func (d *timedDevice) GetCurrPcieLinkWidth() (v int, ret nvml.Return) {
	d.costs.time("slow: GetCurrPcieLinkWidth", func() { v, ret = d.Device.GetCurrPcieLinkWidth() })
	return v, ret
}

func (d *timedDevice) GetTotalEnergyConsumption() (v uint64, ret nvml.Return) {
	d.costs.time("slow: GetTotalEnergyConsumption", func() { v, ret = d.Device.GetTotalEnergyConsumption() })
	return v, ret
}

func (d *timedDevice) GetPcieReplayCounter() (v int, ret nvml.Return) {
	d.costs.time("slow: GetPcieReplayCounter", func() { v, ret = d.Device.GetPcieReplayCounter() })
	return v, ret
}

func (d *timedDevice) GetEccMode() (cur, pending nvml.EnableState, ret nvml.Return) {
	d.costs.time("slow: GetEccMode", func() { cur, pending, ret = d.Device.GetEccMode() })
	return cur, pending, ret
}

func (d *timedDevice) GetTotalEccErrors(t nvml.MemoryErrorType, c nvml.EccCounterType) (v uint64, ret nvml.Return) {
	d.costs.time("slow: GetTotalEccErrors", func() { v, ret = d.Device.GetTotalEccErrors(t, c) })
	return v, ret
}

func (d *timedDevice) GetRemappedRows() (corr, unc int, pending, failed bool, ret nvml.Return) {
	d.costs.time("slow: GetRemappedRows", func() { corr, unc, pending, failed, ret = d.Device.GetRemappedRows() })
	return corr, unc, pending, failed, ret
}

func (d *timedDevice) GetPersistenceMode() (v nvml.EnableState, ret nvml.Return) {
	d.costs.time("slow: GetPersistenceMode", func() { v, ret = d.Device.GetPersistenceMode() })
	return v, ret
}

func (d *timedDevice) GetMigMode() (cur, pending int, ret nvml.Return) {
	d.costs.time("slow: GetMigMode", func() { cur, pending, ret = d.Device.GetMigMode() })
	return cur, pending, ret
}

func (d *timedDevice) GetComputeMode() (v nvml.ComputeMode, ret nvml.Return) {
	d.costs.time("slow: GetComputeMode", func() { v, ret = d.Device.GetComputeMode() })
	return v, ret
}

func (d *timedDevice) GetGpuFabricInfo() (v nvml.GpuFabricInfo, ret nvml.Return) {
	d.costs.time("slow: GetGpuFabricInfo", func() { v, ret = d.Device.GetGpuFabricInfo() })
	return v, ret
}

func (d *timedDevice) GetNvLinkState(l int) (v nvml.EnableState, ret nvml.Return) {
	d.costs.time("slow: GetNvLinkState", func() { v, ret = d.Device.GetNvLinkState(l) })
	return v, ret
}

// The health counters of the slow tier (readHealth, readMemory,
// readCodecs) and GPM per GPU instance.

func (d *timedDevice) GetMemoryInfo_v2() (m nvml.Memory_v2, ret nvml.Return) {
	d.costs.time("slow: GetMemoryInfo_v2", func() { m, ret = d.Device.GetMemoryInfo_v2() })
	return m, ret
}

func (d *timedDevice) GetEncoderUtilization() (u, p uint32, ret nvml.Return) {
	d.costs.time("slow: GetEncoderUtilization", func() { u, p, ret = d.Device.GetEncoderUtilization() })
	return u, p, ret
}

func (d *timedDevice) GetDecoderUtilization() (u, p uint32, ret nvml.Return) {
	d.costs.time("slow: GetDecoderUtilization", func() { u, p, ret = d.Device.GetDecoderUtilization() })
	return u, p, ret
}

func (d *timedDevice) GetMemoryErrorCounter(t nvml.MemoryErrorType, c nvml.EccCounterType, l nvml.MemoryLocation) (v uint64, ret nvml.Return) {
	d.costs.time("slow: GetMemoryErrorCounter", func() { v, ret = d.Device.GetMemoryErrorCounter(t, c, l) })
	return v, ret
}

func (d *timedDevice) GetNvLinkErrorCounter(l int, c nvml.NvLinkErrorCounter) (v uint64, ret nvml.Return) {
	d.costs.time("slow: GetNvLinkErrorCounter", func() { v, ret = d.Device.GetNvLinkErrorCounter(l, c) })
	return v, ret
}

func (d *timedDevice) GpmMigSampleGet(gi int, s nvml.GpmSample) (ret nvml.Return) {
	d.costs.time("GpmMigSampleGet", func() { ret = d.Device.GpmMigSampleGet(gi, s) })
	return ret
}
