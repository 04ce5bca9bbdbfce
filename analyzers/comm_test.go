package analyzers

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/gpudiag/gpudiag/sample"
)

func ncclLib(path, version string) []sample.NCCLLibrary {
	return []sample.NCCLLibrary{{Path: path, Version: version}}
}

func env(kv ...string) []sample.NCCLEnv {
	var out []sample.NCCLEnv
	for i := 0; i+1 < len(kv); i += 2 {
		out = append(out, sample.NCCLEnv{Name: kv[i], Value: kv[i+1]})
	}
	return out
}

func yes() *bool { b := true; return &b }
func no() *bool  { b := false; return &b }

// findingsText is each finding as check:severity:gpu:device, then its summary.
func findingsText(fs []Finding) string {
	var out []string
	for _, f := range fs {
		gpu := "-"
		if f.GPU != nil {
			gpu = string(rune('0' + *f.GPU))
		}
		out = append(out, f.Check+":"+string(f.Severity)+":"+gpu+":"+f.Device+" "+f.Summary)
	}
	return strings.Join(out, "\n")
}

func TestAuditNCCLLibraryMismatch(t *testing.T) {
	pip := "/venv/lib/python3.12/site-packages/nvidia/nccl/lib/libnccl.so.2"
	sys := "/usr/lib/x86_64-linux-gnu/libnccl.so.2.21.5"
	for _, tc := range []struct {
		name  string
		procs []sample.NCCLHostProcess
		want  []string // check:severity:gpu:device, then words the summary holds
	}{
		{"one version", []sample.NCCLHostProcess{
			{PID: 10, SlurmJobID: "7", Libraries: ncclLib(sys, "2.21.5")},
			{PID: 11, SlurmJobID: "7", Libraries: ncclLib("/opt/other/libnccl.so.2.21.5", "2.21.5")},
		}, nil},
		{"two versions in a Slurm job", []sample.NCCLHostProcess{
			{PID: 10, SlurmJobID: "7", Libraries: ncclLib(sys, "2.21.5")},
			{PID: 11, SlurmJobID: "7", Libraries: ncclLib(pip, "2.27.3")},
			{PID: 12, SlurmJobID: "7", Libraries: ncclLib(pip, "2.27.3")},
		}, []string{"nccl_library_mismatch:warning:-:", "slurm job 7 map", "2.21.5 (pid 10), 2.27.3 (pid 11, pid 12)"}},
		{"different jobs may differ", []sample.NCCLHostProcess{
			{PID: 10, SlurmJobID: "7", Libraries: ncclLib(sys, "2.21.5")},
			{PID: 20, PodUID: "u-1", Libraries: ncclLib(pip, "2.27.3")},
		}, nil},
		{"the pod is the job", []sample.NCCLHostProcess{
			{PID: 20, PodUID: "u-1", Libraries: ncclLib(pip, "2.27.3")},
			{PID: 21, PodUID: "u-1", Libraries: ncclLib(sys, "2.21.5")},
		}, []string{"nccl_library_mismatch:warning:-:", "pod u-1 map different NCCL versions"}},
		{"no job: the node's processes", []sample.NCCLHostProcess{
			{PID: 30, Libraries: ncclLib(sys, "2.21.5")},
			{PID: 31, Libraries: ncclLib(pip, "2.27.3")},
		}, []string{"nccl_library_mismatch:warning:-:", "outside any Slurm job or pod"}},
		{"two libraries in one process", []sample.NCCLHostProcess{
			{PID: 40, Libraries: append(ncclLib(sys, "2.21.5"), ncclLib(pip, "2.27.3")...)},
		}, []string{"nccl_library_mismatch:warning:-:", "2.21.5 (pid 40), 2.27.3 (pid 40)"}},
		{"forked workers are their parent", []sample.NCCLHostProcess{
			{PID: 50, Libraries: ncclLib(sys, "2.21.5")},
			{PID: 51, ForkOf: 50, Libraries: ncclLib(pip, "2.27.3")},
		}, nil},
		{"unknown version, other file", []sample.NCCLHostProcess{
			{PID: 60, Libraries: ncclLib(sys, "2.21.5")},
			{PID: 61, Libraries: ncclLib(pip, sample.NCCLLibraryVersionUnknown)},
		}, []string{"nccl_library_mismatch:info:-:", "not all of known version"}},
		{"unknown version, same file", []sample.NCCLHostProcess{
			{PID: 70, Libraries: ncclLib(pip, sample.NCCLLibraryVersionUnknown)},
			{PID: 71, Libraries: ncclLib(pip, sample.NCCLLibraryVersionUnknown)},
		}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := findingsText(Audit(AuditInput{NCCLProcesses: &sample.NCCLHostProcesses{Processes: tc.procs}}))
			if tc.want == nil {
				if got != "" {
					t.Fatalf("findings:\n%s\nwant none", got)
				}
				return
			}
			if !strings.HasPrefix(got, tc.want[0]+" ") || strings.Count(got, "\n") != 0 {
				t.Fatalf("findings:\n%s\nwant one %s", got, tc.want[0])
			}
			for _, w := range tc.want[1:] {
				if !strings.Contains(got, w) {
					t.Errorf("summary %q lacks %q", got, w)
				}
			}
		})
	}
}

