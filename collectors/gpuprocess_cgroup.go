package collectors

// The cgroups processes run in: their CPU quota and throttling, read once per
// sample per cgroup, and the daemon's own cgroup namespace root.

import (
	"errors"
	"io/fs"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/procfs"
	"go.uber.org/zap"

	"github.com/gpudiag/gpudiag/sample"
)

// cgroupNSRetry is how long a failed lookup of the daemon's cgroup
// namespace root stands before it is tried again (it walks the host's
// cgroups down to the root's depth).
const cgroupNSRetry = time.Minute

type cgroupRead struct {
	limit *sample.CPULimit // nil when not readable
	err   string
	gone  bool // the cgroup's files do not exist
}

// cgroupsOf reads the process's cgroup memberships.
func (c *gpuProcessCollector) cgroupsOf(pid int) ([]procfs.Cgroup, error) {
	p, err := c.proc.Proc(pid)
	if err != nil {
		return nil, err
	}
	return p.Cgroups()
}

// cgroupLimit reads the binding CPU quota of a process's cgroups once per
// sample. Cgroups not mounted where expected, or a process outside any
// cpu hierarchy, are not measured: no error.
func (cy *procCycle) cgroupLimit(cgs []procfs.Cgroup) cgroupRead {
	// The cgroup file's lines again, as the key: fmt.Sprint of the
	// parsed lines was a third of this collector's allocations.
	var kb strings.Builder
	for _, cg := range cgs {
		kb.WriteString(strconv.Itoa(cg.HierarchyID))
		kb.WriteByte(':')
		for i, ctl := range cg.Controllers {
			if i > 0 {
				kb.WriteByte(',')
			}
			kb.WriteString(ctl)
		}
		kb.WriteByte(':')
		kb.WriteString(strconv.Itoa(len(cg.Path))) // a path may hold any byte
		kb.WriteByte(':')
		kb.WriteString(cg.Path)
	}
	key := kb.String()
	if cr, ok := cy.cgroups[key]; ok {
		return cr
	}
	var cr cgroupRead
	l, err := cy.c.host.CgroupCPU(cgs, cy.c.cgroupNamespace(cy.now))
	switch {
	case err == nil:
		cr.limit = &sample.CPULimit{Cgroup: l.Path, QuotaCores: l.QuotaCores(), Periods: l.Periods,
			ThrottledPeriods: l.ThrottledPeriods, ThrottledSeconds: float64(l.ThrottledMicros) / 1e6}
	case errors.Is(err, fs.ErrNotExist) || errors.Is(err, fs.ErrPermission):
		cr.gone = errors.Is(err, fs.ErrNotExist)
		cy.c.log.Debug("cgroup CPU limit unreadable", zap.Error(err))
	default:
		cr.err = err.Error()
	}
	cy.cgroups[key] = cr
	return cr
}

// cgroupNamespace returns the host path of the daemon's cgroup namespace
// root: "" where init's cgroup shows the daemon the host's hierarchy (or
// cannot be read), else the cgroup found at init's depth that lists the
// daemon. A failed lookup stands for cgroupNSRetry, and paths above the
// namespace are then not read.
func (c *gpuProcessCollector) cgroupNamespace(now time.Time) string {
	if !c.cgroupNSAt.IsZero() && (c.cgroupNSErr == nil || now.Sub(c.cgroupNSAt) < cgroupNSRetry) {
		return c.cgroupNS
	}
	c.cgroupNSAt, c.cgroupNS, c.cgroupNSErr = now, "", nil
	p, err := c.proc.Proc(1)
	if err != nil {
		return ""
	}
	cgs, err := p.Cgroups()
	if err != nil {
		return ""
	}
	for _, cg := range cgs {
		if cg.HierarchyID == 0 && len(cg.Controllers) == 0 {
			c.cgroupNS, c.cgroupNSErr = c.host.CgroupNamespaceRoot(cg.Path, c.self)
			if c.cgroupNSErr != nil {
				c.log.Info("cgroup namespace root not found: CPU quotas of processes outside it are not read", zap.Error(c.cgroupNSErr))
			}
		}
	}
	return c.cgroupNS
}

// throttling sums the GPU's distinct cgroups' quotas, adds their throttling
// since the last sample to the GPU's totals and, over the cgroups with a
// quota read in both samples, derives the interval's throttled share of
// periods and throttled seconds per second. A cgroup met for the first
// time is a baseline: its past belongs to before the daemon looked.
func (c *gpuProcessCollector) throttling(grp *sample.GPUProcessGroup, acc *gpuAccount, limits map[string]sample.CPULimit, interval float64) {
	grp.CPUCgroups = len(limits)
	var quota, periods, throttled, throttledSec float64
	limited, measured := false, false
	for path, l := range limits {
		if l.QuotaCores > 0 {
			quota += l.QuotaCores
			limited = true
		}
		prev, ok := c.cgroupsSeen[path]
		if !ok {
			continue
		}
		dp := sample.CounterDelta(float64(prev.Periods), float64(l.Periods))
		dt := sample.CounterDelta(float64(prev.ThrottledPeriods), float64(l.ThrottledPeriods))
		ds := sample.CounterDelta(prev.ThrottledSeconds, l.ThrottledSeconds)
		acc.cpuPeriods += dp
		acc.cpuThrottled += dt
		acc.cpuThrottledSec += ds
		if l.QuotaCores > 0 {
			periods += dp
			throttled += dt
			throttledSec += ds
			measured = true
		}
	}
	if limited {
		grp.CPUQuotaCores = &quota
	}
	grp.CPUPeriodsTotal, grp.CPUThrottledPeriodsTotal, grp.CPUThrottledSecondsTotal = acc.cpuPeriods, acc.cpuThrottled, acc.cpuThrottledSec
	if measured && interval > 0 {
		ratio := 0.0
		if periods > 0 {
			ratio = throttled / periods
		}
		perSecond := throttledSec / interval
		grp.CPUThrottledPeriodsRatio, grp.CPUThrottledSecondsPerSecond = &ratio, &perSecond
	}
}
