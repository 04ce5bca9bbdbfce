package nccl

import (
	"reflect"
	"strings"
	"testing"
)

// Logs as people paste them: a launcher's or log pipeline's text before
// NCCL's prefix, and prefixes cut away.
func TestParseLineFromTheWild(t *testing.T) {
	info := func(host string, pid, tid, dev int, msg string) Line {
		return Line{Host: host, PID: pid, TID: tid, CudaDev: dev, Level: LevelInfo, Message: msg}
	}
	for _, tc := range []struct {
		name string
		in   string
		want Line
		ok   bool
	}{
		{"mpirun's rank and stream glued to the host", "[1,26]<stdout>:ip-172-32-36-209:8716:9558 [2] NCCL INFO Ring 00 : 26[2] -> 30[6] via P2P/IPC",
			info("ip-172-32-36-209", 8716, 9558, 2, "Ring 00 : 26[2] -> 30[6] via P2P/IPC"), true},
		{"srun -l", "3: gpu-node-7:4242:4242 [3] NCCL INFO Using network IB", info("gpu-node-7", 4242, 4242, 3, "Using network IB"), true},
		{"srun -l glued", "12:gpu-node-7:4242:4242 [3] NCCL INFO Using network IB", info("gpu-node-7", 4242, 4242, 3, "Using network IB"), true},
		{"a rank in brackets", "[155] crow-19:5330:5499 [3] NCCL INFO x", info("crow-19", 5330, 5499, 3, "x"), true},
		{"ISO timestamp", "2024-12-04T05:27:48.125Z algo-1:18059:20782 [2] NCCL INFO x", info("algo-1", 18059, 20782, 2, "x"), true},
		{"CloudWatch columns", "  | 2025-05-16T16:39:51.208-07:00 | ip-10-36-29-253:79:79 [0] NCCL INFO NCCL_SOCKET_IFNAME set by environment to eth0",
			info("ip-10-36-29-253", 79, 79, 0, "NCCL_SOCKET_IFNAME set by environment to eth0"), true},
		{"CloudWatch: timestamp glued to the host, the line repeated",
			"  | 2025-05-16T16:39:51.208-07:00ip-10-36-29-253:79:79 [0] NCCL INFO Bootstrap : Using eth0:10.36.29.253<0> | ip-10-36-29-253:79:79 [0] NCCL INFO Bootstrap : Using eth0:10.36.29.253<0>",
			info("ip-10-36-29-253", 79, 79, 0, "Bootstrap : Using eth0:10.36.29.253<0>"), true},
		{"a host starting with digits after a glued timestamp", "2025-05-16T16:39:51.208-07:0010-90-43-152:1:2 [0] NCCL INFO x", info("10-90-43-152", 1, 2, 0, "x"), true},
		{"Markdown quote", "> iv-ydin754:1458554:1478071 [6] NCCL INFO x", info("iv-ydin754", 1458554, 1478071, 6, "x"), true},
		{"k9s pane borders", "│ task-7703-j5hpd:72:91 [0] NCCL INFO Channel 00 : 4[cb000] -> 6[e000] [receive] via NET/IB/0/GDRDMA          │",
			info("task-7703-j5hpd", 72, 91, 0, "Channel 00 : 4[cb000] -> 6[e000] [receive] via NET/IB/0/GDRDMA"), true},
		{"a redacted host name keeps its brackets", "<cluster_name>:919:1150 [0] NCCL INFO x", info("<cluster_name>", 919, 1150, 0, "x"), true},
		{"host:pid:tid cut away", " [0] NCCL INFO NCCL version 2.5.7+cuda10.0", info("", 0, 0, 0, "NCCL version 2.5.7+cuda10.0"), true},
		{"host:pid:tid cut away from a warning", "[3] misc/ibvwrap.cc:63 NCCL WARN Failed to open libibverbs.so[.1]",
			Line{CudaDev: 3, Level: LevelWarn, Message: "Failed to open libibverbs.so[.1]"}, true},
		{"bare version behind mpirun's prefix", "[1,0]<stdout>:NCCL version 2.5.6+cuda10.2",
			Line{Level: LevelVersion, Message: "NCCL version 2.5.6+cuda10.2"}, true},
		{"bare version behind CloudWatch's columns", "  | 2025-05-16T16:39:51.208-07:00 | NCCL version 2.21.5+cuda12.8",
			Line{Level: LevelVersion, Message: "NCCL version 2.21.5+cuda12.8"}, true},
		{"bare version behind srun's", "0: NCCL version 2.18.5+cuda12.2", Line{Level: LevelVersion, Message: "NCCL version 2.18.5+cuda12.2"}, true},

		{"a sentence naming a version", "Using NCCL version 2.18 from the wheel", Line{}, false},
		{"an application's rank tag", "[rank0]: NCCL INFO is on", Line{}, false},
		{"an application's pipe-prefixed line", "| distributed init (rank 3): env://", Line{}, false},
		{"a bracket that is no device", "[RO] NCCL INFO x", Line{}, false},
		{"too much before a lone device", "some app said [0] NCCL INFO x", Line{}, false},
		{"only a timestamp before :pid:tid", "2025-05-16T16:39:51.208-07:00:1:2 [0] NCCL INFO x", Line{}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := ParseLine([]byte(tc.in))
			if ok != tc.ok || got != tc.want {
				t.Fatalf("ParseLine(%q) = %+v, %v; want %+v, %v", tc.in, got, ok, tc.want, tc.ok)
			}
		})
	}
}

