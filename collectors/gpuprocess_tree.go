package collectors

// The walk from each GPU's own processes down to their descendants
// (DataLoader workers): breadth-first, one GPU in turn, within the sample's
// process cap and deadline.

import (
	"go.uber.org/zap"

	"github.com/gpudiag/gpudiag/hostfs"
	"github.com/gpudiag/gpudiag/sample"
)

// groupBuild collects one GPU's processes during a sample.
type groupBuild struct {
	ref      GPURef
	key      string
	loc      hostfs.PCILocality
	locKnown bool
	seen     map[int]bool
	unread   map[int]bool // left unread by the cap or the deadline
	queue    []queuedProc
	readings []*procReading
	depths   []int
	group    sample.GPUProcessGroup
	// under lists the processes read under each of the GPU's processes
	// (ProcessTrees.Under); partial marks those whose tree has processes
	// left unread.
	under   map[int][]int
	partial map[int]bool
}

type queuedProc struct {
	pid, depth int
	parent     int // the process whose child it was found as
	root       int // the GPU process whose tree it was found in
}

// visit reads one process into the group (once per GPU) and queues its
// children. A process beyond the cap, or left when the sample ran out of
// time, is counted as unread.
func (g *groupBuild) visit(cy *procCycle, q queuedProc) {
	pid, depth := q.pid, q.depth
	if g.seen[pid] {
		return
	}
	g.seen[pid] = true
	r, ok := cy.read(pid)
	if !ok {
		g.unread[pid] = true
		g.group.Unread++
		g.partial[q.root] = true
		return
	}
	if r == nil {
		return // vanished or unreadable
	}
	g.group.Errors = append(g.group.Errors, r.errs...)
	if r.broken {
		return
	}
	if depth > 0 && r.detail.PPID != q.parent {
		// Not its child now: reparented since the tree was read, or a
		// PID reused since a parent scan's index last read it.
		return
	}
	g.readings = append(g.readings, r)
	g.depths = append(g.depths, depth)
	g.under[q.root] = append(g.under[q.root], pid)
	for _, child := range cy.children(r) {
		if !g.seen[child] {
			g.queue = append(g.queue, queuedProc{pid: child, depth: depth + 1, parent: pid, root: q.root})
		}
	}
}

func (cy *procCycle) children(r *procReading) []int { return r.childPIDs }

// childrenOf finds the process's children from the tree, without a census.
func (c *gpuProcessCollector) childrenOf(cy *procCycle, r *procReading) {
	kids, errs := cy.tree.ChildrenOf(r.detail.PID)
	c.noteChildErrors(r.detail.PID, errs)
	r.childPIDs = kids
}

func (c *gpuProcessCollector) noteChildErrors(pid int, errs []error) {
	for _, err := range errs {
		c.log.Debug("children unreadable", zap.Int("pid", pid), zap.Error(err))
	}
}
