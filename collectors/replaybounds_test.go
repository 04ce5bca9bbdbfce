package collectors

import (
	"fmt"
	"strings"
	"testing"

	"github.com/gpudiag/gpudiag/engine"
	"github.com/gpudiag/gpudiag/nccl"
	"github.com/gpudiag/gpudiag/sample"
)

// Every collector has a replay bound, and its samples tell the window their
// size (engine.Sizer): a sample charged a fixed size could hold any amount
// while the window counts a kilobyte.
func TestEveryCollectorHasAReplayBound(t *testing.T) {
	for _, name := range Names() {
		rc, err := ReplayCollector(name)
		if err != nil {
			t.Errorf("%s: %v (add it to replaybounds.go)", name, err)
			continue
		}
		if _, ok := rc.NewSample().(engine.Sizer); !ok {
			t.Errorf("%s: %T has no SizeBytes", name, rc.NewSample())
		}
	}
	for name := range replayBounds {
		if registry[name] == nil {
			t.Errorf("replay bound for %s, which is not a collector", name)
		}
	}
}

// What the live collectors read on the fixture host passes their replay
// bounds untouched, and is a possible reading (Validate).
func TestLiveSamplesPassTheReplayBounds(t *testing.T) {
	_, window := gatherAllWindow(t)
	for _, name := range Names() {
		latest, ok := registry[name].latest(window)
		if !ok {
			continue // off by default: not built on the fixture
		}
		rc, err := ReplayCollector(name)
		if err != nil {
			t.Fatal(err)
		}
		before := fmt.Sprintf("%+v", latest)
		cut, err := rc.Bound(latest)
		if err != nil || len(cut) > 0 {
			t.Errorf("%s: a live sample is cut (%v) or refused (%v)", name, cut, err)
		}
		if after := fmt.Sprintf("%+v", latest); after != before {
			t.Errorf("%s: the bound changed a live sample", name)
		}
		if v, ok := latest.(interface{ Validate() error }); ok {
			if err := v.Validate(); err != nil {
				t.Errorf("%s: a live sample is not a reading: %v", name, err)
			}
		}
	}
}

func bound(t *testing.T, name string, s any) []string {
	t.Helper()
	rc, err := ReplayCollector(name)
	if err != nil {
		t.Fatal(err)
	}
	cut, err := rc.Bound(s)
	if err != nil {
		t.Fatal(err)
	}
	return cut
}

// An ncclproc scan is held to the live collector's report: its 1024
// processes, forked workers left out first and counted as dropped, sorted by
// PID; 64 variables of at most 1 KiB each, the process's environment marked
// truncated; 64 log files.
func TestReplayBoundNCCLProcesses(t *testing.T) {
	const n = ncclProcMaxReported + 10
	s := &sample.NCCLHostProcesses{Dropped: 3}
	for i := range n {
		p := sample.NCCLHostProcess{PID: n - i}
		if i < 20 {
			p.ForkOf = 1 // 20 forked workers, the highest PIDs
		}
		s.Processes = append(s.Processes, p)
		s.LogFiles = append(s.LogFiles, fmt.Sprintf("/logs/%d", i))
	}
	p := &s.Processes[len(s.Processes)-1] // PID 1, kept
	for i := range ncclProcEnvMaxVars + 1 {
		p.Env = append(p.Env, sample.NCCLEnv{Name: fmt.Sprintf("NCCL_%d", i), Value: "x"})
	}
	p.Env[0].Value = strings.Repeat("é", ncclProcEnvValueBytes)

	cut := bound(t, "ncclproc", s)
	if len(s.Processes) != ncclProcMaxReported || s.Dropped != 3+10 {
		t.Fatalf("%d processes, %d dropped; want %d and 13", len(s.Processes), s.Dropped, ncclProcMaxReported)
	}
	for i, p := range s.Processes {
		if p.ForkOf != 0 && i < len(s.Processes)-10 {
			t.Fatalf("forked worker %d kept before the others were", p.PID)
		}
		if i > 0 && p.PID <= s.Processes[i-1].PID {
			t.Fatalf("processes not sorted by PID at %d", i)
		}
	}
	if len(s.LogFiles) != ncclProcMaxLogFiles {
		t.Errorf("%d log files", len(s.LogFiles))
	}
	p = &s.Processes[0]
	if p.PID != 1 || len(p.Env) != ncclProcEnvMaxVars || !p.EnvTruncated || len(p.Env[0].Value) > ncclProcEnvValueBytes ||
		!strings.HasSuffix(p.Env[0].Value, "…") {
		t.Errorf("process %d: %d variables, truncated %v, first value %d bytes", p.PID, len(p.Env), p.EnvTruncated, len(p.Env[0].Value))
	}
	if len(cut) != 4 {
		t.Errorf("cut %q; want the processes, the log files, the variables and the value", cut)
	}

	// A list cut in each of many processes is told in a few notes.
	s = &sample.NCCLHostProcesses{Processes: make([]sample.NCCLHostProcess, 100)}
	for i := range s.Processes {
		s.Processes[i].GPUs = make([]int, replayMaxGPUs+1)
	}
	if cut := bound(t, "ncclproc", s); len(cut) != maxCutNotes+1 || cut[maxCutNotes] != "92 more" {
		t.Errorf("%d notes, the last %q; want %d and \"92 more\"", len(cut), cut[len(cut)-1], maxCutNotes+1)
	}
}