// One process, whatever text the launcher put before its lines.
func TestOneProcessBehindPrefixes(t *testing.T) {
	l := feedLines(
		"[1,0]<stdout>:node:10:10 [0] NCCL INFO Bootstrap : Using [0]eth0:10.0.0.1<0>",
		"[1,0]<stderr>:node:10:10 [0] NCCL INFO Using network Socket",
		"2025-01-01T00:00:00Z node:10:11 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] [send] via NET/Socket/0",
	)
	sums := l.Summaries()
	if len(sums) != 1 || sums[0].Host != "node" || sums[0].Lines != 3 {
		t.Fatalf("%+v", sums)
	}
}

// NCCL 2.3 to 2.5 wording.
func TestOldWording(t *testing.T) {
	p := "learnfair0536:46393:46393 [0] NCCL INFO "
	l := feedLines(
		p+"NET : Using interface enp1s0f0:100.97.70.134<0>",
		p+"NET/IB : Using interface enp1s0f0 for sideband communication",
		p+"NET/IB: [0] mlx5_1:1/IB",
		p+"NET/IB: [1] mlx5_3:1/IB",
		p+"Using internal Network IB",
		"NCCL version 2.3.7+cuda9.0",
		p+"Ring 00 : 0[0] -> 1[1] via P2P/IPC",
		p+"Ring 00 : 0[1b000] -> 7[41000] via direct shared memory",
		p+"Ring 00 : 6 -> 0 [receive] via NET/IB/0",
		p+"CUDA Dev 0[0], IB NIC distance :  PHB",
	)
	s := l.Summaries()[0]
	if !reflect.DeepEqual(s.IBDevices, []string{"mlx5_1:1/IB", "mlx5_3:1/IB"}) || s.Network != "IB" ||
		s.DistanceNetwork != "IB" || s.HostAddr != "100.97.70.134" {
		t.Fatalf("network %q devices %v distance %q addr %q", s.Network, s.IBDevices, s.DistanceNetwork, s.HostAddr)
	}
	if !reflect.DeepEqual(s.Transports, []TransportCount{{TransportP2P, 1}, {TransportNetIB, 1}, {TransportSHM, 1}}) {
		t.Fatalf("transports %+v", s.Transports)
	}
	// Rank 0 is this process's; ranks 1 and 7 share its node (P2P, SHM).
	if !reflect.DeepEqual(s.LocalRanks, []LocalRank{{RankRef{"", 0}, "0"}}) ||
		!reflect.DeepEqual(s.NodePeers, []RankRef{{"", 1}, {"", 7}}) {
		t.Fatalf("local ranks %+v node peers %+v", s.LocalRanks, s.NodePeers)
	}
	if got := l.Versions(); !reflect.DeepEqual(got, []string{"2.3.7+cuda9.0"}) {
		t.Fatalf("versions %v", got)
	}
	if got := kinds(s.Fallbacks(nil)); !reflect.DeepEqual(got, []string{FallbackP2PDisabled, FallbackIBWithoutGDR}) {
		t.Fatalf("fallbacks %v", got)
	}
}