// ncclLogSample is an NCCL log sample with one current process per entry
// of gpus, pid 17 on host trainer-0 for the first.
func ncclLogSample(env []sample.NCCLEnv, gpus ...int) *sample.NCCL {
	f := sample.NCCLFile{Path: "/logs/nccl.log", Exists: true}
	s := &sample.NCCL{}
	for i, g := range gpus {
		f.Processes = append(f.Processes, sample.NCCLProcess{Host: "trainer-0", PID: 17 + i, Current: true, Env: env})
		s.GPUs = append(s.GPUs, sample.NCCLGPU{GPU: g, Matched: true, File: 0, Process: i})
	}
	s.Files = []sample.NCCLFile{f}
	return s
}

func TestAuditNCCLEnvOverride(t *testing.T) {
	p2p := env("NCCL_P2P_DISABLE", "1")
	for _, tc := range []struct {
		name  string
		log   *sample.NCCL
		procs []sample.NCCLHostProcess
		want  string
	}{
		{"from the log", ncclLogSample(p2p, 3), nil,
			"nccl_env_override:info:3: NCCL settings forced by environment in pid 17 on trainer-0, on GPU 3: NCCL_P2P_DISABLE=1"},
		{"from the environment, one finding for the GPUs", nil, []sample.NCCLHostProcess{{PID: 5252, GPUs: []int{4, 5}, Env: env("NCCL_SHM_DISABLE", "1", "NCCL_ALGO", "Ring")}},
			"nccl_env_override:info:-: NCCL settings forced by environment in pid 5252, on GPUs 4, 5: NCCL_ALGO=Ring, NCCL_SHM_DISABLE=1"},
		{"settings that do not restrict", nil, []sample.NCCLHostProcess{{PID: 1, Env: env("NCCL_IB_DISABLE", "0", "NCCL_NET", "IB", "NCCL_DEBUG", "INFO")}}, ""},
		{"the same process in both sources is named once", ncclLogSample(p2p, 3),
			[]sample.NCCLHostProcess{{PID: 5151, NSPID: 17, Hostname: "trainer-0.cluster.local", Env: env("NCCL_P2P_DISABLE", "1", "NCCL_PROTO", "Simple")}},
			"nccl_env_override:info:3: NCCL settings forced by environment in pid 5151 (pid 17 on trainer-0), on GPU 3: NCCL_P2P_DISABLE=1, NCCL_PROTO=Simple"},
		{"a process of unknown GPU adds only what no GPU's finding says", ncclLogSample(p2p, 3),
			[]sample.NCCLHostProcess{{PID: 900, Env: env("NCCL_P2P_DISABLE", "1")}, {PID: 901, Env: env("NCCL_P2P_DISABLE", "1", "NCCL_IB_DISABLE", "1")}},
			"nccl_env_override:info:-: NCCL settings forced by environment in pid 901: NCCL_IB_DISABLE=1\n" +
				"nccl_env_override:info:3: NCCL settings forced by environment in pid 17 on trainer-0, on GPU 3: NCCL_P2P_DISABLE=1"},
		{"ranks of one job on four GPUs, one cause", ncclLogSample(p2p, 0, 1, 2, 3), nil,
			"nccl_env_override:info:-: NCCL settings forced by environment in pid 17 on trainer-0, pid 18 on trainer-0, pid 19 on trainer-0, pid 20 on trainer-0, on GPUs 0, 1, 2, 3: NCCL_P2P_DISABLE=1"},
		{"forked workers repeat their parent", nil,
			[]sample.NCCLHostProcess{{PID: 50, Env: env("NCCL_NET", "Socket")}, {PID: 51, ForkOf: 50, Env: env("NCCL_NET", "Socket")}},
			"nccl_env_override:info:-: NCCL settings forced by environment in pid 50: NCCL_NET=Socket"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := AuditInput{NCCL: tc.log}
			if tc.procs != nil {
				in.NCCLProcesses = &sample.NCCLHostProcesses{Processes: tc.procs}
			}
			if got := findingsText(Audit(in)); got != tc.want {
				t.Fatalf("findings:\n%s\nwant:\n%s", got, tc.want)
			}
		})
	}
}

