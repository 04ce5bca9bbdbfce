package nccl

import (
	"sort"
	"strconv"
	"strings"
)

// Bounds on what one log may hold, whatever it contains (see the package
// documentation for the memory they add up to). A log is one file, which
// may interleave several processes (a launcher capturing every rank's
// stdout); the per-process bounds apply to each.
const (
	MaxProcesses       = 64   // distinct host:pid in one log; later ones are counted, not kept
	MaxComms           = 32   // communicators per process; ended ones are forgotten first
	MaxConnections     = 1024 // distinct (comm, channel, rank, peer, direction) kept to count each connection once
	MaxPeerLinks       = 256  // distinct (comm, rank, peer, transport) reported per process
	MaxPaths           = 16   // distinct "via ..." strings per process
	MaxEnv             = 64   // environment overrides per process
	MaxEnvValueBytes   = 128  // longer values are cut
	MaxWarnings        = 32   // distinct warning texts per process; the rest only count
	MaxWarningBytes    = 256  // warning texts are cut to this
	MaxVersions        = 4    // NCCL versions per process (a second one already means trouble)
	MaxNetDevices      = 16   // NICs and interfaces per process
	MaxGDRNotes        = 4    // "GPU Direct RDMA Disabled ..." lines per process
	maxNameBytes       = 64   // environment variable and network names, "via" texts
	maxCommIDBytes     = 32   // "0x" and 16 hex digits
	maxEvidenceEntries = 3
)

// Transport classes: what a "via ..." line says about the path a connection
// takes. The log cannot tell NVLink from PCIe for P2P; the topology lines
// (Summary.NVLinkInTopology) say whether NVLink exists.
const (
	TransportP2P            = "P2P"
	TransportSHM            = "SHM"
	TransportNetSocket      = "NET/Socket"
	TransportNetIB          = "NET/IB"
	TransportNetIBGDR       = "NET/IB+GDRDMA"
	TransportNetOther       = "NET/other"
	TransportNetOtherGDR    = "NET/other+GDRDMA"
	TransportCollNet        = "COLLNET"
	TransportNVLS           = "NVLS"
	transportNone           = ""
	expectedNVLinkP2P       = "P2P over NVLink"
	expectedP2P             = "P2P (over NVLink or a shared PCIe switch)"
	expectedIntraNode       = "P2P or SHM"
	expectedIBWithGDR       = "NET/IB+GDRDMA"
	expectedDirectP2P       = "P2P without host copy"
	takenP2PThroughHostCopy = "P2P through a host copy"
)

// Transports lists the classes from fastest-intended to slowest, the order
// summaries and metrics use.
var Transports = []string{
	TransportNVLS, TransportP2P, TransportCollNet, TransportNetIBGDR, TransportNetOtherGDR,
	TransportNetIB, TransportNetOther, TransportSHM, TransportNetSocket,
}

// Fallback kinds.
const (
	// FallbackP2PDisabled: GPUs of one node talk through host shared memory
	// (SHM), or NCCL_P2P_DISABLE / NCCL_P2P_LEVEL=LOC forbids P2P.
	FallbackP2PDisabled = "p2p_disabled"
	// FallbackSHMDisabled: NCCL_SHM_DISABLE forbids the shared-memory path,
	// leaving the network for whatever P2P cannot reach.
	FallbackSHMDisabled = "shm_disabled"
	// FallbackSocketInsteadOfIB: connections run over TCP sockets. "Using
	// network Socket" alone is not enough: NCCL picks a network for every
	// communicator, and a single-node job that never uses it logs the same.
	FallbackSocketInsteadOfIB = "socket_instead_of_ib"
	// FallbackIBWithoutGDR: InfiniBand/RoCE without GPUDirect RDMA, so every
	// message is staged through host memory.
	FallbackIBWithoutGDR = "ib_without_gdr"
	// FallbackP2PCopy: NCCL could not enable P2P and copies through the host
	// ("unable to enable P2P, falling back to copy").
	FallbackP2PCopy = "p2p_copy_fallback"
	// FallbackNetWithinNode: two ranks known to run on this node connect
	// through the network (NET/*), typically because containers gave them
	// different host identities.
	FallbackNetWithinNode = "net_within_node"
)

// FallbackKinds lists every kind, in the order Fallbacks reports them.
var FallbackKinds = []string{
	FallbackP2PDisabled, FallbackSHMDisabled, FallbackSocketInsteadOfIB,
	FallbackIBWithoutGDR, FallbackP2PCopy, FallbackNetWithinNode,
}

