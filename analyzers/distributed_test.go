package analyzers

import (
	"strings"
	"testing"
	"time"

	"github.com/gpudiag/gpudiag/sample"
)

// ncclHistory is one process's CommInits at the given seconds.
func ncclHistory(inits map[int]int) []sample.Timed[*sample.NCCL] {
	t0 := time.Unix(1_700_000_000, 0)
	var out []sample.Timed[*sample.NCCL]
	for s := 0; s <= 600; s++ {
		n, ok := inits[s]
		if !ok {
			continue
		}
		out = append(out, sample.Timed[*sample.NCCL]{Time: t0.Add(time.Duration(s) * time.Second), Sample: &sample.NCCL{
			Files: []sample.NCCLFile{{Path: "/tmp/nccl.log", Exists: true, Processes: []sample.NCCLProcess{{Host: "node1", PID: 77, CommInits: n, Current: true}}}}}})
	}
	return out
}

func TestAuditCommunicatorChurn(t *testing.T) {
	procs := &sample.NCCLHostProcesses{Processes: []sample.NCCLHostProcess{{PID: 4242, NSPID: 77, OnGPU: true, GPUs: []int{3},
		Libraries: []sample.NCCLLibrary{{Path: "/usr/lib/libnccl.so.2.21.5", Version: "2.21.5"}}}}}
	for _, tc := range []struct {
		name   string
		inits  map[int]int
		want   string
		detail string
	}{
		// 12 communicators in the first seconds (world and subgroups), none after.
		{"start-up burst", map[int]int{0: 1, 5: 12, 60: 12, 120: 12, 300: 12}, "", ""},
		// One new group a minute late in the job: a lazy creation, not churn.
		{"one late group", map[int]int{0: 8, 60: 8, 300: 9, 360: 9}, "", ""},
		// A new communicator every 10 s after start-up: 6 a minute.
		{"a group per step", map[int]int{0: 8, 60: 8, 70: 9, 80: 10, 90: 11, 100: 12, 110: 13, 120: 14}, "nccl_communicator_churn:warning", "6 NCCL communicators"},
		// The collector met the log afresh (count back to 2): counted from zero.
		{"restart counts from zero", map[int]int{0: 8, 60: 8, 90: 2, 120: 5}, "nccl_communicator_churn:warning", "5 NCCL communicators"},
		// The process was seen for less than its grace: nothing judged.
		{"within grace", map[int]int{0: 1, 30: 40, 59: 80}, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs := Audit(AuditInput{NCCLHistory: ncclHistory(tc.inits), NCCLProcesses: procs})
			if got := checks(fs); got != tc.want {
				t.Fatalf("findings %q; want %q", got, tc.want)
			}
			if tc.detail != "" && (!strings.Contains(fs[0].Summary, tc.detail) || fs[0].GPU == nil || *fs[0].GPU != 3) {
				t.Fatalf("finding %+v; want %q and GPU 3", fs[0], tc.detail)
			}
		})
	}
}

func TestAuditBackendNotNCCL(t *testing.T) {
	rank := func(mutate func(*sample.NCCLHostProcess)) *sample.NCCLHostProcesses {
		p := sample.NCCLHostProcess{PID: 5151, NSPID: 12, Comm: "python", OnGPU: true, GPUs: []int{1}, GPUSource: "nvml",
			Env: []sample.NCCLEnv{{Name: "WORLD_SIZE", Value: "16"}, {Name: "LOCAL_WORLD_SIZE", Value: "8"}}}
		if mutate != nil {
			mutate(&p)
		}
		return &sample.NCCLHostProcesses{Processes: []sample.NCCLHostProcess{p}}
	}
	logOf := func(pid int) *sample.NCCL {
		return &sample.NCCL{Files: []sample.NCCLFile{{Path: "/tmp/nccl.log", Processes: []sample.NCCLProcess{{Host: "node1", PID: pid}}}}}
	}
	for _, tc := range []struct {
		name  string
		procs *sample.NCCLHostProcesses
		logs  *sample.NCCL
		want  string
	}{
		{"16 ranks without libnccl", rank(nil), nil, "distributed_backend_not_nccl:warning"},
		{"maps libnccl", rank(func(p *sample.NCCLHostProcess) {
			p.Libraries = []sample.NCCLLibrary{{Path: "/opt/conda/lib/libnccl.so.2", Version: "2.21.5"}}
		}), nil, ""},
		{"single process", rank(func(p *sample.NCCLHostProcess) { p.Env[0].Value = "1" }), nil, ""},
		{"no WORLD_SIZE", rank(func(p *sample.NCCLHostProcess) { p.Env = nil }), nil, ""},
		{"maps not read yet", rank(func(p *sample.NCCLHostProcess) { p.MapsUnread = true }), nil, ""},
		{"maps unreadable", rank(func(p *sample.NCCLHostProcess) { p.Unreadable = []string{"maps"} }), nil, ""},
		{"not on a GPU", rank(func(p *sample.NCCLHostProcess) { p.OnGPU = false }), nil, ""},
		// Linked statically, NCCL still logs for the process (its own PID).
		{"NCCL's log names it", rank(nil), logOf(12), ""},
		{"NCCL's log names another", rank(nil), logOf(13), "distributed_backend_not_nccl:warning"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := checks(Audit(AuditInput{NCCLProcesses: tc.procs, NCCL: tc.logs})); got != tc.want {
				t.Fatalf("findings %q; want %q", got, tc.want)
			}
		})
	}
	fs := Audit(AuditInput{NCCLProcesses: rank(nil)})
	if f := fs[0]; f.GPU == nil || *f.GPU != 1 || !strings.Contains(f.Summary, "one of 16 ranks") || !strings.Contains(f.Fix, `backend="nccl"`) {
		t.Fatalf("finding %+v", f)
	}
}

