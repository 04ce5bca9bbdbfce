package sample

import (
	"fmt"
	"math"
	"slices"
)

// The Validate methods say whether a sample holds a value no reading can
// have: a ratio outside 0–1, a temperature below absolute zero or past any
// a chip reads and survives, a negative amount, a reference to an entry the
// sample does not hold. A live collector never makes one (its readings are
// clamped or are ratios by construction); a recorded trace can hold anything,
// so the replay refuses such a frame with the error, which names the field
// (record/replay). NaN is not measured, never an error (Measured).

// Temperature bounds of a reading: absolute zero, and a heat at which no
// electronic part still answers (solder melts near 220 °C, silicon at 1414).
const (
	minCelsius = -273.15
	maxCelsius = 1000
)

// Validate reports the first value of the reading no GPU can have.
func (s *GPUs) Validate() error {
	for i := range s.Devices {
		d := &s.Devices[i]
		for f, x := range d.Values {
			if err := checkGPUField(Field(f), x); err != nil {
				return fmt.Errorf("devices[%d].values.%s: %w", i, Field(f), err)
			}
		}
		if err := nonNegative(d.IntervalSeconds); err != nil {
			return fmt.Errorf("devices[%d].interval_seconds: %w", i, err)
		}
		for j, l := range d.Links {
			for _, v := range []struct {
				name string
				x    float64
			}{{"tx_bps", l.TxBytesPerSecond}, {"rx_bps", l.RxBytesPerSecond}, {"tx_total", l.TxBytesTotal}, {"rx_total", l.RxBytesTotal}} {
				if err := nonNegative(v.x); err != nil {
					return fmt.Errorf("devices[%d].links[%d].%s: %w", i, j, v.name, err)
				}
			}
			for k := range NumNVLinkErrorKinds {
				if x, ok := l.Errors.Get(k); ok {
					if err := nonNegative(x); err != nil {
						return fmt.Errorf("devices[%d].links[%d].errors.%s: %w", i, j, k, err)
					}
				}
			}
		}
		if err := validateECC(d.ECCErrors); err != nil {
			return fmt.Errorf("devices[%d].ecc_errors%w", i, err)
		}
		if err := validateMIGInstances(d.MIGInstances); err != nil {
			return fmt.Errorf("devices[%d].mig_instances%w", i, err)
		}
		for j, p := range d.Processes {
			if p.SMUtil != nil {
				if err := ratio(*p.SMUtil); err != nil {
					return fmt.Errorf("devices[%d].processes[%d].sm_util: %w", i, j, err)
				}
			}
		}
	}
	return nil
}

// checkGPUField holds a GPU field to its range: the activity ratios 0–1,
// the temperature between minCelsius and maxCelsius, everything else (rates,
// bytes, clocks, watts, joules, counts, NVML's enumerations) not negative.
func checkGPUField(f Field, x float64) error {
	switch {
	case f <= MemoryUtilization, f == EncoderUtilization, f == DecoderUtilization:
		return ratio(x)
	case f == TemperatureCelsius, f == MemoryTemperatureCelsius:
		return within(x, minCelsius, maxCelsius, "°C")
	}
	return nonNegative(x)
}

// maxECCCounts bounds a GPU's ECC counters: every location, counter and
// type NVML has once (8 × 2 × 2).
const maxECCCounts = 32

// validateECC holds each ECC counter to the names NVML has (they become
// label values: a trace's made-up names would be new series), to one entry
// each, and to a count that is not negative. The error starts with the
// entry's place ("[2].location: ...").
func validateECC(cs []ECCCount) error {
	if len(cs) > maxECCCounts {
		return fmt.Errorf(": %d counters, more than the %d NVML has", len(cs), maxECCCounts)
	}
	seen := make(map[ECCCount]bool, len(cs))
	for j, c := range cs {
		switch {
		case !slices.Contains(ECCLocations, c.Location):
			return fmt.Errorf("[%d].location: %q is no ECC location (%v)", j, c.Location, ECCLocations)
		case c.Counter != ECCVolatile && c.Counter != ECCAggregate:
			return fmt.Errorf("[%d].counter: %q is neither %s nor %s", j, c.Counter, ECCVolatile, ECCAggregate)
		case c.Type != ECCCorrected && c.Type != ECCUncorrected:
			return fmt.Errorf("[%d].type: %q is neither %s nor %s", j, c.Type, ECCCorrected, ECCUncorrected)
		}
		if err := nonNegative(c.Count); err != nil {
			return fmt.Errorf("[%d].count: %w", j, err)
		}
		key := ECCCount{Location: c.Location, Counter: c.Counter, Type: c.Type}
		if seen[key] {
			return fmt.Errorf("[%d]: %s %s %s counted twice", j, c.Location, c.Counter, c.Type)
		}
		seen[key] = true
	}
	return nil
}