// One cause is one finding for the node, listing its GPUs (ddp_shm and
// ddp_socket: 4 GPUs × 4 kinds made 16). Sockets "instead of InfiniBand" on
// a node with no RDMA device are no fallback unless IB was disabled by hand;
// ranks of one node over the network are no cause of their own when P2P and
// shared memory were both disabled; with NCCL_HOSTID set, its fix says so.
func TestAuditNCCLFallbacksPerCause(t *testing.T) {
	fb := func(kinds ...string) []sample.NCCLFallback {
		var out []sample.NCCLFallback
		for _, k := range kinds {
			out = append(out, sample.NCCLFallback{Kind: k, Taken: "NET/Socket", Expected: "P2P", Evidence: "log says " + k})
		}
		return out
	}
	logOf := func(env []sample.NCCLEnv, kinds []string, gpus ...int) *sample.NCCL {
		s := ncclLogSample(env, gpus...)
		for i := range s.Files[0].Processes {
			s.Files[0].Processes[i].Fallbacks = fb(kinds...)
		}
		return s
	}
	noRDMA := &sample.InfiniBand{}
	withRDMA := &sample.InfiniBand{Ports: []sample.InfiniBandPort{{Device: "mlx5_0", Port: 1}}}
	socket := []string{"p2p_disabled", "shm_disabled", "socket_instead_of_ib", "net_within_node"}
	for _, tc := range []struct {
		name string
		log  *sample.NCCL
		ib   *sample.InfiniBand
		want []string // kind:gpus
	}{
		{"sockets forced, no RDMA device", logOf(env("NCCL_P2P_DISABLE", "1", "NCCL_SHM_DISABLE", "1"), socket, 0, 1, 2, 3), noRDMA,
			[]string{"p2p_disabled:0,1,2,3", "shm_disabled:0,1,2,3"}},
		{"sockets forced, an RDMA device", logOf(env("NCCL_P2P_DISABLE", "1", "NCCL_SHM_DISABLE", "1"), socket, 0, 1), withRDMA,
			[]string{"p2p_disabled:0,1", "shm_disabled:0,1", "socket_instead_of_ib:0,1"}},
		{"IB disabled by hand, no RDMA device", logOf(env("NCCL_IB_DISABLE", "1"), []string{"socket_instead_of_ib"}, 0), noRDMA,
			[]string{"socket_instead_of_ib:0"}},
		{"ports not read", logOf(nil, []string{"socket_instead_of_ib"}, 0), nil, []string{"socket_instead_of_ib:0"}},
		{"ranks as hosts", logOf(env("NCCL_HOSTID", "a"), []string{"socket_instead_of_ib", "net_within_node"}, 0, 1, 2, 3), noRDMA,
			[]string{"net_within_node:0,1,2,3"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs := Audit(AuditInput{NCCL: tc.log, LastIB: tc.ib})
			var got []string
			for _, f := range fs {
				if f.Check != "nccl_fallback" {
					continue
				}
				got = append(got, f.Kind+":"+strings.Trim(strings.Join(strings.Fields(fmt.Sprint(f.GPUs)), ","), "[]"))
				if (len(f.GPUs) == 1) != (f.GPU != nil) {
					t.Errorf("%s: GPU %v with GPUs %v", f.Kind, f.GPU, f.GPUs)
				}
				if f.Kind == "net_within_node" && tc.name == "ranks as hosts" && !strings.Contains(f.Fix, "NCCL_HOSTID=a") {
					t.Errorf("fix %q", f.Fix)
				}
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("fallbacks %v; want %v", got, tc.want)
			}
		})
	}
}

