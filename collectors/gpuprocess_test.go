package collectors

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/procfs"
	"go.uber.org/zap"

	"github.com/gpudiag/gpudiag/hostfs"
	"github.com/gpudiag/gpudiag/internal/hosttest"
	"github.com/gpudiag/gpudiag/sample"
)

var gpuProcessTestOptions = gpuProcessDefaults

func newGPUProcessTestCollector(t *testing.T, procPath, sysPath string, refs []GPURef, opts gpuProcessOptions) (*gpuProcessCollector, *fakeClock) {
	t.Helper()
	shared := &Shared{}
	shared.SetGPUs(refs)
	c, err := newGPUProcessCollector(Config{ProcPath: procPath, SysPath: sysPath, Logger: zap.NewNop(), Shared: shared}, opts)
	if err != nil {
		t.Fatal(err)
	}
	clk := &fakeClock{t: time.Unix(1_700_000_000, 0)}
	c.now = clk.now
	return c, clk
}

func sampleGPUProcesses(t *testing.T, c *gpuProcessCollector) *sample.GPUProcesses {
	return sampleAs[sample.GPUProcesses](t, c)
}

func gpF64(v float64) *float64 { return &v }

const (
	gpPodContainer    = "3f9a1c2b4d5e6f708192a3b4c5d6e7f8091a2b3c4d5e6f708192a3b4c5d6e7f8"
	gpDockerContainer = "8c1d2e3f4a5b6c7d8e9f0a1b2c3d4e5f6a7b8c9d0e1f2a3b4c5d6e7f8a9b0c1d"
)

// PID 4242 on GPU 0 is well placed; PID 4343 on GPU 4 may only run on node 0
// and has 75% of its memory there, while GPU 4 sits on node 1; its
// DataLoader worker 4344 waits on the disk.
func TestGPUProcessFixture(t *testing.T) {
	c, _ := newGPUProcessTestCollector(t, fixtureProc, fixtureSys, numaFixtureGPURefs(), gpuProcessTestOptions)
	s := sampleGPUProcesses(t, c)
	if len(s.GPUs) != 8 {
		t.Fatalf("%d GPUs; want 8", len(s.GPUs))
	}
	if s.DescendantSource != "children_file" {
		t.Errorf("descendant source %q; want children_file", s.DescendantSource)
	}
	onNode0 := []sample.NodeBytes{{Node: 0, Bytes: 27042091008}}
	want0 := sample.GPUProcessGroup{
		GPU: 0, PCIBusID: "0000:18:00.0", NUMANode: 0, LocalCPUList: "0-31,64-95",
		Processes: []sample.GPUProcess{{
			PID: 4242, PPID: 4200, StartTicks: 5000000, Comm: "pt_main_thread", OnGPU: true, Depth: 0,
			State: "R", Threads: 4, ThreadStates: map[string]int{"R": 1, "S": 3},
			CPUsAllowedList: "0-31,64-95", MemsAllowedList: "0", CPUsAllowed: 64, CPUsOffNodeRatio: gpF64(0),
			UserSeconds: 7200, SystemSeconds: 360,
			IO:                  &sample.ProcessIO{StorageReadBytes: 53687091200, SyscallReadBytes: 912345678901, ReadSyscalls: 48211},
			ResidentBytesByNode: onNode0, RemoteMemoryRatio: gpF64(0),
			Cgroup:      "/kubepods.slice/kubepods-pod6f1e2a3b_4c5d_4e6f_8a9b_0c1d2e3f4a5b.slice/cri-containerd-" + gpPodContainer + ".scope",
			ContainerID: gpPodContainer, PodUID: "6f1e2a3b-4c5d-4e6f-8a9b-0c1d2e3f4a5b", MemlockUnlimited: true,
		}},
		RemoteMemoryRatio: gpF64(0), CPUsOffNodeRatio: gpF64(0), ResidentBytesByNode: onNode0,
		Threads: 4, IOWaitThreads: 0, IOWaitThreadsRatio: gpF64(0), AllowedCPUs: 64, MemlockUnlimited: true,
	}
	if got := s.GPUs[0]; !reflect.DeepEqual(got, want0) {
		t.Errorf("GPU 0:\n got %s\nwant %s", gpDump(got), gpDump(want0))
	}

	dockerCgroup := "/system.slice/docker-" + gpDockerContainer + ".scope"
	// The container is limited to 4 CPUs and was never throttled; its
	// /dev/shm is a directory of the fixture, whose size is the test
	// machine's filesystem's.
	limit := &sample.CPULimit{Cgroup: dockerCgroup, QuotaCores: 4, Periods: 52000}
	shm := s.GPUs[4].DevShm
	if shm == nil || shm.Tmpfs || len(s.GPUs[4].Processes) == 0 || s.GPUs[4].Processes[0].DevShm != shm {
		t.Fatalf("GPU 4's /dev/shm: %+v; want the fixture's directory, not a tmpfs", shm)
	}
	mixed := []sample.NodeBytes{{Node: 0, Bytes: 20280520704}, {Node: 1, Bytes: 6760173568}}
	want4 := sample.GPUProcessGroup{
		GPU: 4, PCIBusID: "0000:9a:00.0", NUMANode: 1, LocalCPUList: "32-63,96-127",
		Processes: []sample.GPUProcess{{
			PID: 4343, PPID: 4300, StartTicks: 5100000, Comm: "pt_main_thread", OnGPU: true, Depth: 0,
			State: "S", Threads: 4, ThreadStates: map[string]int{"S": 3, "D": 1},
			CPUsAllowedList: "0-31,64-95", MemsAllowedList: "0-1", CPUsAllowed: 64, CPUsOffNodeRatio: gpF64(1),
			UserSeconds: 5400, SystemSeconds: 900, ChildrenUserSeconds: 120, ChildrenSystemSeconds: 30,
			IO:                  &sample.ProcessIO{StorageReadBytes: 107374182400, SyscallReadBytes: 432198765432, ReadSyscalls: 3918274},
			ResidentBytesByNode: mixed, RemoteMemoryRatio: gpF64(0.75),
			Cgroup: dockerCgroup, ContainerID: gpDockerContainer,
			CPULimit: limit, OMPNumThreads: 8, MemlockUnlimited: true, DevShm: shm,
		}, {
			PID: 4344, PPID: 4343, StartTicks: 5100500, Comm: "pt_data_worker", OnGPU: false, Depth: 1,
			State: "D", Threads: 1, ThreadStates: map[string]int{"D": 1},
			CPUsAllowedList: "0-31,64-95", MemsAllowedList: "0-1", CPUsAllowed: 64, CPUsOffNodeRatio: gpF64(1),
			UserSeconds: 1800, SystemSeconds: 450,
			IO:     &sample.ProcessIO{StorageReadBytes: 268435456000, SyscallReadBytes: 274877906944, ReadSyscalls: 8388608},
			Cgroup: dockerCgroup, ContainerID: gpDockerContainer, CPULimit: limit,
		}},
		RemoteMemoryRatio: gpF64(0.75), CPUsOffNodeRatio: gpF64(1), CPUsFullyRemote: true, ResidentBytesByNode: mixed,
		Threads: 5, IOWaitThreads: 2, IOWaitThreadsRatio: gpF64(0.4), AllowedCPUs: 64,
		CPUCgroups: 1, CPUQuotaCores: gpF64(4), OMPThreads: 8, OMPProcesses: 1, MemlockUnlimited: true, DevShm: shm,
	}
	if got := s.GPUs[4]; !reflect.DeepEqual(got, want4) {
		t.Errorf("GPU 4:\n got %s\nwant %s", gpDump(got), gpDump(want4))
	}
	for _, i := range []int{1, 2, 3, 5, 6, 7} {
		g := s.GPUs[i]
		if len(g.Processes) != 0 || g.RemoteMemoryRatio != nil || g.CPUsOffNodeRatio != nil || g.IOWaitThreadsRatio != nil {
			t.Errorf("GPU %d has no process, yet %s", i, gpDump(g))
		}
	}

	m := sampledMetrics{asEngine(c), s}
	exp := `
# HELP gpudiag_gpu_process_cpus_off_node_ratio Largest share, among the GPU's processes, of a process's allowed CPUs outside the GPU's local CPUs; 1 means it can only run on another node. Absent when the GPU's node is unknown.
# TYPE gpudiag_gpu_process_cpus_off_node_ratio gauge
gpudiag_gpu_process_cpus_off_node_ratio{gpu="0"} 0
gpudiag_gpu_process_cpus_off_node_ratio{gpu="4"} 1
# HELP gpudiag_gpu_process_descendants Descendant processes of the GPU's processes (DataLoader workers and the like) read at the last sample.
# TYPE gpudiag_gpu_process_descendants gauge
gpudiag_gpu_process_descendants{gpu="0"} 0
gpudiag_gpu_process_descendants{gpu="1"} 0
gpudiag_gpu_process_descendants{gpu="2"} 0
gpudiag_gpu_process_descendants{gpu="3"} 0
gpudiag_gpu_process_descendants{gpu="4"} 1
gpudiag_gpu_process_descendants{gpu="5"} 0
gpudiag_gpu_process_descendants{gpu="6"} 0
gpudiag_gpu_process_descendants{gpu="7"} 0
# HELP gpudiag_gpu_process_io_wait_threads_ratio Share of the threads of the GPU's processes and their descendants found in uninterruptible sleep (D state, mostly waiting on storage): main threads as of the last sample, the others as of their process's last census (taken every sample while one of its threads waits, else every 30 s while the host's I/O stall grows by 1% of the time, and at least every 5 min; a process first seen while the host's I/O is quiet has its other threads counted as not waiting until its first census).
# TYPE gpudiag_gpu_process_io_wait_threads_ratio gauge
gpudiag_gpu_process_io_wait_threads_ratio{gpu="0"} 0
gpudiag_gpu_process_io_wait_threads_ratio{gpu="4"} 0.4
# HELP gpudiag_gpu_process_remote_memory_ratio Largest share, among the GPU's processes, of a process's resident memory on NUMA nodes other than the GPU's (from numa_maps). Absent when the GPU's node is unknown.
# TYPE gpudiag_gpu_process_remote_memory_ratio gauge
gpudiag_gpu_process_remote_memory_ratio{gpu="0"} 0
gpudiag_gpu_process_remote_memory_ratio{gpu="4"} 0.75
# HELP gpudiag_gpu_process_resident_memory_bytes Resident memory of the GPU's processes by NUMA node, from numa_maps (pages shared between processes count in each).
# TYPE gpudiag_gpu_process_resident_memory_bytes gauge
gpudiag_gpu_process_resident_memory_bytes{gpu="0",numa_node="0"} 2.7042091008e+10
gpudiag_gpu_process_resident_memory_bytes{gpu="4",numa_node="0"} 2.0280520704e+10
gpudiag_gpu_process_resident_memory_bytes{gpu="4",numa_node="1"} 6.760173568e+09
`
	if err := testutil.CollectAndCompare(m, strings.NewReader(exp), "gpudiag_gpu_process_cpus_off_node_ratio",
		"gpudiag_gpu_process_descendants", "gpudiag_gpu_process_io_wait_threads_ratio",
		"gpudiag_gpu_process_remote_memory_ratio", "gpudiag_gpu_process_resident_memory_bytes"); err != nil {
		t.Error(err)
	}
	for name, n := range map[string]int{
		"gpudiag_gpu_process_cpu_seconds_total": 16, "gpudiag_gpu_process_storage_read_bytes_total": 8,
		"gpudiag_gpu_process_syscall_read_bytes_total": 8, "gpudiag_gpu_process_read_syscalls_total": 8,
		"gpudiag_gpu_process_unread_processes": 8,
	} {
		if got := testutil.CollectAndCount(m, name); got != n {
			t.Errorf("%s: %d series; want %d", name, got, n)
		}
	}
	lintWithPromtool(t, m)
}

