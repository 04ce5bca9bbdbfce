package analyzers

import (
	"math"
	"strings"
	"testing"

	"github.com/gpudiag/gpudiag/sample"
)

// configGPU is a healthy H100 SXM of an HGX board, busy with one process.
func configGPU(i int, mutate func(*sample.GPU)) sample.GPU {
	v := sample.NewValues()
	for f, x := range map[sample.Field]float64{
		sample.MemoryUsedBytes: 40 << 30, sample.MemoryTotalBytes: 80 << 30,
		sample.ComputeMode: sample.ComputeModeDefault, sample.MPSProcesses: 0,
		sample.MIGModeEnabled: 0, sample.MIGModePending: 0,
		sample.FabricState: sample.FabricCompleted, sample.FabricStatus: 0,
	} {
		v.Set(f, x)
	}
	g := sample.GPU{Index: i, Up: true, Model: "NVIDIA H100 80GB HBM3", Values: v,
		Processes: []sample.Process{{PID: 100 + uint32(i)}}}
	for l := 0; l < 18; l++ {
		g.Links = append(g.Links, sample.NVLink{Link: l, Up: true})
	}
	if mutate != nil {
		mutate(&g)
	}
	return g
}

func share(x float64) *float64 { return &x }

func ncclRank(pid int, job string, gpus []int, env ...string) sample.NCCLHostProcess {
	p := sample.NCCLHostProcess{PID: pid, PodUID: job, GPUs: gpus, Libraries: []sample.NCCLLibrary{{}}}
	for i := 0; i+1 < len(env); i += 2 {
		p.Env = append(p.Env, sample.NCCLEnv{Name: env[i], Value: env[i+1]})
	}
	return p
}