// Log is the state machine for one NCCL debug log: Feed it lines in order,
// read Summaries at any time. It is not safe for concurrent use.
type Log struct {
	procs        map[procKey]*procState
	order        []*procState
	bareVersions []string
	lines        uint64
	ncclLines    uint64
	droppedProcs uint64
}

type procKey struct {
	host string
	pid  int
}

// NewLog returns an empty log state.
func NewLog() *Log { return &Log{procs: map[procKey]*procState{}} }

// Reset forgets everything, for a log file that was replaced or truncated:
// its new content is a new job's.
func (l *Log) Reset() { *l = *NewLog() }

// Lines is the number of lines fed.
func (l *Log) Lines() uint64 { return l.lines }

// NCCLLines is the number of lines fed that were NCCL's.
func (l *Log) NCCLLines() uint64 { return l.ncclLines }

// DroppedProcesses counts processes beyond MaxProcesses, whose lines were
// ignored.
func (l *Log) DroppedProcesses() uint64 { return l.droppedProcs }

// Versions lists the bare "NCCL version" lines NCCL prints without a prefix
// (NCCL_DEBUG=VERSION or WARN), which no process can be credited with.
func (l *Log) Versions() []string { return append([]string(nil), l.bareVersions...) }

// Feed consumes one line (without its newline).
func (l *Log) Feed(b []byte) {
	l.lines++
	line, ok := ParseLine(b)
	if !ok {
		return
	}
	l.ncclLines++
	if line.Level == LevelVersion {
		if v := versionOf(line.Message); v != "" {
			l.bareVersions = addBounded(l.bareVersions, v, MaxVersions)
		}
		return
	}
	key := procKey{line.Host, line.PID}
	p := l.procs[key]
	if p == nil {
		if len(l.procs) >= MaxProcesses {
			l.droppedProcs++
			return
		}
		p = newProcState(line.Host, line.PID)
		l.procs[key] = p
		l.order = append(l.order, p)
	}
	p.feed(&line, l.lines)
}

type commState struct {
	seq        uint32
	ptr        string
	commID     string
	rank       int
	nRanks     int
	cudaDev    int
	nvmlDev    int
	busID      string // kernel form; "" when the line had none
	nNodes     int
	localRanks int
	complete   bool
	ended      bool
	initLine   uint64
}

// connKey is kept small: a process holds up to MaxConnections of them.
type connKey struct {
	comm       uint32
	rank, peer int32
	channel    uint16
	connIdx    int8
	dir        direction
	collNet    bool
}

type direction uint8

const (
	dirNone direction = iota
	dirSend
	dirReceive
)

type peerKey struct {
	comm       uint32
	rank, peer int32
	transport  string
}

type peerLink struct {
	commID      string
	path        string
	connections int
}

type procState struct {
	host  string
	pid   int
	lines uint64

	versions []string

	comms     []*commState
	current   *commState
	commSeq   uint32
	commInits int

	conns          map[connKey]struct{}
	transports     map[string]int
	peers          map[peerKey]*peerLink
	peerOrder      []peerKey
	peersDropped   int
	paths          []string
	nvlsChannels   int
	nvlsComm       bool
	network        string
	pluginFailures []string
	ibNoDevice     bool
	ibDevices      []string
	socketIfs      []string
	gdrNotes       []string
	nvlinkTopology bool

	env      map[string]string
	envOrder []string

	warnings        map[string]int // text → count
	warningOrder    []string
	warningsTotal   int
	copyFallbackMsg string
}

func newProcState(host string, pid int) *procState {
	return &procState{
		host: host, pid: pid,
		conns:      map[connKey]struct{}{},
		transports: map[string]int{},
		peers:      map[peerKey]*peerLink{},
		env:        map[string]string{},
		warnings:   map[string]int{},
	}
}

