package collectors

import (
	"time"

	"github.com/gpudiag/gpudiag/hostfs"
)

// ProcessTrees is what the gpuprocess collector found under each GPU
// process at its last sample: the collectors that read files of a GPU
// process's descendants (dataset) take the tree from here instead of
// walking /proc again for it. A collector that finds no tree here, or one
// too old, walks on its own.
type ProcessTrees struct {
	// At is when the sample was taken; Interval is the collector's, so
	// that a reader can tell a tree it will refresh from one it stopped
	// refreshing (disabled, failing).
	At       time.Time
	Interval time.Duration
	// Under maps a GPU process's PID to the processes of its tree, itself
	// first and then its descendants breadth-first. A tree the sample did
	// not read whole (its cap or deadline left processes unread) is not
	// listed.
	Under map[int][]int
}

// Tree returns root's tree when it was read whole by a sample no older
// than two of the collector's intervals at now.
func (t *ProcessTrees) Tree(root int, now time.Time) ([]int, bool) {
	if t == nil || now.Sub(t.At) > 2*t.Interval {
		return nil, false
	}
	procs, ok := t.Under[root]
	return procs, ok
}

// SetProcessTrees publishes the trees of the gpuprocess collector's sample.
func (s *Shared) SetProcessTrees(t *ProcessTrees) { s.processTrees.Store(t) }

// ProcessTrees returns the latest trees published, nil before the first.
func (s *Shared) ProcessTrees() *ProcessTrees { return s.processTrees.Load() }

// ProcessScan is every process's stat as the ncclproc collector's last
// complete scan of /proc read it. The collectors that keep every process's
// parent (hostfs.ParentIndex: gpuprocess, dataset) take their due refresh
// from it instead of reading every process again themselves; without one
// (ncclproc off, failing) they read on their own.
// The tuning collector takes the programs running from it too.
type ProcessScan struct {
	At    time.Time
	Stats map[int]hostfs.TaskStat // by PID; never changed once published
	// Comms holds every command name running (comm: a program's name cut
	// by the kernel to 15 bytes).
	Comms map[string]bool
}

// SetProcessScan publishes a complete scan of every process.
func (s *Shared) SetProcessScan(p *ProcessScan) { s.processScan.Store(p) }

// ProcessScan returns the latest scan published, nil before the first.
func (s *Shared) ProcessScan() *ProcessScan { return s.processScan.Load() }

// seedParents gives ix the latest published scan (ParentIndex.Seed decides
// whether it takes it).
func (s *Shared) seedParents(ix *hostfs.ParentIndex) {
	if p := s.ProcessScan(); p != nil {
		ix.Seed(p.At, p.Stats)
	}
}
