package nccl

import (
	"sort"
	"strconv"
	"strings"
)

// Networks as a Report names them: "IB" is verbs over InfiniBand or RoCE,
// NCCL's own or a plugin's (HPC-X's IBext); "OFI" is aws-ofi-nccl's
// libfabric (EFA). Another plugin keeps the name NCCL printed.
const (
	NetworkIB     = "IB"
	NetworkSocket = "Socket"
	NetworkOFI    = "OFI"
)

// Whether GPUDirect RDMA carried the network traffic.
const (
	GDRUsed    = "used"
	GDRNotUsed = "not_used"
	GDRUnknown = "unknown"
)

// Transport kinds as a Report names them.
const (
	KindP2P     = "P2P"
	KindSHM     = "SHM"
	KindNET     = "NET"
	KindNVLS    = "NVLS"
	KindCollNet = "CollNet"
)

var kindOrder = []string{KindP2P, KindSHM, KindNET, KindNVLS, KindCollNet}

// Bounds on a Report, whatever the log: the Log's bounds keep the rest.
const (
	maxReportComms    = 64
	maxReportWarnings = 10
	maxReportNICs     = 64
	maxReportEnv      = 64
)

// Report is what a whole log says, for the engineer holding a job's
// output: `gpudiag nccl` prints it.
type Report struct {
	Lines            uint64 `json:"lines"`
	NCCLLines        uint64 `json:"nccl_lines"`
	Processes        int    `json:"processes"`
	DroppedProcesses uint64 `json:"dropped_processes,omitempty"`
	// Hosts counts the hosts the processes ran on (HostIDs).
	Hosts int `json:"hosts"`
	// Versions are the NCCL versions as printed ("2.21.5+cuda12.4").
	Versions []string `json:"versions"`
	// Network is NetworkIB, NetworkSocket, NetworkOFI, another plugin's
	// name, or "" when the log does not say.
	Network string `json:"network"`
	// Transports are the kinds the connections took (KindP2P, KindSHM,
	// KindNET, KindNVLS, KindCollNet); WithinNode and BetweenNodes split
	// them by where the peer runs, NET within a node being a fallback.
	Transports   []string `json:"transports"`
	WithinNode   []string `json:"transports_within_node"`
	BetweenNodes []string `json:"transports_between_nodes"`
	// GDR is GDRUsed, GDRNotUsed or GDRUnknown.
	GDR string `json:"gdr"`
	// NICs are the network's devices: "mlx5_0:1" (IB and RoCE ports),
	// "eth0" (sockets), PCI addresses (aws-ofi-nccl's NIC groups).
	NICs []string `json:"nics"`
	// Fallbacks are the kinds of slower path taken (FallbackKinds order).
	Fallbacks     []string     `json:"fallbacks"`
	Findings      []Finding    `json:"findings"`
	Communicators []CommReport `json:"communicators"`
	Env           []EnvVar     `json:"env,omitempty"`
	Warnings      []Warning    `json:"warnings,omitempty"`
	WarningsTotal int          `json:"warnings_total"`
}

// Finding is a fallback or a misconfiguration, with the fix.
type Finding struct {
	Kind string `json:"kind"`
	// Severity is "warning" (a slower path taken, an NCCL warning) or
	// "info" (a setting worth knowing).
	Severity string `json:"severity"`
	// Processes counts the processes it was seen in; Example names one
	// ("host:pid").
	Processes int    `json:"processes"`
	Example   string `json:"example"`
	Taken     string `json:"taken,omitempty"`
	Expected  string `json:"expected,omitempty"`
	Evidence  string `json:"evidence"`
	Fix       string `json:"fix"`
}

// CommReport is one communicator as the log shows it.
type CommReport struct {
	// ID is NCCL's commId, or the communicator's Key where it has none.
	ID           string   `json:"id"`
	NRanks       int      `json:"nranks"`
	NNodes       int      `json:"nnodes,omitempty"`
	RanksSeen    int      `json:"ranks_seen"`
	Hosts        int      `json:"hosts"`
	WithinNode   []string `json:"transports_within_node"`
	BetweenNodes []string `json:"transports_between_nodes"`
}

