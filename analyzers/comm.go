package analyzers

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/gpudiag/gpudiag/sample"
)

// Checks of the communication path, from both of NCCL's sides: what its own
// log says it did (nccl collector) and how the jobs' processes are set up
// (ncclproc and netdev collectors).

// ncclOverrides are the settings that, set by hand, make NCCL take a slower
// path than the hardware offers; the audit names them.
var ncclOverrides = map[string]string{
	"NCCL_P2P_DISABLE":   "1",
	"NCCL_SHM_DISABLE":   "1",
	"NCCL_IB_DISABLE":    "1",
	"NCCL_NET":           "Socket",
	"NCCL_NET_GDR_LEVEL": "",
	"NCCL_P2P_LEVEL":     "",
	"NCCL_ALGO":          "",
	"NCCL_PROTO":         "",
}

// auditNCCL checks the communication path from both of NCCL's sides: what
// its log says it did (log, may be nil) and how its processes are set up
// (procs and the network interfaces, may be nil). ib is the newest reading
// of the node's RDMA ports, nil when not read.
func auditNCCL(a AuditInput) []Finding {
	log, procs, netdev, ib := a.NCCL, a.NCCLProcesses, a.NetDevices, a.LastIB
	if log == nil && procs == nil {
		return nil
	}
	var out []Finding
	if log != nil {
		out = append(out, auditNCCLFallbacks(log, ib)...)
	}
	out = append(out, auditNCCLOverrides(log, procs)...)
	if procs != nil {
		out = append(out, auditNCCLLibraries(procs)...)
	}
	out = append(out, auditNCCLSocketInterfaces(log, procs, netdev)...)
	return out
}

// causeGroup gathers the GPUs and processes one cause (a fallback kind, a
// set of overrides) applies to: one finding per node, listing them.
type causeGroup struct {
	gpus []int
	who  []string
	// first is the first process's own words for it.
	first string
}

func (c *causeGroup) add(gpus []int, who string) {
	for _, g := range gpus {
		if !slices.Contains(c.gpus, g) {
			c.gpus = append(c.gpus, g)
		}
	}
	if !slices.Contains(c.who, who) {
		c.who = append(c.who, who)
	}
}

// where names the GPUs a finding is about: GPU set for one, GPUs listed.
func (c *causeGroup) where(f *Finding) string {
	slices.Sort(c.gpus)
	f.GPUs = c.gpus
	switch len(c.gpus) {
	case 0:
		return ""
	case 1:
		g := c.gpus[0]
		f.GPU = &g
		return fmt.Sprintf(", on GPU %d", g)
	}
	return fmt.Sprintf(", on GPUs %s", intList(c.gpus))
}

// auditNCCLFallbacks reports each fallback NCCL's log shows, once per kind
// for the node, naming the processes and GPUs, the path taken and the path
// expected. It leaves out what the evidence does not support: sockets
// "instead of InfiniBand" on a node that has no RDMA device (the infiniband
// collector read no port) where nothing disabled IB, and ranks of one node
// talking over the network when their environment disabled both P2P and
// shared memory (those two fallbacks are the cause, reported on their own).
func auditNCCLFallbacks(s *sample.NCCL, ib *sample.InfiniBand) []Finding {
	groups := map[string]*causeGroup{}
	var kinds []string
	taken := map[string]string{}
	for _, g := range s.GPUs {
		p := s.Process(g)
		if !p.Current {
			continue
		}
		for _, f := range p.Fallbacks {
			if !fallbackSupported(f.Kind, p, ib) {
				continue
			}
			c := groups[f.Kind]
			if c == nil {
				c = &causeGroup{first: f.Evidence}
				groups[f.Kind] = c
				kinds = append(kinds, f.Kind)
				taken[f.Kind] = f.Taken
				if taken[f.Kind] == "" {
					taken[f.Kind] = "a slower path"
				}
				taken[f.Kind] += " where " + f.Expected + " was expected"
			}
			c.add([]int{g.GPU}, fmt.Sprintf("pid %d on %s", p.PID, p.Host))
		}
	}
	var out []Finding
	for _, k := range kinds {
		c := groups[k]
		f := Finding{Check: "nccl_fallback", Severity: SeverityWarning, Kind: k, Fix: ncclFix(k, s)}
		f.Summary = fmt.Sprintf("NCCL (%s%s) uses %s: %s", whoList(c.who), c.where(&f), taken[k], c.first)
		out = append(out, f)
	}
	return out
}