// MaxMIGInstances is the most GPU instances a GPU is split into (7 on
// A100, H100, H200, B200); MaxGPUInstanceID bounds their IDs, which NVML
// numbers from 0 within a few dozen.
const (
	MaxMIGInstances  = 7
	MaxGPUInstanceID = 64
)

// validateMIGInstances holds a GPU's instances to what a MIG GPU has: at
// most MaxMIGInstances, IDs (label values) below MaxGPUInstanceID and
// distinct, activity ratios 0–1 and counters not negative.
func validateMIGInstances(ms []MIGInstance) error {
	if len(ms) > MaxMIGInstances {
		return fmt.Errorf(": %d GPU instances, more than a MIG GPU has (%d)", len(ms), MaxMIGInstances)
	}
	seen := map[int]bool{}
	for j, m := range ms {
		if m.GPUInstance < 0 || m.GPUInstance >= MaxGPUInstanceID || seen[m.GPUInstance] {
			return fmt.Errorf("[%d].gpu_instance: %d is not a distinct ID in [0, %d)", j, m.GPUInstance, MaxGPUInstanceID)
		}
		seen[m.GPUInstance] = true
		if len(m.Devices) > MaxMIGInstances {
			return fmt.Errorf("[%d].devices: %d MIG devices, more than a MIG GPU has (%d)", j, len(m.Devices), MaxMIGInstances)
		}
		for _, r := range []struct {
			name string
			x    float64
		}{{"sm_active", m.SMActive}, {"sm_occupancy", m.SMOccupancy}, {"tensor_active", m.TensorActive}, {"dram_active", m.DRAMActive}} {
			if err := ratio(r.x); err != nil {
				return fmt.Errorf("[%d].%s: %w", j, r.name, err)
			}
		}
		for _, a := range []struct {
			name string
			x    float64
		}{{"interval_seconds", m.IntervalSeconds}, {"sm_active_seconds_total", m.SMActiveSecondsTotal}} {
			if err := nonNegative(a.x); err != nil {
				return fmt.Errorf("[%d].%s: %w", j, a.name, err)
			}
		}
	}
	return nil
}

// Validate reports the first value of the reading no process group can have.
func (s *GPUProcesses) Validate() error {
	if err := nonNegative(s.IntervalSeconds); err != nil {
		return fmt.Errorf("interval_seconds: %w", err)
	}
	for i := range s.GPUs {
		g := &s.GPUs[i]
		for _, r := range []struct {
			name string
			x    *float64
		}{{"remote_memory_ratio", g.RemoteMemoryRatio}, {"cpus_off_node_ratio", g.CPUsOffNodeRatio},
			{"io_wait_threads_ratio", g.IOWaitThreadsRatio}, {"cpu_throttled_periods_ratio", g.CPUThrottledPeriodsRatio}} {
			if r.x != nil {
				if err := ratio(*r.x); err != nil {
					return fmt.Errorf("gpus[%d].%s: %w", i, r.name, err)
				}
			}
		}
		for _, a := range []struct {
			name string
			x    float64
		}{{"user_seconds_total", g.UserSecondsTotal}, {"system_seconds_total", g.SystemSecondsTotal},
			{"storage_read_bytes_total", g.StorageReadBytesTotal}, {"syscall_read_bytes_total", g.SyscallReadBytesTotal},
			{"read_syscalls_total", g.ReadSyscallsTotal}, {"cpu_cores_used", g.CPUCoresUsed},
			{"storage_read_bytes_per_second", g.StorageReadBytesPerSecond}, {"cpu_periods_total", g.CPUPeriodsTotal},
			{"cpu_throttled_periods_total", g.CPUThrottledPeriodsTotal}, {"cpu_throttled_seconds_total", g.CPUThrottledSecondsTotal}} {
			if err := nonNegative(a.x); err != nil {
				return fmt.Errorf("gpus[%d].%s: %w", i, a.name, err)
			}
		}
		for j := range g.Processes {
			if err := g.Processes[j].validate(); err != nil {
				return fmt.Errorf("gpus[%d].processes[%d].%w", i, j, err)
			}
		}
	}
	return nil
}

