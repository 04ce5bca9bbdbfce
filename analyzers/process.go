package analyzers

import (
	"fmt"
	"slices"
	"time"

	"github.com/gpudiag/gpudiag/engine"
	"github.com/gpudiag/gpudiag/sample"
)

// Evidence from the GPU processes (gpuprocess collector): CPU cores used by
// each GPU's processes and their DataLoader workers, their threads waiting on
// I/O, what they read from storage, and where their memory and CPUs sit.
func init() {
	hostEvidence = append(hostEvidence, processEvidence)
}

// processEvidence averages each GPU's per-interval readings over the span,
// each weighted by the part of its interval inside the span (spanWeight: a
// reading every 5 s covers up to 5 s before a span's start).
//
// A GPU's CPU and storage rates are left out of a reading in which they
// miss a process's interval (measuredWhole): the collector counts nothing
// for a process it meets whose parent it did not follow (its past belongs
// to before the daemon looked), and starts a GPU's account afresh when the
// GPU reappears. So the reading where a job's processes first show reads
// zero for them, a baseline and not a measurement: every GPU's second
// reading after the daemon starts, the one a short diagnose run leans on
// most, and the reading after a job starts. The share of threads in I/O
// wait is a count at the reading, valid in every one.
func processEvidence(w *engine.Window, since time.Time, in *Input) {
	entries := w.Range("gpuprocess", since)
	if len(entries) == 0 {
		return
	}
	type acc struct{ cores, iowait, read, weight, iowaitWeight float64 }
	accs := map[int]*acc{}
	// prev is the previous reading; nil when the window no longer holds
	// it, and the span's first reading is then taken as it is.
	var prev *sample.GPUProcesses
	if e, ok := w.Before("gpuprocess", since); ok {
		prev, _ = e.Sample.(*sample.GPUProcesses)
	}
	var last *sample.GPUProcesses
	for _, e := range entries {
		s, ok := e.Sample.(*sample.GPUProcesses)
		if !ok {
			continue
		}
		last = s
		weight := spanWeight(e.Time, since, s.IntervalSeconds)
		for _, g := range s.GPUs {
			if weight <= 0 {
				break // the first reading has no rates yet
			}
			a := accs[g.GPU]
			if a == nil {
				a = &acc{}
				accs[g.GPU] = a
			}
			if prev == nil || measuredWhole(prev, g) {
				a.cores += g.CPUCoresUsed * weight
				a.read += g.StorageReadBytesPerSecond * weight
				a.weight += weight
			}
			if g.IOWaitThreadsRatio != nil {
				a.iowait += *g.IOWaitThreadsRatio * weight
				a.iowaitWeight += weight
			}
		}
		prev = s
	}
	for i := range in.GPUs {
		w := &in.GPUs[i]
		if a := accs[w.Index]; a != nil && (a.weight > 0 || a.iowaitWeight > 0) {
			if a.weight > 0 {
				w.ProcessCPUCores = a.cores / a.weight
				w.ProcessReadBytes = a.read / a.weight
			}
			if a.iowaitWeight > 0 {
				w.ProcessIOWait = a.iowait / a.iowaitWeight
			}
			w.HostEvidenceSource = "gpuprocess"
		}
		if last == nil {
			continue
		}
		for _, g := range last.GPUs {
			if g.GPU != w.Index {
				continue
			}
			if g.RemoteMemoryRatio != nil {
				w.RemoteMemoryRatio = *g.RemoteMemoryRatio
			}
			if g.CPUsOffNodeRatio != nil {
				w.CPUsOffNodeRatio = *g.CPUsOffNodeRatio
			}
		}
	}
	in.Audit.Processes = last
}

// measuredWhole reports whether a GPU's rates in a reading count every one
// of its processes over the interval since prev, the reading before: the
// GPU was in prev (else its account starts here), and each process is
// either seen before (it has a rate of its own) or the child of a process
// of the GPU in prev (born since, the collector counts it whole). A
// process first seen whose parent was not followed counts nothing yet.
func measuredWhole(prev *sample.GPUProcesses, g sample.GPUProcessGroup) bool {
	i := slices.IndexFunc(prev.GPUs, func(p sample.GPUProcessGroup) bool { return p.GPU == g.GPU })
	if i < 0 {
		return false
	}
	followed := make(map[int]bool, len(prev.GPUs[i].Processes))
	for _, p := range prev.GPUs[i].Processes {
		followed[p.PID] = true
	}
	for _, p := range g.Processes {
		if p.CPUCoresUsed == nil && !followed[p.PPID] {
			return false
		}
	}
	return true
}

// RemoteMemoryWarn is the share of a GPU process's resident memory on another
// NUMA node above which placement is flagged (seeds-000-003 row 8 proposes
// 25%; the example it quotes had 75% remote).
const RemoteMemoryWarn = 0.25

func auditProcesses(p *sample.GPUProcesses) []Finding {
	var out []Finding
	for _, g := range p.GPUs {
		if len(g.Processes) == 0 || g.NUMANode < 0 {
			continue
		}
		idx := g.GPU
		if g.RemoteMemoryRatio != nil && *g.RemoteMemoryRatio > RemoteMemoryWarn {
			out = append(out, Finding{Check: "gpu_process_remote_memory", Severity: SeverityWarning, GPU: &idx,
				Summary: fmt.Sprintf("%.0f%% of a GPU process's resident memory is on a NUMA node other than its GPU's (node %d): host↔GPU copies cross the socket link",
					*g.RemoteMemoryRatio*100, g.NUMANode),
				Evidence: []Evidence{{Signal: "remote_memory_ratio", Value: round(*g.RemoteMemoryRatio), Unit: "ratio", Op: ">", Threshold: RemoteMemoryWarn}},
				Fix:      fmt.Sprintf("bind the job's memory to node %d as well as its CPUs (numactl --membind=%d, docker --cpuset-mems=%d, Kubernetes Topology Manager single-numa-node)", g.NUMANode, g.NUMANode, g.NUMANode)})
		}
		switch {
		case g.CPUsFullyRemote:
			out = append(out, Finding{Check: "gpu_process_remote_cpus", Severity: SeverityWarning, GPU: &idx,
				Summary: fmt.Sprintf("a GPU process may only run on CPUs of another NUMA node than its GPU's (node %d)", g.NUMANode),
				Fix:     fmt.Sprintf("pin it to the GPU's local CPUs (%s): numactl --cpunodebind=%d, taskset, or the container's cpuset", g.LocalCPUList, g.NUMANode)})
		case g.CPUsOffNodeRatio != nil && *g.CPUsOffNodeRatio > 0:
			out = append(out, Finding{Check: "gpu_process_not_pinned", Severity: SeverityInfo, GPU: &idx,
				Summary:  fmt.Sprintf("%.0f%% of the CPUs a GPU process may use are off its GPU's NUMA node: the scheduler may move it away from the GPU", *g.CPUsOffNodeRatio*100),
				Evidence: []Evidence{{Signal: "cpus_off_node_ratio", Value: round(*g.CPUsOffNodeRatio), Unit: "ratio", Op: ">", Threshold: 0}},
				Fix:      fmt.Sprintf("pin the job to node %d's CPUs (%s)", g.NUMANode, g.LocalCPUList)})
		}
	}
	return out
}