func gpDump(v any) string { return fmt.Sprintf("%+v", v) }

// The counters integrate what the process tree did while watched, each CPU
// second and byte once: a worker born since the last sample counts in full,
// and a worker that exits hands its totals to its parent's cutime and io
// counters without being counted twice.
func TestGPUProcessAccounting(t *testing.T) {
	proc := numaCopyTree(t, fixtureProc)
	c, clk := newGPUProcessTestCollector(t, proc, fixtureSys, numaFixtureGPURefs(), gpuProcessTestOptions)
	s := sampleGPUProcesses(t, c)
	g4 := s.GPUs[4]
	if g4.UserSecondsTotal != 0 || g4.StorageReadBytesTotal != 0 || s.IntervalSeconds != 0 {
		t.Fatalf("first sample counts the processes' past: %s", gpDump(g4))
	}

	// 10 s later: 4343 used 8 s user + 1 s system and read 1 MB from
	// storage; worker 4344 5 s + 1 s and 4 GB; a new worker 4345 was born
	// and used 3 s + 0.5 s and read 2 MB; GPU 0's 4242 used 10 s.
	gpStat(t, proc, 4343, map[int]int{14: 540800, 15: 90100})
	gpIO(t, proc, 4343, map[string]int{"read_bytes": 1_000_000, "rchar": 5_000_000, "syscr": 100})
	gpStat(t, proc, 4344, map[int]int{14: 180500, 15: 45100})
	gpIO(t, proc, 4344, map[string]int{"read_bytes": 4_000_000_000, "rchar": 4_000_000_000, "syscr": 1000})
	gpCloneProcess(t, proc, 4344, 4345, 5200000)
	gpStat(t, proc, 4345, map[int]int{14: 300, 15: 50})
	gpSetIO(t, proc, 4345, map[string]uint64{"read_bytes": 2_000_000, "rchar": 2_000_000, "syscr": 10})
	hosttest.WriteFile(t, filepath.Join(proc, "4343/task/4343/children"), "4344 4345 ")
	gpStat(t, proc, 4242, map[int]int{14: 721000})
	clk.t = clk.t.Add(10 * time.Second)
	s = sampleGPUProcesses(t, c)
	g4 = s.GPUs[4]
	if s.IntervalSeconds != 10 {
		t.Errorf("interval %v; want 10", s.IntervalSeconds)
	}
	gpExpectTotals(t, "after growth", g4, 16, 2.5, 4_003_000_000, 4_007_000_000, 1110)
	if g4.CPUCoresUsed != 1.85 || g4.StorageReadBytesPerSecond != 400_300_000 {
		t.Errorf("rates: %v cores, %v B/s; want 1.85, 400300000", g4.CPUCoresUsed, g4.StorageReadBytesPerSecond)
	}
	if w := gpFind(g4, 4344); w == nil || w.CPUCoresUsed == nil || *w.CPUCoresUsed != 0.6 {
		t.Errorf("worker 4344's own CPU use: %s; want 0.6 cores", gpDump(w))
	}
	if w := gpFind(g4, 4345); w == nil || w.CPUCoresUsed != nil || w.Depth != 1 {
		t.Errorf("new worker 4345: %s; want depth 1 and no rate yet", gpDump(w))
	}
	if s.GPUs[0].UserSecondsTotal != 10 {
		t.Errorf("GPU 0 user seconds %v; want 10", s.GPUs[0].UserSecondsTotal)
	}

	// 4344 ran 2 s more and read 1 MB more, exited and was reaped: 4343's
	// cutime/cstime and io now hold 4344's final totals. 4343 itself used
	// 1 s. Only 1 + 2 s and 1 MB are new.
	gpStat(t, proc, 4343, map[int]int{14: 540900, 16: 12000 + 180700, 17: 3000 + 45100})
	final := uint64(268435456000 + 4_000_000_000 + 1_000_000)
	gpSetIO(t, proc, 4343, map[string]uint64{
		"read_bytes": 107374182400 + 1_000_000 + final, "rchar": 432198765432 + 5_000_000 + 274877906944 + 4_000_000_000,
		"syscr": 3918274 + 100 + 8388608 + 1000,
	})
	if err := os.RemoveAll(filepath.Join(proc, "4344")); err != nil {
		t.Fatal(err)
	}
	hosttest.WriteFile(t, filepath.Join(proc, "4343/task/4343/children"), "4345 ")
	clk.t = clk.t.Add(10 * time.Second)
	s = sampleGPUProcesses(t, c)
	g4 = s.GPUs[4]
	gpExpectTotals(t, "after the worker exited", g4, 19, 2.5, 4_004_000_000, 4_007_000_000, 1110)
	if gpFind(g4, 4344) != nil {
		t.Error("vanished worker 4344 still listed")
	}
	if len(g4.Errors) != 0 {
		t.Errorf("errors: %v", g4.Errors)
	}
}