func (p *GPUProcess) validate() error {
	for _, r := range []struct {
		name string
		x    *float64
	}{{"cpus_off_node_ratio", p.CPUsOffNodeRatio}, {"remote_memory_ratio", p.RemoteMemoryRatio}} {
		if r.x != nil {
			if err := ratio(*r.x); err != nil {
				return fmt.Errorf("%s: %w", r.name, err)
			}
		}
	}
	for _, a := range []struct {
		name string
		x    float64
	}{{"user_seconds", p.UserSeconds}, {"system_seconds", p.SystemSeconds}, {"children_user_seconds", p.ChildrenUserSeconds},
		{"children_system_seconds", p.ChildrenSystemSeconds}, {"block_io_delay_seconds", p.BlockIODelaySeconds}} {
		if err := nonNegative(a.x); err != nil {
			return fmt.Errorf("%s: %w", a.name, err)
		}
	}
	if p.CPUCoresUsed != nil {
		if err := nonNegative(*p.CPUCoresUsed); err != nil {
			return fmt.Errorf("cpu_cores_used: %w", err)
		}
	}
	return nil
}

// Validate reports a GPU entry that names a process the sample does not
// hold: the metrics and the analyzers follow it (Process).
func (s *NCCL) Validate() error {
	for i, g := range s.GPUs {
		if g.File < 0 || g.File >= len(s.Files) {
			return fmt.Errorf("gpus[%d].file: %d names no file of the %d the sample holds", i, g.File, len(s.Files))
		}
		if n := len(s.Files[g.File].Processes); g.Process < 0 || g.Process >= n {
			return fmt.Errorf("gpus[%d].process: %d names no process of the %d file %d holds", i, g.Process, n, g.File)
		}
	}
	return nil
}

// Validate reports the first stall average outside 0–100 %: the kernel's
// avg10 is a percentage of wall time.
func (p *Pressure) Validate() error {
	for i, r := range p.Resources {
		for _, l := range []struct {
			name string
			line *PressureLine
		}{{"some", r.Some}, {"full", r.Full}} {
			if l.line == nil {
				continue
			}
			if err := within(l.line.Avg10, 0, 100, "%"); err != nil {
				return fmt.Errorf("resources[%d].%s.avg10: %w", i, l.name, err)
			}
		}
	}
	return nil
}

// Validate reports a busy ratio outside 0–1 (the busy share of the
// interval's CPU ticks).
func (c *CPU) Validate() error {
	if c.Interval != nil {
		if err := ratio(c.Interval.BusyRatio); err != nil {
			return fmt.Errorf("interval.busy_ratio: %w", err)
		}
	}
	return nil
}

// Validate reports a node's share of allocations made for another node
// outside 0–1.
func (n *NUMA) Validate() error {
	for i := range n.Nodes {
		if r := n.Nodes[i].OtherNodeRatio; r != nil {
			if err := ratio(*r); err != nil {
				return fmt.Errorf("nodes[%d].other_node_ratio: %w", i, err)
			}
		}
	}
	return nil
}

func ratio(x float64) error { return within(x, 0, 1, "") }

func nonNegative(x float64) error {
	if math.IsNaN(x) {
		return nil
	}
	if math.IsInf(x, 0) || x < 0 {
		return fmt.Errorf("%g is not a reading: never negative", x)
	}
	return nil
}

func within(x, lo, hi float64, unit string) error {
	if math.IsNaN(x) {
		return nil
	}
	if math.IsInf(x, 0) || x < lo || x > hi {
		return fmt.Errorf("%g%s is not a reading: outside %g–%g%s", x, unit, lo, hi, unit)
	}
	return nil
}
