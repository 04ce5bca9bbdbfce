package analyzers

import (
	"math"
	"strings"
	"testing"

	"github.com/gpudiag/gpudiag/sample"
)

func ptrF(v float64) *float64 { return &v }
func ptrU(v uint64) *uint64   { return &v }

// limitsGroup is GPU 3 holding one process and a DataLoader worker, on 64
// allowed CPUs, with nothing limiting them.
func limitsGroup(edit func(g *sample.GPUProcessGroup)) *sample.GPUProcesses {
	g := sample.GPUProcessGroup{GPU: 3, NUMANode: 0,
		Processes:   []sample.GPUProcess{{PID: 10, OnGPU: true}, {PID: 11, PPID: 10, Depth: 1}},
		AllowedCPUs: 64, MemlockUnlimited: true, CPUCgroups: 1,
		DevShm: &sample.DevShm{Tmpfs: true, SizeBytes: 16 << 30, UsedBytes: 1 << 30}}
	if edit != nil {
		edit(&g)
	}
	return &sample.GPUProcesses{IntervalSeconds: 5, GPUs: []sample.GPUProcessGroup{g}}
}

func TestAuditLimits(t *testing.T) {
	for _, tc := range []struct {
		name string
		p    *sample.GPUProcesses
		want string
	}{
		{"nothing limits", limitsGroup(nil), ""},
		{"quota not biting", limitsGroup(func(g *sample.GPUProcessGroup) {
			g.CPUQuotaCores, g.CPUThrottledPeriodsRatio = ptrF(8), ptrF(0.02)
		}), ""},
		{"quota throttling", limitsGroup(func(g *sample.GPUProcessGroup) {
			g.CPUQuotaCores, g.CPUThrottledPeriodsRatio, g.CPUThrottledSecondsPerSecond = ptrF(2), ptrF(0.1), ptrF(0.3)
		}), "cpu_quota_throttled:warning"},
		{"throttled, no process any more", limitsGroup(func(g *sample.GPUProcessGroup) {
			g.Processes, g.CPUThrottledPeriodsRatio = nil, ptrF(0.9)
		}), ""},
		{"OpenMP at twice the CPUs", limitsGroup(func(g *sample.GPUProcessGroup) { g.OMPThreads, g.OMPProcesses = 128, 2 }), ""},
		{"OpenMP oversubscribed", limitsGroup(func(g *sample.GPUProcessGroup) { g.OMPThreads, g.OMPProcesses = 129, 2 }), "cpu_oversubscribed:warning"},
		{"OpenMP within the cpuset, over a 4-CPU quota", limitsGroup(func(g *sample.GPUProcessGroup) {
			g.OMPThreads, g.OMPProcesses, g.CPUQuotaCores = 16, 2, ptrF(3.5)
		}), "cpu_oversubscribed:warning"},
		{"OpenMP at twice a 4-CPU quota", limitsGroup(func(g *sample.GPUProcessGroup) {
			g.OMPThreads, g.OMPProcesses, g.CPUQuotaCores = 8, 2, ptrF(3.5)
		}), ""},
		{"docker's 64 MiB shm", limitsGroup(func(g *sample.GPUProcessGroup) {
			g.DevShm = &sample.DevShm{Tmpfs: true, SizeBytes: 64 << 20}
		}), "dev_shm_small:warning"},
		{"shm full", limitsGroup(func(g *sample.GPUProcessGroup) {
			g.DevShm = &sample.DevShm{Tmpfs: true, SizeBytes: 32 << 30, UsedBytes: 29 << 30}
		}), "dev_shm_small:warning"},
		{"shm not a tmpfs", limitsGroup(func(g *sample.GPUProcessGroup) {
			g.DevShm = &sample.DevShm{SizeBytes: 64 << 20}
		}), ""},
		{"docker's memlock", limitsGroup(func(g *sample.GPUProcessGroup) { g.MemlockBytes, g.MemlockUnlimited = ptrU(64<<10), false }), "memlock_limited:warning"},
		{"memlock in gigabytes", limitsGroup(func(g *sample.GPUProcessGroup) { g.MemlockBytes, g.MemlockUnlimited = ptrU(4<<30), false }), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := checks(Audit(AuditInput{Processes: tc.p})); got != tc.want {
				t.Fatalf("findings %q; want %q", got, tc.want)
			}
		})
	}
}