func TestNetworkKind(t *testing.T) {
	for _, tc := range []struct {
		name  string
		lines []string
		want  string
	}{
		{"using network IBext_v8", []string{"Using network IBext_v8"}, NetworkIB},
		{"AWS Libfabric", []string{"Using network AWS Libfabric"}, NetworkOFI},
		{"Libfabric", []string{"Using network Libfabric"}, NetworkOFI},
		{"2.27's assignment", []string{"Assigned NET plugin IB to comm"}, NetworkIB},
		{"IB connections", []string{"Channel 00/0 : 0[0] -> 8[0] [send] via NET/IBext_v8/5(2)/GDRDMA"}, NetworkIB},
		{"libfabric connections", []string{"Ring 00 : 7 -> 8 [send] via NET/AWS Libfabric/0"}, NetworkOFI},
		{"aws-ofi-nccl's lines", []string{"NET/OFI Selected Provider is efa (found 16 nics)"}, NetworkOFI},
		{"an IB list", []string{"NET/IB : Using [0]mlx5_0:1/IB ; OOB eth0:10.0.0.1<0>"}, NetworkIB},
		{"no IB device: sockets", []string{"NET/IB : No device found."}, NetworkSocket},
		{"no verbs library: sockets", []string{"Failed to open libibverbs.so[.1]", "NET/Socket : Using [0]eth0:10.0.0.1<0>"}, NetworkSocket},
		{"2.3's empty device list", []string{"Net/IB: call to devices() returned 0 devices."}, NetworkSocket},
		{"2.4's NIC distance", []string{"CUDA Dev 0[0], Socket NIC distance :  PHB"}, NetworkSocket},
		{"bootstrap alone says nothing", []string{"Bootstrap : Using ib0:10.0.35.1<0>"}, ""},
		{"a socket bootstrap before IB (2.4)", []string{"NET/Socket : Using [0]ib0:10.5.134.88<0>", "NET/IB : Using [0]mlx4_0:1/IB ; OOB ib0:10.5.134.88<0>"}, NetworkIB},
		{"another plugin", []string{"Using network UCX"}, "UCX"},
		{"a plugin loaded, no network line", []string{"NET/Plugin: Loaded net plugin FastSocket (v4)", "NET/FastSocket : Flow placement enabled."}, "FastSocket"},
		{"HPC-X's plugin loaded, IB devices listed", []string{"NET/Plugin: Loaded net plugin NCCL RDMA Plugin v8 (v8)",
			"NET/IB : Using [0]ibp0:1/IB/SHARP [RO]; OOB eth0:10.7.147.73<0>"}, NetworkIB},
	} {
		var lines []string
		for _, m := range tc.lines {
			lines = append(lines, "h:1:1 [0] NCCL INFO "+m)
		}
		if got := feedLines(lines...).Summaries()[0].NetworkKind(); got != tc.want {
			t.Errorf("%s: network %q; want %q", tc.name, got, tc.want)
		}
	}
}

