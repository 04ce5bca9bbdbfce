package nccl

import (
	"bufio"
	"fmt"
	"os"
	"reflect"
	"strings"
	"testing"
)

// feedFile runs a whole fixture through a Log.
func feedFile(t *testing.T, path string) *Log {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	l := NewLog()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		l.Feed(sc.Bytes())
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return l
}

func feedLines(lines ...string) *Log {
	l := NewLog()
	for _, s := range lines {
		l.Feed([]byte(s))
	}
	return l
}

func kinds(fb []Fallback) []string {
	var out []string
	for _, f := range fb {
		out = append(out, f.Kind)
	}
	return out
}

// sameHost is the locality the fixtures allow: every rank in the file logs
// from host "vm".
func sameHost(sums []Summary) IsLocal {
	set := map[string]bool{}
	for _, s := range sums {
		for _, c := range s.Comms {
			set[fmt.Sprint(c.CommID, "/", c.Rank)] = true
		}
	}
	return func(id string, rank int) bool { return set[fmt.Sprint(id, "/", rank)] }
}

// The default run: 2×H200 over NV18, P2P/CUMEM on all 24 channels each way.
func TestFixtureDefault(t *testing.T) {
	l := feedFile(t, "testdata/nccl_default.log")
	sums := l.Summaries()
	if len(sums) != 2 {
		t.Fatalf("%d processes; want 2", len(sums))
	}
	want := Summary{
		Host: "vm", PID: 586, Lines: 276,
		Versions: []string{"2.28.9+cuda13.0"},
		Comms: []Comm{{CommID: "0x70e3e4ae57a356b3", Rank: 0, NRanks: 2, CudaDev: 0, NVMLDev: 0,
			PCIBusID: "0000:00:06.0", NNodes: 1, LocalRanks: 2, Complete: true, InitLine: 278, Key: "0x70e3e4ae57a356b3"}},
		CommInits:  1,
		Transports: []TransportCount{{TransportP2P, 24}},
		Peers: []PeerLink{{CommID: "0x70e3e4ae57a356b3", Comm: "0x70e3e4ae57a356b3", Rank: 0, Peer: 1,
			Transport: TransportP2P, Path: "P2P/CUMEM", Connections: 24}},
		Paths:             []string{"P2P/CUMEM"},
		Network:           "Socket",
		NetPluginFailures: []string{"IB"},
		IBNoDevice:        true,
		SocketInterfaces:  []string{"eth0:192.0.2.2"},
		NVLinkInTopology:  true,
		Env:               []EnvVar{{"NCCL_NVLS_ENABLE", "0"}},
		AssignedNetwork:   "Socket",
		HostAddr:          "192.0.2.2",
		// Rank 0 drives GPU 0 and reaches rank 1 over P2P: rank 1 is on
		// its node.
		LocalRanks: []LocalRank{{RankRef{"0x70e3e4ae57a356b3", 0}, "0"}},
		NodePeers:  []RankRef{{"0x70e3e4ae57a356b3", 1}},
	}
	if !reflect.DeepEqual(sums[0], want) {
		t.Fatalf("summary of pid 586:\n got %+v\nwant %+v", sums[0], want)
	}
	b := sums[1]
	if b.PID != 587 || b.Comms[0].Rank != 1 || b.Comms[0].PCIBusID != "0000:00:07.0" || b.Comms[0].NVMLDev != 1 {
		t.Fatalf("pid 587: %+v", b)
	}
	for _, s := range sums {
		if fb := s.Fallbacks(sameHost(sums)); len(fb) != 0 {
			t.Errorf("pid %d: fallbacks %+v on the healthy run", s.PID, fb)
		}
		if s.Ended() {
			t.Errorf("pid %d ended; the default log has no Destroy lines", s.PID)
		}
	}
	if l.Lines() != 528 || l.NCCLLines() != 527 {
		t.Fatalf("lines %d, NCCL lines %d; want 528, 527 (one RESULT line is the benchmark's)", l.Lines(), l.NCCLLines())
	}
}

