package hostfs

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"strconv"
	"strings"

	"github.com/prometheus/procfs"
)

// A process's CPU bandwidth limit (CFS quota) and how often it bit, from
// the cgroup the process runs in and its ancestors: cgroup v2 cpu.max and
// cpu.stat under /sys/fs/cgroup/<path>, v1 cpu.cfs_quota_us,
// cpu.cfs_period_us and cpu.stat under /sys/fs/cgroup/<cpu controllers>/<path>.
// The path is the one /proc/<pid>/cgroup gives: the host's when the daemon
// runs in the host's cgroup namespace, else relative to its own namespace's
// root, which CgroupNamespaceRoot places in the host's hierarchy.

// CgroupRoot is where the cgroup hierarchies are mounted, under /sys.
const CgroupRoot = "fs/cgroup"

// cgroupMaxDepth bounds the walk up a cgroup's ancestors.
const cgroupMaxDepth = 32

// CgroupCPULimit is the binding CPU quota over a process's cgroup and its
// ancestors, and that cgroup's throttling counters.
type CgroupCPULimit struct {
	// Path is the cgroup whose quota binds (the smallest in cores), as a
	// directory relative to the hierarchy's root; Version is 1 or 2.
	Path    string
	Version int
	// QuotaMicros per PeriodMicros; Limited is false when no level sets a
	// quota ("max", -1), and then the counters are the process's own
	// cgroup's.
	Limited      bool
	QuotaMicros  uint64
	PeriodMicros uint64
	// Counters of cpu.stat, cumulative: enforcement periods that had
	// runnable tasks, of which throttled, and the time throttled.
	Periods, ThrottledPeriods uint64
	ThrottledMicros           uint64
}

// QuotaCores is the quota in CPUs (0.5 = half a core per period).
func (l CgroupCPULimit) QuotaCores() float64 {
	if !l.Limited || l.PeriodMicros == 0 {
		return 0
	}
	return float64(l.QuotaMicros) / float64(l.PeriodMicros)
}

// CgroupCPU reads the CPU limit of a process whose /proc/<pid>/cgroup
// procfs parsed as cgs. A v1 hierarchy with the cpu controller is used
// where there is one (a hybrid host keeps cpu on v1), else the unified
// (v2) one, its path taken from the daemon's cgroup namespace root nsRoot
// ("" when the daemon sees the host's hierarchy; CgroupNamespaceRoot). It
// fails with fs.ErrNotExist when neither is mounted where expected, or
// the path cannot be placed in the host's hierarchy.
func (f FS) CgroupCPU(cgs []procfs.Cgroup, nsRoot string) (CgroupCPULimit, error) {
	for _, cg := range cgs {
		for _, c := range cg.Controllers {
			if c == "cpu" {
				if strings.HasPrefix(cg.Path, "/..") {
					return CgroupCPULimit{}, fmt.Errorf("cgroup v1 path %s outside the daemon's cgroup namespace: %w", Quote(cg.Path), fs.ErrNotExist)
				}
				return f.cgroupCPUv1(strings.Join(cg.Controllers, ","), cg.Path)
			}
		}
	}
	for _, cg := range cgs {
		if cg.HierarchyID == 0 && len(cg.Controllers) == 0 {
			host, ok := HostCgroupPath(nsRoot, cg.Path)
			if !ok {
				return CgroupCPULimit{}, fmt.Errorf("cgroup path %s outside the daemon's cgroup namespace (root %s unknown): %w", Quote(cg.Path), Quote(nsRoot), fs.ErrNotExist)
			}
			return f.cgroupCPUv2(host)
		}
	}
	return CgroupCPULimit{}, fmt.Errorf("no cpu or unified cgroup hierarchy: %w", fs.ErrNotExist)
}

// ancestors lists p and its ancestors up to the root, deepest first.
func ancestors(p string) []string {
	p = path.Clean("/" + p)
	var out []string
	for range cgroupMaxDepth {
		out = append(out, p)
		if p == "/" {
			break
		}
		p = path.Dir(p)
	}
	return out
}

// tighter is whether quota q/per is fewer cores than the current best.
func tighter(best CgroupCPULimit, q, per uint64) bool {
	if !best.Limited {
		return true
	}
	// q/per < bq/bper, without division.
	return float64(q)*float64(best.PeriodMicros) < float64(best.QuotaMicros)*float64(per)
}

func (f FS) cgroupCPUv2(cgPath string) (CgroupCPULimit, error) {
	root := f.SysPath(CgroupRoot)
	best := CgroupCPULimit{Version: 2}
	for i, dir := range ancestors(cgPath) {
		full := path.Join(root, dir)
		b, err := ReadAttr(path.Join(full, "cpu.max"))
		switch {
		case errors.Is(err, fs.ErrNotExist) && i > 0:
			continue // the root cgroup has no cpu.max
		case errors.Is(err, fs.ErrNotExist) && i == 0:
			// A cgroup without the cpu controller enabled: no quota
			// applies at this level; its cpu.stat still counts usage.
		case err != nil:
			return CgroupCPULimit{}, WithPath(path.Join(full, "cpu.max"), err)
		default:
			q, per, limited, err := ParseCPUMax(path.Join(full, "cpu.max"), b)
			if err != nil {
				return CgroupCPULimit{}, err
			}
			if limited && tighter(best, q, per) {
				best.Limited, best.QuotaMicros, best.PeriodMicros, best.Path = true, q, per, dir
			}
		}
	}
	return withThrottling(root, cgPath, best)
}