func TestAuditNCCLSocketInterface(t *testing.T) {
	nics := &sample.NetDevices{Interfaces: []sample.NetInterface{
		{Name: "lo", SpeedBytesPerSecond: 0},
		{Name: "eno1", Physical: true, Carrier: true, SpeedBytesPerSecond: 1e9 / 8},
		{Name: "ens9c0np0", Physical: true, Carrier: true, SpeedBytesPerSecond: 200e9 / 8},
		{Name: "ens9c1np1", Physical: true, Carrier: true, SpeedBytesPerSecond: 10e9 / 8},
		{Name: "bond0", SpeedBytesPerSecond: 200e9 / 8},
		{Name: "cilium_host", SpeedBytesPerSecond: 0},
	}}
	proc := func(value string, hostNet *bool) []sample.NCCLHostProcess {
		return []sample.NCCLHostProcess{{PID: 5252, HostNetwork: hostNet, Env: env("NCCL_SOCKET_IFNAME", value)}}
	}
	for _, tc := range []struct {
		name  string
		procs []sample.NCCLHostProcess
		log   *sample.NCCL
		want  string // check:severity:gpu:device and the reasons
	}{
		{"docker bridge", proc("docker0", nil), nil, "nccl_socket_ifname_virtual:warning:-:docker0 docker0 is a virtual interface"},
		{"loopback", proc("lo", yes()), nil, "nccl_socket_ifname_virtual:warning:-:lo lo is the loopback interface"},
		{"veth prefix from the log", nil, ncclLogSample(env("NCCL_SOCKET_IFNAME", "veth"), 0), "nccl_socket_ifname_virtual:warning:-:veth veth is a virtual interface"},
		{"exclusions name nothing", proc("^docker0,lo", yes()), nil, ""},
		{"slow NIC on the host network", proc("eno", yes()), nil, "nccl_socket_ifname_virtual:warning:-:eno eno1 runs at 1 Gb/s, below 25 Gb/s"},
		{"slow NIC name in a pod's own network", proc("eno1", no()), nil, ""},
		{"prefix picks a slow port too", proc("ens9", yes()), nil, "nccl_socket_ifname_virtual:warning:-:ens9 ens9c1np1 runs at 10 Gb/s"},
		{"exact name picks the fast port only", proc("=ens9c0np0", yes()), nil, ""},
		{"a bond reports its NICs' rate", proc("bond0", yes()), nil, ""},
		{"a virtual interface without a rate", proc("cilium", yes()), nil, "nccl_socket_ifname_virtual:warning:-:cilium cilium_host is a virtual interface (no device behind it"},
		{"a single-node torchrun job", []sample.NCCLHostProcess{{PID: 7, Env: env("NCCL_SOCKET_IFNAME", "lo", "WORLD_SIZE", "8", "LOCAL_WORLD_SIZE", "8")}}, nil, ""},
		{"a multi-node torchrun job", []sample.NCCLHostProcess{{PID: 7, Env: env("NCCL_SOCKET_IFNAME", "lo", "WORLD_SIZE", "16", "LOCAL_WORLD_SIZE", "8")}}, nil,
			"nccl_socket_ifname_virtual:warning:-:lo lo is the loopback interface"},
		{"a single-node job by its log", nil, func() *sample.NCCL {
			s := ncclLogSample(env("NCCL_SOCKET_IFNAME", "lo"), 0)
			s.Files[0].Processes[0].Comms = []sample.NCCLComm{{NNodes: 1}}
			return s
		}(), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := AuditInput{NCCL: tc.log, NetDevices: nics}
			if tc.procs != nil {
				in.NCCLProcesses = &sample.NCCLHostProcesses{Processes: tc.procs}
			}
			fs := Audit(in)
			var got []Finding
			for _, f := range fs {
				if f.Check == "nccl_socket_ifname_virtual" {
					got = append(got, f)
				}
			}
			text := findingsText(got)
			if tc.want == "" {
				if text != "" {
					t.Fatalf("findings:\n%s\nwant none", text)
				}
				return
			}
			head, reason, _ := strings.Cut(tc.want, " ")
			if len(got) != 1 || !strings.HasPrefix(text, head+" ") || !strings.Contains(text, reason) {
				t.Fatalf("findings:\n%s\nwant one %s saying %q", text, head, reason)
			}
			if !strings.Contains(got[0].Fix, "NCCL_SOCKET_IFNAME=ens9c0np0 (200 Gb/s") {
				t.Errorf("fix %q does not name the fastest interface", got[0].Fix)
			}
		})
	}
}

