package hostfs

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// CPUFreq is what cpufreq says of the CPUs: how many run each scaling
// governor, which CPUs those are (in numeric order), and the scaling
// driver (read from the first CPU: one driver serves them all), which
// says what a governor's name means (intel_pstate's and amd-pstate's
// "powersave" is a dynamic policy, acpi-cpufreq's the lowest clock).
type CPUFreq struct {
	Governors    map[string]int
	GovernorCPUs map[string][]int
	Driver       string
}

// ScalingGovernors reads each CPU's cpufreq governor; Governors is nil when
// no CPU has cpufreq (a VM, a kernel without it). It reads the governor
// through each CPU's cpufreq link rather than procfs's SystemCpufreq,
// which reads a dozen files per CPU (current frequency included, which the
// kernel may make wait) to give this one.
func (f FS) ScalingGovernors() (CPUFreq, error) {
	var out CPUFreq
	paths, err := filepath.Glob(f.SysPath("devices/system/cpu/cpu[0-9]*/cpufreq/scaling_governor"))
	if err != nil {
		return out, err
	}
	for _, p := range paths {
		b, err := ReadAttr(p)
		if errors.Is(err, fs.ErrNotExist) {
			continue // CPU went offline since the glob
		}
		if err != nil {
			return CPUFreq{}, err
		}
		g := strings.TrimSpace(string(b))
		if g == "" {
			return CPUFreq{}, fmt.Errorf("%s is empty", p)
		}
		if out.Governors == nil {
			out.Governors, out.GovernorCPUs = map[string]int{}, map[string][]int{}
			if d, err := ReadAttr(filepath.Join(filepath.Dir(p), "scaling_driver")); err == nil {
				out.Driver = strings.TrimSpace(string(d))
			}
		}
		out.Governors[g]++
		// The path is .../cpu<N>/cpufreq/scaling_governor.
		if n, err := strconv.Atoi(strings.TrimPrefix(filepath.Base(filepath.Dir(filepath.Dir(p))), "cpu")); err == nil {
			out.GovernorCPUs[g] = append(out.GovernorCPUs[g], n)
		}
	}
	for _, cpus := range out.GovernorCPUs {
		slices.Sort(cpus) // the glob puts cpu10 before cpu2
	}
	return out, nil
}