func (p *procState) feed(l *Line, lineNo uint64) {
	p.lines++
	m := l.Message
	if l.Level == LevelWarn {
		p.warn(m)
	}
	if p.copyFallbackMsg == "" && (strings.Contains(m, "falling back to copy") || strings.Contains(m, "Falling back to copy")) {
		p.copyFallbackMsg = truncate(RedactText(m), MaxWarningBytes)
	}
	if l.Level != LevelInfo && l.Level != LevelWarn {
		return
	}
	switch {
	case strings.HasPrefix(m, "NCCL version "):
		if v := versionOf(m); v != "" {
			p.versions = addBounded(p.versions, v, MaxVersions)
		}
	case strings.Contains(m, " set by environment to "):
		p.setEnv(m)
	case strings.HasPrefix(m, "Channel "), strings.HasPrefix(m, "Ring "),
		strings.HasPrefix(m, "CollNet "), strings.HasPrefix(m, "Coll "):
		p.connection(m)
	case strings.HasPrefix(m, "NVLS comm 0x"):
		p.nvlsComm = true
	case strings.Contains(m, "comm 0x"):
		p.comm(m, lineNo)
	case strings.HasPrefix(m, "Using network "):
		p.network = truncate(strings.TrimSpace(strings.TrimPrefix(m, "Using network ")), maxNameBytes)
	case strings.HasPrefix(m, "NET/IB : No device found"):
		p.ibNoDevice = true
	case strings.HasPrefix(m, "NET/IB : Using "):
		for _, d := range netDeviceList(strings.TrimPrefix(m, "NET/IB : Using ")) {
			p.ibDevices = addBounded(p.ibDevices, d, MaxNetDevices)
		}
	case strings.HasPrefix(m, "NET/Socket : Using "):
		for _, d := range netDeviceList(strings.TrimPrefix(m, "NET/Socket : Using ")) {
			p.socketIfs = addBounded(p.socketIfs, socketInterface(d), MaxNetDevices)
		}
	case strings.HasPrefix(m, "Failed to initialize NET plugin "):
		p.pluginFailures = addBounded(p.pluginFailures,
			truncate(RedactText(strings.TrimPrefix(m, "Failed to initialize NET plugin ")), maxNameBytes), MaxNetDevices)
	case strings.HasPrefix(m, "NET/IB") && strings.Contains(m, "GPU Direct RDMA Disabled"):
		p.gdrNotes = addBounded(p.gdrNotes, truncate(RedactText(m), MaxWarningBytes), MaxGDRNotes)
	case strings.HasPrefix(m, "+ NVL["):
		p.nvlinkTopology = true
	case strings.Contains(m, " nvls channels"):
		p.nvlsChannelsLine(m)
	}
}

func (p *procState) warn(m string) {
	p.warningsTotal++
	m = truncate(RedactText(m), MaxWarningBytes)
	if _, seen := p.warnings[m]; !seen {
		if len(p.warnings) >= MaxWarnings {
			return
		}
		p.warningOrder = append(p.warningOrder, m)
	}
	p.warnings[m]++
}

// setEnv reads "<VAR> set by environment to <value>", with or without the
// trailing dot NCCL adds after integer values.
func (p *procState) setEnv(m string) {
	name, value, _ := strings.Cut(m, " set by environment to ")
	if !isEnvName(name) {
		return
	}
	value, keep := KeepEnv(name, strings.TrimSuffix(strings.TrimSpace(value), "."))
	if !keep {
		return // not an NCCL, UCX or allow-listed variable: not even its name
	}
	value = truncate(value, MaxEnvValueBytes)
	if _, seen := p.env[name]; !seen {
		if len(p.env) >= MaxEnv {
			return
		}
		p.envOrder = append(p.envOrder, name)
	}
	p.env[name] = value
}

func isEnvName(s string) bool {
	if s == "" || len(s) > maxNameBytes || s[0] < 'A' || s[0] > 'Z' {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_') {
			return false
		}
	}
	return true
}

// comm handles the communicator lifecycle lines:
//
//	ncclCommInitRankConfig comm 0x.. rank 0 nranks 2 cudaDev 0 nvmlDev 0 busId 60 commId 0x.. - Init START
//	... - Init COMPLETE
//	comm 0x.. rank 0 nRanks 2 nNodes 1 localRanks 2 localRank 0 MNNVL 0
//	comm 0x.. rank 0 nranks 2 cudaDev 0 busId 60 - Destroy COMPLETE   (or Abort COMPLETE)
func (p *procState) comm(m string, lineNo uint64) {
	body, event, _ := strings.Cut(m, " - ")
	kv := keyValues(body)
	ptr := kv["comm"]
	if !strings.HasPrefix(ptr, "0x") {
		return
	}
	event = strings.TrimSpace(event)
	switch {
	case strings.HasPrefix(event, "Init START"), strings.HasPrefix(event, "Init COMPLETE"):
		c := p.findComm(ptr)
		if c == nil || c.complete && strings.HasPrefix(event, "Init START") {
			c = p.newComm(ptr)
		}
		c.fill(kv)
		if strings.HasPrefix(event, "Init COMPLETE") {
			c.complete = true
		}
		c.initLine = lineNo
		p.current = c
	case strings.HasPrefix(event, "Destroy COMPLETE"), strings.HasPrefix(event, "Abort COMPLETE"):
		if c := p.findComm(ptr); c != nil {
			c.ended = true
			if p.current == c {
				p.current = nil
			}
		}
	case event == "" && kv["nNodes"] != "":
		if c := p.findComm(ptr); c != nil {
			c.nNodes = atoiOr(kv["nNodes"], c.nNodes)
			c.localRanks = atoiOr(kv["localRanks"], c.localRanks)
		}
	}
}