func gpExpectTotals(t *testing.T, when string, g sample.GPUProcessGroup, user, system, storage, syscallBytes, syscalls float64) {
	t.Helper()
	got := []float64{g.UserSecondsTotal, g.SystemSecondsTotal, g.StorageReadBytesTotal, g.SyscallReadBytesTotal, g.ReadSyscallsTotal}
	want := []float64{user, system, storage, syscallBytes, syscalls}
	for i := range got {
		if diff := got[i] - want[i]; diff > 1e-6 || diff < -1e-6 {
			t.Errorf("%s: totals (user, system, storage, syscall bytes, syscalls) = %v; want %v", when, got, want)
			return
		}
	}
}

func gpFind(g sample.GPUProcessGroup, pid int) *sample.GPUProcess {
	for i := range g.Processes {
		if g.Processes[i].PID == pid {
			return &g.Processes[i]
		}
	}
	return nil
}

// gpStat sets fields (1-based, as in proc(5): 14 utime, 15 stime, 16 cutime,
// 17 cstime) of /proc/<pid>/stat and its main thread's stat.
func gpStat(t *testing.T, proc string, pid int, fields map[int]int) {
	t.Helper()
	for _, path := range []string{
		filepath.Join(proc, strconv.Itoa(pid), "stat"),
		filepath.Join(proc, strconv.Itoa(pid), "task", strconv.Itoa(pid), "stat"),
	} {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		line := strings.TrimSpace(string(b))
		r := strings.LastIndex(line, ")")
		rest := strings.Fields(line[r+2:]) // field 3 onwards
		for n, v := range fields {
			rest[n-3] = strconv.Itoa(v)
		}
		hosttest.WriteFile(t, path, line[:r+2]+strings.Join(rest, " ")+"\n")
	}
}

// gpIO adds to counters of /proc/<pid>/io; gpSetIO sets them.
func gpIO(t *testing.T, proc string, pid int, add map[string]int) {
	t.Helper()
	p, err := procfs.NewFS(proc)
	if err != nil {
		t.Fatal(err)
	}
	pr, err := p.Proc(pid)
	if err != nil {
		t.Fatal(err)
	}
	cur, err := pr.IO()
	if err != nil {
		t.Fatal(err)
	}
	gpSetIO(t, proc, pid, map[string]uint64{
		"read_bytes": cur.ReadBytes + uint64(add["read_bytes"]),
		"rchar":      cur.RChar + uint64(add["rchar"]),
		"syscr":      cur.SyscR + uint64(add["syscr"]),
	})
}

func gpSetIO(t *testing.T, proc string, pid int, set map[string]uint64) {
	t.Helper()
	path := filepath.Join(proc, strconv.Itoa(pid), "io")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		key, _, _ := strings.Cut(line, ":")
		if v, ok := set[key]; ok {
			line = fmt.Sprintf("%s: %d", key, v)
		}
		out = append(out, line)
	}
	hosttest.WriteFile(t, path, strings.Join(out, "\n")+"\n")
}

// gpCloneProcess copies /proc/<from> to /proc/<to> with a new PID and start
// time, and its counters zeroed.
func gpCloneProcess(t *testing.T, proc string, from, to int, start uint64) {
	t.Helper()
	src := filepath.Join(proc, strconv.Itoa(from))
	dst := numaCopyTree(t, src)
	if err := os.Rename(filepath.Join(dst, "task", strconv.Itoa(from)), filepath.Join(dst, "task", strconv.Itoa(to))); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(dst, filepath.Join(proc, strconv.Itoa(to))); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{
		filepath.Join(proc, strconv.Itoa(to), "stat"),
		filepath.Join(proc, strconv.Itoa(to), "task", strconv.Itoa(to), "stat"),
	} {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		_, rest, _ := strings.Cut(string(b), " ")
		hosttest.WriteFile(t, path, strconv.Itoa(to)+" "+rest)
	}
	gpStat(t, proc, to, map[int]int{14: 0, 15: 0, 16: 0, 17: 0, 22: int(start)})
	gpSetIO(t, proc, to, map[string]uint64{"read_bytes": 0, "rchar": 0, "syscr": 0})
}

// A PID the driver lists but /proc does not have (exited, or another PID
// namespace) is skipped without failing the sample.
func TestGPUProcessVanishedPID(t *testing.T) {
	refs := numaFixtureGPURefs()
	refs[0].PIDs = []uint32{999999, 4242}
	c, _ := newGPUProcessTestCollector(t, fixtureProc, fixtureSys, refs, gpuProcessTestOptions)
	s := sampleGPUProcesses(t, c)
	g := s.GPUs[0]
	if len(g.Processes) != 1 || g.Processes[0].PID != 4242 || len(g.Errors) != 0 || g.Unread != 0 {
		t.Errorf("GPU 0: %s; want only 4242", gpDump(g))
	}
}