// The throttling finding names the quota and the share, and its fix is
// the CPU limit.
func TestCPUQuotaThrottledFinding(t *testing.T) {
	fs := Audit(AuditInput{Processes: limitsGroup(func(g *sample.GPUProcessGroup) {
		g.CPUQuotaCores, g.CPUThrottledPeriodsRatio, g.CPUThrottledSecondsPerSecond = ptrF(0.1), ptrF(1), ptrF(0.75)
	})})
	if len(fs) != 1 {
		t.Fatalf("%+v", fs)
	}
	f := fs[0]
	if f.GPU == nil || *f.GPU != 3 || !strings.Contains(f.Summary, "0.1 CPUs") || !strings.Contains(f.Summary, "100% of periods") ||
		f.Fix != "raise the container's CPU limit (or remove it; requests only)" || len(f.Evidence) != 3 || f.Evidence[0].Threshold != 0.1 {
		t.Fatalf("%+v", f)
	}
}

// The host rule: a starved GPU whose processes are throttled by their
// quota is host / cpu_quota, fixed by the CPU limit, not by more workers
// (which share the quota); a quota of 0.1 CPU caps their use far below
// ProcessCPUCores, and the throttling alone makes the rule. Unthrottled,
// the same load stays host / cpu.
func TestClassifyCPUQuota(t *testing.T) {
	starved := func(cores, throttled, quota float64) GPUWindow {
		w := h200(0.001, 0, 0, 0, 0.0001*gb, 0.0001*gb, 0, 0)
		w.ProcessCPUCores, w.ProcessCPUThrottled, w.ProcessCPUQuota = cores, throttled, quota
		return w
	}
	for _, tc := range []struct {
		name            string
		w               GPUWindow
		sub, fix, inSum string
	}{
		{"GIL-bound, no quota", starved(1.0, math.NaN(), math.NaN()), SubCPU, "raise DataLoader num_workers", ""},
		{"GIL-bound, quota rarely bites", starved(1.0, 0.05, 4), SubCPU, "raise DataLoader num_workers", ""},
		{"throttled at 2 CPUs", starved(1.9, 0.4, 2), SubCPUQuota, cpuQuotaFix, "(2 CPUs) in 40% of periods"},
		{"0.1 CPU quota", starved(0.1, 0.95, 0.1), SubCPUQuota, cpuQuotaFix, "(0.1 CPUs) in 95% of periods"},
		{"quota unknown", starved(0.5, 0.5, math.NaN()), SubCPUQuota, cpuQuotaFix, "in 50% of periods"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := ClassifyGPU(tc.w, NaNNode(), DefaultThresholds)
			if v.Class != ClassHost || v.SubKind != tc.sub || !strings.HasPrefix(v.Fix, tc.fix) || !strings.Contains(v.Summary, tc.inSum) || v.Confidence < 0.6 {
				t.Fatalf("%+v", v)
			}
		})
	}
	if v := ClassifyGPU(starved(0.05, 0.02, 0.1), NaNNode(), DefaultThresholds); v.Class == ClassHost {
		t.Fatalf("neither busy nor throttled, yet host: %+v", v)
	}
}

// gpu_process_not_pinned: a process allowed on CPUs of both nodes, some
// of them off its GPU's.
func TestGPUProcessNotPinned(t *testing.T) {
	p := &sample.GPUProcesses{GPUs: []sample.GPUProcessGroup{{GPU: 1, NUMANode: 0, LocalCPUList: "0-31,64-95",
		Processes: []sample.GPUProcess{{PID: 10, OnGPU: true}}, CPUsOffNodeRatio: ptrF(0.5)}}}
	fs := Audit(AuditInput{Processes: p})
	if got := checks(fs); got != "gpu_process_not_pinned:info" {
		t.Fatalf("findings %q", got)
	}
	if f := fs[0]; f.GPU == nil || *f.GPU != 1 || !strings.Contains(f.Summary, "50%") || !strings.Contains(f.Fix, "0-31,64-95") {
		t.Fatalf("%+v", f)
	}
	p.GPUs[0].CPUsOffNodeRatio = ptrF(0)
	if got := checks(Audit(AuditInput{Processes: p})); got != "" {
		t.Fatalf("pinned process: findings %q", got)
	}
}

