package collectors

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/common/expfmt"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/gpudiag/gpudiag/analyzers"
	"github.com/gpudiag/gpudiag/hostfs"
	"github.com/gpudiag/gpudiag/internal/hosttest"
	"github.com/gpudiag/gpudiag/nccl"
	"github.com/gpudiag/gpudiag/sample"
)

// debugLogger logs everything, fields included, into the returned buffer.
func debugLogger() (*zap.Logger, *bytes.Buffer) {
	var buf bytes.Buffer
	core := zapcore.NewCore(zapcore.NewJSONEncoder(zap.NewDevelopmentEncoderConfig()), zapcore.AddSync(&buf), zapcore.DebugLevel)
	return zap.New(core), &buf
}

func newNCCLProcTestCollector(t *testing.T, procPath string, refs []GPURef, opts ncclProcOptions) (*ncclProcCollector, *Shared, *bytes.Buffer) {
	t.Helper()
	shared := &Shared{}
	shared.SetGPUs(refs)
	log, buf := debugLogger()
	c, err := newNCCLProcCollector(Config{ProcPath: procPath, Logger: log, Shared: shared}, opts)
	if err != nil {
		t.Fatal(err)
	}
	return c, shared, buf
}

func sampleNCCLProc(t *testing.T, c *ncclProcCollector) *sample.NCCLHostProcesses {
	return sampleAs[sample.NCCLHostProcesses](t, c)
}

// ncclProcRefs are the fixture host's eight GPUs with no process listed:
// NVML does not see the containers' PIDs.
func ncclProcRefs() []GPURef {
	refs := numaFixtureGPURefs()
	for i := range refs {
		refs[i].PIDs = nil
	}
	return refs
}

// assertNoSecret fails when any of the secrets appears in any of the texts.
func assertNoSecret(t *testing.T, secrets []string, texts map[string]string) {
	t.Helper()
	for what, text := range texts {
		for _, s := range secrets {
			if strings.Contains(text, s) {
				t.Errorf("secret %q leaked into the %s:\n%s", s, what, text)
			}
		}
	}
}

func metricsText(t *testing.T, c *ncclProcCollector, s any) string {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(sampledMetrics{asEngine(c), s})
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	for _, mf := range mfs {
		if _, err := expfmt.MetricFamilyToText(&b, mf); err != nil {
			t.Fatal(err)
		}
	}
	return b.String()
}

const (
	fixturePipNCCL    = "/usr/local/lib/python3.10/dist-packages/nvidia/nccl/lib/libnccl.so.2"
	fixtureSystemNCCL = "/usr/lib/x86_64-linux-gnu/libnccl.so.2.18.3"
	fixturePodUID     = "9b2c4d6e-1a3f-4b5c-8d7e-6f5a4b3c2d1e"
	fixtureContainer  = "a1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8f90"
	fixtureSlurmCG    = "/system.slice/slurmstepd.scope/job_8812/step_0/user/task_0"
)

// The fixture's secrets: every one sits in an environ beside the NCCL
// variables that are kept.
var fixtureSecrets = []string{"fixture-secret", "wJalrXUtnFEMI", "hunter2", "hf_abcdef", "MASTER_ADDR", "10.0.0.1", "/home/alice", "AWS_SECRET", "DB_PASSWORD"}

