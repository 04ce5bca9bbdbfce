package collectors

import (
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/gpudiag/gpudiag/analyzers"
	"github.com/gpudiag/gpudiag/internal/hosttest"
)

// The reference host's GPU 4 runs in a Docker container limited to 0.5
// CPU (cgroup v2): between two samples 10 s apart its cgroup counts 100
// periods, 40 of them throttled, and 2.5 s throttled. Process 4343 and its
// worker 4344 ask for 96 OpenMP threads each on 64 allowed CPUs; 4343's
// memlock limit is Docker's 64 KiB.
func TestGPUProcessLimits(t *testing.T) {
	proc := numaCopyTree(t, fixtureProc)
	sys := numaCopyTree(t, fixtureSys)
	cg := filepath.Join(sys, "fs/cgroup/system.slice/docker-"+gpDockerContainer+".scope")
	hosttest.WriteFile(t, filepath.Join(cg, "cpu.max"), "50000 100000\n")
	hosttest.WriteFile(t, filepath.Join(sys, "fs/cgroup/system.slice/cpu.max"), "max 100000\n")
	stat := func(periods, throttled, usec int) {
		hosttest.WriteFile(t, filepath.Join(cg, "cpu.stat"), "usage_usec 1\nnr_periods "+strconv.Itoa(periods)+"\nnr_throttled "+strconv.Itoa(throttled)+"\nthrottled_usec "+strconv.Itoa(usec)+"\n")
	}
	stat(1000, 100, 5_000_000)
	env := "PATH=/usr/bin\x00OMP_NUM_THREADS=96\x00SECRET=x\x00"
	hosttest.WriteFile(t, filepath.Join(proc, "4343/environ"), env)
	hosttest.WriteFile(t, filepath.Join(proc, "4344/environ"), env)
	hosttest.WriteFile(t, filepath.Join(proc, "4343/limits"), "Limit                     Soft Limit           Hard Limit           Units     \n"+
		"Max locked memory         65536                65536                bytes     \n")
	hosttest.WriteFile(t, filepath.Join(proc, "4242/limits"), "Max locked memory         unlimited            unlimited            bytes     \n")

	c, clk := newGPUProcessTestCollector(t, proc, sys, numaFixtureGPURefs(), gpuProcessTestOptions)
	s := sampleGPUProcesses(t, c)
	g4 := s.GPUs[4]
	if g4.CPUCgroups != 1 || g4.CPUQuotaCores == nil || *g4.CPUQuotaCores != 0.5 || g4.CPUThrottledPeriodsRatio != nil {
		t.Fatalf("first sample: %s; want a 0.5-CPU quota and no ratio yet", gpDump(g4))
	}
	if p := gpFind(g4, 4344); p == nil || p.CPULimit == nil || p.CPULimit.QuotaCores != 0.5 || p.CPULimit.ThrottledPeriods != 100 || p.OMPNumThreads != 96 {
		t.Errorf("worker 4344: %s", gpDump(p))
	}
	if g4.OMPThreads != 192 || g4.OMPProcesses != 2 || g4.AllowedCPUs != 64 {
		t.Errorf("OpenMP: %d threads in %d processes on %d CPUs; want 192, 2, 64", g4.OMPThreads, g4.OMPProcesses, g4.AllowedCPUs)
	}
	if g4.MemlockBytes == nil || *g4.MemlockBytes != 65536 || g4.MemlockUnlimited {
		t.Errorf("memlock %v (unlimited %v); want 65536", g4.MemlockBytes, g4.MemlockUnlimited)
	}
	if g0 := s.GPUs[0]; g0.MemlockBytes != nil || !g0.MemlockUnlimited {
		t.Errorf("GPU 0 memlock %v, unlimited %v; want unlimited", g0.MemlockBytes, g0.MemlockUnlimited)
	}

	stat(1100, 140, 7_500_000)
	clk.t = clk.t.Add(10 * time.Second)
	s = sampleGPUProcesses(t, c)
	g4 = s.GPUs[4]
	if g4.CPUThrottledPeriodsRatio == nil || *g4.CPUThrottledPeriodsRatio != 0.4 ||
		g4.CPUThrottledSecondsPerSecond == nil || math.Abs(*g4.CPUThrottledSecondsPerSecond-0.25) > 1e-9 {
		t.Fatalf("second sample: %s; want 40%% of periods throttled, 0.25 s/s", gpDump(g4))
	}
	if g4.CPUPeriodsTotal != 100 || g4.CPUThrottledPeriodsTotal != 40 || math.Abs(g4.CPUThrottledSecondsTotal-2.5) > 1e-9 {
		t.Errorf("totals %v %v %v; want 100 40 2.5", g4.CPUPeriodsTotal, g4.CPUThrottledPeriodsTotal, g4.CPUThrottledSecondsTotal)
	}
	if len(g4.Errors) != 0 {
		t.Errorf("errors: %v", g4.Errors)
	}

	m := sampledMetrics{asEngine(c), s}
	exp := `
# HELP gpudiag_gpu_process_cpu_quota_cores CPU quota (CFS bandwidth limit) of the cgroups the GPU's processes and descendants run in, in CPUs: for each process the smallest over its cgroup and its ancestors (container, pod), the distinct cgroups summed. Absent when no quota applies.
# TYPE gpudiag_gpu_process_cpu_quota_cores gauge
gpudiag_gpu_process_cpu_quota_cores{gpu="4"} 0.5
# HELP gpudiag_gpu_process_cpu_throttled_seconds_total Time the GPU's processes' cgroups spent throttled by their CPU quota (cpu.stat throttled_usec; v1 throttled_time), since the daemon first saw them.
# TYPE gpudiag_gpu_process_cpu_throttled_seconds_total counter
gpudiag_gpu_process_cpu_throttled_seconds_total{gpu="4"} 2.5
# HELP gpudiag_gpu_process_memlock_limit_bytes Lowest RLIMIT_MEMLOCK (Max locked memory, soft) among the GPU's own processes without CAP_IPC_LOCK, which lifts it; +Inf when unlimited or lifted for every one. RDMA memory registration counts against it.
# TYPE gpudiag_gpu_process_memlock_limit_bytes gauge
gpudiag_gpu_process_memlock_limit_bytes{gpu="0"} +Inf
gpudiag_gpu_process_memlock_limit_bytes{gpu="4"} 65536
# HELP gpudiag_gpu_process_omp_threads Sum of OMP_NUM_THREADS over the GPU's processes and descendants that set it: the OpenMP threads they ask for.
# TYPE gpudiag_gpu_process_omp_threads gauge
gpudiag_gpu_process_omp_threads{gpu="4"} 192
`
	if err := testutil.CollectAndCompare(m, strings.NewReader(exp), "gpudiag_gpu_process_cpu_quota_cores",
		"gpudiag_gpu_process_cpu_throttled_seconds_total", "gpudiag_gpu_process_memlock_limit_bytes", "gpudiag_gpu_process_omp_threads"); err != nil {
		t.Error(err)
	}
	lintWithPromtool(t, m)

	// Granted CAP_IPC_LOCK, 4343 is no longer held by its 64 KiB.
	gpReplaceIn(t, filepath.Join(proc, "4343/status"), "CapEff:\t0000000000000000", "CapEff:\t0000000000004000")
	clk.t = clk.t.Add(10 * time.Second)
	g4 = sampleGPUProcesses(t, c).GPUs[4]
	if p := gpFind(g4, 4343); p == nil || !p.IPCLock || p.MemlockBytes == nil || g4.MemlockBytes != nil || !g4.MemlockUnlimited {
		t.Errorf("with CAP_IPC_LOCK: process %s, GPU memlock %v unlimited %v; want the limit lifted", gpDump(p), g4.MemlockBytes, g4.MemlockUnlimited)
	}
}

