package collectors

// Where a GPU process's memory lives, by NUMA node (numa_maps), and when that
// read, which walks the process's page tables, falls due.

import (
	"errors"
	"io/fs"
	"sort"
	"time"

	"go.uber.org/zap"

	"github.com/gpudiag/gpudiag/hostfs"
	"github.com/gpudiag/gpudiag/sample"
)

type numaMapsRead struct {
	bytes    []sample.NodeBytes
	at       time.Time
	rssPages uint64 // the process's resident pages when read
}

// A GPU process's numa_maps falls due every numaMapsInterval, and a due
// read is made only when the process's resident memory moved by at least
// numaMapsRSSShare of what it was at the last read, or that read is
// numaMapsMaxIntervals intervals old. Reading numa_maps walks the process's
// page tables (a rank with tens of GB of pinned host memory pays it in
// milliseconds); pages placed or freed move the shares on each node by at
// most the resident memory they add or take, so under an eighth the
// placement the verdict judges (most memory remote from the GPU) stands.
// Pages moved between nodes at the same size (NUMA balancing, migratepages)
// or freed and placed again elsewhere wait for the maximum age.
const (
	numaMapsRSSShare     = 1.0 / 8
	numaMapsMaxIntervals = 10
)

// steady tells whether a due read may be skipped at now for a process with
// rss resident pages.
func (m numaMapsRead) steady(now time.Time, rss uint64, interval time.Duration) bool {
	if interval <= 0 || m.rssPages == 0 || now.Sub(m.at) >= numaMapsMaxIntervals*interval {
		return false
	}
	moved := max(rss, m.rssPages) - min(rss, m.rssPages)
	return float64(moved) < numaMapsRSSShare*float64(m.rssPages)
}

type numaMapsResult struct {
	numaMapsRead
	err string
}

// numaMaps returns the process's memory per node, re-reading numa_maps when
// the last reading is older than the numa-maps interval (and the sample still
// has time; otherwise the older reading stands).
func (cy *procCycle) numaMaps(r *procReading) numaMapsResult {
	if r.nm == nil {
		c, now := cy.c, cy.now
		id := hostfs.ProcID{PID: r.detail.PID, StartTicks: r.detail.StartTicks}
		res := &numaMapsResult{}
		prev, havePrev := c.numaMaps[id]
		if havePrev && (now.Sub(prev.at) < c.opts.numaMapsInterval || prev.steady(now, r.rssPages, c.opts.numaMapsInterval) || cy.ctx.Err() != nil) {
			res.numaMapsRead = prev
		} else if cy.ctx.Err() == nil {
			byNode, err := c.host.NUMAMaps(r.detail.PID)
			switch {
			case err == nil:
				res.numaMapsRead = numaMapsRead{bytes: nodeBytes(byNode), at: now, rssPages: r.rssPages}
				c.numaMaps[id] = res.numaMapsRead
			case hostfs.Vanished(err) || errors.Is(err, fs.ErrPermission):
				c.log.Debug("numa_maps unreadable", zap.Int("pid", r.detail.PID), zap.Error(err))
				r.detail.Unreadable = append(r.detail.Unreadable, "numa_maps")
			default:
				res.err = err.Error()
			}
		}
		r.nm = res
	}
	return *r.nm
}

func nodeBytes(m map[int]uint64) []sample.NodeBytes {
	if len(m) == 0 {
		return nil
	}
	out := make([]sample.NodeBytes, 0, len(m))
	for n, b := range m {
		out = append(out, sample.NodeBytes{Node: n, Bytes: b})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Node < out[j].Node })
	return out
}
