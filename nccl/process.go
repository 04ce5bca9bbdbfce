package nccl

import "strings"

// procState is what one process's (host, pid) lines said so far; feed
// routes each line to the part of it that the line is about (communicators
// in comm.go, connections in transport.go, networks in net.go), and
// summary reads it out.
type procState struct {
	host  string
	pid   int
	lines uint64

	versions []string

	comms     []*commState
	current   *commState
	commSeq   uint32
	commInits int
	// bySize counts the communicators of each size, to name one that has
	// no commId (NCCL before 2.18) by its size and order.
	bySize map[int]int

	conns        map[connKey]struct{}
	transports   map[string]int
	ibPlainRecv  int // NET/IB connections without GDRDMA that receive (or say no direction)
	peers        map[peerKey]*peerLink
	peerOrder    []peerKey
	peersDropped int
	paths        []string
	nvlsChannels int
	nvlsComm     bool

	// Where the process's ranks are: the ranks it drives (the local end of
	// its connection lines, its communicators' ranks) and the peers it
	// reaches over P2P or SHM, which share its node.
	localRanks map[RankRef]string // → the GPU the rank's line names ("0" of "0[0]", "1b000" of "0[1b000]")
	localOrder []RankRef
	nodePeers  map[RankRef]struct{}
	peerOrderN []RankRef

	network        string // "Using network X", or NCCL <= 2.4's "Using internal Network X"
	assignedNet    string // "Assigned NET plugin X to comm" (2.27+)
	distanceNet    string // NCCL 2.4's "CUDA Dev 0[0], IB NIC distance : PIX"
	loadedNet      string // "NET/Plugin: Loaded net plugin FastSocket (v4)"
	pluginFailures []string
	ibNoDevice     bool
	ibVerbsMissing bool
	ibDevices      []string
	socketIfs      []string
	hostAddr       string
	// hostAddrBootstrap: hostAddr is the bootstrap's, which no later
	// NIC line replaces.
	hostAddrBootstrap bool
	ofi               bool
	ofiProvider       string
	ofiDevices        []string
	ofiNoGDR          bool
	gdrNotes          []string
	gdrEnabled        bool
	nvlinkTopology    bool

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
		bySize:     map[int]int{},
		conns:      map[connKey]struct{}{},
		transports: map[string]int{},
		peers:      map[peerKey]*peerLink{},
		localRanks: map[RankRef]string{},
		nodePeers:  map[RankRef]struct{}{},
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
		p.setEnv(m, " set by environment to ")
	case strings.HasPrefix(m, "NCCL_") && strings.Contains(m, " set to "):
		// 2.19+ echoes some strings as "NCCL_IB_HCA set to mlx5_2:1".
		p.setEnv(m, " set to ")
	case strings.HasPrefix(m, "Channel "), strings.HasPrefix(m, "Ring "),
		strings.HasPrefix(m, "CollNet "), strings.HasPrefix(m, "Coll "):
		p.connection(m)
	case strings.HasPrefix(m, "NVLS comm 0x"), strings.HasPrefix(m, "NVLS Head "), strings.HasPrefix(m, "Connected NVLS"):
		// The NVLS groups are set up: printed only when NVLS is in use,
		// unlike "NVLS multicast support is available", which is a
		// capability.
		p.nvlsComm = true
	case strings.Contains(m, "comm 0x"):
		p.comm(m, lineNo)
	case strings.Contains(m, " nvls channels"):
		p.nvlsChannelsLine(m)
	case strings.HasPrefix(m, "+ NVL["):
		p.nvlinkTopology = true
	default:
		p.netLine(m)
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
func (p *procState) setEnv(m, sep string) {
	name, value, _ := strings.Cut(m, sep)
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