// In a VM the GPU's node is -1: placement is unknown and not reported as 0;
// memory per node and thread states still are.
func TestGPUProcessUnknownGPUNode(t *testing.T) {
	_, sys := numaWriteVMHost(t)
	refs := []GPURef{{Index: 0, PCIBusID: "0000:00:05.0", PIDs: []uint32{4343}}}
	c, _ := newGPUProcessTestCollector(t, fixtureProc, sys, refs, gpuProcessTestOptions)
	s := sampleGPUProcesses(t, c)
	g := s.GPUs[0]
	if g.NUMANode != -1 || g.RemoteMemoryRatio != nil || g.CPUsOffNodeRatio != nil || g.CPUsFullyRemote {
		t.Errorf("placement guessed for a GPU on an unknown node: %s", gpDump(g))
	}
	for _, p := range g.Processes {
		if p.RemoteMemoryRatio != nil || p.CPUsOffNodeRatio != nil {
			t.Errorf("process %d has placement ratios: %s", p.PID, gpDump(p))
		}
	}
	if len(g.ResidentBytesByNode) != 2 || g.IOWaitThreadsRatio == nil || *g.IOWaitThreadsRatio != 0.4 {
		t.Errorf("memory per node %v, I/O wait ratio %v", g.ResidentBytesByNode, g.IOWaitThreadsRatio)
	}
	m := sampledMetrics{asEngine(c), s}
	for _, name := range []string{"gpudiag_gpu_process_remote_memory_ratio", "gpudiag_gpu_process_cpus_off_node_ratio"} {
		if n := testutil.CollectAndCount(m, name); n != 0 {
			t.Errorf("%s exported for a GPU on an unknown node", name)
		}
	}
	if n := testutil.CollectAndCount(m, "gpudiag_gpu_process_io_wait_threads_ratio"); n != 1 {
		t.Errorf("io_wait_threads_ratio: %d series; want 1", n)
	}
}

// The cap reads the GPUs' own processes first, then descendants; what is
// left is reported unread. An unread worker is not taken for an exited one:
// when the cap lets it be read again, only what it did since its last
// reading counts.
func TestGPUProcessCap(t *testing.T) {
	proc := numaCopyTree(t, fixtureProc)
	c, clk := newGPUProcessTestCollector(t, proc, fixtureSys, numaFixtureGPURefs(), gpuProcessTestOptions)
	sampleGPUProcesses(t, c)

	c.opts.maxProcesses = 2
	gpStat(t, proc, 4344, map[int]int{14: 180500}) // 5 s of user time
	clk.t = clk.t.Add(10 * time.Second)
	s := sampleGPUProcesses(t, c)
	if g := s.GPUs[0]; len(g.Processes) != 1 || g.Unread != 0 {
		t.Errorf("GPU 0: %s", gpDump(g))
	}
	g4 := s.GPUs[4]
	if len(g4.Processes) != 1 || g4.Processes[0].PID != 4343 || g4.Unread != 1 || g4.UserSecondsTotal != 0 {
		t.Errorf("GPU 4: %d processes, %d unread, %v user seconds; want 4343 read, its worker unread, 0 s",
			len(g4.Processes), g4.Unread, g4.UserSecondsTotal)
	}
	exp := `
# HELP gpudiag_gpu_process_unread_processes Processes of the GPU or their descendants left unread at the last sample because of --collector.gpuprocess.max-processes.
# TYPE gpudiag_gpu_process_unread_processes gauge
gpudiag_gpu_process_unread_processes{gpu="0"} 0
gpudiag_gpu_process_unread_processes{gpu="1"} 0
gpudiag_gpu_process_unread_processes{gpu="2"} 0
gpudiag_gpu_process_unread_processes{gpu="3"} 0
gpudiag_gpu_process_unread_processes{gpu="4"} 1
gpudiag_gpu_process_unread_processes{gpu="5"} 0
gpudiag_gpu_process_unread_processes{gpu="6"} 0
gpudiag_gpu_process_unread_processes{gpu="7"} 0
`
	if err := testutil.CollectAndCompare(sampledMetrics{asEngine(c), s}, strings.NewReader(exp), "gpudiag_gpu_process_unread_processes"); err != nil {
		t.Error(err)
	}

	c.opts.maxProcesses = 256
	clk.t = clk.t.Add(10 * time.Second)
	s = sampleGPUProcesses(t, c)
	if g4 := s.GPUs[4]; g4.Unread != 0 || g4.UserSecondsTotal != 5 {
		t.Errorf("cap lifted: %d unread, %v user seconds; want 0 and the worker's 5 s", g4.Unread, g4.UserSecondsTotal)
	}
}

// Kernels without CONFIG_PROC_CHILDREN have no task/<tid>/children: workers
// are then found by their parent PID in every /proc/<pid>/stat.
func TestGPUProcessFindsChildrenByParentScan(t *testing.T) {
	proc := numaCopyTree(t, fixtureProc)
	matches, err := filepath.Glob(filepath.Join(proc, "*/task/*/children"))
	if err != nil || len(matches) == 0 {
		t.Fatalf("children files: %v %v", matches, err)
	}
	for _, m := range matches {
		if err := os.Remove(m); err != nil {
			t.Fatal(err)
		}
	}
	c, _ := newGPUProcessTestCollector(t, proc, fixtureSys, numaFixtureGPURefs(), gpuProcessTestOptions)
	s := sampleGPUProcesses(t, c)
	if s.DescendantSource != "ppid_scan" {
		t.Errorf("descendant source %q; want ppid_scan", s.DescendantSource)
	}
	if w := gpFind(s.GPUs[4], 4344); w == nil || w.Depth != 1 || w.Comm != "pt_data_worker" {
		t.Errorf("worker not found: %s", gpDump(s.GPUs[4]))
	}
}

// A malformed numa_maps leaves the process's memory placement unknown and
// names the file and line; the rest of the sample stands.
func TestGPUProcessMalformedNUMAMaps(t *testing.T) {
	proc := numaCopyTree(t, fixtureProc)
	path := filepath.Join(proc, "4343/numa_maps")
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString("7ffc12500000 default anon=3 dirty=3 N1=3 kernelpage"); err != nil {
		t.Fatal(err)
	}
	f.Close()
	c, _ := newGPUProcessTestCollector(t, proc, fixtureSys, numaFixtureGPURefs(), gpuProcessTestOptions)
	s := sampleGPUProcesses(t, c)
	g4 := s.GPUs[4]
	if len(g4.Errors) != 1 || !strings.Contains(g4.Errors[0], path+":14:") {
		t.Errorf("errors %v; want one naming %s:14", g4.Errors, path)
	}
	if g4.RemoteMemoryRatio != nil || g4.CPUsOffNodeRatio == nil || len(g4.Processes) != 2 {
		t.Errorf("GPU 4: %s", gpDump(g4))
	}
	if s.GPUs[0].RemoteMemoryRatio == nil {
		t.Error("GPU 0 lost its memory placement")
	}
}

