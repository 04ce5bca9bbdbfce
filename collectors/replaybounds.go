package collectors

import (
	"encoding/json"
	"fmt"
	"sort"

	"github.com/gpudiag/gpudiag/bpf"
	"github.com/gpudiag/gpudiag/hostfs"
	"github.com/gpudiag/gpudiag/nccl"
	"github.com/gpudiag/gpudiag/safetext"
	"github.com/gpudiag/gpudiag/sample"
)

// A recorded trace can hold samples no live collector returns: a frame of
// 150,000 processes, each with its own library version, made 300,000
// series and a window at 4.5 times its budget. A replayed sample is held
// here to the bounds the live collector keeps, with the live collector's
// own constants: a list longer than the live collector lists is cut to it,
// and counted where the sample counts what it left out (Dropped, Unread,
// Truncated), as the live collector does. Cutting rather than refusing
// keeps the most of a trace: the frame's other readings are replayed, and
// a legitimate trace, which never passes these bounds, loses nothing. What
// no live constant bounds (a node's disks, interfaces, XIDs) is held by the
// window's share of its budget, which the replay checks for every sample
// (record/replay).

// replayMaxGPUs bounds every list of GPUs a replayed sample holds: DCGM
// reads at most DCGM_MAX_NUM_DEVICES (32) GPUs, and no node holds more.
const replayMaxGPUs = 32

// replayMaxNVLinks is NVML_NVLINK_MAX_LINKS (DCGM's
// DCGM_NVLINK_MAX_LINKS_PER_GPU is asserted equal to it).
const replayMaxNVLinks = 18

// replayMaxMIGDevices is the most GPU instances a MIG GPU is split into.
const replayMaxMIGDevices = 7

// replayMaxTopologies bounds the distinct GPU topologies one replay keeps.
// The live collector reads the topology once when its backend opens and
// every sample shares it, which is why a GPU sample's size leaves it out; a
// replay decodes one per frame, so it keeps one copy of each distinct
// topology and refuses a frame bringing more than a backend that fails
// over and back could have read.
const replayMaxTopologies = 4

// replayBounds holds, by collector name, what makes a collector's bound:
// a function, made once per replay, that cuts one decoded sample in place
// to the live bounds and says what it cut, or refuses the sample.
var replayBounds = map[string]func() func(any) ([]string, error){}

// boundReplay registers the bound of a collector's replayed samples;
// newBound is called once per replay, so a bound may keep state across
// the trace's frames.
func boundReplay[S any](key sample.Key[S], newBound func() func(*S) ([]string, error)) {
	replayBounds[key.Name()] = func() func(any) ([]string, error) {
		b := newBound()
		return func(s any) ([]string, error) { return b(s.(*S)) }
	}
}

// stateless is newBound for a bound that keeps nothing between frames.
func stateless[S any](cut func(*S, *cuts)) func() func(*S) ([]string, error) {
	return func() func(*S) ([]string, error) {
		return func(s *S) ([]string, error) {
			var c cuts
			cut(s, &c)
			return c.list(), nil
		}
	}
}

// maxCutNotes bounds what the log is told of one frame's cuts: a frame can
// have a list cut in each of a thousand processes.
const maxCutNotes = 8

// cuts lists what a bound cut, for the replay's log: the first
// maxCutNotes, and how many more.
type cuts struct {
	notes []string
	more  int
}

func (c *cuts) note(format string, args ...any) {
	if len(c.notes) == maxCutNotes {
		c.more++
		return
	}
	c.notes = append(c.notes, fmt.Sprintf(format, args...))
}

func (c *cuts) list() []string {
	if c.more > 0 {
		return append(c.notes, fmt.Sprintf("%d more", c.more))
	}
	return c.notes
}

// cutList cuts *list to at most limit entries, notes it, and returns how
// many it dropped.
func cutList[T any](c *cuts, list *[]T, limit int, what string) int {
	n := len(*list)
	if n <= limit {
		return 0
	}
	c.note("%s: %d listed, at most %d kept", what, n, limit)
	*list = (*list)[:limit:limit]
	return n - limit
}

// cutString cuts *s to at most limit bytes at a character, and notes it.
func cutString(c *cuts, s *string, limit int, what string) bool {
	if len(*s) <= limit {
		return false
	}
	c.note("%s: %d bytes, at most %d kept", what, len(*s), limit)
	*s = safetext.Cut(*s, limit)
	return true
}