// PID 5151 is rank 0 of a torchrun job in a Kubernetes pod given GPUs 2
// and 3 (by UUID) and using the second, with pip's NCCL 2.21.5; PID 5252 is
// rank 3 of Slurm job 8812 on the host with the system's NCCL 2.18.3, and
// 5253 its DataLoader worker. NVML lists none of them.
func TestNCCLProcFixture(t *testing.T) {
	c, shared, logs := newNCCLProcTestCollector(t, fixtureProc, ncclProcRefs(), ncclProcDefaults)
	s := sampleNCCLProc(t, c)

	slurmEnv := []sample.NCCLEnv{
		{Name: "SLURM_JOB_ID", Value: "8812"}, {Name: "SLURM_STEP_ID", Value: "0"}, {Name: "SLURM_PROCID", Value: "3"},
		{Name: "SLURM_LOCALID", Value: "1"}, {Name: "CUDA_VISIBLE_DEVICES", Value: "4,5"}, {Name: "NCCL_DEBUG", Value: "WARN"},
		{Name: "NCCL_DEBUG_FILE", Value: "/var/log/nccl/%h.%p"}, {Name: "NCCL_SOCKET_IFNAME", Value: "docker0"},
		{Name: "NCCL_P2P_DISABLE", Value: "1"}, {Name: "OMP_NUM_THREADS", Value: "8"},
	}
	systemLib := []sample.NCCLLibrary{{Path: fixtureSystemNCCL, Version: "2.18.3", VersionSource: "file_name"}}
	rank0Log := filepath.Join(fixtureProc, "5151/root/workspace/nccl/trainer-0.17.log")
	rank3Log := filepath.Join(fixtureProc, "5252/root/var/log/nccl/gpu-node-7.5252")
	want := &sample.NCCLHostProcesses{
		MapsRead: 3,
		Processes: []sample.NCCLHostProcess{{
			PID: 5151, NSPID: 17, PPID: 5100, StartTicks: 6000000, Comm: "pt_main_thread",
			GPUs: []int{3}, GPUSource: "visible_devices",
			Libraries: []sample.NCCLLibrary{{Path: fixturePipNCCL, Version: "2.21.5", VersionSource: "pip_dist_info"}},
			Env: []sample.NCCLEnv{
				{Name: "NVIDIA_VISIBLE_DEVICES", Value: "GPU-0f3c2a91-5b7e-4d28-9c61-3e8a7d2b4f10,GPU-7a1d9e44-2c3b-4f5a-8e6d-1b0c9f8e7d6a"},
				{Name: "CUDA_VISIBLE_DEVICES", Value: "1"}, {Name: "NCCL_DEBUG", Value: "INFO"},
				{Name: "NCCL_DEBUG_FILE", Value: "nccl/%h.%p.log"},
				{Name: "NCCL_IB_DISABLE", Value: "1"}, // the first of two, as getenv
				{Name: "NCCL_SOCKET_IFNAME", Value: "eth0"}, {Name: "TORCH_NCCL_ASYNC_ERROR_HANDLING", Value: "1"},
				{Name: "RANK", Value: "0"}, {Name: "LOCAL_RANK", Value: "0"}, {Name: "WORLD_SIZE", Value: "16"},
				{Name: "LOCAL_WORLD_SIZE", Value: "8"},
			},
			Cgroup:      "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod9b2c4d6e_1a3f_4b5c_8d7e_6f5a4b3c2d1e.slice/cri-containerd-" + fixtureContainer + ".scope",
			ContainerID: fixtureContainer, PodUID: fixturePodUID,
			Hostname: "trainer-0", HostnameSource: "etc_hostname", DebugFile: rank0Log,
		}, {
			PID: 5252, NSPID: 5252, PPID: 5200, StartTicks: 7000000, Comm: "python3",
			GPUs: []int{4, 5}, GPUSource: "visible_devices", Libraries: systemLib, Env: slurmEnv,
			Cgroup: fixtureSlurmCG, SlurmJobID: "8812",
			Hostname: "gpu-node-7.cluster.local", HostnameSource: "etc_hostname", DebugFile: rank3Log,
		}, {
			PID: 5253, NSPID: 5253, PPID: 5252, StartTicks: 7000500, Comm: "pt_data_worker", ForkOf: 5252,
			GPUs: []int{4, 5}, GPUSource: "visible_devices", Libraries: systemLib, Env: slurmEnv,
			Cgroup: fixtureSlurmCG, SlurmJobID: "8812",
		}},
		LogFiles: []string{rank0Log, rank3Log},
	}
	if !reflect.DeepEqual(s, want) {
		got, _ := json.MarshalIndent(s, "", "  ")
		exp, _ := json.MarshalIndent(want, "", "  ")
		t.Fatalf("sample:\n%s\nwant:\n%s", got, exp)
	}
	if got := ncclLogPaths(shared); !reflect.DeepEqual(got, want.LogFiles) {
		t.Errorf("published log files %q; want %q", got, want.LogFiles)
	}

	metrics := metricsText(t, c, s)
	expected := `
# HELP gpudiag_nccl_library_info ` + ncclHelp(ncclProcLibraryDesc) + `
# TYPE gpudiag_nccl_library_info gauge
gpudiag_nccl_library_info{version="2.18.3"} 1
gpudiag_nccl_library_info{version="2.21.5"} 1
# HELP gpudiag_nccl_process_env_info ` + ncclHelp(ncclProcEnvDesc) + `
# TYPE gpudiag_nccl_process_env_info gauge
gpudiag_nccl_process_env_info{gpu="3",value="1",variable="NCCL_IB_DISABLE"} 1
gpudiag_nccl_process_env_info{gpu="3",value="eth0",variable="NCCL_SOCKET_IFNAME"} 1
gpudiag_nccl_process_env_info{gpu="4",value="1",variable="NCCL_P2P_DISABLE"} 1
gpudiag_nccl_process_env_info{gpu="4",value="docker0",variable="NCCL_SOCKET_IFNAME"} 1
gpudiag_nccl_process_env_info{gpu="5",value="1",variable="NCCL_P2P_DISABLE"} 1
gpudiag_nccl_process_env_info{gpu="5",value="docker0",variable="NCCL_SOCKET_IFNAME"} 1
# HELP gpudiag_nccl_process_scan_unread_processes ` + ncclHelp(ncclProcUnreadDesc) + `
# TYPE gpudiag_nccl_process_scan_unread_processes gauge
gpudiag_nccl_process_scan_unread_processes{reason="limit"} 0
gpudiag_nccl_process_scan_unread_processes{reason="permission"} 0
# HELP gpudiag_nccl_processes ` + ncclHelp(ncclProcCountDesc) + `
# TYPE gpudiag_nccl_processes gauge
gpudiag_nccl_processes 2
`
	if err := testutil.CollectAndCompare(sampledMetrics{asEngine(c), s}, strings.NewReader(expected)); err != nil {
		t.Error(err)
	}
	raw, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	assertNoSecret(t, fixtureSecrets, map[string]string{"sample JSON": string(raw), "metrics": metrics, "logs": logs.String()})

	// Known NCCL processes are not read again.
	s2 := sampleNCCLProc(t, c)
	if s2.MapsRead != 0 || len(s2.Processes) != 3 {
		t.Errorf("second scan read %d maps and found %d processes; want 0 and 3", s2.MapsRead, len(s2.Processes))
	}
	lintWithPromtool(t, sampledMetrics{asEngine(c), s})
}

// ncclHelp is a descriptor's help text, as the text format escapes it.
func ncclHelp(d *prometheus.Desc) string {
	s := d.String()
	i := strings.Index(s, `help: "`) + len(`help: "`)
	j := strings.Index(s, `", constLabels:`)
	return strings.NewReplacer(`\"`, `"`).Replace(s[i:j])
}