// numa_maps is costly to read, so a reading younger than the numa-maps
// interval is reused, with its age.
func TestGPUProcessNUMAMapsInterval(t *testing.T) {
	proc := numaCopyTree(t, fixtureProc)
	c, clk := newGPUProcessTestCollector(t, proc, fixtureSys, numaFixtureGPURefs(), gpuProcessTestOptions)
	sampleGPUProcesses(t, c)
	hosttest.WriteFile(t, filepath.Join(proc, "4343/numa_maps"), "7f2a00000000 default anon=8 dirty=8 N1=8 kernelpagesize_kB=4\n")
	clk.t = clk.t.Add(10 * time.Second)
	p := sampleGPUProcesses(t, c).GPUs[4].Processes[0]
	if *p.RemoteMemoryRatio != 0.75 || p.NUMAMapsAgeSeconds != 10 {
		t.Errorf("after 10 s: remote ratio %v, age %v; want the 10 s-old reading reused (0.75, 10)", *p.RemoteMemoryRatio, p.NUMAMapsAgeSeconds)
	}
	// Due at 30 s, but the resident memory has not moved: the reading
	// stands.
	clk.t = clk.t.Add(20 * time.Second)
	p = sampleGPUProcesses(t, c).GPUs[4].Processes[0]
	if *p.RemoteMemoryRatio != 0.75 || p.NUMAMapsAgeSeconds != 30 {
		t.Errorf("after 30 s, resident memory as it was: remote ratio %v, age %v; want the reading to stand (0.75, 30)", *p.RemoteMemoryRatio, p.NUMAMapsAgeSeconds)
	}
	// A sixteenth more resident pages: still standing; an eighth: read.
	stat := filepath.Join(proc, "4343/stat")
	b, err := os.ReadFile(stat)
	if err != nil {
		t.Fatal(err)
	}
	setRSS := func(pages int) {
		hosttest.WriteFile(t, stat, strings.Replace(string(b), " 4931234 ", " "+strconv.Itoa(pages)+" ", 1))
	}
	setRSS(4931234 + 4931234/16)
	clk.t = clk.t.Add(5 * time.Second)
	if p = sampleGPUProcesses(t, c).GPUs[4].Processes[0]; p.NUMAMapsAgeSeconds != 35 {
		t.Errorf("a sixteenth more resident: age %v; want the reading to stand (35)", p.NUMAMapsAgeSeconds)
	}
	setRSS(4931234 + 4931234/8 + 1)
	clk.t = clk.t.Add(5 * time.Second)
	p = sampleGPUProcesses(t, c).GPUs[4].Processes[0]
	if *p.RemoteMemoryRatio != 0 || p.NUMAMapsAgeSeconds != 0 || p.ResidentBytesByNode[0] != (sample.NodeBytes{Node: 1, Bytes: 8 * 4096}) {
		t.Errorf("an eighth more resident: remote ratio %v, age %v, %v; want a fresh reading", *p.RemoteMemoryRatio, p.NUMAMapsAgeSeconds, p.ResidentBytesByNode)
	}
	// Memory moved between nodes at the same size: read at the
	// maximum age, ten intervals.
	hosttest.WriteFile(t, filepath.Join(proc, "4343/numa_maps"), "7f2a00000000 default anon=8 dirty=8 N0=8 kernelpagesize_kB=4\n")
	clk.t = clk.t.Add(numaMapsMaxIntervals*gpuProcessTestOptions.numaMapsInterval - time.Second)
	if p = sampleGPUProcesses(t, c).GPUs[4].Processes[0]; *p.RemoteMemoryRatio != 0 {
		t.Errorf("before the maximum age: remote ratio %v; want the reading to stand (0)", *p.RemoteMemoryRatio)
	}
	clk.t = clk.t.Add(time.Second)
	if p = sampleGPUProcesses(t, c).GPUs[4].Processes[0]; *p.RemoteMemoryRatio != 1 || p.NUMAMapsAgeSeconds != 0 {
		t.Errorf("at the maximum age: remote ratio %v, age %v; want a fresh reading (1, 0)", *p.RemoteMemoryRatio, p.NUMAMapsAgeSeconds)
	}
}

func TestGPUProcessRejectsZeroCaps(t *testing.T) {
	for _, opts := range []gpuProcessOptions{{maxProcesses: 0, maxThreads: 1}, {maxProcesses: 1, maxThreads: 0}} {
		if _, err := newGPUProcessCollector(Config{ProcPath: fixtureProc, SysPath: fixtureSys}, opts); err == nil {
			t.Errorf("%+v accepted", opts)
		}
	}
}

// The live machine: a child shell of the test with a sleeping child of its
// own, passed as a GPU process. The collector must read both.
func TestGPUProcessLive(t *testing.T) {
	cmd := exec.Command("/bin/sh", "-c", "sleep 600 & wait") // killed at the end; outlives a slow run
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Skip("cannot start a shell:", err)
	}
	pid := cmd.Process.Pid
	t.Cleanup(func() {
		_ = syscall.Kill(-pid, syscall.SIGKILL) // the shell's process group: it and its sleep
		_ = cmd.Wait()
	})
	bus := ""
	if entries, err := os.ReadDir("/sys/bus/pci/devices"); err == nil && len(entries) > 0 {
		bus = entries[0].Name()
	}
	refs := []GPURef{{Index: 0, PCIBusID: bus, PIDs: []uint32{uint32(pid)}}}
	shared := &Shared{}
	shared.SetGPUs(refs)
	c, err := newGPUProcessCollector(Config{ProcPath: "/proc", SysPath: "/sys", Logger: zap.NewNop(), Shared: shared}, gpuProcessTestOptions)
	if err != nil {
		t.Fatal(err)
	}
	var s *sample.GPUProcesses
	var g sample.GPUProcessGroup
	// The shell forks and execs its sleep when the machine lets it: the
	// deadline only stops a shell that never does.
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		s = sampleGPUProcesses(t, c)
		g = s.GPUs[0]
		if len(g.Processes) == 2 && g.Processes[1].Comm == "sleep" { // forked and exec'd
			break
		}
	}
	if len(g.Processes) != 2 {
		t.Fatalf("want the shell and its sleep, got %s", gpDump(g))
	}
	sh, sleep := g.Processes[0], g.Processes[1]
	if sh.PID != pid || !sh.OnGPU || sh.Threads != 1 || sh.CPUsAllowed == 0 || sh.CPUsAllowedList == "" || sh.StartTicks == 0 {
		t.Errorf("shell: %s", gpDump(sh))
	}
	if sleep.Comm != "sleep" || sleep.PPID != pid || sleep.Depth != 1 || sleep.OnGPU {
		t.Errorf("sleep: %s", gpDump(sleep))
	}
	if len(sh.ResidentBytesByNode) == 0 || sh.ResidentBytesByNode[0].Bytes == 0 {
		t.Errorf("shell's memory per node: %v (unreadable: %v)", sh.ResidentBytesByNode, sh.Unreadable)
	}
	if g.Threads != 2 || g.IOWaitThreadsRatio == nil {
		t.Errorf("threads %d, ratio %v", g.Threads, g.IOWaitThreadsRatio)
	}
	if len(g.Errors) != 0 {
		t.Errorf("errors: %v", g.Errors)
	}
	lintWithPromtool(t, sampledMetrics{asEngine(c), s})
}