// Severity of findings.
const (
	SeverityWarning = "warning"
	SeverityInfo    = "info"
)

// networkKind names a network as a Report does.
func networkKind(name string) string {
	up := strings.ToUpper(strings.TrimSpace(name))
	switch {
	case up == "":
		return ""
	case strings.HasPrefix(up, "IB"):
		return NetworkIB
	case strings.HasPrefix(up, "SOCKET"):
		return NetworkSocket
	case strings.Contains(up, "LIBFABRIC") || strings.Contains(up, "OFI"):
		return NetworkOFI
	}
	return name
}

// NetworkKind is the network the process's connections took, or would
// have: the one NCCL named ("Using network", "Assigned NET plugin"), else
// its connections' network, else what its plugin and NIC lines imply (a
// plugin NCCL loaded; sockets when InfiniBand has no device).
func (s *Summary) NetworkKind() string {
	for _, n := range []string{s.Network, s.AssignedNetwork} {
		if n != "" {
			return networkKind(n)
		}
	}
	switch {
	case s.Uses(TransportNetIB) || s.Uses(TransportNetIBGDR):
		return NetworkIB
	case s.Uses(TransportNetSocket):
		return NetworkSocket
	}
	for _, p := range s.Paths {
		if c := classify(p); c == TransportNetOther || c == TransportNetOtherGDR {
			name, _, _ := strings.Cut(strings.TrimPrefix(p, "NET/"), "/")
			return networkKind(name)
		}
	}
	switch {
	case s.OFI:
		return NetworkOFI
	case len(s.IBDevices) > 0 && !s.IBNoDevice:
		return NetworkIB
	case s.LoadedNetPlugin != "":
		return networkKind(s.LoadedNetPlugin)
	case s.IBNoDevice:
		return NetworkSocket
	}
	return networkKind(s.DistanceNetwork)
}

// GDR says whether the process's network traffic used GPUDirect RDMA:
// its connections' /GDRDMA and NCCL's "Enabled" notes say used; network connections without it (sockets never have it), the
// "Disabled" notes and aws-ofi-nccl's "disabling GDR" say not used.
func (s *Summary) GDR() string {
	switch {
	case s.Uses(TransportNetIBGDR) || s.Uses(TransportNetOtherGDR) || s.GDREnabled:
		return GDRUsed
	case s.Uses(TransportNetIB) || s.Uses(TransportNetOther) || s.Uses(TransportNetSocket) ||
		len(s.GDRNotes) > 0 || s.OFINoGDR:
		return GDRNotUsed
	}
	return GDRUnknown
}

// kindOf maps a transport class to its Report kind.
func kindOf(class string) string {
	switch {
	case class == TransportP2P:
		return KindP2P
	case class == TransportSHM:
		return KindSHM
	case class == TransportNVLS:
		return KindNVLS
	case class == TransportCollNet:
		return KindCollNet
	case strings.HasPrefix(class, "NET/"):
		return KindNET
	}
	return ""
}