// When the driver lists a process, its GPUs come from there and its log
// is handed over first.
func TestNCCLProcNVMLGPUs(t *testing.T) {
	refs := ncclProcRefs()
	refs[7].PIDs = []uint32{5252}
	refs[6].PIDs = []uint32{5252}
	c, shared, _ := newNCCLProcTestCollector(t, fixtureProc, refs, ncclProcDefaults)
	s := sampleNCCLProc(t, c)
	p := s.Processes[1]
	if p.PID != 5252 || !p.OnGPU || !reflect.DeepEqual(p.GPUs, []int{6, 7}) || p.GPUSource != "nvml" {
		t.Errorf("process %d on GPU %v %v from %q; want 5252 on GPUs [6 7] from nvml", p.PID, p.OnGPU, p.GPUs, p.GPUSource)
	}
	if files := ncclLogPaths(shared); len(files) != 2 || !strings.HasSuffix(files[0], "gpu-node-7.5252") {
		t.Errorf("log files %q; want the GPU process's first", files)
	}
}

// Under the per-scan limit, each scan resumes after the last process read,
// so every process is read in turn.
func TestNCCLProcScanLimit(t *testing.T) {
	c, _, _ := newNCCLProcTestCollector(t, fixtureProc, nil, ncclProcOptions{maxScan: 2})
	// PIDs with a stat: 4242, 4343, 4344 (no maps: taken as exited while
	// read), 5151, 5252, 5253.
	for i, want := range []struct{ found, unscanned int }{{0, 4}, {1, 4}, {3, 3}} {
		s := sampleNCCLProc(t, c)
		if len(s.Processes) != want.found || s.Unscanned != want.unscanned {
			t.Errorf("scan %d: %d processes found, %d unscanned; want %d and %d", i+1, len(s.Processes), s.Unscanned, want.found, want.unscanned)
		}
	}
	if _, err := newNCCLProcCollector(Config{ProcPath: fixtureProc}, ncclProcOptions{maxScan: 0}); err == nil {
		t.Error("max-scan 0 accepted")
	}
	if _, err := newNCCLProcCollector(Config{ProcPath: filepath.Join(t.TempDir(), "absent")}, ncclProcDefaults); err == nil ||
		!strings.Contains(err.Error(), ErrUnavailable.Error()) {
		t.Errorf("missing proc: %v; want ErrUnavailable", err)
	}
}

// A process read without libnccl is read again once its virtual size
// changes: Python imports torch, and with it libnccl, after start.
func TestNCCLProcLibraryLoadedLater(t *testing.T) {
	proc := procTree(t, "5252/stat", "5252/maps", "5252/environ", "5252/status", "5252/cgroup")
	stat, _ := os.ReadFile(filepath.Join(fixtureProc, "5252/stat"))
	late := strings.Replace(strings.Replace(string(stat), "5252 (python3) S 5200", "6000 (python3) S 1", 1), " 7000000 ", " 7100000 ", 1)
	hosttest.WriteFile(t, filepath.Join(proc, "6000/stat"), late)
	hosttest.WriteFile(t, filepath.Join(proc, "6000/maps"), "5610f0a00000-5610f0b2c000 r--p 00000000 103:02 2623511                    /usr/bin/python3.11\n")
	hosttest.WriteFile(t, filepath.Join(proc, "6000/cgroup"), "0::/user.slice\n")
	hosttest.WriteFile(t, filepath.Join(proc, "6000/status"), "Name:\tpython3\nNSpid:\t6000\n")
	hosttest.WriteFile(t, filepath.Join(proc, "6000/environ"), "NCCL_ALGO=Ring\x00")
	c, _, _ := newNCCLProcTestCollector(t, proc, nil, ncclProcDefaults)
	now := time.Unix(1_700_000_000, 0)
	c.now = func() time.Time { return now }
	if s := sampleNCCLProc(t, c); s.MapsRead != 2 || len(s.Processes) != 1 {
		t.Fatalf("first scan: %d maps read, %d processes; want 2 and 1", s.MapsRead, len(s.Processes))
	}
	if s := sampleNCCLProc(t, c); s.MapsRead != 0 {
		t.Fatalf("unchanged processes re-read: %d maps", s.MapsRead)
	}
	// The heap moving (8 MiB more, then 40 MiB less) is not a library
	// loaded: not read again until the read is ncclMapsMaxAge old.
	for _, vsize := range []string{" 52437188608 ", " 52386856960 "} {
		now = now.Add(15 * time.Second)
		hosttest.WriteFile(t, filepath.Join(proc, "6000/stat"), strings.Replace(late, " 52428800000 ", vsize, 1))
		if s := sampleNCCLProc(t, c); s.MapsRead != 0 {
			t.Fatalf("virtual size moved by less than a library: %d maps re-read", s.MapsRead)
		}
	}
	now = now.Add(ncclMapsMaxAge)
	if s := sampleNCCLProc(t, c); s.MapsRead != 1 {
		t.Fatalf("a changed process read %s ago: %d maps read; want 1", ncclMapsMaxAge, s.MapsRead)
	}
	grown := strings.Replace(late, " 52428800000 ", " 60000000000 ", 1)
	hosttest.WriteFile(t, filepath.Join(proc, "6000/stat"), grown)
	maps, _ := os.ReadFile(filepath.Join(fixtureProc, "5252/maps"))
	hosttest.WriteFile(t, filepath.Join(proc, "6000/maps"), string(maps))
	s := sampleNCCLProc(t, c)
	if s.MapsRead != 1 || len(s.Processes) != 2 || s.Processes[1].PID != 6000 || !s.Processes[1].MapsNCCL() {
		t.Fatalf("after import: %d maps read, processes %+v; want 6000 found with its libnccl", s.MapsRead, s.Processes)
	}
	if v, _ := s.Processes[1].EnvValue("NCCL_ALGO"); v != "Ring" {
		t.Errorf("NCCL_ALGO %q; want Ring", v)
	}
}