// An NCCL sample is held to the nccl package's bounds per log and process,
// and to the followers the collector keeps.
func TestReplayBoundNCCL(t *testing.T) {
	proc := sample.NCCLProcess{}
	for i := range 300 {
		proc.Peers = append(proc.Peers, sample.NCCLPeer{Peer: i})
		proc.Comms = append(proc.Comms, sample.NCCLComm{Rank: i})
		proc.Warnings = append(proc.Warnings, sample.NCCLWarning{Message: strings.Repeat("w", 1000)})
		proc.Transports = append(proc.Transports, sample.NCCLTransport{Transport: fmt.Sprint(i)})
	}
	file := sample.NCCLFile{}
	for range nccl.MaxProcesses + 1 {
		file.Processes = append(file.Processes, proc)
	}
	s := &sample.NCCL{}
	for range 2*ncclFlags.maxFiles + 1 {
		s.Files = append(s.Files, file)
	}
	bound(t, "nccl", s)
	if len(s.Files) != 2*ncclFlags.maxFiles || s.SkippedFiles != 1 {
		t.Fatalf("%d files, %d skipped", len(s.Files), s.SkippedFiles)
	}
	f := s.Files[0]
	if len(f.Processes) != nccl.MaxProcesses || f.DroppedProcesses != 1 {
		t.Fatalf("%d processes, %d dropped", len(f.Processes), f.DroppedProcesses)
	}
	p := f.Processes[0]
	if len(p.Peers) != nccl.MaxPeerLinks || p.PeersDropped != 300-nccl.MaxPeerLinks || len(p.Comms) != nccl.MaxComms ||
		len(p.Warnings) != nccl.MaxWarnings || len(p.Warnings[0].Message) > nccl.MaxWarningBytes ||
		len(p.Transports) != len(nccl.Transports) {
		t.Errorf("process: %d peers (%d dropped), %d comms, %d warnings of %d bytes, %d transports",
			len(p.Peers), p.PeersDropped, len(p.Comms), len(p.Warnings), len(p.Warnings[0].Message), len(p.Transports))
	}
}

// A GPU reading is held to the GPUs, links and MIG devices a node has; the
// GPU processes to the processes one cycle reads, the rest unread.
func TestReplayBoundGPUs(t *testing.T) {
	s := &sample.GPUs{}
	for i := range 40 {
		s.Devices = append(s.Devices, sample.GPU{Index: i, Links: make([]sample.NVLink, 30), MIGDevices: make([]string, 9)})
	}
	bound(t, "gpu", s)
	if len(s.Devices) != replayMaxGPUs || len(s.Devices[0].Links) != replayMaxNVLinks || len(s.Devices[0].MIGDevices) != replayMaxMIGDevices {
		t.Errorf("%d GPUs, %d links, %d MIG devices", len(s.Devices), len(s.Devices[0].Links), len(s.Devices[0].MIGDevices))
	}

	g := &sample.GPUProcesses{GPUs: []sample.GPUProcessGroup{
		{GPU: 0, Processes: make([]sample.GPUProcess, gpuProcessFlags.maxProcesses-1)},
		{GPU: 1, Processes: make([]sample.GPUProcess, 5), Unread: 2},
	}}
	bound(t, "gpuprocess", g)
	if n := len(g.GPUs[0].Processes) + len(g.GPUs[1].Processes); n != gpuProcessFlags.maxProcesses || g.GPUs[1].Unread != 2+4 {
		t.Errorf("%d processes kept, GPU 1's unread %d; want %d and 6", n, g.GPUs[1].Unread, gpuProcessFlags.maxProcesses)
	}
}

// The GPU topology, which the live collector reads once and shares between
// its samples, is kept once per distinct topology: frames that repeat it
// share the first copy, and a frame bringing one more than a backend could
// have read is refused.
func TestReplayBoundSharesTheTopology(t *testing.T) {
	rc, err := ReplayCollector("gpu")
	if err != nil {
		t.Fatal(err)
	}
	topology := func(n int) *sample.Topology {
		return &sample.Topology{GPUs: []sample.GPULinkCapacity{{Index: 0, NVLinks: n}}}
	}
	first := &sample.GPUs{Topology: topology(1)}
	if _, err := rc.Bound(first); err != nil {
		t.Fatal(err)
	}
	again := &sample.GPUs{Topology: topology(1)}
	if _, err := rc.Bound(again); err != nil || again.Topology != first.Topology {
		t.Fatalf("a repeated topology is not shared (%v)", err)
	}
	for i := 2; i <= replayMaxTopologies; i++ {
		if _, err := rc.Bound(&sample.GPUs{Topology: topology(i)}); err != nil {
			t.Fatalf("topology %d: %v", i, err)
		}
	}
	if _, err := rc.Bound(&sample.GPUs{Topology: topology(replayMaxTopologies + 1)}); err == nil {
		t.Fatalf("a %d-th distinct topology is kept", replayMaxTopologies+1)
	}
}