// NCCL_P2P_DISABLE=1: the same pair of GPUs talks through host shared memory.
func TestFixtureP2PDisabled(t *testing.T) {
	sums := feedFile(t, "testdata/nccl_p2pdisabled.log").Summaries()
	if len(sums) != 2 {
		t.Fatalf("%d processes; want 2", len(sums))
	}
	wantBus := map[int]string{748: "0000:00:06.0", 749: "0000:00:07.0"}
	wantRank := map[int]int{748: 0, 749: 1}
	for _, s := range sums {
		if !reflect.DeepEqual(s.Transports, []TransportCount{{TransportSHM, 4}}) {
			t.Errorf("pid %d transports %+v; want SHM ×4 only", s.PID, s.Transports)
		}
		if v, _ := s.EnvValue("NCCL_P2P_DISABLE"); v != "1" {
			t.Errorf("pid %d: NCCL_P2P_DISABLE=%q; want 1", s.PID, v)
		}
		if !reflect.DeepEqual(s.Versions, []string{"2.28.9+cuda13.0"}) {
			t.Errorf("pid %d versions %v", s.PID, s.Versions)
		}
		if len(s.Comms) != 1 || s.Comms[0].PCIBusID != wantBus[s.PID] || s.Comms[0].Rank != wantRank[s.PID] ||
			s.Comms[0].NRanks != 2 || s.Comms[0].CommID != "0x8bd5248fa9fb2532" || !s.Comms[0].Complete {
			t.Errorf("pid %d comms %+v", s.PID, s.Comms)
		}
		fb := s.Fallbacks(sameHost(sums))
		want := []Fallback{{
			Kind: FallbackP2PDisabled, Taken: TransportSHM, Expected: "P2P over NVLink",
			Evidence: "NCCL_P2P_DISABLE=1 set by environment; 4 connections via SHM/direct/direct",
		}}
		if !reflect.DeepEqual(fb, want) {
			t.Errorf("pid %d fallbacks\n got %+v\nwant %+v", s.PID, fb, want)
		}
	}
}

// NCCL_P2P_DISABLE=1 and NCCL_SHM_DISABLE=1: the two GPUs of one VM talk over
// TCP on eth0 (3 GB/s instead of 248).
func TestFixtureSocket(t *testing.T) {
	sums := feedFile(t, "testdata/nccl_socket.log").Summaries()
	if len(sums) != 2 {
		t.Fatalf("%d processes; want 2", len(sums))
	}
	for _, s := range sums {
		if !reflect.DeepEqual(s.Transports, []TransportCount{{TransportNetSocket, 4}}) {
			t.Errorf("pid %d transports %+v; want NET/Socket ×4 only", s.PID, s.Transports)
		}
		if s.Network != "Socket" || !s.IBNoDevice {
			t.Errorf("pid %d network %q, IB no device %v", s.PID, s.Network, s.IBNoDevice)
		}
		if !s.Ended() {
			t.Errorf("pid %d not ended; the log has Destroy COMPLETE", s.PID)
		}
		if c := s.Comms[0]; c.NNodes != 2 || c.LocalRanks != 1 {
			t.Errorf("pid %d: NCCL saw nNodes %d localRanks %d; want 2 and 1", s.PID, c.NNodes, c.LocalRanks)
		}
		// Without knowing where the peer runs, the log alone says three things.
		if got := kinds(s.Fallbacks(nil)); !reflect.DeepEqual(got,
			[]string{FallbackP2PDisabled, FallbackSHMDisabled, FallbackSocketInsteadOfIB}) {
			t.Errorf("pid %d fallbacks without locality %v", s.PID, got)
		}
		fb := s.Fallbacks(sameHost(sums))
		if got := kinds(fb); !reflect.DeepEqual(got,
			[]string{FallbackP2PDisabled, FallbackSHMDisabled, FallbackSocketInsteadOfIB, FallbackNetWithinNode}) {
			t.Errorf("pid %d fallbacks %v", s.PID, got)
		}
		socket := fb[2]
		if socket.Taken != TransportNetSocket || socket.Expected != "NET/IB+GDRDMA" ||
			socket.Evidence != "4 connections via NET/Socket/0; NET/IB : No device found; socket interfaces eth0:192.0.2.2" {
			t.Errorf("pid %d socket fallback %+v", s.PID, socket)
		}
		within := fb[3]
		peer := 1 - s.Comms[0].Rank
		wantEv := fmt.Sprintf("ranks %d and %d of comm 0x76e3b669f8a410c run on this node yet connect via NET/Socket/0 (4 connections between ranks on this node)",
			s.Comms[0].Rank, peer)
		if within.Taken != TransportNetSocket || within.Expected != "P2P over NVLink" || within.Evidence != wantEv {
			t.Errorf("pid %d within-node fallback %+v", s.PID, within)
		}
		if !reflect.DeepEqual(s.Env, []EnvVar{{"NCCL_NVLS_ENABLE", "0"}, {"NCCL_P2P_DISABLE", "1"}, {"NCCL_SHM_DISABLE", "1"}}) {
			t.Errorf("pid %d env %+v", s.PID, s.Env)
		}
	}
}

