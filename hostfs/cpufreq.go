package hostfs

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"strings"
)

// ScalingGovernors counts the CPUs running each cpufreq scaling governor;
// nil when no CPU has cpufreq (a VM, a kernel without it). It reads the
// governor through each CPU's cpufreq link rather than procfs's
// SystemCpufreq, which reads a dozen files per CPU (current frequency
// included, which the kernel may make wait) to give this one.
func (f FS) ScalingGovernors() (map[string]int, error) {
	paths, err := filepath.Glob(f.SysPath("devices/system/cpu/cpu[0-9]*/cpufreq/scaling_governor"))
	if err != nil {
		return nil, err
	}
	var governors map[string]int
	for _, p := range paths {
		b, err := ReadAttr(p)
		if errors.Is(err, fs.ErrNotExist) {
			continue // CPU went offline since the glob
		}
		if err != nil {
			return nil, err
		}
		g := strings.TrimSpace(string(b))
		if g == "" {
			return nil, fmt.Errorf("%s is empty", p)
		}
		if governors == nil {
			governors = map[string]int{}
		}
		governors[g]++
	}
	return governors, nil
}