// A job whose ranks switch PyTorch's NCCL error handling off hangs for
// good when a rank dies; PyTorch's default (unset) and blocking wait fail
// at the timeout instead.
func TestAuditNCCLErrorHandlingOff(t *testing.T) {
	procs := func(ps ...sample.NCCLHostProcess) AuditInput {
		return AuditInput{NCCLProcesses: &sample.NCCLHostProcesses{Processes: ps}}
	}
	for _, tc := range []struct {
		name, want, summary string
		in                  AuditInput
	}{
		{name: "default", in: procs(ncclRank(1, "a", []int{0}), ncclRank(2, "a", []int{1}))},
		{name: "on", in: procs(ncclRank(1, "a", []int{0}, "TORCH_NCCL_ASYNC_ERROR_HANDLING", "1"))},
		{name: "off", in: procs(ncclRank(1, "a", []int{0}, "TORCH_NCCL_ASYNC_ERROR_HANDLING", "0"), ncclRank(2, "a", []int{1}, "TORCH_NCCL_ASYNC_ERROR_HANDLING", "0")),
			want: "nccl_error_handling_off:warning", summary: "pod a (pid 1, pid 2) run with TORCH_NCCL_ASYNC_ERROR_HANDLING=0"},
		{name: "off by the old name", in: procs(ncclRank(1, "a", []int{0}, "NCCL_ASYNC_ERROR_HANDLING", "0")),
			want: "nccl_error_handling_off:warning", summary: "NCCL_ASYNC_ERROR_HANDLING=0"},
		// PyTorch reads the old name only when the new one is unset.
		{name: "old name off, new name on", in: procs(ncclRank(1, "a", []int{0}, "NCCL_ASYNC_ERROR_HANDLING", "0", "TORCH_NCCL_ASYNC_ERROR_HANDLING", "3"))},
		{name: "off, with blocking wait", in: procs(ncclRank(1, "a", []int{0}, "TORCH_NCCL_ASYNC_ERROR_HANDLING", "0", "TORCH_NCCL_BLOCKING_WAIT", "1"))},
		{name: "off in a process without NCCL", in: procs(func() sample.NCCLHostProcess {
			p := ncclRank(1, "a", []int{0}, "TORCH_NCCL_ASYNC_ERROR_HANDLING", "0")
			p.Libraries = nil
			return p
		}())},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs := Audit(tc.in)
			if got := checks(fs); got != tc.want {
				t.Fatalf("findings %q; want %q", got, tc.want)
			}
			if tc.want != "" && (!strings.Contains(fs[0].Summary, tc.summary) || fs[0].Fix == "") {
				t.Errorf("summary %q lacks %q", fs[0].Summary, tc.summary)
			}
		})
	}
}

// NCCL_TOPO_FILE naming a file missing where the ranks run: one finding
// for the job, its path as the device.
func TestAuditNCCLTopoFileMissing(t *testing.T) {
	rank := func(pid, gpu int, missing bool) sample.NCCLHostProcess {
		p := ncclRank(pid, "a", []int{gpu}, "NCCL_TOPO_FILE", "/opt/microsoft/ndv5-topo.xml")
		p.TopoFileMissing = missing
		return p
	}
	in := func(ps ...sample.NCCLHostProcess) AuditInput {
		return AuditInput{NCCLProcesses: &sample.NCCLHostProcesses{Processes: ps}}
	}
	if fs := Audit(in(rank(1, 0, false), rank(2, 1, false))); len(fs) != 0 {
		t.Fatalf("the file is there, yet %+v", fs)
	}
	fs := Audit(in(rank(1, 0, true), rank(2, 1, true)))
	if got := checks(fs); got != "nccl_topo_file_missing:info" {
		t.Fatalf("findings %q", got)
	}
	if f := fs[0]; f.Device != "/opt/microsoft/ndv5-topo.xml" || len(f.GPUs) != 2 || !strings.Contains(f.Summary, "pod a (pid 1, pid 2) set NCCL_TOPO_FILE=/opt/microsoft/ndv5-topo.xml") {
		t.Errorf("%+v", f)
	}
}