// Analyze reads the whole log into a Report.
func Analyze(l *Log) Report {
	sums := l.Summaries()
	ids := HostIDs(sums)
	local := Locality(sums)
	r := Report{Lines: l.Lines(), NCCLLines: l.NCCLLines(), Processes: len(sums), DroppedProcesses: l.DroppedProcesses(),
		GDR: GDRUnknown}
	hosts := map[string]bool{}
	kinds, within, between := map[string]bool{}, map[string]bool{}, map[string]bool{}
	networks := map[string]int{}
	var networkOrder []string
	gdr := map[string]bool{}
	fallbacks := map[string]*Finding{}
	env := map[string]string{}
	warnings := map[string]int{}
	var warningOrder []string
	comms := map[string]*commAcc{}
	var commOrder []string

	for i := range sums {
		s := &sums[i]
		hosts[ids[i]] = true
		for _, v := range s.Versions {
			r.Versions = addBounded(r.Versions, v, MaxVersions*4)
		}
		if n := s.NetworkKind(); n != "" {
			if networks[n] == 0 {
				networkOrder = append(networkOrder, n)
			}
			networks[n]++
		}
		gdr[s.GDR()] = true
		for _, t := range s.Transports {
			k := kindOf(t.Transport)
			kinds[k] = true
			switch k {
			case KindP2P, KindSHM, KindNVLS:
				within[k] = true
			case KindCollNet:
				between[k] = true
			}
		}
		// A network connection is between nodes unless its peer is known
		// to be on this host.
		for _, pl := range s.Peers {
			if kindOf(pl.Transport) != KindNET {
				continue
			}
			if local[i](pl.Comm, pl.Peer) {
				within[KindNET] = true
			} else {
				between[KindNET] = true
			}
		}
		if s.PeersDropped > 0 && kinds[KindNET] && !within[KindNET] {
			between[KindNET] = true // connections past the peer bound
		}
		proc := procName(s)
		for _, fb := range s.Fallbacks(local[i]) {
			f := fallbacks[fb.Kind]
			if f == nil {
				f = &Finding{Kind: fb.Kind, Severity: SeverityWarning, Example: proc, Taken: fb.Taken,
					Expected: fb.Expected, Evidence: fb.Evidence, Fix: Fix(fb.Kind)}
				fallbacks[fb.Kind] = f
			}
			f.Processes++
		}
		for _, e := range s.Env {
			if _, ok := env[e.Name]; !ok && len(env) < maxReportEnv {
				env[e.Name] = e.Value
			}
		}
		r.WarningsTotal += s.WarningsTotal
		for _, w := range s.Warnings {
			if _, ok := warnings[w.Message]; !ok {
				if len(warnings) >= maxReportWarnings {
					continue
				}
				warningOrder = append(warningOrder, w.Message)
			}
			warnings[w.Message] += w.Count
		}
		for _, c := range s.Comms {
			acc := comms[c.Key]
			if acc == nil {
				if len(comms) >= maxReportComms {
					continue
				}
				acc = &commAcc{id: c.CommID, ranks: map[int]bool{}, hosts: map[string]bool{},
					within: map[string]bool{}, between: map[string]bool{}}
				if acc.id == "" {
					acc.id = c.Key
				}
				comms[c.Key] = acc
				commOrder = append(commOrder, c.Key)
			}
			acc.nRanks = max(acc.nRanks, c.NRanks)
			acc.nNodes = max(acc.nNodes, c.NNodes)
			if c.Rank >= 0 {
				acc.ranks[c.Rank] = true
			}
			acc.hosts[ids[i]] = true
		}
		for _, pl := range s.Peers {
			acc := comms[pl.Comm]
			if acc == nil {
				continue
			}
			k := kindOf(pl.Transport)
			if k == KindNET && !local[i](pl.Comm, pl.Peer) {
				acc.between[k] = true
			} else {
				acc.within[k] = true
			}
		}
	}
	for _, v := range l.Versions() {
		r.Versions = addBounded(r.Versions, v, MaxVersions*4)
	}
	r.Hosts = len(hosts)
	best := 0
	for _, n := range networkOrder {
		if networks[n] > best {
			r.Network, best = n, networks[n]
		}
	}
	switch {
	case gdr[GDRUsed]:
		r.GDR = GDRUsed
	case gdr[GDRNotUsed]:
		r.GDR = GDRNotUsed
	}
	r.Transports = orderedKinds(kinds)
	r.WithinNode = orderedKinds(within)
	r.BetweenNodes = orderedKinds(between)
	r.NICs = reportNICs(sums, r.Network)
	for _, k := range FallbackKinds {
		if f := fallbacks[k]; f != nil {
			r.Fallbacks = append(r.Fallbacks, k)
			r.Findings = append(r.Findings, *f)
		}
	}
	r.Findings = append(r.Findings, misconfigurations(sums)...)
	if r.WarningsTotal > 0 && len(warningOrder) > 0 {
		r.Findings = append(r.Findings, Finding{Kind: "nccl_warnings", Severity: SeverityWarning,
			Processes: countProcs(sums, func(s *Summary) bool { return s.WarningsTotal > 0 }),
			Example:   procName(firstProc(sums, func(s *Summary) bool { return s.WarningsTotal > 0 })),
			Evidence:  strconv.Itoa(r.WarningsTotal) + " NCCL WARN lines, first: " + warningOrder[0],
			Fix:       Fix("nccl_warnings")})
	}
	for _, k := range commOrder {
		acc := comms[k]
		r.Communicators = append(r.Communicators, CommReport{ID: acc.id, NRanks: acc.nRanks, NNodes: acc.nNodes,
			RanksSeen: len(acc.ranks), Hosts: len(acc.hosts), WithinNode: orderedKinds(acc.within),
			BetweenNodes: orderedKinds(acc.between)})
	}
	names := make([]string, 0, len(env))
	for n := range env {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		r.Env = append(r.Env, EnvVar{Name: n, Value: env[n]})
	}
	for _, w := range warningOrder {
		r.Warnings = append(r.Warnings, Warning{Message: w, Count: warnings[w]})
	}
	for _, list := range []*[]string{&r.Versions, &r.Transports, &r.WithinNode, &r.BetweenNodes, &r.NICs, &r.Fallbacks} {
		if *list == nil {
			*list = []string{} // JSON: [], not null
		}
	}
	if r.Findings == nil {
		r.Findings = []Finding{}
	}
	if r.Communicators == nil {
		r.Communicators = []CommReport{}
	}
	return r
}