// Collectives over sockets on a node without an RDMA device: the verdict
// says so, its fix names only the NCCL variables the job sets, and its
// summary only the fallbacks the audit reports. With an RDMA port, the fix
// turns to why NCCL does not use it.
func TestSocketVerdictFollowsEvidence(t *testing.T) {
	w := h200(0.015, 0, 0.001, 1, 4.0*gb, 3.6*gb, 0, 0)
	w.ProcessTCPBytes = 3 * gb
	w.NCCLFallbacks = []string{"p2p_disabled", "shm_disabled", "socket_instead_of_ib", "net_within_node"}
	w.NCCLEnv = env("NCCL_P2P_DISABLE", "1", "NCCL_SHM_DISABLE", "1", "NCCL_IB_DISABLE", "0")
	none := NaNNode()
	none.RDMAMeasured = true
	v := ClassifyGPU(w, none, DefaultThresholds)
	if v.SubKind != SubNetwork || !strings.Contains(v.Summary, "this node has no RDMA NIC") || !strings.HasSuffix(v.Summary, "fallback p2p_disabled, shm_disabled") {
		t.Errorf("summary %q", v.Summary)
	}
	if !strings.Contains(v.Fix, "unset NCCL_P2P_DISABLE=1, NCCL_SHM_DISABLE=1") || !strings.Contains(v.Fix, "inter-node collectives over TCP: no RDMA NIC on this node") ||
		strings.Contains(v.Fix, "NCCL_IB_DISABLE") || strings.Contains(v.Fix, "NCCL_NET") || strings.Contains(v.Fix, "ports are active") {
		t.Errorf("fix %q", v.Fix)
	}
	withPort := none
	withPort.RDMAPorts = []RDMAPort{{Name: "mlx5_0/1", LinkLayer: "InfiniBand", Active: true, TxBytes: 0, RxBytes: 0}}
	v = ClassifyGPU(w, withPort, DefaultThresholds)
	if !strings.Contains(v.Fix, "active RDMA ports that NCCL does not use") || strings.Contains(v.Fix, "no RDMA NIC") || !strings.Contains(v.Summary, "socket_instead_of_ib") {
		t.Errorf("with a port: %q / %q", v.Summary, v.Fix)
	}
}