func init() {
	boundReplay(sample.GPUKey, newGPUBound)
	boundReplay(sample.GPUProcessKey, stateless(cutGPUProcesses))
	boundReplay(sample.NCCLProcKey, stateless(cutNCCLProcesses))
	boundReplay(sample.NCCLKey, stateless(cutNCCL))
	boundReplay(sample.PodResourcesKey, stateless(func(s *sample.PodResources, c *cuts) {
		s.Dropped += cutList(c, &s.Assignments, podResourcesMaxAssignments, "assignments")
	}))
	boundReplay(sample.DatasetKey, stateless(func(s *sample.Datasets, c *cuts) {
		cutList(c, &s.GPUs, replayMaxGPUs, "gpus")
		for i := range s.GPUs {
			if cutList(c, &s.GPUs[i].Mounts, sample.DatasetMaxMounts, fmt.Sprintf("gpus[%d].mounts", i)) > 0 {
				s.GPUs[i].Truncated = true
			}
		}
	}))
	boundReplay(sample.TCPKey, stateless(func(s *sample.TCP, c *cuts) {
		cutList(c, &s.GPUs, replayMaxGPUs, "gpus")
		for i := range s.Processes {
			cutList(c, &s.Processes[i].GPUs, replayMaxGPUs, fmt.Sprintf("processes[%d].gpus", i))
		}
	}))
	boundReplay(sample.EBPFKey, stateless(func(s *sample.EBPF, c *cuts) {
		cutList(c, &s.GPUs, replayMaxGPUs, "gpus")
		for i := range s.Disks {
			cutList(c, &s.Disks[i].Buckets, bpf.LatencySlots, fmt.Sprintf("disks[%d].buckets", i))
		}
		for i := range s.Processes {
			cutList(c, &s.Processes[i].GPUs, replayMaxGPUs, fmt.Sprintf("processes[%d].gpus", i))
		}
	}))
	boundReplay(sample.NUMAKey, stateless(func(s *sample.NUMA, c *cuts) {
		cutList(c, &s.GPUs, replayMaxGPUs, "gpus")
	}))
	boundReplay(sample.DiskstatsKey, stateless(func(s *sample.Disks, c *cuts) {
		cutList(c, &s.Devices, hostfs.DiskstatsMaxDevices, "devices")
	}))
	// Bounded by the host alone, as live: held by the window's share.
	for _, k := range []interface{ Name() string }{sample.CPUKey, sample.InfiniBandKey, sample.KubeletKey,
		sample.NetDevKey, sample.PressureKey, sample.TuningKey} {
		replayBounds[k.Name()] = func() func(any) ([]string, error) {
			return func(any) ([]string, error) { return nil, nil }
		}
	}
}

// newGPUBound cuts the GPUs and their links and MIG devices, and keeps one
// copy of each distinct topology.
func newGPUBound() func(*sample.GPUs) ([]string, error) {
	var topologies []*sample.Topology
	var keys []string
	return func(s *sample.GPUs) ([]string, error) {
		var c cuts
		cutList(&c, &s.Devices, replayMaxGPUs, "devices")
		for i := range s.Devices {
			d := &s.Devices[i]
			cutList(&c, &d.Links, replayMaxNVLinks, fmt.Sprintf("devices[%d].links", i))
			cutList(&c, &d.MIGDevices, replayMaxMIGDevices, fmt.Sprintf("devices[%d].mig_devices", i))
		}
		t := s.Topology
		if t == nil {
			return c.list(), nil
		}
		cutList(&c, &t.GPUs, replayMaxGPUs, "topology.gpus")
		cutList(&c, &t.Pairs, replayMaxGPUs*(replayMaxGPUs-1)/2, "topology.pairs")
		b, err := json.Marshal(t)
		if err != nil {
			return c.list(), fmt.Errorf("topology: %w", err)
		}
		key := string(b)
		for i, k := range keys {
			if k == key {
				s.Topology = topologies[i]
				return c.list(), nil
			}
		}
		if len(keys) == replayMaxTopologies {
			return c.list(), fmt.Errorf("topology: more than %d distinct GPU topologies in the trace; a GPU backend reads one each time it opens", replayMaxTopologies)
		}
		keys, topologies = append(keys, key), append(topologies, t)
		return c.list(), nil
	}
}