// findComm returns the live communicator at ptr (NCCL reuses freed
// addresses, so an ended one is not a match).
func (p *procState) findComm(ptr string) *commState {
	for i := len(p.comms) - 1; i >= 0; i-- {
		c := p.comms[i]
		if c.ptr == ptr && !c.ended {
			return c
		}
	}
	return nil
}

func (p *procState) newComm(ptr string) *commState {
	p.commInits++
	p.commSeq++
	c := &commState{seq: p.commSeq, ptr: truncate(ptr, maxCommIDBytes), rank: -1, nRanks: -1, cudaDev: -1, nvmlDev: -1}
	if len(p.comms) >= MaxComms {
		// Forget an ended communicator first: churn (a new communicator per
		// step) is then still visible in commInits.
		drop := 0
		for i, old := range p.comms {
			if old.ended {
				drop = i
				break
			}
		}
		p.comms = append(p.comms[:drop], p.comms[drop+1:]...)
	}
	p.comms = append(p.comms, c)
	return c
}

func (c *commState) fill(kv map[string]string) {
	c.rank = atoiOr(kv["rank"], c.rank)
	if n, ok := kv["nranks"]; ok {
		c.nRanks = atoiOr(n, c.nRanks)
	} else {
		c.nRanks = atoiOr(kv["nRanks"], c.nRanks)
	}
	c.cudaDev = atoiOr(kv["cudaDev"], c.cudaDev)
	c.nvmlDev = atoiOr(kv["nvmlDev"], c.nvmlDev)
	if b, ok := ParseBusID(kv["busId"]); ok {
		c.busID = b
	}
	if id := kv["commId"]; strings.HasPrefix(id, "0x") {
		c.commID = truncate(id, maxCommIDBytes)
	}
}

// keyValues reads "key value key value ..." pairs; the first word (the
// calling function's name) may stand alone.
func keyValues(s string) map[string]string {
	f := strings.Fields(s)
	kv := make(map[string]string, len(f)/2)
	for i := 0; i+1 < len(f); i++ {
		switch f[i] {
		case "comm", "rank", "nranks", "nRanks", "cudaDev", "nvmlDev", "busId", "commId", "nNodes", "localRanks":
			kv[f[i]] = f[i+1]
			i++
		}
	}
	return kv
}

func atoiOr(s string, def int) int {
	if n, ok := atoiPositive([]byte(s)); ok {
		return n
	}
	return def
}

