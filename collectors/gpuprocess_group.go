package collectors

// One GPU's processes summed into its group: placement against the GPU's NUMA
// node, threads, limits, and the accounted CPU time and reads.

import (
	"time"

	"github.com/gpudiag/gpudiag/sample"
)

// finishGroup derives the group's placement, thread and accounting values.
func (c *gpuProcessCollector) finishGroup(cy *procCycle, g *groupBuild, now time.Time, interval float64) {
	grp := &g.group
	nodeKnown := g.locKnown && g.loc.NUMANode >= 0
	local := map[int]bool{}
	for _, cpu := range g.loc.LocalCPUs {
		local[cpu] = true
	}
	residentByNode := map[int]uint64{}
	allowed := map[int]bool{}
	limits := map[string]sample.CPULimit{}
	memlockUnlimited := 0
	for i, r := range g.readings {
		onGPU := g.depths[i] == 0
		var nm numaMapsResult
		if onGPU {
			nm = cy.numaMaps(r) // before the copy below: it may mark numa_maps unreadable
		}
		p := r.detail
		p.Depth, p.OnGPU = g.depths[i], onGPU
		if nodeKnown && len(local) > 0 && len(r.allowedCPUs) > 0 {
			off := 0
			for _, cpu := range r.allowedCPUs {
				if !local[cpu] {
					off++
				}
			}
			ratio := float64(off) / float64(len(r.allowedCPUs))
			p.CPUsOffNodeRatio = &ratio
			if p.OnGPU {
				grp.CPUsOffNodeRatio = maxRatio(grp.CPUsOffNodeRatio, ratio)
				grp.CPUsFullyRemote = grp.CPUsFullyRemote || off == len(r.allowedCPUs)
			}
		}
		if onGPU {
			if !nm.at.IsZero() {
				p.ResidentBytesByNode = nm.bytes
				p.NUMAMapsAgeSeconds = now.Sub(nm.at).Seconds()
				var total, remote uint64
				for _, nb := range nm.bytes {
					residentByNode[nb.Node] += nb.Bytes
					total += nb.Bytes
					if nb.Node != g.loc.NUMANode {
						remote += nb.Bytes
					}
				}
				if nodeKnown && total > 0 {
					ratio := float64(remote) / float64(total)
					p.RemoteMemoryRatio = &ratio
					grp.RemoteMemoryRatio = maxRatio(grp.RemoteMemoryRatio, ratio)
				}
			} else if nm.err != "" {
				grp.Errors = append(grp.Errors, nm.err)
			}
		}
		if onGPU {
			grp.Errors = append(grp.Errors, cy.processLimits(r)...)
			p.MemlockBytes, p.MemlockUnlimited, p.IPCLock, p.DevShm = r.detail.MemlockBytes, r.detail.MemlockUnlimited, r.detail.IPCLock, r.detail.DevShm
			p.Unreadable = r.detail.Unreadable
			switch {
			case p.MemlockUnlimited || (p.IPCLock && p.MemlockBytes != nil):
				memlockUnlimited++
			case p.MemlockBytes != nil && (grp.MemlockBytes == nil || *p.MemlockBytes < *grp.MemlockBytes):
				grp.MemlockBytes = p.MemlockBytes
			}
			if p.DevShm != nil && (grp.DevShm == nil || p.DevShm.SizeBytes < grp.DevShm.SizeBytes) {
				grp.DevShm = p.DevShm
			}
		}
		if p.OMPNumThreads > 0 {
			grp.OMPThreads += p.OMPNumThreads
			grp.OMPProcesses++
		}
		for _, cpu := range r.allowedCPUs {
			allowed[cpu] = true
		}
		if p.CPULimit != nil {
			limits[p.CPULimit.Cgroup] = *p.CPULimit
		}
		counted := 0
		for state, n := range p.ThreadStates {
			counted += n
			if state == "D" {
				grp.IOWaitThreads += n
			}
		}
		if r.census.presumed {
			counted = max(counted, p.Threads) // the unread ones, not waiting
		}
		grp.Threads += counted
		grp.Processes = append(grp.Processes, p)
	}
	grp.ResidentBytesByNode = nodeBytes(residentByNode)
	grp.AllowedCPUs = len(allowed)
	grp.MemlockUnlimited = memlockUnlimited > 0 && grp.MemlockBytes == nil
	if grp.Threads > 0 {
		ratio := float64(grp.IOWaitThreads) / float64(grp.Threads)
		grp.IOWaitThreadsRatio = &ratio
	}

	acc, ok := c.accounts[g.key]
	if !ok {
		acc = &gpuAccount{procs: map[int]trackedProc{}}
		c.accounts[g.key] = acc
	}
	inc := acc.update(g.readings, g.unread)
	grp.UserSecondsTotal, grp.SystemSecondsTotal = acc.user, acc.system
	grp.StorageReadBytesTotal, grp.SyscallReadBytesTotal, grp.ReadSyscallsTotal = acc.storageRead, acc.syscallRead, acc.readSyscalls
	if interval > 0 {
		grp.CPUCoresUsed = (inc.user + inc.system) / interval
		grp.StorageReadBytesPerSecond = inc.storageRead / interval
	}
	c.throttling(grp, acc, limits, interval)
}

func maxRatio(cur *float64, v float64) *float64 {
	if cur == nil || v > *cur {
		return &v
	}
	return cur
}