type commAcc struct {
	id              string
	nRanks, nNodes  int
	ranks           map[int]bool
	hosts           map[string]bool
	within, between map[string]bool
}

func orderedKinds(set map[string]bool) []string {
	var out []string
	for _, k := range kindOrder {
		if set[k] {
			out = append(out, k)
		}
	}
	return out
}

// reportNICs lists the devices of the report's network, as NCCL named
// them, the first seen first.
func reportNICs(sums []Summary, network string) []string {
	var out []string
	for i := range sums {
		var list []string
		socket := false
		switch network {
		case NetworkIB:
			list = sums[i].IBDevices
		case NetworkSocket:
			list, socket = sums[i].SocketInterfaces, true
		case NetworkOFI:
			list = sums[i].OFIDevices
		}
		for _, d := range list {
			if name := deviceName(d, socket); name != "" {
				out = addBounded(out, name, maxReportNICs)
			}
		}
	}
	return out
}

func procName(s *Summary) string {
	if s == nil {
		return ""
	}
	if s.Host == "" && s.PID == 0 {
		return "(no host:pid prefix)"
	}
	return s.Host + ":" + strconv.Itoa(s.PID)
}

func countProcs(sums []Summary, f func(*Summary) bool) int {
	n := 0
	for i := range sums {
		if f(&sums[i]) {
			n++
		}
	}
	return n
}

func firstProc(sums []Summary, f func(*Summary) bool) *Summary {
	for i := range sums {
		if f(&sums[i]) {
			return &sums[i]
		}
	}
	return nil
}

// restrictive are the settings that take a faster path away, and what
// each does: the misconfigurations a log shows even where no connection
// line says what they cost.
var restrictive = []struct {
	name string
	hit  func(v string) bool
	what string
}{
	{"NCCL_IB_DISABLE", truthy, "InfiniBand/RoCE is off: multi-node traffic goes over TCP sockets"},
	{"NCCL_NET", func(v string) bool { return strings.EqualFold(strings.Trim(v, "'\""), "Socket") }, "the network is forced to TCP sockets"},
	{"NCCL_P2P_DISABLE", truthy, "P2P between GPUs is off"},
	{"NCCL_P2P_LEVEL", func(v string) bool { return strings.EqualFold(v, "LOC") || v == "0" }, "P2P between GPUs is off"},
	{"NCCL_SHM_DISABLE", truthy, "shared memory between GPUs is off"},
	{"NCCL_NET_GDR_LEVEL", func(v string) bool { return strings.EqualFold(v, "LOC") || v == "0" }, "GPUDirect RDMA is off"},
	{"NCCL_NVLS_ENABLE", func(v string) bool { return v == "0" }, "NVLink SHARP is off"},
	{"NCCL_IBEXT_DISABLE", truthy, "HPC-X's IB plugin (IBext, SHARP) is off"},
	{"NCCL_ALGO", func(v string) bool { return v != "" }, "the algorithm is forced"},
	{"NCCL_PROTO", func(v string) bool { return v != "" }, "the protocol is forced"},
}