// connection reads a transport line:
//
//	Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM
//	Channel 00 : 0[1b000] -> 1[3d000] via SHM/direct/direct
//	Channel 00/0 : 1[1] -> 0[0] [receive] via NET/Socket/0
//	Channel 01/0 : 0[0] -> 8[0] [send] via NET/IB/0(1)/GDRDMA(PCI)/Shared
//	Ring 00 : 0[0] -> 1[1] via P2P/IPC                          (NCCL 2.4)
//	CollNet 00/0 : 0 [send] via COLLNET/SHARP/0/GDRDMA
//
// Ring-order lines ("Channel 00/24 : 0 1") have no "via" and are skipped.
func (p *procState) connection(m string) {
	at := strings.Index(m, " via ")
	if at < 0 {
		return
	}
	path := truncate(strings.TrimSpace(m[at+len(" via "):]), maxNameBytes)
	class := classify(path)
	if class == transportNone {
		return
	}
	f := strings.Fields(m[:at])
	if len(f) < 4 || f[2] != ":" {
		return
	}
	chanStr, connStr, hasConn := strings.Cut(f[1], "/")
	channel, ok := atoiPositive([]byte(chanStr))
	if !ok {
		return
	}
	connIdx := -1
	if hasConn {
		if connIdx, ok = atoiPositive([]byte(connStr)); !ok {
			return
		}
	}
	if channel > 0xffff || connIdx > 127 {
		return
	}
	k := connKey{channel: uint16(channel), connIdx: int8(connIdx), rank: -1, peer: -1}
	if p.current != nil {
		k.comm = p.current.seq
	}
	switch {
	case f[0] == "CollNet" || f[0] == "Coll":
		k.collNet = true
		rank, ok := atoiPositive([]byte(f[3]))
		if !ok {
			return
		}
		k.rank = int32(rank)
		if len(f) > 4 {
			k.dir = directionOf(f[4])
		}
	case len(f) >= 6 && f[4] == "->":
		from, ok1 := rankOf(f[3])
		to, ok2 := rankOf(f[5])
		if !ok1 || !ok2 {
			return
		}
		if len(f) > 6 {
			k.dir = directionOf(f[6])
		}
		// A receive line names the sender first: the peer is on the left.
		k.rank, k.peer = int32(from), int32(to)
		if k.dir == dirReceive {
			k.rank, k.peer = int32(to), int32(from)
		}
	default:
		return
	}
	p.paths = addBounded(p.paths, path, MaxPaths)
	if _, seen := p.conns[k]; seen {
		return
	}
	// Past the bound a repeated line may be counted twice: the counts stay
	// an upper bound and memory stays flat.
	if len(p.conns) < MaxConnections {
		p.conns[k] = struct{}{}
	}
	p.transports[class]++
	if k.peer < 0 {
		return
	}
	pk := peerKey{comm: k.comm, rank: k.rank, peer: k.peer, transport: class}
	if pl := p.peers[pk]; pl != nil {
		pl.connections++
		return
	}
	if len(p.peers) >= MaxPeerLinks {
		p.peersDropped++
		return
	}
	commID := ""
	if p.current != nil {
		commID = p.current.commID
	}
	p.peers[pk] = &peerLink{commID: commID, path: path, connections: 1}
	p.peerOrder = append(p.peerOrder, pk)
}

func directionOf(f string) direction {
	switch f {
	case "[send]":
		return dirSend
	case "[receive]":
		return dirReceive
	}
	return dirNone
}

// rankOf reads "3[3]" or "3[1b000]": the rank before the bracket.
func rankOf(f string) (int, bool) {
	r, _, ok := strings.Cut(f, "[")
	if !ok {
		return 0, false
	}
	return atoiPositive([]byte(r))
}

// classify maps a "via" path to its transport class.
func classify(path string) string {
	switch {
	case strings.HasPrefix(path, "P2P"):
		return TransportP2P
	case strings.HasPrefix(path, "SHM"):
		return TransportSHM
	case strings.HasPrefix(path, "COLLNET"):
		return TransportCollNet
	case strings.HasPrefix(path, "NVLS"):
		return TransportNVLS
	case strings.HasPrefix(path, "NET/"):
		name, _, _ := strings.Cut(strings.TrimPrefix(path, "NET/"), "/")
		gdr := strings.Contains(path, "/GDRDMA")
		switch {
		case strings.EqualFold(name, "Socket"):
			return TransportNetSocket
		case strings.HasPrefix(strings.ToUpper(name), "IB"):
			// IB, and plugins named after it (IBext, IBext_v8 from HPC-X).
			if gdr {
				return TransportNetIBGDR
			}
			return TransportNetIB
		case gdr:
			return TransportNetOtherGDR
		default:
			return TransportNetOther
		}
	}
	return transportNone
}

// nvlsChannelsLine reads "24 coll channels, 24 collnet channels, 0 nvls
// channels, 32 p2p channels, 32 p2p channels per peer".
func (p *procState) nvlsChannelsLine(m string) {
	for _, part := range strings.Split(m, ",") {
		f := strings.Fields(part)
		if len(f) == 3 && f[1] == "nvls" && f[2] == "channels" {
			if n, ok := atoiPositive([]byte(f[0])); ok && n > p.nvlsChannels {
				p.nvlsChannels = n
			}
		}
	}
}

// netDeviceList reads "[0]mlx5_0:1/IB [1]mlx5_1:1/RoCE [RO]; OOB eth0:10.0.0.1<0>"
// or "[0]eth0:192.0.2.2<0> [1]eth1:...": the "[N]name" entries before ";".
func netDeviceList(s string) []string {
	s, _, _ = strings.Cut(s, ";")
	var out []string
	for _, f := range strings.Fields(s) {
		if !strings.HasPrefix(f, "[") {
			continue
		}
		end := strings.IndexByte(f, ']')
		if end < 2 {
			continue
		}
		if _, ok := atoiPositive([]byte(f[1:end])); !ok || end+1 >= len(f) {
			continue
		}
		out = append(out, truncate(f[end+1:], maxNameBytes))
	}
	return out
}