func TestTransportLines(t *testing.T) {
	for _, tc := range []struct {
		line  string
		class string
	}{
		{"Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM", TransportP2P},
		{"Channel 00/1 : 0[0] -> 1[1] via P2P/CUMEM/read", TransportP2P},
		{"Channel 00/0 : 0[0] -> 1[1] via P2P/IPC/read/CE", TransportP2P},
		{"Channel 00/0 : 0[0] -> 1[1] via P2P/direct pointer/read", TransportP2P},
		{"Channel 00/0 : 0[0] -> 1[1] via P2P/MNNVL", TransportP2P},
		{"Channel 00 : 0[1b000] -> 1[3d000] via P2P/IPC", TransportP2P},
		{"Ring 00 : 0[0] -> 1[1] via P2P/IPC", TransportP2P},
		{"Channel 00 : 0[0] -> 1[1] via SHM/direct/direct", TransportSHM},
		{"Channel 00/0 : 0[0] -> 1[1] via SHM/CE/direct", TransportSHM},
		{"Channel 00/0 : 1[1] -> 0[0] [receive] via NET/Socket/0", TransportNetSocket},
		{"Channel 00/0 : 0[0] -> 8[0] [send] via NET/IB/0/GDRDMA", TransportNetIBGDR},
		{"Channel 00/0 : 0[0] -> 8[0] [send] via NET/IB/3(1)/GDRDMA(PCI)/Shared", TransportNetIBGDR},
		{"Channel 00/0 : 8[0] -> 0[0] [receive] via NET/IB/0", TransportNetIB},
		{"Channel 02/0 : 8[0] -> 0[0] [receive] via NET/IBext_v8/1/GDRDMA", TransportNetIBGDR},
		{"Channel 00/0 : 0[0] -> 8[0] [send] via NET/AWS Libfabric/0/GDRDMA", TransportNetOtherGDR},
		{"Channel 00/0 : 0[0] -> 8[0] [send] via NET/AWS Libfabric/0", TransportNetOther},
		{"CollNet 00/0 : 0 [send] via COLLNET/SHARP/0/GDRDMA", TransportCollNet},
	} {
		s := feedLines("h:1:1 [0] NCCL INFO " + tc.line).Summaries()[0]
		if len(s.Transports) != 1 || s.Transports[0].Transport != tc.class {
			t.Errorf("%q: transports %+v; want %s", tc.line, s.Transports, tc.class)
		}
	}
	// Ring-order lines list ranks and name no transport.
	s := feedLines("h:1:1 [0] NCCL INFO Channel 00/24 : 0 1", "h:1:1 [0] NCCL INFO Channel 00/02 :    0   1").Summaries()[0]
	if len(s.Transports) != 0 {
		t.Fatalf("ring-order lines counted as connections: %+v", s.Transports)
	}
}

// An 8-GPU node on IB without GPUDirect RDMA: each rank sends to the next
// node over NET/IB, and NCCL says why GDR is off.
func TestIBWithoutGDR(t *testing.T) {
	p := "dgx1:100:100 [0] NCCL INFO "
	l := feedLines(
		p+"NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/RoCE [RO]; OOB ibp26s0:10.0.0.1<0>",
		p+"Using network IB",
		p+"NET/IB : GPU Direct RDMA Disabled for HCA 0 'mlx5_0' (no module)",
		p+"ncclCommInitRank comm 0xabc rank 0 nranks 16 cudaDev 0 nvmlDev 0 busId 18000 commId 0x1234 - Init START",
		p+"ncclCommInitRank comm 0xabc rank 0 nranks 16 cudaDev 0 nvmlDev 0 busId 18000 commId 0x1234 - Init COMPLETE",
		p+"Channel 00/0 : 15[7] -> 0[0] [receive] via NET/IB/0",
		p+"Channel 00/0 : 0[0] -> 8[0] [send] via NET/IB/0",
		p+"Channel 01/0 : 0[0] -> 8[0] [send] via NET/IB/1",
		p+"Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read",
		p+"Channel 00/0 : 0[0] -> 8[0] [send] via NET/IB/0", // repeated: counted once
	)
	s := l.Summaries()[0]
	if !reflect.DeepEqual(s.IBDevices, []string{"mlx5_0:1/IB", "mlx5_1:1/RoCE"}) || s.Network != "IB" {
		t.Fatalf("IB devices %v network %q", s.IBDevices, s.Network)
	}
	if !reflect.DeepEqual(s.Transports, []TransportCount{{TransportP2P, 1}, {TransportNetIB, 3}}) {
		t.Fatalf("transports %+v", s.Transports)
	}
	wantPeers := []PeerLink{
		{CommID: "0x1234", Comm: "0x1234", Rank: 0, Peer: 15, Transport: TransportNetIB, Path: "NET/IB/0", Connections: 1},
		{CommID: "0x1234", Comm: "0x1234", Rank: 0, Peer: 8, Transport: TransportNetIB, Path: "NET/IB/0", Connections: 2},
		{CommID: "0x1234", Comm: "0x1234", Rank: 0, Peer: 1, Transport: TransportP2P, Path: "P2P/CUMEM/read", Connections: 1},
	}
	if !reflect.DeepEqual(s.Peers, wantPeers) {
		t.Fatalf("peers\n got %+v\nwant %+v", s.Peers, wantPeers)
	}
	fb := s.Fallbacks(nil)
	want := []Fallback{{Kind: FallbackIBWithoutGDR, Taken: TransportNetIB, Expected: "NET/IB+GDRDMA",
		Evidence: "3 connections via NET/IB/0 without /GDRDMA; NET/IB : GPU Direct RDMA Disabled for HCA 0 'mlx5_0' (no module)"}}
	if !reflect.DeepEqual(fb, want) {
		t.Fatalf("fallbacks\n got %+v\nwant %+v", fb, want)
	}
	// Peers 8 and 15 are on another node: no within-node fallback even when
	// the local ranks are known.
	local := func(id string, r int) bool { return id == "0x1234" && r < 8 }
	if got := kinds(s.Fallbacks(local)); !reflect.DeepEqual(got, []string{FallbackIBWithoutGDR}) {
		t.Fatalf("fallbacks with locality %v", got)
	}
}