// Real kernel: a spinning shell in a cgroup limited to 0.1 CPU, passed as
// a GPU process; the collector's per-process read sees the quota and the
// cgroup's throttled periods rise, and the GPU's interval share is high.
//
// GPUDIAG_TEST_THROTTLED_PID and GPUDIAG_TEST_THROTTLED_CGROUP name such a
// process made by the caller instead: for a run inside a cgroup namespace
// of its own, which cannot move a process to a cgroup outside it.
func TestGPUProcessThrottledLive(t *testing.T) {
	var pid, version int
	var cgPath string
	if env := os.Getenv("GPUDIAG_TEST_THROTTLED_PID"); env != "" {
		var err error
		if pid, err = strconv.Atoi(env); err != nil {
			t.Fatal(err)
		}
		cgPath, version = os.Getenv("GPUDIAG_TEST_THROTTLED_CGROUP"), 2
	} else {
		pid, cgPath, version = hosttest.ThrottledCgroup(t)
	}
	refs := []GPURef{{Index: 0, PCIBusID: "", PIDs: []uint32{uint32(pid)}}}
	c, clk := newGPUProcessTestCollector(t, "/proc", "/sys", refs, gpuProcessTestOptions)
	first := sampleGPUProcesses(t, c).GPUs[0]
	time.Sleep(time.Second)
	clk.t = clk.t.Add(time.Second)
	s := sampleGPUProcesses(t, c)
	second := s.GPUs[0]
	p0, p1 := gpFind(first, pid), gpFind(second, pid)
	if p0 == nil || p1 == nil || p0.CPULimit == nil || p1.CPULimit == nil {
		t.Fatalf("shell not read with its cgroup: %s / %s", gpDump(first), gpDump(second))
	}
	t.Logf("cgroup v%d %s: %+v → %+v; GPU: quota %v, throttled share %v, %v s/s", version, cgPath, *p0.CPULimit, *p1.CPULimit,
		deref(second.CPUQuotaCores), deref(second.CPUThrottledPeriodsRatio), deref(second.CPUThrottledSecondsPerSecond))
	if p1.CPULimit.Cgroup != cgPath || p1.CPULimit.QuotaCores != 0.1 {
		t.Errorf("limit %+v; want 0.1 CPU at %s", *p1.CPULimit, cgPath)
	}
	if p1.CPULimit.ThrottledPeriods <= p0.CPULimit.ThrottledPeriods {
		t.Errorf("nr_throttled did not rise: %d → %d", p0.CPULimit.ThrottledPeriods, p1.CPULimit.ThrottledPeriods)
	}
	// Alone on its CPU the shell is throttled in every period; on a
	// loaded machine it gets less than its quota in some. The finding's
	// threshold is the bar.
	if r := second.CPUThrottledPeriodsRatio; r == nil || *r < analyzers.CPUThrottledWarn {
		t.Errorf("throttled share %v; want at least %v", deref(r), analyzers.CPUThrottledWarn)
	}
	// The audit, from what the kernel counted. The machine's own limits
	// (its memlock, its /dev/shm) may add findings of their own.
	found := false
	for _, f := range analyzers.Audit(analyzers.AuditInput{Processes: s}) {
		t.Logf("finding %s: %s", f.Check, f.Summary)
		found = found || f.Check == "cpu_quota_throttled"
	}
	if !found {
		t.Error("no cpu_quota_throttled finding")
	}
}