// cutGPUProcesses holds the groups to the GPUs and the processes to the
// most one cycle reads (--collector.gpuprocess.max-processes, across all
// GPUs); those left out count as unread, as live.
func cutGPUProcesses(s *sample.GPUProcesses, c *cuts) {
	cutList(c, &s.GPUs, replayMaxGPUs, "gpus")
	budget := gpuProcessFlags.maxProcesses
	for i := range s.GPUs {
		g := &s.GPUs[i]
		dropped := cutList(c, &g.Processes, budget, fmt.Sprintf("gpus[%d].processes", i))
		g.Unread += dropped
		budget -= len(g.Processes)
	}
}

// cutNCCLProcesses holds the processes to ncclProcMaxReported (forked
// workers left out first, as live), their environment to
// ncclProcEnvMaxVars variables of at most ncclProcEnvValueBytes, and the
// log files to ncclProcMaxLogFiles.
func cutNCCLProcesses(s *sample.NCCLHostProcesses, c *cuts) {
	if len(s.Processes) > ncclProcMaxReported {
		sort.SliceStable(s.Processes, func(i, j int) bool {
			return s.Processes[i].ForkOf == 0 && s.Processes[j].ForkOf != 0
		})
		s.Dropped += cutList(c, &s.Processes, ncclProcMaxReported, "processes")
		sort.SliceStable(s.Processes, func(i, j int) bool { return s.Processes[i].PID < s.Processes[j].PID })
	}
	cutList(c, &s.LogFiles, ncclProcMaxLogFiles, "log_files")
	for i := range s.Processes {
		p := &s.Processes[i]
		cutList(c, &p.GPUs, replayMaxGPUs, fmt.Sprintf("processes[%d].gpus", i))
		if cutList(c, &p.Env, ncclProcEnvMaxVars, fmt.Sprintf("processes[%d].env", i)) > 0 {
			p.EnvTruncated = true
		}
		for j := range p.Env {
			if cutString(c, &p.Env[j].Value, ncclProcEnvValueBytes, fmt.Sprintf("processes[%d].env[%d].value", i, j)) {
				p.EnvTruncated = true
			}
		}
	}
}

// cutNCCL holds the logs to the followers the collector keeps (twice
// --collector.nccl.max-files) and each log to the nccl package's bounds.
func cutNCCL(s *sample.NCCL, c *cuts) {
	s.SkippedFiles += cutList(c, &s.Files, 2*ncclFlags.maxFiles, "files")
	cutList(c, &s.GPUs, replayMaxGPUs, "gpus")
	for i := range s.Files {
		f := &s.Files[i]
		cutList(c, &f.Versions, nccl.MaxVersions, fmt.Sprintf("files[%d].versions", i))
		f.DroppedProcesses += uint64(cutList(c, &f.Processes, nccl.MaxProcesses, fmt.Sprintf("files[%d].processes", i)))
		for j := range f.Processes {
			cutNCCLProcess(&f.Processes[j], c, fmt.Sprintf("files[%d].processes[%d]", i, j))
		}
	}
}

func cutNCCLProcess(p *sample.NCCLProcess, c *cuts, at string) {
	cutList(c, &p.Versions, nccl.MaxVersions, at+".versions")
	cutList(c, &p.Comms, nccl.MaxComms, at+".comms")
	cutList(c, &p.Transports, len(nccl.Transports), at+".transports")
	p.PeersDropped += cutList(c, &p.Peers, nccl.MaxPeerLinks, at+".peers")
	cutList(c, &p.Paths, nccl.MaxPaths, at+".paths")
	cutList(c, &p.IBDevices, nccl.MaxNetDevices, at+".ib_devices")
	cutList(c, &p.SocketInterfaces, nccl.MaxNetDevices, at+".socket_interfaces")
	cutList(c, &p.GDRNotes, nccl.MaxGDRNotes, at+".gdr_notes")
	cutList(c, &p.Env, nccl.MaxEnv, at+".env")
	for k := range p.Env {
		cutString(c, &p.Env[k].Value, nccl.MaxEnvValueBytes, fmt.Sprintf("%s.env[%d].value", at, k))
	}
	cutList(c, &p.Warnings, nccl.MaxWarnings, at+".warnings")
	for k := range p.Warnings {
		cutString(c, &p.Warnings[k].Message, nccl.MaxWarningBytes, fmt.Sprintf("%s.warnings[%d].message", at, k))
	}
	cutList(c, &p.Fallbacks, len(nccl.FallbackKinds), at+".fallbacks")
}