// fallbackSupported says whether a fallback the log reports for process p
// is one this node could have avoided.
func fallbackSupported(kind string, p *sample.NCCLProcess, ib *sample.InfiniBand) bool {
	set := func(name, want string) bool {
		v, ok := envValue(p.Env, name)
		return ok && strings.EqualFold(v, want)
	}
	has := func(k string) bool {
		return slices.ContainsFunc(p.Fallbacks, func(f sample.NCCLFallback) bool { return f.Kind == k })
	}
	switch kind {
	case "socket_instead_of_ib":
		return ib == nil || len(ib.Ports) > 0 || set("NCCL_IB_DISABLE", "1") || set("NCCL_NET", "Socket")
	case "net_within_node":
		return !(has("p2p_disabled") && has("shm_disabled"))
	}
	return true
}

// ncclSetting is what one process sets, and which process (as NCCL's log
// or the process scan names it).
type ncclSetting struct {
	who  string
	gpus []int // empty when unknown
	env  []sample.NCCLEnv
	// hostNetwork: the process is known to use the host's network
	// namespace, so interface names in env name the node's interfaces.
	hostNetwork bool
	// singleNode: the job is known to run on this node alone (its
	// communicators span one node, or WORLD_SIZE equals
	// LOCAL_WORLD_SIZE), so sockets carry its bootstrap only.
	singleNode bool
}

// ncclSettings lists the environments of the current processes of both
// sources: NCCL's log (the settings NCCL reports it took from the
// environment, its configuration files included) and the processes' own
// exec-time environment. A process both name is listed once: the log names
// it by host name and PID in its own namespaces, which the scan also
// knows; the log's settings and GPUs win. Forked workers repeat their
// parent and are left out.
func ncclSettings(log *sample.NCCL, procs *sample.NCCLHostProcesses) []ncclSetting {
	type logRef struct {
		host string
		pid  int
	}
	var out []ncclSetting
	fromLog := map[logRef]int{}
	if log != nil {
		for _, g := range log.GPUs {
			p := log.Process(g)
			if !p.Current {
				continue
			}
			ref := logRef{p.Host, p.PID}
			if i, ok := fromLog[ref]; ok {
				out[i].gpus = append(out[i].gpus, g.GPU)
				continue
			}
			single := len(p.Comms) > 0
			for _, c := range p.Comms {
				single = single && c.NNodes == 1
			}
			fromLog[ref] = len(out)
			out = append(out, ncclSetting{who: fmt.Sprintf("pid %d on %s", p.PID, p.Host), gpus: []int{g.GPU},
				env: append([]sample.NCCLEnv(nil), p.Env...), singleNode: single})
		}
	}
	if procs == nil {
		return out
	}
	for i := range procs.Processes {
		p := &procs.Processes[i]
		if p.ForkOf != 0 {
			continue
		}
		hostNet := p.HostNetwork != nil && *p.HostNetwork
		world, _ := p.EnvValue("WORLD_SIZE")
		local, _ := p.EnvValue("LOCAL_WORLD_SIZE")
		single := world != "" && world == local
		if j, ok := fromLog[logRef{sample.LogHostname(p.Hostname), p.NSPID}]; ok && p.Hostname != "" {
			st := &out[j]
			if p.NSPID != p.PID {
				st.who = fmt.Sprintf("pid %d (%s)", p.PID, st.who)
			}
			for _, e := range p.Env {
				if _, set := envValue(st.env, e.Name); !set {
					st.env = append(st.env, e)
				}
			}
			st.hostNetwork = hostNet
			st.singleNode = st.singleNode || single
			continue
		}
		out = append(out, ncclSetting{who: fmt.Sprintf("pid %d", p.PID), gpus: p.GPUs, env: p.Env, hostNetwork: hostNet, singleNode: single})
	}
	return out
}