func deref(p *float64) float64 {
	if p == nil {
		return math.NaN()
	}
	return *p
}

// Real kernel: a process in a mount namespace of its own with an 8 MiB
// tmpfs on /dev/shm, 2 MiB used, passed as a GPU process: the collector
// reads its /dev/shm, not the daemon's.
func TestGPUProcessDevShmLive(t *testing.T) {
	child := hosttest.PrivateDevShm(t)
	c, _ := newGPUProcessTestCollector(t, "/proc", "/sys", []GPURef{{Index: 0, PIDs: []uint32{uint32(child)}}}, gpuProcessTestOptions)
	g := sampleGPUProcesses(t, c).GPUs[0]
	t.Logf("GPU process %d: /dev/shm %+v", child, g.DevShm)
	if g.DevShm == nil || !g.DevShm.Tmpfs || g.DevShm.SizeBytes != 8<<20 || g.DevShm.UsedBytes != 2<<20 {
		t.Fatalf("/dev/shm %+v; want an 8 MiB tmpfs with 2 MiB used", g.DevShm)
	}
}

// The daemon (pid 999) runs in a cgroup namespace of its own, the root of
// which is its container's cgroup three levels below the host's: init's
// and the GPU processes' cgroups read "/../../../…" to it. The collector
// finds the root by the daemon's pid and reads the host's hierarchy.
func TestGPUProcessCgroupNamespace(t *testing.T) {
	proc := numaCopyTree(t, fixtureProc)
	sys := numaCopyTree(t, fixtureSys)
	docker := "/system.slice/docker-" + gpDockerContainer + ".scope"
	hosttest.WriteFile(t, filepath.Join(proc, "1/cgroup"), "0::/../../../init.scope\n")
	hosttest.WriteFile(t, filepath.Join(proc, "1/stat"), "1 (systemd) S 0 1 1 0 -1 4194560 0 0 0 0 0 0 0 0 20 0 1 0 1 0 0 18446744073709551615 0 0 0 0 0 0 0 0 0 0 0 0 17 0 0 0 0 0 0\n")
	for _, pid := range []string{"4343", "4344"} {
		hosttest.WriteFile(t, filepath.Join(proc, pid, "cgroup"), "0::/../../.."+docker+"\n")
	}
	hosttest.WriteFile(t, filepath.Join(sys, "fs/cgroup/kubepods.slice/kubepods-pod9.slice/cri-containerd-gpudiag.scope/cgroup.procs"), "999\n")
	c, _ := newGPUProcessTestCollector(t, proc, sys, numaFixtureGPURefs(), gpuProcessTestOptions)
	c.self = 999
	g4 := sampleGPUProcesses(t, c).GPUs[4]
	p := gpFind(g4, 4343)
	if p == nil || p.CPULimit == nil || p.CPULimit.Cgroup != docker || p.CPULimit.QuotaCores != 4 || g4.CPUQuotaCores == nil {
		t.Fatalf("4343 from a cgroup namespace: %s; want the 4-CPU quota of %s", gpDump(p), docker)
	}
	if c.cgroupNS != "/kubepods.slice/kubepods-pod9.slice/cri-containerd-gpudiag.scope" {
		t.Errorf("namespace root %q", c.cgroupNS)
	}
}