func (f FS) cgroupCPUv1(controllers, cgPath string) (CgroupCPULimit, error) {
	root := f.SysPath(CgroupRoot, controllers)
	if _, err := ReadAttr(path.Join(root, "cpu.cfs_period_us")); errors.Is(err, fs.ErrNotExist) {
		// Mounted as cpu only, or the joined name is a symlink that is
		// missing: try the usual names.
		for _, alt := range []string{"cpu,cpuacct", "cpu"} {
			if _, err := ReadAttr(f.SysPath(CgroupRoot, alt, "cpu.cfs_period_us")); err == nil {
				root = f.SysPath(CgroupRoot, alt)
				break
			}
		}
	}
	best := CgroupCPULimit{Version: 1}
	for _, dir := range ancestors(cgPath) {
		full := path.Join(root, dir)
		qb, err := ReadAttr(path.Join(full, "cpu.cfs_quota_us"))
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return CgroupCPULimit{}, WithPath(path.Join(full, "cpu.cfs_quota_us"), err)
		}
		quota, err := strconv.ParseInt(strings.TrimSpace(string(qb)), 10, 64)
		if err != nil {
			return CgroupCPULimit{}, fmt.Errorf("%s: not an integer: %s", path.Join(full, "cpu.cfs_quota_us"), Quote(strings.TrimSpace(string(qb))))
		}
		if quota < 0 {
			continue // -1: no quota
		}
		pb, err := ReadAttr(path.Join(full, "cpu.cfs_period_us"))
		if err != nil {
			return CgroupCPULimit{}, WithPath(path.Join(full, "cpu.cfs_period_us"), err)
		}
		per, err := ParseUintAttr(path.Join(full, "cpu.cfs_period_us"), pb)
		if err != nil {
			return CgroupCPULimit{}, err
		}
		if per == 0 {
			return CgroupCPULimit{}, fmt.Errorf("%s: period 0", path.Join(full, "cpu.cfs_period_us"))
		}
		if tighter(best, uint64(quota), per) {
			best.Limited, best.QuotaMicros, best.PeriodMicros, best.Path = true, uint64(quota), per, dir
		}
	}
	return withThrottling(root, cgPath, best)
}

// withThrottling adds to best the cpu.stat counters of the cgroup whose
// quota binds, or of cgPath, the process's own, when no level sets one.
func withThrottling(root, cgPath string, best CgroupCPULimit) (CgroupCPULimit, error) {
	if best.Path == "" {
		best.Path = path.Clean("/" + cgPath)
	}
	statPath := path.Join(root, best.Path, "cpu.stat")
	b, err := ReadAttr(statPath)
	if err != nil {
		return CgroupCPULimit{}, WithPath(statPath, err)
	}
	st, err := ParseCgroupCPUStat(statPath, b)
	if err != nil {
		return CgroupCPULimit{}, err
	}
	best.Periods, best.ThrottledPeriods, best.ThrottledMicros = st.Periods, st.ThrottledPeriods, st.ThrottledMicros
	return best, nil
}

// ParseCPUMax parses cgroup v2 cpu.max: "$MAX $PERIOD", MAX being "max"
// for no limit (limited false).
func ParseCPUMax(p string, b []byte) (quota, period uint64, limited bool, err error) {
	fields := strings.Fields(string(b))
	if len(fields) != 2 {
		return 0, 0, false, fmt.Errorf("%s: want \"$MAX $PERIOD\": %s", p, Quote(strings.TrimSpace(string(b))))
	}
	period, err = strconv.ParseUint(fields[1], 10, 64)
	if err != nil || period == 0 {
		return 0, 0, false, fmt.Errorf("%s: period is not a positive integer: %s", p, Quote(fields[1]))
	}
	if fields[0] == "max" {
		return 0, period, false, nil
	}
	quota, err = strconv.ParseUint(fields[0], 10, 64)
	if err != nil {
		return 0, 0, false, fmt.Errorf("%s: quota is neither max nor an integer: %s", p, Quote(fields[0]))
	}
	return quota, period, true, nil
}

// CgroupCPUStat is the bandwidth part of a cgroup's cpu.stat.
type CgroupCPUStat struct {
	Periods, ThrottledPeriods, ThrottledMicros uint64
}

// ParseCgroupCPUStat parses cpu.stat, v2 (nr_periods, nr_throttled,
// throttled_usec) or v1 (nr_periods, nr_throttled, throttled_time in ns).
// A cgroup whose cpu controller is not enabled (v2) has only the usage
// lines: all three read 0, as for a cgroup never limited. A value that is
// not a number is an error.
func ParseCgroupCPUStat(p string, b []byte) (CgroupCPUStat, error) {
	var st CgroupCPUStat
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		key, val, ok := strings.Cut(sc.Text(), " ")
		if !ok {
			continue
		}
		var dst *uint64
		scale := uint64(1)
		switch key {
		case "nr_periods":
			dst = &st.Periods
		case "nr_throttled":
			dst = &st.ThrottledPeriods
		case "throttled_usec":
			dst = &st.ThrottledMicros
		case "throttled_time":
			dst, scale = &st.ThrottledMicros, 1000
		default:
			continue
		}
		v, err := strconv.ParseUint(strings.TrimSpace(val), 10, 64)
		if err != nil {
			return CgroupCPUStat{}, fmt.Errorf("%s: %s: not an unsigned integer: %s", p, key, Quote(strings.TrimSpace(val)))
		}
		*dst = v / scale
	}
	if err := sc.Err(); err != nil {
		return CgroupCPUStat{}, WithPath(p, err)
	}
	return st, nil
}