// socketInterface turns "eth0:192.0.2.2<0>" into "eth0:192.0.2.2".
func socketInterface(d string) string {
	if i := strings.IndexByte(d, '<'); i > 0 {
		return d[:i]
	}
	return d
}

// versionOf reads "NCCL version 2.28.9+cuda13.0" into "2.28.9+cuda13.0".
func versionOf(m string) string {
	f := strings.Fields(strings.TrimPrefix(m, "NCCL version "))
	if len(f) == 0 || len(f[0]) > maxNameBytes || f[0][0] < '0' || f[0][0] > '9' {
		return ""
	}
	for _, c := range f[0] {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '.' || c == '+' || c == '-' || c == '_') {
			return ""
		}
	}
	return f[0]
}

func addBounded(list []string, s string, max int) []string {
	for _, x := range list {
		if x == s {
			return list
		}
	}
	if len(list) >= max {
		return list
	}
	return append(list, s)
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	// Cut on a rune boundary so the result stays valid UTF-8.
	for n > 0 && n < len(s) && s[n]&0xc0 == 0x80 {
		n--
	}
	return s[:n]
}

// Comm is one communicator a process initialised.
type Comm struct {
	// CommID is NCCL's communicator hash, shared by all its ranks (NCCL 2.18+).
	CommID string
	Rank   int
	NRanks int
	// CudaDev and NVMLDev are the process's device numbers; -1 when the
	// line had none (NVMLDev appears in NCCL 2.19+).
	CudaDev int
	NVMLDev int
	// PCIBusID is the GPU's bus ID in kernel form, from NCCL's busId.
	PCIBusID string
	// NNodes and LocalRanks are NCCL's view of the job's layout; 0 when the
	// line was not seen.
	NNodes     int
	LocalRanks int
	Complete   bool
	Ended      bool
	// InitLine is the log's line number of the communicator's latest init
	// line.
	InitLine uint64
}

// TransportCount is the number of distinct connections of one class.
type TransportCount struct {
	Transport   string
	Connections int
}

// PeerLink is the connections of one rank to one peer over one class.
type PeerLink struct {
	CommID      string
	Rank        int
	Peer        int
	Transport   string
	Path        string // the first "via" text, e.g. "NET/Socket/0"
	Connections int
}

// EnvVar is a "<NAME> set by environment to <value>" line.
type EnvVar struct {
	Name  string
	Value string
}

// Warning is a distinct WARN text and how often it appeared.
type Warning struct {
	Message string
	Count   int
}

// Summary is what one process's lines say.
type Summary struct {
	Host     string
	PID      int
	Lines    uint64
	Versions []string

	Comms []Comm
	// CommInits counts communicator initialisations, including those
	// forgotten past MaxComms: a count that keeps rising is churn.
	CommInits int

	Transports   []TransportCount
	Peers        []PeerLink
	PeersDropped int
	Paths        []string

	Network           string
	NetPluginFailures []string
	IBNoDevice        bool
	IBDevices         []string
	SocketInterfaces  []string
	GDRNotes          []string
	NVLinkInTopology  bool

	Env           []EnvVar
	Warnings      []Warning
	WarningsTotal int
	// CopyFallback is the "falling back to copy" line, if any.
	CopyFallback string
}

// Ended reports whether the process destroyed every communicator it
// created: a job that finished cleanly.
func (s *Summary) Ended() bool {
	if len(s.Comms) == 0 {
		return false
	}
	for _, c := range s.Comms {
		if !c.Ended {
			return false
		}
	}
	return true
}

// PCIBusIDs lists the distinct GPUs the process's communicators ran on.
func (s *Summary) PCIBusIDs() []string {
	var out []string
	for _, c := range s.Comms {
		if c.PCIBusID != "" {
			out = addBounded(out, c.PCIBusID, MaxComms)
		}
	}
	return out
}

// LastInitLine is the line number of the process's latest communicator
// init, to tell which of two processes on one GPU came last.
func (s *Summary) LastInitLine() uint64 {
	var n uint64
	for _, c := range s.Comms {
		n = max(n, c.InitLine)
	}
	return n
}

// Uses reports whether any connection took the class.
func (s *Summary) Uses(class string) bool {
	for _, t := range s.Transports {
		if t.Transport == class && t.Connections > 0 {
			return true
		}
	}
	return false
}