func TestNVLSAndCopyFallbackAndWarnings(t *testing.T) {
	p := "n:5:5 [0] NCCL INFO "
	w := "\n[2026-11-21 10:00:00] n:5:9 [0] p2p.cc:300 (p2pSendSetup) NCCL WARN "
	l := NewLog()
	for _, s := range []string{
		p + "NVLS multicast support is available on dev 0 (NVLS_NCHANNELS 16)",
		p + "24 coll channels, 24 collnet channels, 16 nvls channels, 32 p2p channels, 32 p2p channels per peer",
		w + "unable to enable P2P, falling back to copy",
		w + "unable to enable P2P, falling back to copy",
		w + "Cuda failure 'out of memory'",
	} {
		for _, line := range strings.Split(s, "\n") {
			l.Feed([]byte(line))
		}
	}
	s := l.Summaries()[0]
	if !reflect.DeepEqual(s.Transports, []TransportCount{{TransportNVLS, 16}}) {
		t.Fatalf("transports %+v", s.Transports)
	}
	if s.WarningsTotal != 3 || !reflect.DeepEqual(s.Warnings, []Warning{
		{"unable to enable P2P, falling back to copy", 2}, {"Cuda failure 'out of memory'", 1}}) {
		t.Fatalf("warnings %d %+v", s.WarningsTotal, s.Warnings)
	}
	fb := s.Fallbacks(nil)
	want := []Fallback{{Kind: FallbackP2PCopy, Taken: "P2P through a host copy", Expected: "P2P without host copy",
		Evidence: "unable to enable P2P, falling back to copy"}}
	if !reflect.DeepEqual(fb, want) {
		t.Fatalf("fallbacks %+v", fb)
	}
}

func TestEnvLines(t *testing.T) {
	p := "h:1:1 [0] NCCL INFO "
	s := feedLines(
		p+"NCCL_IB_DISABLE set by environment to 1.",
		p+"NCCL_SOCKET_IFNAME set by environment to eth0",
		p+"NCCL_P2P_LEVEL set by environment to LOC",
		p+"NCCL_SOCKET_IFNAME set by environment to =ens9c0np0", // later wins
		p+"lowercase set by environment to 1",                   // not a variable name
		p+"NCCL_P2P_DISABLE set by environment to 0",
		p+"NCCL_IBEXT_DISABLE set by environment to 1.", // HPC-X's plugin: a setting, not a secret
		p+"NCCL_IB_HCA set to mlx5_2:1,mlx5_0:1",        // 2.19+'s wording for strings
	).Summaries()[0]
	want := []EnvVar{{"NCCL_IBEXT_DISABLE", "1"}, {"NCCL_IB_DISABLE", "1"}, {"NCCL_IB_HCA", "mlx5_2:1,mlx5_0:1"},
		{"NCCL_P2P_DISABLE", "0"}, {"NCCL_P2P_LEVEL", "LOC"}, {"NCCL_SOCKET_IFNAME", "=ens9c0np0"}}
	if !reflect.DeepEqual(s.Env, want) {
		t.Fatalf("env %+v", s.Env)
	}
	// P2P_DISABLE=0 does not disable P2P; P2P_LEVEL=LOC does.
	fb := s.Fallbacks(nil)
	if len(fb) != 1 || fb[0].Kind != FallbackP2PDisabled || fb[0].Evidence != "NCCL_P2P_LEVEL=LOC set by environment" || fb[0].Taken != "" {
		t.Fatalf("fallbacks %+v", fb)
	}
}