func TestNCCLEnvKept(t *testing.T) {
	for name, want := range map[string]bool{
		"NCCL_P2P_DISABLE": true, "NCCL_DEBUG_FILE": true, "UCX_TLS": true, "TORCH_NCCL_BLOCKING_WAIT": true,
		"TORCH_DISTRIBUTED_DEBUG": true, "CUDA_VISIBLE_DEVICES": true, "NVIDIA_VISIBLE_DEVICES": true, "OMP_NUM_THREADS": true,
		"LOCAL_RANK": true, "RANK": true, "WORLD_SIZE": true, "LOCAL_WORLD_SIZE": true,
		"SLURM_JOB_ID": true, "SLURM_PROCID": true, "SLURM_LOCALID": true, "SLURM_STEP_ID": true,
		"NCCL_": false, "NCCL": false, "XNCCL_P2P_DISABLE": false, "nccl_p2p_disable": false, "AWS_SECRET_ACCESS_KEY": false,
		"TORCH_DISTRIBUTED_DEBUG_X": false, "RANKS": false, "SLURM_JOB_ACCOUNT": false, "MASTER_ADDR": false, "PATH": false,
		"HF_TOKEN": false, "TORCH_HOME": false, "UCX": false, "CUDA_VISIBLE_DEVICES_X": false,
	} {
		if got := ncclEnvKept([]byte(name)); got != want {
			t.Errorf("ncclEnvKept(%q) = %v; want %v", name, got, want)
		}
	}
}

// keptEnviron keeps the first of duplicate names, cuts long values on a
// character boundary, and bounds the number of variables.
func TestReadEnviron(t *testing.T) {
	proc := t.TempDir()
	path := filepath.Join(proc, "1", "environ")
	var b strings.Builder
	b.WriteString("NCCL_ALGO=Ring\x00NCCL_ALGO=Tree\x00")
	b.WriteString("NCCL_TOPO_FILE=" + strings.Repeat("é", 600) + "\x00")
	for i := range 80 {
		fmt.Fprintf(&b, "NCCL_X%d=%d\x00SECRET_%d=s3cr3t\x00", i, i, i)
	}
	hosttest.WriteFile(t, path, b.String())
	host, err := hostfs.NewFS(proc, "")
	if err != nil {
		t.Fatal(err)
	}
	c := &ncclProcCollector{}
	env, err := c.keptEnviron(host.Environ(1))
	if err != nil {
		t.Fatal(err)
	}
	if len(env.vars) != ncclProcEnvMaxVars || !env.truncated || !reflect.DeepEqual(env.cut, []string{"NCCL_TOPO_FILE"}) {
		t.Fatalf("%d variables, truncated %v, cut %q; want %d, true, [NCCL_TOPO_FILE]", len(env.vars), env.truncated, env.cut, ncclProcEnvMaxVars)
	}
	if env.vars[0] != (sample.NCCLEnv{Name: "NCCL_ALGO", Value: "Ring"}) {
		t.Errorf("first variable %+v; want NCCL_ALGO=Ring", env.vars[0])
	}
	if v := env.vars[1].Value; len(v) != 1024 || v != strings.Repeat("é", 512) {
		t.Errorf("long value cut to %d bytes; want 1024 on a character boundary", len(v))
	}
	for _, v := range env.vars {
		if strings.Contains(v.Name+v.Value, "SECRET") || strings.Contains(v.Value, "s3cr3t") {
			t.Errorf("kept %+v", v)
		}
	}
}

func TestNCCLDebugFilePath(t *testing.T) {
	cwd := func() (string, error) { return "/workspace/run", nil }
	noCwd := func() (string, error) { return "", os.ErrPermission }
	for _, tc := range []struct {
		name, pattern, host, root string
		cut                       bool
		cwd                       func() (string, error)
		want, wantErr             string
	}{
		{"absolute", "/tmp/nccl.%h.%p.log", "node-3.example.org", "", false, cwd, "/tmp/nccl.node-3.17.log", ""},
		{"relative to the working directory", "logs/../nccl.%p", "", "", false, cwd, "/workspace/run/nccl.17", ""},
		{"another mount namespace", "/var/log/nccl.%h", "pod-0", "/proc/5151/root", false, cwd, "/proc/5151/root/var/log/nccl.pod-0", ""},
		{"escaped percent needs no host", "/tmp/100%%h", "", "", false, cwd, "/tmp/100%h", ""},
		{"host unknown", "/tmp/%h.log", "", "", false, cwd, "", "host name is unknown"},
		{"working directory unknown", "nccl.log", "h", "", false, noCwd, "", "working directory is unreadable"},
		{"cut value", "/tmp/x", "h", "", true, cwd, "", "longer than"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ncclDebugFileName(tc.pattern, tc.cut, tc.host, 17, tc.cwd)
			got = filepath.Join(tc.root, got)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v; want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("got %q, %v; want %q", got, err, tc.want)
			}
		})
	}
	for level, want := range map[string]bool{"INFO": true, "info": true, "WARN": true, "TRACE": true, "ABORT": true, "VERSION": false, "": false, "DEBUG": false} {
		if got := nccl.WritesDebugFile(level); got != want {
			t.Errorf("nccl.WritesDebugFile(%q) = %v; want %v", level, got, want)
		}
	}
}

