package hostfs

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// CPU idle states, per CPU under /sys/devices/system/cpu/cpu<N>/cpuidle/
// state<K>/: name (POLL, C1, C1E, C6…), latency (the exit latency in µs
// the driver declares) and disable (1 when an administrator turned the
// state off for that CPU).

// CPUIdleState is one idle state as the CPUs declare it.
type CPUIdleState struct {
	Name string
	// LatencyMicros is the exit latency, µs.
	LatencyMicros uint64
	// CPUs counts the CPUs that declare the state; Enabled those on which
	// it is not disabled.
	CPUs, Enabled int
}

var cpuIdleStatePattern = regexp.MustCompile(`/cpu([0-9]+)/cpuidle/state([0-9]+)$`)

// CPUIdleStates reads every CPU's idle states and merges them by state
// index (every CPU of a node has the same driver), shallowest first. A
// kernel without cpuidle (a VM, idle=poll) gives nil, nil.
func (f FS) CPUIdleStates() ([]CPUIdleState, error) {
	dirs, err := filepath.Glob(f.SysPath("devices/system/cpu/cpu[0-9]*/cpuidle/state[0-9]*"))
	if err != nil {
		return nil, err
	}
	byIndex := map[int]*CPUIdleState{}
	for _, d := range dirs {
		m := cpuIdleStatePattern.FindStringSubmatch(filepath.ToSlash(d))
		if m == nil {
			continue
		}
		k, _ := strconv.Atoi(m[2])
		name, err := ReadAttr(filepath.Join(d, "name"))
		if errors.Is(err, fs.ErrNotExist) {
			continue // the CPU went offline since the glob
		}
		if err != nil {
			return nil, err
		}
		lat, err := readUintAttr(filepath.Join(d, "latency"))
		if err != nil {
			return nil, err
		}
		disabled := false
		if b, err := ReadAttr(filepath.Join(d, "disable")); err == nil {
			v, err := ParseUintAttr(filepath.Join(d, "disable"), b)
			if err != nil {
				return nil, err
			}
			disabled = v != 0
		} else if !errors.Is(err, fs.ErrNotExist) {
			return nil, err
		}
		s := byIndex[k]
		if s == nil {
			s = &CPUIdleState{Name: strings.TrimSpace(string(name)), LatencyMicros: lat}
			if s.Name == "" {
				return nil, fmt.Errorf("%s is empty", filepath.Join(d, "name"))
			}
			byIndex[k] = s
		}
		s.LatencyMicros = max(s.LatencyMicros, lat)
		s.CPUs++
		if !disabled {
			s.Enabled++
		}
	}
	if len(byIndex) == 0 {
		return nil, nil
	}
	idx := make([]int, 0, len(byIndex))
	for k := range byIndex {
		idx = append(idx, k)
	}
	sort.Ints(idx)
	out := make([]CPUIdleState, 0, len(idx))
	for _, k := range idx {
		out = append(out, *byIndex[k])
	}
	return out, nil
}

func readUintAttr(path string) (uint64, error) {
	b, err := ReadAttr(path)
	if err != nil {
		return 0, err
	}
	return ParseUintAttr(path, b)
}