// What GPUDirect RDMA the lines show, and when staging through the host is
// a fallback.
func TestGDRAndIBWithoutGDR(t *testing.T) {
	for _, tc := range []struct {
		name     string
		lines    []string
		gdr      string
		fallback bool
	}{
		{"GDR both ways", []string{"Channel 00/0 : 0[0] -> 8[0] [send] via NET/IB/0/GDRDMA",
			"Channel 00/0 : 8[0] -> 0[0] [receive] via NET/IB/0/GDRDMA"}, GDRUsed, false},
		// PCIe GPUs before NCCL_NET_GDR_READ defaulted on: GDR receives,
		// host-staged sends. NCCL's default, not a fallback.
		{"GDR for receives only", []string{"Channel 00 : 0[1b000] -> 8[1b000] [send] via NET/IB/0",
			"Channel 00 : 8[1b000] -> 0[1b000] [receive] via NET/IB/0/GDRDMA"}, GDRUsed, false},
		{"a receive without GDR", []string{"Channel 00 : 0[1b000] -> 8[1b000] [send] via NET/IB/0/GDRDMA",
			"Channel 00 : 8[1b000] -> 0[1b000] [receive] via NET/IB/0"}, GDRUsed, true},
		{"no GDR at all, 2.4 ranks", []string{"Ring 00 : 6 -> 2 [send] via NET/IB/0"}, GDRNotUsed, true},
		{"notes only, on IB", []string{"Using network IB", "NET/IB : GPU Direct RDMA Disabled for HCA 0 'mlx5_0'"}, GDRNotUsed, true},
		{"newer note wording, on IB", []string{"NET/IB : Using [0]mlx5_0:1/RoCE ; OOB eth0:10.0.0.1<0>",
			"GPU Direct RDMA Disabled for GPU 42000 / HCA 0 (distance 6 > 4)"}, GDRNotUsed, true},
		{"a note, network unknown", []string{"GPU Direct RDMA Disabled for GPU 42000 / HCA 0 (distance 6 > 4)"}, GDRNotUsed, false},
		{"enabled note", []string{"Using network IB", "GPU Direct RDMA Enabled for GPU 1b000 / HCA 0 (distance 3 <= 4), read 1"}, GDRUsed, false},
		{"the ring line's GDR flag says nothing", []string{"Connected all rings, use ring PXN 0 GDR 1"}, GDRUnknown, false},
		{"sockets never do GDR", []string{"NET/Socket : GPU Direct RDMA Disabled for HCA 0 'eth0'",
			"Channel 00/0 : 1[1] -> 0[0] [receive] via NET/Socket/0"}, GDRNotUsed, false},
		{"aws-ofi-nccl turns it off", []string{"NET/OFI Could not disable CUDA API usage for HMEM, disabling GDR"}, GDRNotUsed, false},
		{"IBext without GDR", []string{"Channel 03/0 : 47[7] -> 39[7] [receive] via NET/IBext_v8/2"}, GDRNotUsed, true},
	} {
		var lines []string
		for _, m := range tc.lines {
			lines = append(lines, "h:1:1 [0] NCCL INFO "+m)
		}
		s := feedLines(lines...).Summaries()[0]
		got := false
		for _, f := range s.Fallbacks(nil) {
			got = got || f.Kind == FallbackIBWithoutGDR
		}
		if s.GDR() != tc.gdr || got != tc.fallback {
			t.Errorf("%s: gdr %q ib_without_gdr %v; want %q %v", tc.name, s.GDR(), got, tc.gdr, tc.fallback)
		}
	}
}

func TestNICLists(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"[0]mlx5_0:1/IB [1]mlx5_1:1/RoCE [RO]; OOB eth0:10.0.0.1<0>", "mlx5_0:1/IB mlx5_1:1/RoCE"},
		{"[0]={[0] mlx5_2:1/RoCE, [1] mlx5_3:1/RoCE} [1]={[2] mlx5_0:1/RoCE, [3] mlx5_1:1/RoCE} [RO]; OOB bond0:10.0.0.1<0>",
			"mlx5_2:1/RoCE mlx5_3:1/RoCE mlx5_0:1/RoCE mlx5_1:1/RoCE"},
		{"[0]ibp0:1/IB/SHARP [1]ibp1:1/IB/SHARP [RO]; OOB eth0:10.7.147.73<0>", "ibp0:1/IB/SHARP ibp1:1/IB/SHARP"},
		{"[0]eno1:192.168.1.15<0> [1]veth2ea2288:fe80::78d8:4eff:fe15:8fed%veth2ea2288<0>", "eno1:192.168.1.15<0> veth2ea2288:fe80::78d8:4eff:fe15:8fed%veth2ea2288<0>"},
		{"[RO]; OOB eth0:192.0.2.2<0>", ""},
	} {
		if got := strings.Join(netDeviceList(tc.in), " "); got != tc.want {
			t.Errorf("netDeviceList(%q) = %q; want %q", tc.in, got, tc.want)
		}
	}
}

func TestOFIAndNVLSLines(t *testing.T) {
	p := "8h200-3:6310:6318 [0] NCCL INFO "
	s := feedLines(
		p+"NET/OFI Selected Provider is efa (found 16 nics)",
		p+"NET/OFI NIC group 0 device #0 0000:56:00.0",
		p+"NET/OFI NIC group 0 device #1 0000:55:00.0",
		p+"NVLS multicast support is available on dev 0 (NVLS_NCHANNELS 16)",
	).Summaries()[0]
	if !s.OFI || s.OFIProvider != "efa" || !reflect.DeepEqual(s.OFIDevices, []string{"0000:56:00.0", "0000:55:00.0"}) {
		t.Fatalf("OFI %v %q %v", s.OFI, s.OFIProvider, s.OFIDevices)
	}
	if len(s.Transports) != 0 {
		t.Fatalf("NVLS support alone counted as NVLS in use: %+v", s.Transports)
	}
	s = feedLines("[0] h100:1:2 [0] NCCL INFO NVLS Head  0:  0  8 16").Summaries()[0]
	if !s.Uses(TransportNVLS) {
		t.Fatalf("NVLS Head lines: transports %+v", s.Transports)
	}
}