// ncclProcHelperEnv names the fake libnccl the helper process maps.
const ncclProcHelperEnv = "GPUDIAG_NCCLPROC_HELPER_LIB"

// TestNCCLProcHelperProcess is not a test: the live test runs the test
// binary as a child that maps a file named like libnccl, so that the scan
// has a real process to find.
func TestNCCLProcHelperProcess(t *testing.T) {
	path := os.Getenv(ncclProcHelperEnv)
	if path == "" {
		t.Skip("helper process for TestNCCLProcLive")
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	m, err := syscall.Mmap(int(f.Fd()), 0, 4096, syscall.PROT_READ, syscall.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Println("mapped")
	_, _ = io.Copy(io.Discard, os.Stdin) // until the parent closes stdin
	_ = syscall.Munmap(m)
	os.Exit(0)
}

// On this machine: a sleep the GPU collector lists and a process that maps
// a libnccl, both with a secret beside their NCCL settings. The published
// debug log paths are exact, the secret appears nowhere.
//
// The scan reads every process of the host, and the host is shared (other
// test runs, jobs that really map libnccl): every assertion is about the
// processes this test started and their children, never about the others
// or about totals over the host. Where a host-wide bound (the processes a
// sample lists, the log files it publishes) could push ours out, the check
// says so instead of failing.
func TestNCCLProcLive(t *testing.T) {
	if _, err := os.Stat("/proc/self/environ"); err != nil {
		t.Skip("no /proc")
	}
	token := make([]byte, 12)
	if _, err := rand.Read(token); err != nil {
		t.Fatal(err)
	}
	secret := "hunter2-" + hex.EncodeToString(token)
	env := []string{"SECRET_TOKEN=" + secret, "NCCL_P2P_DISABLE=1", "NCCL_DEBUG=INFO", "NCCL_DEBUG_FILE=/tmp/x.%h.%p.log"}

	// Long enough to outlive the test on a loaded machine; killed at the end.
	sleeper := exec.Command("sleep", "600")
	sleeper.Env = env
	if err := sleeper.Start(); err != nil {
		t.Skipf("cannot run sleep: %v", err)
	}
	t.Cleanup(func() { _ = sleeper.Process.Kill(); _ = sleeper.Wait() })

	lib := filepath.Join(t.TempDir(), "libnccl.so.2.99.1")
	hosttest.WriteFile(t, lib, strings.Repeat("\x00", 4096))
	mapper := exec.Command(os.Args[0], "-test.run=^TestNCCLProcHelperProcess$")
	mapper.Env = append([]string{ncclProcHelperEnv + "=" + lib}, env...)
	stdin, err := mapper.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := mapper.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := mapper.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = stdin.Close(); _ = mapper.Wait() })
	if line, err := bufio.NewReader(stdout).ReadString('\n'); err != nil || line != "mapped\n" {
		t.Fatalf("helper process: %q, %v", line, err)
	}

	refs := []GPURef{{Index: 0, PIDs: []uint32{uint32(sleeper.Process.Pid)}}}
	c, shared, logs := newNCCLProcTestCollector(t, "/proc", refs, ncclProcOptions{maxScan: 1 << 20})
	if os.Geteuid() == 0 && (c.selfMnt == 0 || c.selfUTS == 0) {
		t.Fatal("running as root, yet the daemon's own namespaces are unknown")
	}
	s := sampleNCCLProc(t, c)
	mine := ownNCCLProcesses(s, sleeper.Process.Pid, mapper.Process.Pid)
	byPID := map[int]*sample.NCCLHostProcess{}
	for i := range mine.Processes {
		byPID[mine.Processes[i].PID] = &mine.Processes[i]
	}
	host, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	wantFile := func(pid int) string {
		return "/tmp/x." + sample.LogHostname(host) + "." + strconv.Itoa(pid) + ".log"
	}
	sleep := byPID[sleeper.Process.Pid]
	if sleep == nil {
		// The GPU collector's processes are listed first: no number of
		// other processes pushes it out.
		t.Fatalf("the GPU collector's process %d is missing (%d processes listed, %d dropped)", sleeper.Process.Pid, len(s.Processes), s.Dropped)
	}
	mapping := byPID[mapper.Process.Pid]
	if mapping == nil {
		if s.Dropped > 0 {
			t.Skipf("the host runs over %d NCCL processes: the sample dropped %d, ours among them", ncclProcMaxReported, s.Dropped)
		}
		t.Fatalf("the process mapping %s (pid %d) was not found", lib, mapper.Process.Pid)
	}
	if len(mine.Processes) != 2 {
		t.Errorf("processes of this test: %+v; want the sleep and the mapping process only (neither has children)", mine.Processes)
	}
	if !sleep.OnGPU || !reflect.DeepEqual(sleep.GPUs, []int{0}) || sleep.MapsNCCL() || sleep.NSPID != sleeper.Process.Pid {
		t.Errorf("sleep: %+v", *sleep)
	}
	wantLib := []sample.NCCLLibrary{{Path: lib, Version: "2.99.1", VersionSource: "file_name"}}
	if mapping.OnGPU || !reflect.DeepEqual(mapping.Libraries, wantLib) {
		t.Errorf("mapping process: libraries %+v; want %+v", mapping.Libraries, wantLib)
	}
	wantEnv := []sample.NCCLEnv{{Name: "NCCL_P2P_DISABLE", Value: "1"}, {Name: "NCCL_DEBUG", Value: "INFO"}, {Name: "NCCL_DEBUG_FILE", Value: "/tmp/x.%h.%p.log"}}
	for _, p := range []*sample.NCCLHostProcess{sleep, mapping} {
		if !reflect.DeepEqual(p.Env, wantEnv) {
			t.Errorf("pid %d: environment %+v; want %+v", p.PID, p.Env, wantEnv)
		}
		if c.hostNet != 0 && p.HostNetwork == nil {
			t.Errorf("pid %d: network namespace unknown although PID 1's is known", p.PID)
		}
		if c.selfMnt != 0 && c.selfUTS != 0 {
			// Same mount and UTS namespaces as the test: the plain path,
			// with this host's name.
			if p.DebugFile != wantFile(p.PID) || p.HostnameSource != "uts_namespace" {
				t.Errorf("pid %d: debug file %q (host name from %s); want %q", p.PID, p.DebugFile, p.HostnameSource, wantFile(p.PID))
			}
		}
	}
	// Of the published log files, ours: the GPU process's first (GPU
	// processes come before the others), the mapping process's after it
	// unless other processes' files filled the list.
	var published []string
	all := ncclLogPaths(shared)
	for _, f := range all {
		if f == wantFile(sleeper.Process.Pid) || f == wantFile(mapper.Process.Pid) {
			published = append(published, f)
		}
	}
	if c.selfMnt != 0 && c.selfUTS != 0 {
		want := []string{wantFile(sleeper.Process.Pid), wantFile(mapper.Process.Pid)}
		if len(published) == 1 && len(all) == ncclProcMaxLogFiles {
			want = want[:1] // the list is full of others' files
			t.Logf("the host's other NCCL processes filled the %d published log files; the mapping process's is not among them", ncclProcMaxLogFiles)
		}
		if !reflect.DeepEqual(published, want) {
			t.Errorf("published (of this test's) %q; want %q", published, want)
		}
	}

	// The metrics of this test's processes alone: the host's others would
	// add their own libraries, settings and count.
	metrics := metricsText(t, c, mine)
	for _, want := range []string{
		"gpudiag_nccl_processes 1\n", // the mapping process; the sleep maps none
		`gpudiag_nccl_process_env_info{gpu="0",value="1",variable="NCCL_P2P_DISABLE"} 1`,
		`gpudiag_nccl_library_info{version="2.99.1"} 1`,
	} {
		if !strings.Contains(metrics, want) {
			t.Errorf("metrics of this test's processes lack %q:\n%s", want, metrics)
		}
	}
	raw, err := json.Marshal(mine)
	if err != nil {
		t.Fatal(err)
	}
	// The records of the engine's window and the replay go through JSON;
	// the scrape through the metrics. The secret is this run's own, so the
	// logs, which name the host's other processes too, are searched for it
	// alone; the variable's name is looked for where only ours appear.
	assertNoSecret(t, []string{secret, "SECRET_TOKEN"}, map[string]string{
		"sample JSON": string(raw), "metrics": metrics, "published paths": strings.Join(published, "\n"),
	})
	assertNoSecret(t, []string{secret}, map[string]string{"logs": logs.String(), "all published paths": strings.Join(all, "\n")})
	if !bytes.Equal(c.environBuf, make([]byte, len(c.environBuf))) {
		t.Error("the environ buffer still holds data after the sample")
	}
}