// Sixteen DataLoader workers on eight CPUs: a finding only while the
// node's CPUs are contended (seed-001 row 16), counted once when two GPUs
// list the same rank's workers.
func TestDataLoaderWorkersOversubscribed(t *testing.T) {
	group := func(gpu, rank, workers int, cpus string) sample.GPUProcessGroup {
		g := sample.GPUProcessGroup{GPU: gpu, Processes: []sample.GPUProcess{{PID: rank, OnGPU: true, Comm: "pt_main_thread", CPUsAllowedList: cpus}}}
		for w := 1; w <= workers; w++ {
			g.Processes = append(g.Processes, sample.GPUProcess{PID: rank + w, PPID: rank, Depth: 1, Comm: DataLoaderWorkerComm, CPUsAllowedList: cpus})
		}
		return g
	}
	for _, tc := range []struct {
		name     string
		groups   []sample.GPUProcessGroup
		pressure float64
		want     string
		summary  string
	}{
		{name: "contended", groups: []sample.GPUProcessGroup{group(0, 100, 8, "0-7"), group(1, 200, 8, "0-7")}, pressure: 0.35,
			want: "dataloader_workers_oversubscribed:warning", summary: "16 DataLoader workers of the GPUs' processes may run on 8 CPUs while the node's CPU pressure is 35%"},
		{name: "idle CPUs", groups: []sample.GPUProcessGroup{group(0, 100, 8, "0-7"), group(1, 200, 8, "0-7")}, pressure: 0.05},
		{name: "pressure not measured", groups: []sample.GPUProcessGroup{group(0, 100, 8, "0-7"), group(1, 200, 8, "0-7")}, pressure: math.NaN()},
		{name: "as many workers as CPUs", groups: []sample.GPUProcessGroup{group(0, 100, 4, "0-7"), group(1, 200, 4, "0-7")}, pressure: 0.35},
		{name: "one rank's workers listed twice", groups: []sample.GPUProcessGroup{group(0, 100, 6, "0-7"), group(1, 100, 6, "0-7")}, pressure: 0.35},
		{name: "a worker by another name", groups: []sample.GPUProcessGroup{func() sample.GPUProcessGroup {
			g := group(0, 100, 9, "0-7")
			g.Processes[1].Comm = "python3"
			return g
		}()}, pressure: 0.35},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Through Analyze, which gives the audit the node's CPU
			// pressure and its threshold.
			node := NaNNode()
			node.CPUPressure = tc.pressure
			fs := Analyze(Input{Node: node, Audit: AuditInput{Processes: &sample.GPUProcesses{GPUs: tc.groups}}}, nil, DefaultThresholds).Findings
			if got := checks(fs); got != tc.want {
				t.Fatalf("findings %q; want %q", got, tc.want)
			}
			if tc.want != "" && (!strings.Contains(fs[0].Summary, tc.summary) || !strings.Contains(fs[0].Fix, "about 4 per rank")) {
				t.Errorf("%+v; want %q in the summary", fs[0], tc.summary)
			}
		})
	}
}

// A GPU process whose DataLoader workers are replaced whole every few
// minutes forks new ones each epoch; workers kept across epochs, a respawn
// seen once, or epochs of an hour are no finding.
func TestDataLoaderWorkersRespawned(t *testing.T) {
	procs := func(respawns int, watched float64) *sample.GPUProcesses {
		return &sample.GPUProcesses{GPUs: []sample.GPUProcessGroup{{GPU: 3, Processes: []sample.GPUProcess{
			{PID: 4242, Comm: "python", OnGPU: true, WorkerRespawns: respawns, WorkersWatchedSeconds: watched},
			{PID: 4300, PPID: 4242, Comm: "pt_data_worker", Depth: 1},
		}}}}
	}
	for _, tc := range []struct {
		name, want, summary string
		in                  *sample.GPUProcesses
	}{
		{name: "every three minutes", in: procs(4, 720), want: "dataloader_workers_respawned:info",
			summary: "pid 4242 (python) on GPU 3 replaced all its DataLoader workers 4 times in 12 minutes, about every 180 s"},
		{name: "persistent workers", in: procs(0, 3600)},
		{name: "once", in: procs(1, 200)},
		{name: "hour-long epochs", in: procs(3, 3*3600)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []Finding
			for _, f := range Audit(AuditInput{Processes: tc.in}) {
				if f.Check == "dataloader_workers_respawned" {
					got = append(got, f)
				}
			}
			if checks(got) != tc.want {
				t.Fatalf("findings %q; want %q", checks(got), tc.want)
			}
			if tc.want != "" && (!strings.Contains(got[0].Summary, tc.summary) || got[0].GPU == nil || *got[0].GPU != 3) {
				t.Errorf("finding %+v lacks %q", got[0], tc.summary)
			}
		})
	}
}