func TestAuditGPUConfig(t *testing.T) {
	linksDown := func(n int) func(*sample.GPU) {
		return func(g *sample.GPU) {
			for l := 0; l < n; l++ {
				g.Links[l].Up = false
			}
		}
	}
	twoProcs := func(g *sample.GPU) { g.Processes = []sample.Process{{PID: 7}, {PID: 8}} }
	migOn := func(g *sample.GPU) {
		g.Values.Set(sample.MIGModeEnabled, 1)
		g.Values.Set(sample.MIGModePending, 1)
		g.Links = nil
	}
	for _, tc := range []struct {
		name   string
		mutate func(*sample.GPU) // GPU 0; GPU 1 stays healthy unless both
		both   bool
		busy   bool
		procs  *sample.NCCLHostProcesses
		cuda   int
		want   string
		in     string // a word the summary must hold
	}{
		{name: "healthy", busy: true},
		// Memory: ≥ 95% while busy.
		{name: "memory 96% busy", mutate: func(g *sample.GPU) { g.Values.Set(sample.MemoryUsedBytes, 0.96*(80<<30)) }, busy: true,
			want: "gpu_memory_near_full:warning", in: "96%"},
		{name: "memory 94% busy", mutate: func(g *sample.GPU) { g.Values.Set(sample.MemoryUsedBytes, 0.94*(80<<30)) }, busy: true},
		{name: "memory full idle", mutate: func(g *sample.GPU) { g.Values.Set(sample.MemoryUsedBytes, 80<<30) }},
		// Time-slicing: ≥ 2 processes, busy, Default mode, no MPS, MIG off.
		{name: "two processes time-slice", mutate: twoProcs, busy: true, want: "gpu_time_sliced:warning", in: "2 compute processes"},
		{name: "shares named", mutate: func(g *sample.GPU) {
			g.Processes = []sample.Process{{PID: 7, SMUtil: share(0.6)}, {PID: 8, SMUtil: share(0.35)}}
		}, busy: true, want: "gpu_time_sliced:warning", in: "pid 7 60%, pid 8 35%"},
		{name: "one computes, one idles", mutate: func(g *sample.GPU) {
			g.Processes = []sample.Process{{PID: 7, SMUtil: share(0.9)}, {PID: 8, SMUtil: share(0)}}
		}, busy: true},
		{name: "time-slicing idle", mutate: twoProcs},
		{name: "MPS in use", mutate: func(g *sample.GPU) { twoProcs(g); g.Values.Set(sample.MPSProcesses, 2) }, busy: true},
		{name: "exclusive process", mutate: func(g *sample.GPU) {
			twoProcs(g)
			g.Values.Set(sample.ComputeMode, sample.ComputeModeExclusiveProcess)
		}, busy: true},
		{name: "MPS unknown", mutate: func(g *sample.GPU) { twoProcs(g); g.Values.Set(sample.MPSProcesses, math.NaN()) }, busy: true},
		// MIG.
		{name: "MIG change pending", mutate: func(g *sample.GPU) { g.Values.Set(sample.MIGModePending, 1) },
			want: "mig_mode_pending:warning", in: "becomes on"},
		{name: "MIG on, single-GPU work", mutate: migOn,
			procs: &sample.NCCLHostProcesses{Processes: []sample.NCCLHostProcess{ncclRank(1, "a", []int{0}), ncclRank(2, "b", []int{1})}}},
		{name: "MIG on under a 2-GPU job", mutate: migOn,
			procs: &sample.NCCLHostProcesses{Processes: []sample.NCCLHostProcess{ncclRank(1, "a", []int{0}), ncclRank(2, "a", []int{1})}},
			want:  "mig_job_spans_gpus:warning", in: "pod a uses GPUs 0,1"},
		// NVLink: below the model's 18 and the peers'.
		{name: "two links down", mutate: linksDown(2), want: "nvlink_links_down:warning", in: "16 NVLink(s) up"},
		{name: "all links down, peers up", mutate: linksDown(18), want: "nvlink_links_down:critical", in: "have 18 up"},
		{name: "no NVLink listed, peers 18", mutate: func(g *sample.GPU) { g.Links = nil }, want: "nvlink_links_down:critical"},
		{name: "no NVLink listed on any GPU (a VM)", mutate: func(g *sample.GPU) { g.Links = nil }, both: true},
		{name: "unknown model, below its peers", mutate: func(g *sample.GPU) { g.Model = "NVIDIA X"; linksDown(3)(g) }},
		// Fabric.
		{name: "fabric not started", mutate: func(g *sample.GPU) { g.Values.Set(sample.FabricState, sample.FabricNotStarted) },
			want: "fabric_manager_not_ready:critical", in: "not started"},
		{name: "fabric failed", mutate: func(g *sample.GPU) { g.Values.Set(sample.FabricStatus, 3) },
			want: "fabric_manager_not_ready:critical", in: "error 3"},
		{name: "fabric completed, status unknown (DCGM)", mutate: func(g *sample.GPU) { g.Values.Set(sample.FabricStatus, math.NaN()) }},
		{name: "fabric not supported", mutate: func(g *sample.GPU) { g.Values.Set(sample.FabricState, sample.FabricNotSupported) }},
		// Driver CUDA: the driver supports 12.4.
		{name: "image needs 12.8", cuda: 12040,
			procs: &sample.NCCLHostProcesses{Processes: []sample.NCCLHostProcess{
				ncclRank(1, "a", []int{0}, "NVIDIA_REQUIRE_CUDA", "cuda>=12.8 brand=tesla,driver>=470,driver<471", "CUDA_VERSION", "12.8.0")}},
			want: "driver_cuda_too_old:critical", in: "process 1 on GPU 0 needs CUDA 12.8 (NVIDIA_REQUIRE_CUDA=cuda>=12.8)"},
		{name: "CUDA_VERSION alone", cuda: 12040,
			procs: &sample.NCCLHostProcesses{Processes: []sample.NCCLHostProcess{ncclRank(1, "a", []int{0}, "CUDA_VERSION", "13.0.1")}},
			want:  "driver_cuda_too_old:critical", in: "CUDA 13.0"},
		{name: "image needs 12.4", cuda: 12040,
			procs: &sample.NCCLHostProcesses{Processes: []sample.NCCLHostProcess{ncclRank(1, "a", []int{0}, "NVIDIA_REQUIRE_CUDA", "cuda>=12.4 brand=tesla,driver>=470")}}},
		{name: "driver's CUDA unknown",
			procs: &sample.NCCLHostProcesses{Processes: []sample.NCCLHostProcess{ncclRank(1, "a", []int{0}, "CUDA_VERSION", "13.0.1")}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			gpus := &sample.GPUs{Backend: "nvml", DriverVersion: "550.54.15", CUDADriverVersion: tc.cuda,
				Devices: []sample.GPU{configGPU(0, tc.mutate), configGPU(1, nil)}}
			if tc.both {
				gpus.Devices[1] = configGPU(1, tc.mutate)
			}
			// withoutDisabled: TestSeedConditionTestsFire switches the rules off.
			fs := withoutDisabled(auditGPUConfig(AuditInput{LastGPUs: gpus, NCCLProcesses: tc.procs, Busy: map[int]bool{0: tc.busy, 1: tc.busy}}))
			if got := checks(fs); got != tc.want {
				t.Fatalf("findings %q, want %q: %+v", got, tc.want, fs)
			}
			if tc.want != "" {
				if f := fs[0]; !strings.Contains(f.Summary, tc.in) || f.Fix == "" {
					t.Errorf("summary %q lacks %q (fix %q)", f.Summary, tc.in, f.Fix)
				}
			}
		})
	}
}