// ownNCCLProcesses keeps, of a live scan, the processes a test started
// (roots) and their descendants, in the sample's order.
func ownNCCLProcesses(s *sample.NCCLHostProcesses, roots ...int) *sample.NCCLHostProcesses {
	own := map[int]bool{}
	for _, pid := range roots {
		own[pid] = true
	}
	for grew := true; grew; {
		grew = false
		for _, p := range s.Processes {
			if !own[p.PID] && own[p.PPID] {
				own[p.PID], grew = true, true
			}
		}
	}
	out := &sample.NCCLHostProcesses{}
	for _, p := range s.Processes {
		if own[p.PID] {
			out.Processes = append(out.Processes, p)
			if p.DebugFile != "" {
				out.LogFiles = append(out.LogFiles, p.DebugFile)
			}
		}
	}
	return out
}

// A memory map that cannot be parsed is named in the process's errors; the
// scan goes on.
func TestNCCLProcMalformedMaps(t *testing.T) {
	proc := procTree(t, "5252/stat", "5252/environ", "5252/status", "5252/cgroup", "5151/stat", "5151/maps", "5151/environ", "5151/status", "5151/cgroup")
	hosttest.WriteFile(t, filepath.Join(proc, "5252/maps"), "7f55d0000000-7f55d4600000 r--p /usr/lib/libnccl.so.2\n")
	refs := ncclProcRefs()
	refs[4].PIDs = []uint32{5252}
	c, _, _ := newNCCLProcTestCollector(t, proc, refs, ncclProcDefaults)
	s := sampleNCCLProc(t, c)
	if len(s.Processes) != 2 {
		t.Fatalf("%d processes; want 5151 and 5252", len(s.Processes))
	}
	p := s.Processes[1]
	want := []string{filepath.Join(proc, "5252/maps") + ":1: malformed mapping (truncated line?)"}
	if p.PID != 5252 || p.MapsNCCL() || !reflect.DeepEqual(p.Errors, want) {
		t.Errorf("process %d: libraries %+v, errors %q; want 5252 without libraries and %q", p.PID, p.Libraries, p.Errors, want)
	}
	if !s.Processes[0].MapsNCCL() {
		t.Error("the other process was not read")
	}
}