// A GPU that gets a process it did not have makes the collector sample at
// the daemon's interval for a while, so the new job's CPU has a rate within
// the analysis span; the first sample, where every process is new, does not.
func TestGPUProcessPacesANewJob(t *testing.T) {
	now := time.Unix(1000, 0)
	c := &gpuProcessCollector{now: func() time.Time { return now }, fastInterval: time.Second}
	c.noteNewGPUProcesses([]GPURef{{Index: 0, PIDs: []uint32{10}}}, now)
	if d := c.NextSample(); d != 0 {
		t.Fatalf("first sample: next in %v; want the collector's own interval", d)
	}
	now = now.Add(5 * time.Second)
	c.noteNewGPUProcesses([]GPURef{{Index: 0, PIDs: []uint32{10}}, {Index: 1, PIDs: []uint32{20}}}, now)
	if d := c.NextSample(); d != time.Second {
		t.Fatalf("new process on GPU 1: next in %v; want 1s", d)
	}
	now = now.Add(newJobFastSpan)
	c.noteNewGPUProcesses([]GPURef{{Index: 0, PIDs: []uint32{10}}, {Index: 1, PIDs: []uint32{20}}}, now)
	if d := c.NextSample(); d != 0 {
		t.Fatalf("after the fast span: next in %v", d)
	}
}

// Shared signals a GPU's new process once, and not for one it knew.
func TestSharedSignalsNewGPUProcesses(t *testing.T) {
	s := &Shared{}
	pending := func() bool {
		select {
		case <-s.NewGPUProcesses():
			return true
		default:
			return false
		}
	}
	s.SetGPUs([]GPURef{{Index: 0, PIDs: []uint32{10}}})
	if !pending() {
		t.Fatal("the first process of a GPU was not signalled")
	}
	s.SetGPUs([]GPURef{{Index: 0, PIDs: []uint32{10}}})
	if pending() {
		t.Fatal("a known process was signalled")
	}
	s.SetGPUs([]GPURef{{Index: 0, PIDs: []uint32{10}}, {Index: 1, PIDs: []uint32{11, 12}}})
	s.SetGPUs([]GPURef{{Index: 0, PIDs: []uint32{10, 13}}, {Index: 1, PIDs: []uint32{11, 12}}})
	if !pending() || pending() {
		t.Fatal("new processes: want one pending signal")
	}
}

// Thread states: every main thread is read each sample; a process's other
// threads stand for threadCensusInterval when its last census found none
// waiting, and are followed each sample once one is.
func TestGPUProcessThreadCensus(t *testing.T) {
	proc := gpCensusTree(t)
	c, clk := newGPUProcessTestCollector(t, proc, fixtureSys, numaFixtureGPURefs(), gpuProcessTestOptions)
	states := func(when string, pid int, want map[string]int) {
		t.Helper()
		s := sampleGPUProcesses(t, c)
		p := gpFind(s.GPUs[4], pid)
		if p == nil || !reflect.DeepEqual(p.ThreadStates, want) {
			t.Errorf("%s: process %d thread states %s; want %v", when, pid, gpDump(p), want)
		}
	}
	step := func(d time.Duration) { clk.t = clk.t.Add(d) }

	states("first sample", 4344, map[string]int{"S": 2})
	states("first sample", 4343, map[string]int{"D": 1, "S": 3})
	gpThreadState(t, proc, 4344, 4370, 'D')
	gpThreadState(t, proc, 4343, 4360, 'D')
	step(5 * time.Second)
	states("5 s: the worker's pool thread waits, its census stands", 4344, map[string]int{"S": 2})
	step(0)
	states("5 s: a GPU process found waiting is counted each sample", 4343, map[string]int{"D": 2, "S": 2})
	gpIOStall(t, proc, 456789012+1_000_000) // 1 s of I/O stall in 35 s
	step(threadCensusInterval)
	states("after the census interval", 4344, map[string]int{"S": 1, "D": 1})
	gpThreadState(t, proc, 4344, 4370, 'S')
	step(5 * time.Second)
	states("a worker found waiting is followed each sample", 4344, map[string]int{"S": 2})
	gpThreadState(t, proc, 4344, 4344, 'D')
	step(5 * time.Second)
	states("the main thread is read each sample", 4344, map[string]int{"S": 1, "D": 1})
}

// A census due by its interval is taken only when the host's I/O stall
// grew by 1% of the time since the last one or the last one is
// threadCensusMaxAge old; otherwise it stands, also when the process's
// thread count changed.
func TestGPUProcessCensusWhenIOStalls(t *testing.T) {
	proc := gpCensusTree(t)
	stall := uint64(456789012)
	gpIOStall(t, proc, stall)
	c, clk := newGPUProcessTestCollector(t, proc, fixtureSys, numaFixtureGPURefs(), gpuProcessTestOptions)
	states := func(when string, want map[string]int) {
		t.Helper()
		p := gpFind(sampleGPUProcesses(t, c).GPUs[4], 4344)
		if p == nil || !reflect.DeepEqual(p.ThreadStates, want) {
			t.Errorf("%s: worker thread states %s; want %v", when, gpDump(p), want)
		}
	}
	step := func(d time.Duration) { clk.t = clk.t.Add(d) }

	states("first sample", map[string]int{"S": 2})
	gpThreadState(t, proc, 4344, 4370, 'D')
	stall += 300_000 // 0.3 s in 30 s: 1%, not less
	gpIOStall(t, proc, stall)
	step(threadCensusInterval)
	states("I/O stall of 1% of the time: counted", map[string]int{"S": 1, "D": 1})
	gpThreadState(t, proc, 4344, 4370, 'S')
	step(5 * time.Second)
	states("found waiting: counted the next sample", map[string]int{"S": 2})

	gpThreadState(t, proc, 4344, 4370, 'D')
	stall += 200_000 // under 1% of the 35 s since
	gpIOStall(t, proc, stall)
	step(threadCensusInterval)
	states("I/O quiet: the census stands", map[string]int{"S": 2})
	gpReplaceIn(t, filepath.Join(proc, "4344/stat"), " 20 0 1 0 5100500 ", " 20 0 2 0 5100500 ")
	step(5 * time.Second)
	states("a thread more, I/O quiet: the census stands", map[string]int{"S": 2})

	// The census standing is the one that found no thread waiting, taken
	// 35 s ago.
	age := threadCensusInterval + 5*time.Second
	for age+threadCensusInterval < threadCensusMaxAge { // ages 65 s to 4 min 35 s
		age += threadCensusInterval
		step(threadCensusInterval)
		states("I/O quiet, under the census's maximum age", map[string]int{"S": 2})
	}
	step(threadCensusInterval)
	states("past the census's maximum age: counted", map[string]int{"S": 1, "D": 1})
}