// ncclGroup gathers what several processes share, in first-seen order.
type ncclGroup struct {
	items []string
	set   map[string]bool
	who   []string
}

func (g *ncclGroup) add(items []string, who string) {
	if g.set == nil {
		g.set = map[string]bool{}
	}
	for _, it := range items {
		if !g.set[it] {
			g.set[it] = true
			g.items = append(g.items, it)
		}
	}
	if !slices.Contains(g.who, who) {
		g.who = append(g.who, who)
	}
}

// whoList names at most four processes.
func whoList(who []string) string {
	if len(who) <= 4 {
		return strings.Join(who, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(who[:4], ", "), len(who)-4)
}

// auditNCCLOverrides reports the settings that restrict NCCL's path, from
// NCCL's log and from the processes' environment, once per node for each
// set of settings, naming the processes and GPUs that make them: what a
// process of unknown GPU sets is reported without GPU unless some GPU's
// finding already names it.
func auditNCCLOverrides(log *sample.NCCL, procs *sample.NCCLHostProcesses) []Finding {
	type unplaced struct {
		who string
		set []string
	}
	groups := map[string]*causeGroup{}
	var keys []string
	var node []unplaced
	reported := map[string]bool{}
	for _, st := range ncclSettings(log, procs) {
		var set []string
		for _, e := range st.env {
			want, ok := ncclOverrides[e.Name]
			if ok && (want == "" || strings.EqualFold(e.Value, want)) {
				set = append(set, e.Name+"="+e.Value)
			}
		}
		if len(set) == 0 {
			continue
		}
		slices.Sort(set)
		if len(st.gpus) == 0 {
			node = append(node, unplaced{st.who, set})
			continue
		}
		k := strings.Join(set, ", ")
		if groups[k] == nil {
			groups[k] = &causeGroup{}
			keys = append(keys, k)
		}
		groups[k].add(st.gpus, st.who)
		for _, it := range set {
			reported[it] = true
		}
	}
	finding := func(items string, c *causeGroup) Finding {
		f := Finding{Check: "nccl_env_override", Severity: SeverityInfo,
			Fix: "remove the override unless it works around a known problem; NCCL's defaults pick the fastest path the topology offers"}
		f.Summary = fmt.Sprintf("NCCL settings forced by environment in %s%s: %s", whoList(c.who), c.where(&f), items)
		return f
	}
	var out []Finding
	slices.SortFunc(keys, func(a, b string) int {
		return cmp.Or(cmp.Compare(slices.Min(groups[a].gpus), slices.Min(groups[b].gpus)), strings.Compare(a, b))
	})
	for _, k := range keys {
		out = append(out, finding(k, groups[k]))
	}
	var rest causeGroup
	var left []string
	for _, u := range node {
		var mine []string
		for _, it := range u.set {
			if !reported[it] {
				mine = append(mine, it)
				if !slices.Contains(left, it) {
					left = append(left, it)
				}
			}
		}
		if len(mine) > 0 {
			rest.add(nil, u.who)
		}
	}
	if len(left) > 0 {
		slices.Sort(left)
		out = append(out, finding(strings.Join(left, ", "), &rest))
	}
	return out
}

// auditNCCLLibraries reports a job whose processes map different libnccl
// versions. A job is a Slurm job, else a Kubernetes pod, else every NCCL
// process of the node outside both. When some version is unknown and the
// files differ, the versions may still match: that is said as info.
func auditNCCLLibraries(procs *sample.NCCLHostProcesses) []Finding {
	type jobLibraries struct {
		versions map[string][]int // known version → PIDs
		paths    map[string]bool
		unknown  bool
	}
	jobs := map[string]*jobLibraries{}
	for i := range procs.Processes {
		p := &procs.Processes[i]
		if p.ForkOf != 0 || !p.MapsNCCL() {
			continue
		}
		j := jobs[p.Job()]
		if j == nil {
			j = &jobLibraries{versions: map[string][]int{}, paths: map[string]bool{}}
			jobs[p.Job()] = j
		}
		for _, l := range p.Libraries {
			j.paths[l.Path] = true
			if l.Version == sample.NCCLLibraryVersionUnknown {
				j.unknown = true
			} else if !slices.Contains(j.versions[l.Version], p.PID) {
				j.versions[l.Version] = append(j.versions[l.Version], p.PID)
			}
		}
	}
	var out []Finding
	for _, job := range slices.Sorted(maps.Keys(jobs)) {
		j := jobs[job]
		name := job
		if name == "" {
			name = "this node's NCCL processes outside any Slurm job or pod"
		}
		switch {
		case len(j.versions) > 1:
			var parts []string
			for _, v := range slices.Sorted(maps.Keys(j.versions)) {
				var pids []string
				for _, pid := range j.versions[v] {
					pids = append(pids, "pid "+strconv.Itoa(pid))
				}
				parts = append(parts, fmt.Sprintf("%s (%s)", v, whoList(pids)))
			}
			out = append(out, Finding{Check: "nccl_library_mismatch", Severity: SeverityWarning,
				Summary: fmt.Sprintf("%s map different NCCL versions: %s; ranks on different NCCL builds can hang in collectives or fall back to slower paths",
					name, strings.Join(parts, ", ")),
				Fix: "give every rank the same NCCL: the same nvidia-nccl-cu* package in every environment, or PyTorch built against the system NCCL (check LD_LIBRARY_PATH and LD_PRELOAD)"})
		case j.unknown && len(j.paths) > 1:
			out = append(out, Finding{Check: "nccl_library_mismatch", Severity: SeverityInfo,
				Summary: fmt.Sprintf("%s map different libnccl files (%s), not all of known version: they may be different NCCL builds",
					name, strings.Join(slices.Sorted(maps.Keys(j.paths)), ", ")),
				Fix: "check that every rank loads the same NCCL (NCCL_DEBUG=VERSION prints it); install it once and point every environment at it"})
		}
	}
	return out
}

// SocketInterfaceMinBytesPerSecond is the line rate below which an
// interface NCCL_SOCKET_IFNAME names is called slow: 25 Gb/s, the slowest
// data-centre NIC for GPU nodes; management ports run at 1–10 Gb/s.
const SocketInterfaceMinBytesPerSecond = 25e9 / 8

// virtualInterfacePrefixes name interfaces that are software: container
// bridges and veth pairs, libvirt and CNI bridges, overlay tunnels.
var virtualInterfacePrefixes = []string{"docker", "veth", "virbr", "br-", "cni", "flannel", "cali", "vxlan"}

// auditNCCLSocketInterfaces reports an NCCL_SOCKET_IFNAME that points NCCL
// at loopback, a virtual interface, or a slow one, in a job that may span
// nodes (a single-node job's sockets carry only its bootstrap). Interface
// names in a process's environment are checked against the node's
// interfaces only for processes in the host's network namespace; elsewhere
// only the name speaks.
func auditNCCLSocketInterfaces(log *sample.NCCL, procs *sample.NCCLHostProcesses, netdev *sample.NetDevices) []Finding {
	type key struct{ value, reasons string }
	groups := map[key]*ncclGroup{}
	var order []key
	for _, st := range ncclSettings(log, procs) {
		value, ok := envValue(st.env, "NCCL_SOCKET_IFNAME")
		if !ok || st.singleNode {
			continue
		}
		var ifs *sample.NetDevices
		if st.hostNetwork {
			ifs = netdev
		}
		reasons := socketInterfaceProblems(value, ifs)
		if len(reasons) == 0 {
			continue
		}
		k := key{value, strings.Join(reasons, "; ")}
		if groups[k] == nil {
			groups[k] = &ncclGroup{}
			order = append(order, k)
		}
		groups[k].add(nil, st.who)
	}
	var out []Finding
	for _, k := range order {
		g := groups[k]
		fix := "set NCCL_SOCKET_IFNAME to the node's fast physical interface (the one on the RDMA or data network) or unset it and let NCCL choose; in containers, use the host's network"
		if best := fastestInterface(netdev); best != nil {
			fix = fmt.Sprintf("set NCCL_SOCKET_IFNAME=%s (%.0f Gb/s, the fastest physical interface with a link) or unset it and let NCCL choose; in containers, use the host's network",
				best.Name, best.SpeedBytesPerSecond*8/1e9)
		}
		out = append(out, Finding{Check: "nccl_socket_ifname_virtual", Severity: SeverityWarning, Device: k.value,
			Summary: fmt.Sprintf("NCCL_SOCKET_IFNAME=%s in %s: %s. NCCL's bootstrap, and all its inter-node traffic when it uses sockets, go through it",
				k.value, whoList(g.who), k.reasons),
			Fix: fix})
	}
	return out
}

// socketInterfaceProblems reads an NCCL_SOCKET_IFNAME as NCCL does (a
// comma-separated list of name prefixes, exact names after a leading '=',
// names to avoid after a leading '^') and says what is wrong with the
// interfaces it selects: each as "<name> is …". ifs, when given, are the
// interfaces the process sees.
func socketInterfaceProblems(value string, ifs *sample.NetDevices) []string {
	value = strings.TrimSpace(value)
	if value == "" || strings.HasPrefix(value, "^") {
		return nil // exclusions name no interface to use
	}
	exact := strings.HasPrefix(value, "=")
	value = strings.TrimPrefix(value, "=")
	var out []string
	note := func(s string) {
		if !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	byName := func(name string) bool {
		switch {
		case name == "lo":
			note("lo is the loopback interface: other nodes cannot reach the ranks through it")
		case slices.ContainsFunc(virtualInterfacePrefixes, func(p string) bool { return strings.HasPrefix(name, p) }):
			note(name + " is a virtual interface (a container or VM bridge, veth or tunnel)")
		default:
			return false
		}
		return true
	}
	for _, entry := range strings.Split(value, ",") {
		entry = strings.TrimSpace(entry)
		if entry == "" || byName(entry) || ifs == nil {
			continue
		}
		for _, f := range ifs.Interfaces {
			if f.Name != entry && (exact || !strings.HasPrefix(f.Name, entry)) {
				continue
			}
			// A bond or VLAN has no device of its own but reports the
			// rate of the NICs under it; a veth claims 10 Gb/s.
			switch {
			case byName(f.Name):
			case f.SpeedBytesPerSecond > 0 && f.SpeedBytesPerSecond < SocketInterfaceMinBytesPerSecond:
				note(fmt.Sprintf("%s runs at %.0f Gb/s, below %.0f Gb/s", f.Name, f.SpeedBytesPerSecond*8/1e9, SocketInterfaceMinBytesPerSecond*8/1e9))
			case !f.Physical && f.SpeedBytesPerSecond == 0:
				note(f.Name + " is a virtual interface (no device behind it, no line rate)")
			}
		}
	}
	return out
}

// fastestInterface is the physical interface with a link and the highest
// line rate, nil when none qualifies.
func fastestInterface(ifs *sample.NetDevices) *sample.NetInterface {
	if ifs == nil {
		return nil
	}
	var best *sample.NetInterface
	for i := range ifs.Interfaces {
		f := &ifs.Interfaces[i]
		if f.Physical && f.Carrier && f.SpeedBytesPerSecond >= SocketInterfaceMinBytesPerSecond &&
			(best == nil || f.SpeedBytesPerSecond > best.SpeedBytesPerSecond) {
			best = f
		}
	}
	return best
}

// logEnvValue is a setting any current process of NCCL's log reports.
func logEnvValue(s *sample.NCCL, name string) (string, bool) {
	if s == nil {
		return "", false
	}
	for _, g := range s.GPUs {
		if p := s.Process(g); p.Current {
			if v, ok := envValue(p.Env, name); ok {
				return v, true
			}
		}
	}
	return "", false
}

func envValue(env []sample.NCCLEnv, name string) (string, bool) {
	for _, e := range env {
		if e.Name == name {
			return e.Value, true
		}
	}
	return "", false
}

func ncclFix(kind string, s *sample.NCCL) string {
	if kind == "net_within_node" {
		if v, ok := logEnvValue(s, "NCCL_HOSTID"); ok {
			return "NCCL_HOSTID=" + v + " makes NCCL count ranks of this node as other hosts, which it reaches over the network: unset it"
		}
	}
	switch kind {
	case "p2p_disabled":
		return "GPU-to-GPU traffic goes through host shared memory: unset NCCL_P2P_DISABLE (and any restrictive NCCL_P2P_LEVEL) and check that the GPUs can reach each other (nvidia-smi topo -p2p r)"
	case "shm_disabled":
		return "unset NCCL_SHM_DISABLE: without P2P and shared memory NCCL falls back to sockets"
	case "socket_instead_of_ib":
		return "NCCL uses TCP sockets: check NCCL_NET/NCCL_IB_DISABLE, that the RDMA ports are active (ibstat), and that the container sees /dev/infiniband"
	case "ib_without_gdr":
		return "load nvidia_peermem (or use DMA-BUF), check NCCL_NET_GDR_LEVEL and that GPU and NIC share a PCIe switch"
	case "p2p_copy_fallback":
		return "P2P could not be enabled between these GPUs: check IOMMU/ACS settings and that the GPUs are in the same PCIe or NVLink domain"
	case "net_within_node":
		return "ranks on one node talk over the network: give the job's containers the same host network/IPC namespace or hostname so NCCL sees them as one node"
	}
	return "read the NCCL_DEBUG=INFO log of the process"
}

// socketFix is the fix for collectives over TCP sockets, from what is
// known: the NCCL settings the GPU's processes make that force sockets
// (only those set), whether the node has an RDMA NIC at all, and
// NCCL_HOSTID, which makes ranks of one node count as other hosts.
func socketFix(g GPUWindow, n NodeWindow) string {
	var set []string
	for _, name := range []string{"NCCL_NET", "NCCL_IB_DISABLE", "NCCL_P2P_DISABLE", "NCCL_SHM_DISABLE"} {
		want := ncclOverrides[name]
		if v, ok := envValue(g.NCCLEnv, name); ok && (want == "" || strings.EqualFold(v, want)) {
			set = append(set, name+"="+v)
		}
	}
	var parts []string
	if len(set) > 0 {
		parts = append(parts, "the job's environment forces NCCL onto sockets: unset "+strings.Join(set, ", "))
	}
	if v, ok := envValue(g.NCCLEnv, "NCCL_HOSTID"); ok {
		parts = append(parts, "NCCL_HOSTID="+v+" makes ranks of this node count as other hosts, which NCCL reaches over the network: unset it")
	}
	switch {
	case n.noRDMADevice():
		parts = append(parts, "inter-node collectives over TCP: no RDMA NIC on this node (no InfiniBand or RoCE device); a job that spans nodes needs one for RDMA, and a job within the node needs no network at all")
	case len(n.RDMAPorts) > 0 && !slices.ContainsFunc(n.RDMAPorts, func(p RDMAPort) bool { return p.Active }):
		parts = append(parts, "no InfiniBand/RoCE port of this node is active: check ibstat and the cabling")
	case len(n.RDMAPorts) > 0:
		parts = append(parts, "the node has active RDMA ports that NCCL does not use: check that the job's container sees /dev/infiniband and that NCCL_IB_HCA, if set, names them")
	}
	if v, ok := envValue(g.NCCLEnv, "NCCL_SOCKET_IFNAME"); ok {
		parts = append(parts, "check that NCCL_SOCKET_IFNAME="+v+" selects the fastest interface")
	}
	if len(parts) == 0 {
		return "NCCL runs its collectives over sockets: its NCCL_DEBUG=INFO log says why (the NET/IB lines)"
	}
	return strings.Join(parts, "; ")
}