// EnvValue returns an overridden variable's value.
func (s *Summary) EnvValue(name string) (string, bool) {
	for _, e := range s.Env {
		if e.Name == name {
			return e.Value, true
		}
	}
	return "", false
}

// Summaries returns each process's summary in the order the processes
// first appeared. The result shares nothing with the log.
func (l *Log) Summaries() []Summary {
	out := make([]Summary, 0, len(l.order))
	for _, p := range l.order {
		out = append(out, p.summary())
	}
	return out
}

func (p *procState) summary() Summary {
	s := Summary{
		Host: p.host, PID: p.pid, Lines: p.lines,
		Versions:          append([]string(nil), p.versions...),
		CommInits:         p.commInits,
		PeersDropped:      p.peersDropped,
		Paths:             append([]string(nil), p.paths...),
		Network:           p.network,
		NetPluginFailures: append([]string(nil), p.pluginFailures...),
		IBNoDevice:        p.ibNoDevice,
		IBDevices:         append([]string(nil), p.ibDevices...),
		SocketInterfaces:  append([]string(nil), p.socketIfs...),
		GDRNotes:          append([]string(nil), p.gdrNotes...),
		NVLinkInTopology:  p.nvlinkTopology,
		WarningsTotal:     p.warningsTotal,
		CopyFallback:      p.copyFallbackMsg,
	}
	for _, c := range p.comms {
		s.Comms = append(s.Comms, Comm{
			CommID: c.commID, Rank: c.rank, NRanks: c.nRanks, CudaDev: c.cudaDev, NVMLDev: c.nvmlDev,
			PCIBusID: c.busID, NNodes: c.nNodes, LocalRanks: c.localRanks,
			Complete: c.complete, Ended: c.ended, InitLine: c.initLine,
		})
	}
	counts := map[string]int{}
	for k, v := range p.transports {
		counts[k] = v
	}
	if p.nvlsChannels > 0 || p.nvlsComm {
		counts[TransportNVLS] += max(p.nvlsChannels, 1)
	}
	for _, t := range Transports {
		if n := counts[t]; n > 0 {
			s.Transports = append(s.Transports, TransportCount{Transport: t, Connections: n})
		}
	}
	for _, k := range p.peerOrder {
		pl := p.peers[k]
		s.Peers = append(s.Peers, PeerLink{CommID: pl.commID, Rank: int(k.rank), Peer: int(k.peer),
			Transport: k.transport, Path: pl.path, Connections: pl.connections})
	}
	for _, name := range p.envOrder {
		s.Env = append(s.Env, EnvVar{Name: name, Value: p.env[name]})
	}
	sort.Slice(s.Env, func(i, j int) bool { return s.Env[i].Name < s.Env[j].Name })
	for _, text := range p.warningOrder {
		s.Warnings = append(s.Warnings, Warning{Message: text, Count: p.warnings[text]})
	}
	return s
}

// Fallback is one way the process's communication took a slower path than
// the one it should have: what was taken, what was expected, and the lines
// that say so.
type Fallback struct {
	Kind     string
	Taken    string
	Expected string
	Evidence string
}

// IsLocal reports whether a communicator's rank is known to run on this
// node. Fallbacks uses it to tell a network connection between two GPUs of
// the node (a fallback) from one to another node (normal).
type IsLocal func(commID string, rank int) bool