// A process first seen while the host's I/O was quiet since the previous
// sample gets a presumed census: its main thread is read, its other threads
// count as not waiting (in the share's denominator, not among the states
// read), and a census is read at the first sample the host's I/O stalls. A
// process first seen while it stalls is counted at once.
func TestGPUProcessPresumedCensus(t *testing.T) {
	const stall0 = uint64(456789012)
	start := func(t *testing.T) (proc string, c *gpuProcessCollector, clk *fakeClock) {
		proc = gpCensusTree(t)
		gpReplaceIn(t, filepath.Join(proc, "4344/stat"), " 20 0 1 0 5100500 ", " 20 0 2 0 5100500 ") // two threads
		gpThreadState(t, proc, 4344, 4370, 'D')
		gpIOStall(t, proc, stall0)
		refs := numaFixtureGPURefs()
		job := refs[4].PIDs
		refs[4].PIDs = nil
		c, clk = newGPUProcessTestCollector(t, proc, fixtureSys, refs, gpuProcessTestOptions)
		sampleGPUProcesses(t, c) // GPU 4 has no process yet
		refs[4].PIDs = job
		c.shared.SetGPUs(refs)
		clk.t = clk.t.Add(5 * time.Second)
		return proc, c, clk
	}
	worker := func(t *testing.T, s *sample.GPUProcesses, when string, want map[string]int) sample.GPUProcessGroup {
		t.Helper()
		g := s.GPUs[4]
		if p := gpFind(g, 4344); p == nil || !reflect.DeepEqual(p.ThreadStates, want) {
			t.Errorf("%s: worker thread states %s; want %v", when, gpDump(p), want)
		}
		return g
	}

	proc, c, clk := start(t)
	quiet := worker(t, sampleGPUProcesses(t, c), "new under a quiet host", map[string]int{"S": 1})
	gpIOStall(t, proc, stall0+50_000) // 50 ms in 5 s: 1%
	clk.t = clk.t.Add(5 * time.Second)
	read := worker(t, sampleGPUProcesses(t, c), "the host's I/O stalls", map[string]int{"S": 1, "D": 1})
	// The rank's waiting pool thread was presumed not waiting too.
	if quiet.Threads != read.Threads || quiet.IOWaitThreads != 0 || read.IOWaitThreads != 2 {
		t.Errorf("presumed: %d threads, %d waiting; read: %d, %d: want the same threads, 0 and 2 waiting",
			quiet.Threads, quiet.IOWaitThreads, read.Threads, read.IOWaitThreads)
	}

	proc, c, _ = start(t)
	gpIOStall(t, proc, stall0+50_000)
	worker(t, sampleGPUProcesses(t, c), "new while the host's I/O stalls", map[string]int{"S": 1, "D": 1})
}

// gpCensusTree is the reference host with worker 4344's main thread asleep
// and a second thread, 4370, asleep too: two threads to count.
func gpCensusTree(t *testing.T) string {
	t.Helper()
	proc := numaCopyTree(t, fixtureProc)
	gpThreadState(t, proc, 4344, 4344, 'S')
	hosttest.WriteFile(t, filepath.Join(proc, "4344/task/4370/stat"),
		"4370 (pt_pool) S 4343 4343 4343 0 -1 4194560 0 0 0 0 10 5 0 0 20 0 2 0 5100600 0 0\n")
	hosttest.WriteFile(t, filepath.Join(proc, "4344/task/4370/children"), "")
	return proc
}

// gpIOStall writes the host's I/O pressure with the some line's total.
func gpIOStall(t *testing.T, proc string, total uint64) {
	t.Helper()
	hosttest.WriteFile(t, filepath.Join(proc, "pressure/io"),
		"some avg10=0.00 avg60=0.00 avg300=0.00 total="+strconv.FormatUint(total, 10)+"\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n")
}

// gpThreadState sets the state letter of /proc/<pid>/task/<tid>/stat, and
// of /proc/<pid>/stat for the main thread.
func gpThreadState(t *testing.T, proc string, pid, tid int, state byte) {
	t.Helper()
	paths := []string{filepath.Join(proc, strconv.Itoa(pid), "task", strconv.Itoa(tid), "stat")}
	if pid == tid {
		paths = append(paths, filepath.Join(proc, strconv.Itoa(pid), "stat"))
	}
	for _, path := range paths {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		r := strings.LastIndexByte(string(b), ')')
		b[r+2] = state
		hosttest.WriteFile(t, path, string(b))
	}
}

// gpReplaceIn replaces the first old in a fixture file with new.
func gpReplaceIn(t *testing.T, path, old, new string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), old) {
		t.Fatalf("%s holds no %q", path, old)
	}
	hosttest.WriteFile(t, path, strings.Replace(string(b), old, new, 1))
}

// A process found as a GPU process's child whose own stat names another
// parent (reparented since the tree was read, or a PID reused since a parent
// scan's index read it) is not counted as the GPU's. Here the index, warm
// from the first sample's scan, still names 4343 as 4344's parent.
func TestGPUProcessChildCheckedAgainstItsParent(t *testing.T) {
	proc, c, clk := parentScanWalked(t)
	if c.parents.Len() == 0 {
		t.Fatal("the first sample's walk left no parent index")
	}
	gpReplaceIn(t, filepath.Join(proc, "4344/stat"), ") D 4343 ", ") D 1 ")
	clk.t = clk.t.Add(5 * time.Second)
	c.treeThreads = 1000
	if p := gpFind(sampleGPUProcesses(t, c).GPUs[4], 4344); p != nil {
		t.Fatalf("4344, whose parent is now 1, still counted under 4343's GPU: %s", gpDump(p))
	}
}

// parentScanWalked samples a copy of the fixture host once with the walk on
// a parent scan (more threads expected than the host has processes), and
// checks that worker 4344 was found under its rank 4343.
func parentScanWalked(t *testing.T) (string, *gpuProcessCollector, *fakeClock) {
	t.Helper()
	proc := numaCopyTree(t, fixtureProc)
	c, clk := newGPUProcessTestCollector(t, proc, fixtureSys, numaFixtureGPURefs(), gpuProcessTestOptions)
	c.treeThreads = 1000
	if p := gpFind(sampleGPUProcesses(t, c).GPUs[4], 4344); p == nil {
		t.Fatal("worker 4344 not found under 4343")
	}
	return proc, c, clk
}

// When its parent index is due for a refresh, the walk takes every process's
// parent from the ncclproc collector's published scan instead of reading
// them all again: here the scan says worker 4344's parent is 1 (its stat
// file says 4343), so a walk that took the scan does not find it under
// 4343. A scan as old as the refresh interval is not taken.
func TestGPUProcessParentsFromPublishedScan(t *testing.T) {
	_, c, clk := parentScanWalked(t)
	scan := map[int]hostfs.TaskStat{4344: {PID: 4344, PPID: 1, NumThreads: 1}}
	clk.t = clk.t.Add(hostfs.ParentIndexRefresh + time.Second)
	c.shared.SetProcessScan(&ProcessScan{At: clk.t.Add(-hostfs.ParentIndexRefresh), Stats: scan})
	c.treeThreads = 1000
	if p := gpFind(sampleGPUProcesses(t, c).GPUs[4], 4344); p == nil {
		t.Fatal("a scan as old as the refresh interval was taken")
	}
	clk.t = clk.t.Add(hostfs.ParentIndexRefresh + time.Second)
	c.shared.SetProcessScan(&ProcessScan{At: clk.t.Add(-time.Second), Stats: scan})
	c.treeThreads = 1000
	if p := gpFind(sampleGPUProcesses(t, c).GPUs[4], 4344); p != nil {
		t.Fatalf("the due refresh read 4344's stat file instead of taking the published scan: %s", gpDump(p))
	}
}