// "Failed to open libibverbs.so[.1]" is no InfiniBand, whether NCCL logs
// it as INFO or WARN.
func TestNoVerbsLibraryIsNoIB(t *testing.T) {
	for _, line := range []string{
		"h:1:1 [0] NCCL INFO Failed to open libibverbs.so[.1]",
		"h:1:1 [0] misc/ibvwrap.cc:63 NCCL WARN Failed to open libibverbs.so[.1]",
	} {
		s := feedLines(line).Summaries()[0]
		if !s.IBNoDevice || !s.IBVerbsMissing || s.NetworkKind() != NetworkSocket {
			t.Errorf("%q: no device %v, verbs missing %v, network %q", line, s.IBNoDevice, s.IBVerbsMissing, s.NetworkKind())
		}
	}
}

// Communicators NCCL gives no commId (before 2.18) are named by size and
// order, the same in every process of the job.
func TestCommKeyWithoutCommID(t *testing.T) {
	p := "n1:10:10 [0] NCCL INFO "
	s := feedLines(
		p+"comm 0x7f01 rank 0 nranks 8 cudaDev 0 busId 1b000 - Init COMPLETE",
		p+"comm 0x7f02 rank 0 nranks 2 cudaDev 0 busId 1b000 - Init COMPLETE",
		p+"comm 0x7f03 rank 3 nranks 8 cudaDev 0 busId 1b000 - Init COMPLETE",
		p+"Channel 00 : 3[1b000] -> 4[1c000] [send] via NET/IB/0/GDRDMA",
	).Summaries()[0]
	var keys []string
	for _, c := range s.Comms {
		keys = append(keys, c.Key)
	}
	if !reflect.DeepEqual(keys, []string{"#8.1", "#2.1", "#8.2"}) {
		t.Fatalf("keys %v", keys)
	}
	if s.Peers[0].Comm != "#8.2" || s.Peers[0].CommID != "" {
		t.Fatalf("peer %+v", s.Peers[0])
	}
}

// Hosts are told apart by more than their name.
func TestHostIDs(t *testing.T) {
	for _, tc := range []struct {
		name  string
		lines []string
		want  []string
	}{
		{"one name, two bootstrap addresses", []string{
			"ubuntu:10:10 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.1<0>",
			"ubuntu:20:20 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.2<0>",
			"ubuntu:11:11 [1] NCCL INFO Bootstrap : Using eth0:10.0.0.1<0>",
		}, []string{"ubuntu@10.0.0.1", "ubuntu@10.0.0.2", "ubuntu@10.0.0.1"}},
		{"one name, one address", []string{
			"vm:10:10 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.1<0>",
			"vm:11:11 [1] NCCL INFO NET/Socket : Using [0]eth0:10.0.0.1<0>",
		}, []string{"vm", "vm"}},
		{"loopback says nothing", []string{
			"vm:10:10 [0] NCCL INFO Bootstrap : Using [0]lo:127.0.0.1<0>",
			"vm:11:11 [1] NCCL INFO Bootstrap : Using [0]lo:127.0.0.1<0>",
		}, []string{"vm", "vm"}},
		{"one rank of one communicator in two processes", []string{
			"localhost:10:10 [0] NCCL INFO comm 0x1 rank 0 nranks 2 cudaDev 0 busId 1b000 commId 0xabc - Init COMPLETE",
			"localhost:10:10 [0] NCCL INFO comm 0x1 rank 0 nRanks 2 nNodes 2 localRanks 1 localRank 0 MNNVL 0",
			"localhost:10:10 [0] NCCL INFO comm 0x2 rank 1 nranks 2 cudaDev 0 busId 1b000 commId 0xabc - Init COMPLETE",
		}, []string{"localhost"}}, // one process: no conflict with itself
		{"two ranks of one communicator on one bus ID", []string{
			"localhost:10:10 [0] NCCL INFO comm 0x1 rank 0 nranks 2 cudaDev 0 busId 1b000 commId 0xabc - Init COMPLETE",
			"localhost:20:20 [0] NCCL INFO comm 0x2 rank 1 nranks 2 cudaDev 0 busId 1b000 commId 0xabc - Init COMPLETE",
		}, []string{"localhost", "localhost#2"}},
		{"two one-GPU processes that both call their GPU 0", []string{
			"node:10:10 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[0] [send] via NET/Socket/0",
			"node:20:20 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[0] [receive] via NET/Socket/0",
		}, []string{"node", "node"}},
		{"two eight-GPU processes on the same GPUs", []string{
			"ubuntu:9621:9687 [2] NCCL INFO Channel 13 : 10[2] -> 11[3] via SHM/direct/direct",
			"ubuntu:9621:9690 [5] NCCL INFO Channel 11 : 13[5] -> 14[6] via SHM/direct/direct",
			"ubuntu:39964:40047 [3] NCCL INFO Channel 11 : 3[3] -> 4[4] via SHM/direct/direct",
			"ubuntu:39964:40046 [2] NCCL INFO Channel 13 : 2[2] -> 3[3] via SHM/direct/direct",
		}, []string{"ubuntu", "ubuntu#2"}},
	} {
		if got := HostIDs(feedLines(tc.lines...).Summaries()); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: %v; want %v", tc.name, got, tc.want)
		}
	}
}