// Ranks of one job that all carry the same CUDA_VISIBLE_DEVICES and so run
// on the same GPU were given a value hard-coded for one GPU; the same
// value resolving to different GPUs (containers), a shared list of
// several GPUs, or one rank alone is no finding.
func TestAuditCUDAVisibleDevicesShared(t *testing.T) {
	procs := func(ps ...sample.NCCLHostProcess) AuditInput {
		return AuditInput{NCCLProcesses: &sample.NCCLHostProcesses{Processes: ps}}
	}
	cvd := "CUDA_VISIBLE_DEVICES"
	for _, tc := range []struct {
		name, want, summary string
		in                  AuditInput
	}{
		{name: "one GPU per rank, unset", in: procs(ncclRank(1, "a", []int{0}), ncclRank(2, "a", []int{1}))},
		{name: "the same list, a GPU each", in: procs(ncclRank(1, "a", []int{0}, cvd, "0,1"), ncclRank(2, "a", []int{1}, cvd, "0,1"))},
		{name: "0 in containers given other GPUs", in: procs(ncclRank(1, "a", []int{2}, cvd, "0"), ncclRank(2, "a", []int{5}, cvd, "0"))},
		{name: "one rank", in: procs(ncclRank(1, "a", []int{0}, cvd, "0"))},
		{name: "ranks set by rank", in: procs(ncclRank(1, "a", []int{0}, cvd, "0"), ncclRank(2, "a", []int{1}, cvd, "1"))},
		{name: "every rank on GPU 0", in: procs(ncclRank(1, "a", []int{0}, cvd, "0"), ncclRank(2, "a", []int{0}, cvd, "0"), ncclRank(3, "a", []int{0}, cvd, "0")),
			want: "cuda_visible_devices_shared:warning", summary: `pod a (pid 1, pid 2, pid 3) all run with CUDA_VISIBLE_DEVICES="0" and so all on GPU 0`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []Finding
			for _, f := range Audit(tc.in) {
				if f.Check == "cuda_visible_devices_shared" {
					got = append(got, f)
				}
			}
			if checks(got) != tc.want {
				t.Fatalf("findings %q; want %q", checks(got), tc.want)
			}
			if tc.want != "" && (!strings.Contains(got[0].Summary, tc.summary) || got[0].Fix == "" || got[0].GPU == nil || *got[0].GPU != 0) {
				t.Errorf("finding %+v lacks %q", got[0], tc.summary)
			}
		})
	}
}

// A multi-node job's ranks in a container without /dev/infiniband, on a
// node with an active RDMA port, send their inter-node traffic over TCP; a
// single-node job, a container that sees the devices, or a node without an
// active port raise nothing.
func TestAuditRDMADevicesHidden(t *testing.T) {
	ib := &sample.InfiniBand{Ports: []sample.InfiniBandPort{{Device: "mlx5_0", Port: 1, State: "ACTIVE"}, {Device: "mlx5_1", Port: 1, State: "DOWN"}}}
	down := &sample.InfiniBand{Ports: []sample.InfiniBandPort{{Device: "mlx5_0", Port: 1, State: "DOWN"}}}
	rank := func(pid, gpu int, hidden bool, world string) sample.NCCLHostProcess {
		p := ncclRank(pid, "a", []int{gpu}, "WORLD_SIZE", world, "LOCAL_WORLD_SIZE", "8")
		p.RDMADevicesHidden = hidden
		return p
	}
	for _, tc := range []struct {
		name, want, summary string
		ib                  *sample.InfiniBand
		procs               []sample.NCCLHostProcess
	}{
		{name: "multi-node, devices hidden", ib: ib, procs: []sample.NCCLHostProcess{rank(1, 0, true, "16"), rank(2, 1, true, "16")},
			want: "rdma_devices_hidden:warning", summary: "pod a (pid 1, pid 2) run in a container without /dev/infiniband while the node has 1 active RDMA port(s) (mlx5_0/1)"},
		{name: "multi-node, devices seen", ib: ib, procs: []sample.NCCLHostProcess{rank(1, 0, false, "16")}},
		{name: "single-node job", ib: ib, procs: []sample.NCCLHostProcess{rank(1, 0, true, "8")}},
		{name: "no active port", ib: down, procs: []sample.NCCLHostProcess{rank(1, 0, true, "16")}},
		{name: "job size unknown", ib: ib, procs: []sample.NCCLHostProcess{func() sample.NCCLHostProcess {
			p := ncclRank(1, "a", []int{0})
			p.RDMADevicesHidden = true
			return p
		}()}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []Finding
			for _, f := range Audit(AuditInput{NCCLProcesses: &sample.NCCLHostProcesses{Processes: tc.procs}, LastIB: tc.ib}) {
				if f.Check == "rdma_devices_hidden" {
					got = append(got, f)
				}
			}
			if checks(got) != tc.want {
				t.Fatalf("findings %q; want %q", checks(got), tc.want)
			}
			if tc.want != "" && (!strings.Contains(got[0].Summary, tc.summary) || got[0].Fix == "") {
				t.Errorf("summary %q lacks %q", got[0].Summary, tc.summary)
			}
		})
	}
}