// A process's placement (status) and cgroup membership are read every
// sample while it is young and then every processAttrInterval: a change
// made later shows at the next read, and the counters go on being read
// every sample in between.
func TestGPUProcessPlacementReadWhenDue(t *testing.T) {
	proc := numaCopyTree(t, fixtureProc)
	c, clk := newGPUProcessTestCollector(t, proc, fixtureSys, numaFixtureGPURefs(), gpuProcessTestOptions)
	status := filepath.Join(proc, "4344/status")
	moveWorker := func(cpus, cgroup string) {
		t.Helper()
		b, err := os.ReadFile(status)
		if err != nil {
			t.Fatal(err)
		}
		var lines []string
		for _, l := range strings.Split(string(b), "\n") {
			switch {
			case strings.HasPrefix(l, "Cpus_allowed_list:"):
				l = "Cpus_allowed_list:\t" + cpus
			case strings.HasPrefix(l, "Cpus_allowed:"):
				continue // the list is what is parsed
			}
			lines = append(lines, l)
		}
		hosttest.WriteFile(t, status, strings.Join(lines, "\n"))
		hosttest.WriteFile(t, filepath.Join(proc, "4344/cgroup"), "0::"+cgroup+"\n")
	}
	worker := func(when, wantCPUs, wantCgroup string) *sample.GPUProcess {
		t.Helper()
		p := gpFind(sampleGPUProcesses(t, c).GPUs[4], 4344)
		if p == nil {
			t.Fatalf("%s: worker 4344 not found", when)
		}
		if p.CPUsAllowedList != wantCPUs || p.Cgroup != wantCgroup {
			t.Errorf("%s: worker on CPUs %q in cgroup %q; want %q in %q", when, p.CPUsAllowedList, p.Cgroup, wantCPUs, wantCgroup)
		}
		return p
	}
	step := func(d time.Duration) { clk.t = clk.t.Add(d) }
	docker := "/system.slice/docker-" + gpDockerContainer + ".scope"

	worker("first sample", "0-31,64-95", docker)
	moveWorker("32-63", "/job.slice/a.scope")
	step(5 * time.Second)
	worker("young: read every sample", "32-63", "/job.slice/a.scope")
	step(processAttrInterval)
	worker("read again at the interval", "32-63", "/job.slice/a.scope")
	moveWorker("96-127", "/job.slice/b.scope")
	step(5 * time.Second)
	p := worker("old: the last reading stands", "32-63", "/job.slice/a.scope")
	if p.CPUsAllowed != 32 {
		t.Errorf("the standing placement counts %d CPUs; want 32", p.CPUsAllowed)
	}
	step(processAttrInterval - 5*time.Second)
	worker("due again", "96-127", "/job.slice/b.scope")

	// An exec keeps the PID and start time; its new command name makes
	// the placement due at once.
	moveWorker("0-15", "/job.slice/b.scope")
	gpReplaceIn(t, filepath.Join(proc, "4344/stat"), "(pt_data_worker)", "(python3)")
	step(5 * time.Second)
	worker("after an exec", "0-15", "/job.slice/b.scope")
}

// The stat and io files of the processes read are held open from one
// sample to the next, and closed once their process is gone or no longer
// read.
func TestGPUProcessHoldsFilesOfProcessesRead(t *testing.T) {
	if _, err := os.Stat("/proc/self/io"); err != nil {
		t.Skip("no task I/O accounting:", err)
	}
	start := func() *exec.Cmd {
		cmd := exec.Command("sleep", "600")
		if err := cmd.Start(); err != nil {
			t.Skip("cannot start sleep:", err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		return cmd
	}
	a, b := start(), start()
	// Descriptors of the test process open on the children's proc files.
	heldOpen := func() (n int) {
		entries, err := os.ReadDir("/proc/self/fd")
		if err != nil {
			t.Skip(err)
		}
		for _, e := range entries {
			target, _ := os.Readlink("/proc/self/fd/" + e.Name())
			for _, cmd := range []*exec.Cmd{a, b} {
				if strings.HasPrefix(target, fmt.Sprintf("/proc/%d/", cmd.Process.Pid)) {
					n++
				}
			}
		}
		return n
	}
	shared := &Shared{}
	list := func(cmds ...*exec.Cmd) {
		var pids []uint32
		for _, c := range cmds {
			pids = append(pids, uint32(c.Process.Pid))
		}
		shared.SetGPUs([]GPURef{{Index: 0, PIDs: pids}})
	}
	c, err := newGPUProcessCollector(Config{ProcPath: "/proc", SysPath: "/sys", Logger: zap.NewNop(), Shared: shared}, gpuProcessTestOptions)
	if err != nil {
		t.Fatal(err)
	}
	list(a, b)
	sampleGPUProcesses(t, c)
	held := c.heldFiles[a.Process.Pid]
	if held == nil || c.heldFiles[b.Process.Pid] == nil || len(c.heldFiles) != 2 || heldOpen() != 4 {
		t.Fatalf("held after the first sample: %v, %d descriptors", c.heldFiles, heldOpen())
	}
	s := sampleGPUProcesses(t, c)
	if c.heldFiles[a.Process.Pid] != held {
		t.Error("the files were opened again at the second sample")
	}
	if got := s.GPUs[0].Processes; len(got) != 2 || got[0].IO == nil || got[0].Comm != "sleep" {
		t.Errorf("read through held files: %s", gpDump(s.GPUs[0]))
	}

	// a is reaped but still listed (the listing lags); b is no longer on
	// the GPU.
	_ = a.Process.Kill()
	_ = a.Wait()
	list(a)
	s = sampleGPUProcesses(t, c)
	if len(s.GPUs[0].Processes) != 0 || len(c.heldFiles) != 0 {
		t.Errorf("after the process was reaped: %s, held %v", gpDump(s.GPUs[0]), c.heldFiles)
	}
	list(b)
	sampleGPUProcesses(t, c)
	if err := c.Close(); err != nil || len(c.heldFiles) != 0 {
		t.Errorf("close: %v, held %v", err, c.heldFiles)
	}
	if n := heldOpen(); n != 0 {
		t.Errorf("%d descriptors left open on the processes' files after Close", n)
	}
}

// The sample publishes each GPU process's tree it read whole
// (Shared.ProcessTrees); a tree the cap cut short is left out.
func TestGPUProcessPublishesTrees(t *testing.T) {
	c, clk := newGPUProcessTestCollector(t, fixtureProc, fixtureSys, numaFixtureGPURefs(), gpuProcessTestOptions)
	sampleGPUProcesses(t, c)
	trees := c.shared.ProcessTrees()
	// Without an interval of its own the collector samples at the daemon's.
	if trees == nil || !trees.At.Equal(clk.t) || trees.Interval != c.fastInterval {
		t.Fatalf("published trees %+v; want ones taken at %v every %v", trees, clk.t, c.fastInterval)
	}
	want := map[int][]int{4242: {4242}, 4343: {4343, 4344}}
	if !reflect.DeepEqual(trees.Under, want) {
		t.Errorf("trees %v; want %v", trees.Under, want)
	}

	opts := gpuProcessTestOptions
	opts.maxProcesses = 2 // the two GPU processes; worker 4344 left unread
	c, _ = newGPUProcessTestCollector(t, fixtureProc, fixtureSys, numaFixtureGPURefs(), opts)
	sampleGPUProcesses(t, c)
	if got, want := c.shared.ProcessTrees().Under, map[int][]int{4242: {4242}}; !reflect.DeepEqual(got, want) {
		t.Errorf("with the cap at 2, trees %v; want %v (4343's cut short)", got, want)
	}
}