// Every override exported as a series keeps its value under the
// environment rule; one that did not would show as "<redacted>".
func TestNCCLOverrideSeriesAreAllowListed(t *testing.T) {
	for name := range ncclEnvAllowList {
		if nccl.EnvPolicy([]byte(name)) != nccl.EnvValue {
			t.Errorf("%s is exported as a series but its value is not kept", name)
		}
	}
}

// The reference rank 5151 (WORLD_SIZE=16) with the libnccl lines taken out
// of its map, listed by the driver on GPU 1: a GPU rank whose collectives
// run without NCCL.
func TestNCCLProcRankWithoutNCCL(t *testing.T) {
	proc := procTree(t, "5151/stat", "5151/environ", "5151/status", "5151/cgroup")
	maps, err := os.ReadFile(filepath.Join(fixtureProc, "5151/maps"))
	if err != nil {
		t.Fatal(err)
	}
	var kept []string
	for line := range strings.SplitSeq(string(maps), "\n") {
		if !strings.Contains(line, "libnccl") {
			kept = append(kept, line)
		}
	}
	hosttest.WriteFile(t, filepath.Join(proc, "5151/maps"), strings.Join(kept, "\n"))
	refs := ncclProcRefs()
	refs[1].PIDs = []uint32{5151}
	c, _, _ := newNCCLProcTestCollector(t, proc, refs, ncclProcDefaults)
	s := sampleNCCLProc(t, c)
	if len(s.Processes) != 1 || s.Processes[0].MapsNCCL() || !s.Processes[0].MapsKnown() {
		t.Fatalf("processes %+v; want 5151 read, without libnccl", s.Processes)
	}
	fs := analyzers.Audit(analyzers.AuditInput{NCCLProcesses: s})
	var got []string
	for _, f := range fs {
		got = append(got, f.Check)
	}
	if !slices.Contains(got, "distributed_backend_not_nccl") {
		t.Fatalf("findings %q; want distributed_backend_not_nccl", got)
	}
}

// A GPU process whose map the per-scan limit left unread is listed with
// MapsUnread, so that no libnccl is not read as "maps none"; the next scan
// reads it.
func TestNCCLProcMapsUnreadUnderScanLimit(t *testing.T) {
	refs := ncclProcRefs()
	refs[1].PIDs = []uint32{5151}
	refs[6].PIDs = []uint32{5252}
	c, _, _ := newNCCLProcTestCollector(t, fixtureProc, refs, ncclProcOptions{maxScan: 1})
	unread := func(s *sample.NCCLHostProcesses) (out []int) {
		for _, p := range s.Processes {
			if p.MapsUnread {
				out = append(out, p.PID)
			}
			if p.MapsUnread == p.MapsKnown() {
				t.Errorf("process %d: MapsUnread %v, MapsKnown %v", p.PID, p.MapsUnread, p.MapsKnown())
			}
		}
		return out
	}
	if got := unread(sampleNCCLProc(t, c)); len(got) != 1 {
		t.Fatalf("first scan: unread %v; want one of the two GPU processes", got)
	}
	if got := unread(sampleNCCLProc(t, c)); len(got) != 0 {
		t.Fatalf("second scan: unread %v; want none", got)
	}
}

// A complete scan is published for the collectors that keep every process's
// parent and for the tuning collector's daemons: every process of the
// fixture host, as its stat file says, and the command names running.
func TestNCCLProcPublishesItsScan(t *testing.T) {
	c, shared, _ := newNCCLProcTestCollector(t, fixtureProc, ncclProcRefs(), ncclProcDefaults)
	clk := &fakeClock{t: time.Unix(1_700_000_000, 0)}
	c.now = clk.now
	sampleNCCLProc(t, c)
	p := shared.ProcessScan()
	if p == nil || !p.At.Equal(clk.t) {
		t.Fatalf("published scan %+v; want one at %v", p, clk.t)
	}
	dirs, err := filepath.Glob(filepath.Join(fixtureProc, "[0-9]*", "stat"))
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Stats) != len(dirs) {
		t.Errorf("scan of %d processes; the fixture has %d", len(p.Stats), len(dirs))
	}
	if st := p.Stats[5151]; st.PPID != 5100 || st.Starttime != 6000000 {
		t.Errorf("5151 in the scan: %+v", st)
	}
	if !p.Comms["pt_main_thread"] || p.Comms["nv-hostengine"] {
		t.Errorf("command names of the scan: %v; want pt_main_thread (5151) and no nv-hostengine", p.Comms)
	}
}