// net_within_node from the log alone, with no commId (NCCL before 2.18),
// and not between two hosts that share a name.
func TestNetWithinNodeFromTheLog(t *testing.T) {
	withinNode := func(lines ...string) []bool {
		sums := feedLines(lines...).Summaries()
		local := Locality(sums)
		var out []bool
		for i := range sums {
			got := false
			for _, f := range sums[i].Fallbacks(local[i]) {
				got = got || f.Kind == FallbackNetWithinNode
			}
			out = append(out, got)
		}
		return out
	}
	// horovod on two AWS nodes: ranks 1 and 2 of one host talk over sockets.
	if got := withinNode(
		"[1,1]<stdout>:ip-172-31-0-63:2121:2136 [1] NCCL INFO Channel 01 : 1[1c0] -> 2[1d0] [send] via NET/Socket/0",
		"[1,2]<stdout>:ip-172-31-0-63:2122:2137 [2] NCCL INFO Channel 01 : 1[1c0] -> 2[1d0] [receive] via NET/Socket/0",
		"[1,4]<stdout>:ip-172-31-12-129:1759:1773 [0] NCCL INFO Channel 00 : 4[1b0] -> 2[1d0] [send] via NET/Socket/0",
	); !reflect.DeepEqual(got, []bool{true, true, false}) {
		t.Errorf("horovod: %v", got)
	}
	// One process driving four GPUs over the network.
	if got := withinNode(
		"10-90-43-152:120890:121560 [0] NCCL INFO Channel 01 : 2[c7000] -> 0[87000] [receive] via NET/IB/5/GDRDMA",
		"10-90-43-152:120890:121562 [2] NCCL INFO Channel 01 : 2[c7000] -> 0[87000] [send] via NET/IB/2/GDRDMA",
	); !reflect.DeepEqual(got, []bool{true}) {
		t.Errorf("one process: %v", got)
	}
	// Two nodes both named "ubuntu": their bootstrap addresses differ, so
	// rank 0's network connection to rank 1 leaves the node.
	if got := withinNode(
		"ubuntu:10:10 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.1<0>",
		"ubuntu:10:11 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[0] [send] via NET/IB/0/GDRDMA",
		"ubuntu:20:20 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.2<0>",
		"ubuntu:20:21 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[0] [receive] via NET/IB/0/GDRDMA",
	); !reflect.DeepEqual(got, []bool{false, false}) {
		t.Errorf("two ubuntu hosts: %v", got)
	}
	// A peer reached over P2P is on the node: a network connection to it is
	// within the node too.
	if got := withinNode(
		"n:10:10 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM",
		"n:20:20 [0] NCCL INFO Channel 00/0 : 2[2] -> 1[1] [send] via NET/IB/0/GDRDMA",
	); !reflect.DeepEqual(got, []bool{false, true}) {
		t.Errorf("P2P layout: %v", got)
	}
}
