package diagnose

import (
	"math"
	"slices"
	"testing"
	"time"

	"github.com/gpudiag/gpudiag/analyzers"
	"github.com/gpudiag/gpudiag/engine"
	"github.com/gpudiag/gpudiag/sample"
)

// The ranks the window saw: two ranks of a launcher (parent 50) on GPUs 0
// and 1, and a third on GPU 2; at second 5 the rank on GPU 1 is killed (a
// zombie in the gpuprocess reading, then on no GPU). Ranks carry their
// newest state, parent, CPU, WORLD_SIZE and RANK and NCCL's communicators;
// the killed one is gone, seen last at second 5; one on a GPU whose newest
// reading lacks the driver's process list (GPU 2) is not called gone.
func TestRankEvidence(t *testing.T) {
	w := engine.NewWindow(time.Hour, 64<<20)
	dev := func(i int, pids ...uint32) sample.GPU {
		v := sample.NewValues()
		v.Set(sample.ComputeProcesses, float64(len(pids)))
		d := sample.GPU{Index: i, Up: true, Values: v}
		for _, p := range pids {
			d.Processes = append(d.Processes, sample.Process{PID: p})
		}
		return d
	}
	for i := 0; i <= 10; i++ {
		s := &sample.GPUs{Devices: []sample.GPU{dev(0, 101), dev(1, 102), dev(2, 103), dev(3)}}
		if i > 5 {
			s.Devices[1] = dev(1)
		}
		if i == 10 {
			s.Devices[2].Values = sample.NewValues() // the driver's process list failed
		}
		put(w, sample.GPUKey, at(i), s)
	}
	proc := func(pid, ppid int, state string, cores float64) sample.GPUProcess {
		return sample.GPUProcess{PID: pid, PPID: ppid, Comm: "python3", State: state, OnGPU: true, CPUCoresUsed: &cores,
			ThreadStates: map[string]int{state: 1, "S": 3}}
	}
	for _, i := range []int{0, 5, 10} {
		g1 := proc(102, 50, "R", 1)
		if i == 5 {
			g1 = proc(102, 50, "Z", 0.8)
		}
		s := &sample.GPUProcesses{IntervalSeconds: 5, GPUs: []sample.GPUProcessGroup{
			{GPU: 0, Processes: []sample.GPUProcess{proc(101, 50, "R", 1)}},
			{GPU: 1, Processes: []sample.GPUProcess{g1}},
			{GPU: 2, Processes: []sample.GPUProcess{proc(103, 60, "D", 0.1)}}}}
		if i == 10 {
			s.GPUs[1].Processes = nil
		}
		put(w, sample.GPUProcessKey, at(i), s)
	}
	env := func(rank string) []sample.NCCLEnv {
		return []sample.NCCLEnv{{Name: "WORLD_SIZE", Value: "2"}, {Name: "RANK", Value: rank}}
	}
	put(w, sample.NCCLProcKey, at(1), &sample.NCCLHostProcesses{Processes: []sample.NCCLHostProcess{
		{PID: 101, NSPID: 101, Hostname: "n1", Env: env("0")}, {PID: 102, NSPID: 102, Hostname: "n1", Env: env("1")}}})
	// The newest scan, after the kill, no longer lists the killed rank: its
	// RANK comes from the scan before.
	put(w, sample.NCCLProcKey, at(8), &sample.NCCLHostProcesses{Processes: []sample.NCCLHostProcess{
		{PID: 101, NSPID: 101, Hostname: "n1", Env: env("0")}}})
	put(w, sample.NCCLKey, at(2), &sample.NCCL{Files: []sample.NCCLFile{{Processes: []sample.NCCLProcess{
		{Host: "n1", PID: 101, Comms: []sample.NCCLComm{{CommID: "0xabc"}}}, {Host: "n1", PID: 102, Comms: []sample.NCCLComm{{CommID: "0xabc"}}}}}}})
	in := FromWindow(w, at(10), 10*time.Second)
	byPID := map[int]analyzers.Rank{}
	for _, r := range in.Ranks {
		byPID[r.PID] = r
	}
	r0, r1, r2 := byPID[101], byPID[102], byPID[103]
	if r0.Gone || r0.GPU != 0 || r0.PPID != 50 || r0.State != "R" || r0.CPUCores != 1 || r0.WorldSize != 2 || r0.RankID != 0 || !slices.Equal(r0.Comms, []string{"0xabc"}) {
		t.Errorf("rank 0: %+v", r0)
	}
	if !r1.Gone || r1.GPU != 1 || r1.State != "Z" || r1.RankID != 1 || !r1.LastSeen.Equal(at(5)) || r1.PPID != 50 {
		t.Errorf("killed rank: %+v", r1)
	}
	if r2.Gone || r2.State != "D" || math.Abs(r2.IOWait-0.25) > 1e-9 || r2.RankID != -1 {
		t.Errorf("rank of GPU 2: %+v", r2)
	}
	if len(in.Ranks) != 3 {
		t.Errorf("%d ranks: %+v", len(in.Ranks), in.Ranks)
	}
}

// The disk that writes most gives the node's write rate (a checkpoint); a
// GPU's NCCL settings come from NCCL's log first, then from its processes'
// environment, NCCL_* only.
func TestDiskWriteAndNCCLEnvEvidence(t *testing.T) {
	w := engine.NewWindow(time.Hour, 64<<20)
	for i := 0; i <= 10; i++ {
		v := sample.NewValues()
		v.Set(sample.ComputeProcesses, 1)
		v.Set(sample.SMActive, 0)
		put(w, sample.GPUKey, at(i), &sample.GPUs{Devices: []sample.GPU{{Index: 0, Up: true, IntervalSeconds: 1, Values: v, Processes: []sample.Process{{PID: 7}}}}})
		put(w, sample.DiskstatsKey, at(i), &sample.Disks{IntervalSeconds: 1, Devices: []sample.Disk{
			{Name: "vda", Rates: &sample.DiskRates{ReadBytesPerSecond: 1e6, WriteBytesPerSecond: 480e6}},
			{Name: "vdb", Rates: &sample.DiskRates{ReadBytesPerSecond: 20e6, WriteBytesPerSecond: 1e6}}}})
	}
	put(w, sample.NCCLKey, at(5), &sample.NCCL{GPUs: []sample.NCCLGPU{{GPU: 0}}, Files: []sample.NCCLFile{{Processes: []sample.NCCLProcess{
		{Host: "n1", PID: 7, Current: true, Env: []sample.NCCLEnv{{Name: "NCCL_P2P_DISABLE", Value: "1"}}}}}}})
	put(w, sample.NCCLProcKey, at(5), &sample.NCCLHostProcesses{Processes: []sample.NCCLHostProcess{{PID: 7, NSPID: 7, GPUs: []int{0},
		Env: []sample.NCCLEnv{{Name: "NCCL_P2P_DISABLE", Value: "0"}, {Name: "NCCL_HOSTID", Value: "a"}, {Name: "WORLD_SIZE", Value: "4"}}}}})
	in := FromWindow(w, at(10), 10*time.Second)
	if in.Node.DiskWriteBytes != 480e6 || in.Node.DiskReadBytes != 20e6 {
		t.Errorf("disks: write %v read %v", in.Node.DiskWriteBytes, in.Node.DiskReadBytes)
	}
	want := []sample.NCCLEnv{{Name: "NCCL_P2P_DISABLE", Value: "1"}, {Name: "NCCL_HOSTID", Value: "a"}}
	if got := in.GPUs[0].NCCLEnv; !slices.Equal(got, want) {
		t.Errorf("NCCL settings %+v; want %+v", got, want)
	}
}