// A workload plants an escape sequence in its SLURM_JOB_ID and 10 kB in
// its TORCHELASTIC_RUN_ID (issue 34; an entry past the 64 KiB read buffer
// is skipped by the environ scan already): both were kept (the second cut
// to 1 KiB) and became the job_id label. Now neither is kept, the Slurm job is named by
// the process's cgroup (the next source), each refusal is counted by
// variable (gpudiag_nccl_job_identity_refused_total) and the first of
// each variable logged with its value escaped and shortened, once: a
// second scan of the same process neither counts nor logs it again.
func TestNCCLProcRefusesForeignJobIdentity(t *testing.T) {
	proc := procTree(t, "5252/stat", "5252/status", "5252/cgroup", "5252/maps")
	hosttest.WriteFile(t, filepath.Join(proc, "5252/environ"),
		"SLURM_JOB_ID=\x1b]0;owned\x07\x00TORCHELASTIC_RUN_ID="+strings.Repeat("r", 10_000)+"\x00SLURM_JOB_ID=9999\x00NCCL_DEBUG=WARN\x00")
	refs := ncclProcRefs()
	refs[4].PIDs = []uint32{5252}
	c, _, logs := newNCCLProcTestCollector(t, proc, refs, ncclProcDefaults)
	for scan := 1; scan <= 2; scan++ {
		s := sampleNCCLProc(t, c)
		if len(s.Processes) != 1 {
			t.Fatalf("scan %d: %d processes", scan, len(s.Processes))
		}
		p := s.Processes[0]
		for _, v := range []string{"SLURM_JOB_ID", "TORCHELASTIC_RUN_ID"} {
			if got, ok := p.EnvValue(v); ok {
				t.Errorf("scan %d kept %s = %.40q", scan, v, got)
			}
		}
		if p.SlurmJobID != "8812" || p.Job() != "slurm job 8812" {
			t.Errorf("scan %d: Slurm job %q; want the cgroup's 8812", scan, p.SlurmJobID)
		}
		want := map[string]uint64{"SLURM_JOB_ID": 1, "TORCHELASTIC_RUN_ID": 1}
		if !reflect.DeepEqual(s.JobIdentityRefused, want) {
			t.Errorf("scan %d counted %v; want %v", scan, s.JobIdentityRefused, want)
		}
		metrics := metricsText(t, c, s)
		for _, line := range []string{
			`gpudiag_nccl_job_identity_refused_total{variable="SLURM_JOB_ID"} 1`,
			`gpudiag_nccl_job_identity_refused_total{variable="TORCHELASTIC_RUN_ID"} 1`,
		} {
			if !strings.Contains(metrics, line) {
				t.Errorf("scan %d: metrics lack %s", scan, line)
			}
		}
		if strings.Contains(metrics, "owned") || strings.Contains(metrics, "rrrr") {
			t.Errorf("scan %d: a refused value reached the metrics", scan)
		}
	}
	text := logs.String()
	if n := strings.Count(text, "not in its scheduler's format"); n != 2 {
		t.Errorf("%d refusal logs for two variables over two scans; want 2:\n%.2000s", n, text)
	}
	if strings.Contains(text, "\x1b") || strings.Contains(text, "\\u001b]0") || !strings.Contains(text, `\\x1b]0;owned\\x07`) {
		t.Errorf("the refused value is not logged escaped:\n%.2000s", text)
	}
	if strings.Contains(text, strings.Repeat("r", 300)) {
		t.Error("the 10 kB value was logged, not shortened")
	}
}

// NCCL_TOPO_FILE naming a file that is not there is flagged; one that is
// there, or a relative name found from the process's working directory,
// is not.
func TestNCCLProcTopoFileMissing(t *testing.T) {
	if _, err := os.Stat("/proc/self/environ"); err != nil {
		t.Skip("no /proc")
	}
	dir := t.TempDir()
	hosttest.WriteFile(t, filepath.Join(dir, "topo.xml"), "<system/>")
	start := func(topo string) int {
		// Long enough to outlive the test on a loaded machine; killed at the end.
		cmd := exec.Command("sleep", "600")
		cmd.Env, cmd.Dir = []string{"NCCL_TOPO_FILE=" + topo}, dir
		if err := cmd.Start(); err != nil {
			t.Skipf("cannot run sleep: %v", err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		return cmd.Process.Pid
	}
	missing, present, relative := start(filepath.Join(dir, "gone.xml")), start(filepath.Join(dir, "topo.xml")), start("topo.xml")
	refs := []GPURef{{Index: 0, PIDs: []uint32{uint32(missing), uint32(present), uint32(relative)}}}
	c, _, _ := newNCCLProcTestCollector(t, "/proc", refs, ncclProcOptions{maxScan: 1 << 20})
	s := ownNCCLProcesses(sampleNCCLProc(t, c), missing, present, relative)
	got := map[int]bool{}
	for _, p := range s.Processes {
		got[p.PID] = p.TopoFileMissing
	}
	if want := map[int]bool{missing: true, present: false, relative: false}; !reflect.DeepEqual(got, want) {
		t.Fatalf("topology file missing by pid %v; want %v", got, want)
	}
}

// A process in another mount namespace than the daemon's (a container)
// whose root has no /dev/infiniband is marked; one in the daemon's own
// namespace is not looked at.
func TestNCCLProcRDMADevicesHidden(t *testing.T) {
	if _, err := os.Stat("/proc/self/environ"); err != nil {
		t.Skip("no /proc")
	}
	cmd := exec.Command("sleep", "600")
	cmd.Env = []string{"NCCL_DEBUG=WARN"}
	if err := cmd.Start(); err != nil {
		t.Skipf("cannot run sleep: %v", err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	pid := cmd.Process.Pid
	refs := []GPURef{{Index: 0, PIDs: []uint32{uint32(pid)}}}
	_, err := os.Stat("/dev/infiniband")
	noDevices := errors.Is(err, fs.ErrNotExist)
	for _, tc := range []struct {
		name      string
		otherMnt  bool
		wantFlags bool
	}{
		{name: "the daemon's namespace", otherMnt: false, wantFlags: false},
		{name: "a container's namespace", otherMnt: true, wantFlags: noDevices},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, _, _ := newNCCLProcTestCollector(t, "/proc", refs, ncclProcOptions{maxScan: 1 << 20})
			if tc.otherMnt {
				c.selfMnt = 1 // no process's mount namespace has inode 1
			}
			s := ownNCCLProcesses(sampleNCCLProc(t, c), pid)
			if len(s.Processes) != 1 || s.Processes[0].RDMADevicesHidden != tc.wantFlags {
				t.Fatalf("processes %+v; want RDMADevicesHidden %v", s.Processes, tc.wantFlags)
			}
		})
	}
}
