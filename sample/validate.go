package sample

import (
	"fmt"
	"math"
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
	case f <= MemoryUtilization:
		return ratio(x)
	case f == TemperatureCelsius:
		return within(x, minCelsius, maxCelsius, "°C")
	}
	return nonNegative(x)
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