// misconfigurations are the settings and libraries that take a path away:
// one finding for the restrictive settings, one for a missing verbs
// library.
func misconfigurations(sums []Summary) []Finding {
	var out []Finding
	var ev []string
	procs := 0
	var example *Summary
	for i := range sums {
		hit := false
		for _, r := range restrictive {
			if v, ok := sums[i].EnvValue(r.name); ok && r.hit(v) {
				hit = true
				text := r.name + "=" + v + ": " + r.what
				if !containsString(ev, text) && len(ev) < maxEvidenceEntries*2 {
					ev = append(ev, text)
				}
			}
		}
		if hit {
			procs++
			if example == nil {
				example = &sums[i]
			}
		}
	}
	if procs > 0 {
		out = append(out, Finding{Kind: "env_override", Severity: SeverityInfo, Processes: procs, Example: procName(example),
			Evidence: strings.Join(ev, "; "), Fix: Fix("env_override")})
	}
	if n := countProcs(sums, func(s *Summary) bool { return s.IBVerbsMissing }); n > 0 {
		out = append(out, Finding{Kind: "ib_verbs_missing", Severity: SeverityInfo, Processes: n,
			Example:  procName(firstProc(sums, func(s *Summary) bool { return s.IBVerbsMissing })),
			Evidence: "Failed to open libibverbs.so[.1]: NCCL cannot use InfiniBand or RoCE", Fix: Fix("ib_verbs_missing")})
	}
	return out
}

func containsString(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// Fix is what to do about a finding of the kind, for a job's owner
// reading the log.
func Fix(kind string) string {
	switch kind {
	case FallbackP2PDisabled:
		return "P2P between GPUs of one node is off or unavailable (they talk through host memory or the network): unset NCCL_P2P_DISABLE and any NCCL_P2P_LEVEL=LOC, and check that the GPUs can reach each other (nvidia-smi topo -p2p r; in a VM or container, ACS and IOMMU settings)"
	case FallbackSHMDisabled:
		return "unset NCCL_SHM_DISABLE: without P2P and shared memory NCCL sends between local GPUs over the network"
	case FallbackSocketInsteadOfIB:
		return "the job talks over TCP sockets: check NCCL_NET and NCCL_IB_DISABLE, that the RDMA ports are active (ibstat), that the container sees /dev/infiniband and has libibverbs, or for EFA that aws-ofi-nccl is installed"
	case FallbackIBWithoutGDR:
		return "traffic is staged through host memory: load nvidia_peermem (or use DMA-BUF), check NCCL_NET_GDR_LEVEL and that each GPU shares a PCIe switch with its NIC (nvidia-smi topo -m)"
	case FallbackP2PCopy:
		return "P2P could not be enabled between these GPUs: check IOMMU/ACS settings and that the GPUs are in the same PCIe or NVLink domain"
	case FallbackNetWithinNode:
		return "ranks of one node talk over the network: give the job's containers the same host and IPC namespace (or run one container per node) so that NCCL sees them as one node, and unset NCCL_P2P_DISABLE/NCCL_SHM_DISABLE"
	case "env_override":
		return "remove the settings unless they work around a known problem: each takes a faster path away"
	case "ib_verbs_missing":
		return "on an InfiniBand or RoCE cluster, install rdma-core (libibverbs) in the job's image and expose /dev/infiniband; on a single node or a socket-only network this is expected"
	case "nccl_warnings":
		return "read NCCL's WARN lines: they name what failed (a network error, a CUDA failure, a plugin that did not load)"
	}
	return "read the NCCL_DEBUG=INFO log of the process"
}