// Fallbacks derives the fallbacks the summary shows, in FallbackKinds
// order. isLocal may be nil when no other rank's location is known.
func (s *Summary) Fallbacks(isLocal IsLocal) []Fallback {
	var out []Fallback
	// Without NVLink in NCCL's topology dump, SHM may be the best this pair
	// of GPUs has (P2P across CPU sockets is off by default); the expected
	// path then says what P2P needs.
	p2p, intraNode := expectedP2P, expectedIntraNode
	if s.NVLinkInTopology {
		p2p, intraNode = expectedNVLinkP2P, expectedNVLinkP2P
	}
	slowIntra := s.takenAmong(TransportSHM, TransportNetSocket, TransportNetIB, TransportNetIBGDR, TransportNetOther, TransportNetOtherGDR)

	// p2p_disabled
	var ev []string
	if v, ok := s.EnvValue("NCCL_P2P_DISABLE"); ok && truthy(v) {
		ev = append(ev, "NCCL_P2P_DISABLE="+v+" set by environment")
	}
	if v, ok := s.EnvValue("NCCL_P2P_LEVEL"); ok && (strings.EqualFold(v, "LOC") || v == "0") {
		ev = append(ev, "NCCL_P2P_LEVEL="+v+" set by environment")
	}
	if n := s.connections(TransportSHM); n > 0 {
		ev = append(ev, strconv.Itoa(n)+" connections via "+s.pathOf(TransportSHM))
	}
	if len(ev) > 0 {
		taken := slowIntra
		if s.Uses(TransportSHM) {
			taken = TransportSHM
		}
		out = append(out, Fallback{FallbackP2PDisabled, taken, p2p, strings.Join(ev, "; ")})
	}

	// shm_disabled
	if v, ok := s.EnvValue("NCCL_SHM_DISABLE"); ok && truthy(v) {
		out = append(out, Fallback{FallbackSHMDisabled, s.takenAmong(TransportNetSocket, TransportNetIB,
			TransportNetIBGDR, TransportNetOther, TransportNetOtherGDR), intraNode,
			"NCCL_SHM_DISABLE=" + v + " set by environment"})
	}

	// socket_instead_of_ib
	if n := s.connections(TransportNetSocket); n > 0 {
		ev := []string{strconv.Itoa(n) + " connections via " + s.pathOf(TransportNetSocket)}
		if s.IBNoDevice {
			ev = append(ev, "NET/IB : No device found")
		}
		if v, ok := s.EnvValue("NCCL_IB_DISABLE"); ok && truthy(v) {
			ev = append(ev, "NCCL_IB_DISABLE="+v+" set by environment")
		}
		if len(s.SocketInterfaces) > 0 {
			ev = append(ev, "socket interfaces "+strings.Join(firstN(s.SocketInterfaces, maxEvidenceEntries), " "))
		}
		out = append(out, Fallback{FallbackSocketInsteadOfIB, TransportNetSocket, expectedIBWithGDR, strings.Join(ev, "; ")})
	}

	// ib_without_gdr
	if n := s.connections(TransportNetIB); n > 0 {
		ev := []string{strconv.Itoa(n) + " connections via " + s.pathOf(TransportNetIB) + " without /GDRDMA"}
		if v, ok := s.EnvValue("NCCL_NET_GDR_LEVEL"); ok {
			ev = append(ev, "NCCL_NET_GDR_LEVEL="+v+" set by environment")
		}
		ev = append(ev, firstN(s.GDRNotes, maxEvidenceEntries)...)
		out = append(out, Fallback{FallbackIBWithoutGDR, TransportNetIB, expectedIBWithGDR, strings.Join(ev, "; ")})
	}

	// p2p_copy_fallback
	if s.CopyFallback != "" {
		out = append(out, Fallback{FallbackP2PCopy, takenP2PThroughHostCopy, expectedDirectP2P, s.CopyFallback})
	}

	// net_within_node
	if isLocal != nil {
		var taken, example string
		n := 0
		for _, pl := range s.Peers {
			if !strings.HasPrefix(pl.Transport, "NET/") || pl.CommID == "" || !isLocal(pl.CommID, pl.Peer) {
				continue
			}
			n += pl.Connections
			if taken == "" {
				taken = pl.Transport
				example = "ranks " + strconv.Itoa(pl.Rank) + " and " + strconv.Itoa(pl.Peer) + " of comm " + pl.CommID +
					" run on this node yet connect via " + pl.Path
			}
		}
		if n > 0 {
			out = append(out, Fallback{FallbackNetWithinNode, taken, intraNode,
				example + " (" + strconv.Itoa(n) + " connections between ranks on this node)"})
		}
	}
	return out
}

func (s *Summary) connections(class string) int {
	for _, t := range s.Transports {
		if t.Transport == class {
			return t.Connections
		}
	}
	return 0
}

// pathOf returns the first "via" text of a class, for evidence.
func (s *Summary) pathOf(class string) string {
	for _, p := range s.Paths {
		if classify(p) == class {
			return p
		}
	}
	return class
}

// takenAmong joins the classes the process used, from the given ones.
func (s *Summary) takenAmong(classes ...string) string {
	var used []string
	for _, c := range classes {
		if s.Uses(c) {
			used = append(used, c)
		}
	}
	return strings.Join(used, ",")
}

// truthy reads an integer setting as NCCL does (strtoll, base auto): any
// non-zero number is on; text it cannot parse leaves the default (off).
func truthy(v string) bool {
	n, err := strconv.ParseInt(v, 0, 64)
	return err == nil && n != 0
}

func firstN(s []string, n int) []string {
	if len(s) > n {
		return s[:n]
	}
	return s
}