// The model table: SXM boards only, PCIe and NVL cards left to their bridges.
func TestExpectedNVLinks(t *testing.T) {
	for model, want := range map[string]int{
		"NVIDIA H100 80GB HBM3": 18, "NVIDIA H200": 18, "NVIDIA A100-SXM4-80GB": 12, "NVIDIA B200": 18,
		"NVIDIA H800": 8, "NVIDIA H100 PCIe": 0, "NVIDIA H100 NVL": 0, "NVIDIA H200 NVL": 0, "NVIDIA L40S": 0,
		"NVIDIA A100 80GB PCIe": 0, "NVIDIA GH200 480GB": 18,
	} {
		if got := expectedNVLinks(model); got != want {
			t.Errorf("%s: %d NVLinks, want %d", model, got, want)
		}
	}
}

// The checks reach /diagnose through Audit.
func TestAuditRunsGPUConfig(t *testing.T) {
	gpus := &sample.GPUs{Devices: []sample.GPU{configGPU(0, func(g *sample.GPU) { g.Values.Set(sample.FabricState, sample.FabricInProgress) })}}
	if got := checks(Audit(AuditInput{LastGPUs: gpus})); !strings.Contains(got, "fabric_manager_not_ready:critical") {
		t.Errorf("Audit: %s", got)
	}
}

// A GPU NVIDIA's driver does not drive is lost to the node's jobs: held by
// nouveau, or with no driver at all; one passed through to a VM is not.
func TestAuditGPUDriver(t *testing.T) {
	for _, tc := range []struct {
		name    string
		drivers map[string]int
		want    string
		summary string
	}{
		{name: "all on nvidia", drivers: map[string]int{"nvidia": 8}},
		{name: "passed through to VMs", drivers: map[string]int{"nvidia": 4, "vfio-pci": 4}},
		{name: "nouveau", drivers: map[string]int{"nouveau": 8}, want: "gpu_driver_missing:critical", summary: "8 of the 8 NVIDIA GPUs on the PCI bus are driven by nouveau"},
		{name: "driver not loaded", drivers: map[string]int{"none": 2}, want: "gpu_driver_missing:critical", summary: "NVIDIA's driver is not loaded"},
		{name: "one GPU not taken", drivers: map[string]int{"nvidia": 7, "none": 1}, want: "gpu_driver_missing:critical", summary: "1 of the 8 NVIDIA GPUs on the PCI bus have no driver bound while NVIDIA's drives the others"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs := Audit(AuditInput{Tuning: &sample.HostTuning{GPUPCIDrivers: tc.drivers}})
			var got []Finding
			for _, f := range fs {
				if f.Check == "gpu_driver_missing" {
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
