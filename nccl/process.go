package nccl

import "strings"

// procState is what one process's (host, pid) lines said so far; feed
// routes each line to the part of it that the line is about (communicators
// in comm.go, connections in transport.go), and summary reads it out.
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