// A communicator created and destroyed per step: every init counts, memory
// stays at MaxComms, and a reused address after Destroy is a new comm.
func TestCommunicatorChurnIsBounded(t *testing.T) {
	l := NewLog()
	p := "h:1:1 [0] NCCL INFO "
	for i := 0; i < 3*MaxComms; i++ {
		l.Feed([]byte(p + "ncclCommInitRank comm 0x55 rank 0 nranks 2 cudaDev 0 busId 18000 - Init COMPLETE"))
		l.Feed([]byte(p + "comm 0x55 rank 0 nranks 2 cudaDev 0 busId 18000 - Destroy COMPLETE"))
	}
	l.Feed([]byte(p + "ncclCommInitRank comm 0x55 rank 0 nranks 2 cudaDev 0 busId 18000 - Init START"))
	s := l.Summaries()[0]
	if s.CommInits != 3*MaxComms+1 || len(s.Comms) != MaxComms {
		t.Fatalf("inits %d, comms kept %d; want %d and %d", s.CommInits, len(s.Comms), 3*MaxComms+1, MaxComms)
	}
	if last := s.Comms[len(s.Comms)-1]; last.Ended || last.Complete {
		t.Fatalf("latest comm %+v; want started, not complete, not ended", last)
	}
	if s.Ended() {
		t.Fatal("process with a live communicator reported ended")
	}
}

func TestBoundsHold(t *testing.T) {
	l := NewLog()
	for pid := 1; pid <= MaxProcesses+10; pid++ {
		l.Feed(fmt.Appendf(nil, "h:%d:1 [0] NCCL INFO x", pid))
	}
	if n := len(l.Summaries()); n != MaxProcesses || l.DroppedProcesses() != 10 {
		t.Fatalf("%d processes kept, %d dropped", n, l.DroppedProcesses())
	}

	l = NewLog()
	p := "h:1:1 [0] NCCL "
	for i := 0; i < 2*MaxWarnings; i++ {
		l.Feed(fmt.Appendf(nil, "%sWARN failure %d", p, i))
		l.Feed(fmt.Appendf(nil, "%sINFO NCCL_VAR_%d set by environment to %d", p, i%(2*MaxEnv), i))
	}
	for i := 0; i < 2*MaxEnv; i++ {
		l.Feed(fmt.Appendf(nil, "%sINFO NCCL_VAR_%d set by environment to %d", p, i, i))
	}
	for peer := 0; peer < 2*MaxPeerLinks; peer++ {
		l.Feed(fmt.Appendf(nil, "%sINFO Channel 00/0 : 0[0] -> %d[0] [send] via NET/IB/%d/GDRDMA", p, peer+1, peer))
	}
	l.Feed([]byte(p + "WARN " + strings.Repeat("é", MaxWarningBytes)))
	s := l.Summaries()[0]
	if len(s.Warnings) != MaxWarnings || s.WarningsTotal != 2*MaxWarnings+1 {
		t.Fatalf("%d distinct warnings, %d in all", len(s.Warnings), s.WarningsTotal)
	}
	if len(s.Env) != MaxEnv || len(s.Peers) != MaxPeerLinks || s.PeersDropped != MaxPeerLinks || len(s.Paths) != MaxPaths {
		t.Fatalf("env %d, peers %d (+%d dropped), paths %d", len(s.Env), len(s.Peers), s.PeersDropped, len(s.Paths))
	}
	if s.Transports[0].Connections != 2*MaxPeerLinks {
		t.Fatalf("connections %d; counts must survive the peer bound", s.Transports[0].Connections)
	}
}

func TestResetForgets(t *testing.T) {
	l := feedLines("h:1:1 [0] NCCL INFO NCCL version 2.28.9+cuda13.0", "NCCL version 2.18.1+cuda12.1")
	if len(l.Summaries()) != 1 || !reflect.DeepEqual(l.Versions(), []string{"2.18.1+cuda12.1"}) {
		t.Fatalf("summaries %+v, bare versions %v", l.Summaries(), l.Versions())
	}
	l.Reset()
	if len(l.Summaries()) != 0 || len(l.Versions()) != 0 || l.Lines() != 0 {
		t.Fatal("Reset kept state")
	}
}