// A GPU process's memlock limit and CAP_IPC_LOCK are read with its
// placement: every sample while it is young, then every
// processAttrInterval; an exec makes them due at once.
func TestGPUProcessMemlockReadWhenDue(t *testing.T) {
	proc := numaCopyTree(t, fixtureProc)
	limits := filepath.Join(proc, "4343/limits")
	setLimit := func(v string) {
		hosttest.WriteFile(t, limits, "Max locked memory         "+v+"                "+v+"                bytes     \n")
	}
	setLimit("65536")
	c, clk := newGPUProcessTestCollector(t, proc, fixtureSys, numaFixtureGPURefs(), gpuProcessTestOptions)
	memlock := func(when string, want uint64) {
		t.Helper()
		g4 := sampleGPUProcesses(t, c).GPUs[4]
		if g4.MemlockBytes == nil || *g4.MemlockBytes != want {
			t.Errorf("%s: memlock %v; want %d", when, g4.MemlockBytes, want)
		}
	}
	step := func(d time.Duration) { clk.t = clk.t.Add(d) }
	memlock("first sample", 65536)
	setLimit("131072")
	step(5 * time.Second)
	memlock("young: read every sample", 131072)
	step(processAttrInterval)
	memlock("read again at the interval", 131072)
	setLimit("262144")
	step(5 * time.Second)
	memlock("old: the last reading stands", 131072)
	step(processAttrInterval - 5*time.Second)
	memlock("due again", 262144)
	setLimit("524288")
	gpReplaceIn(t, filepath.Join(proc, "4343/stat"), "(pt_main_thread)", "(python3)")
	step(5 * time.Second)
	memlock("after an exec", 524288)
}
