package nccl

import "strings"

// netLine reads the lines about networks, NICs and GPUDirect RDMA, in the
// wording of every NCCL from 2.3 to 2.28 and of its network plugins
// (HPC-X's IBext, aws-ofi-nccl):
//
//	Using network IB | Using internal Network Socket (<= 2.4) | Assigned NET plugin IB to comm (2.27+)
//	NET/Plugin: Loaded net plugin FastSocket (v4)
//	NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/RoCE [RO]; OOB eth0:10.0.0.1<0>
//	NET/IB : Using [0]={[0] mlx5_2:1/RoCE, [1] mlx5_3:1/RoCE} [1]={...} [RO]; OOB ...   (merged NICs)
//	NET/IB: [0] mlx5_1:1/IB                                    (2.3)
//	NET/IB : No device found. | Net/IB: call to devices() returned 0 devices. | Failed to open libibverbs.so[.1]
//	NET/Socket : Using [0]eth0:10.0.0.1<0> | NET : Using interface eth0:10.0.0.1<0> (2.3)
//	Bootstrap : Using [0]eth0:10.0.0.1<0>
//	GPU Direct RDMA Disabled for GPU 42000 / HCA 0 (distance 6 > 4) | NET/IB : GPU Direct RDMA Disabled for HCA 0 'mlx5_0'
//	NET/OFI Selected Provider is efa (found 16 nics) | NET/OFI NIC group 0 device #0 0000:56:00.0
//	CUDA Dev 0[0], IB NIC distance :  PHB                       (2.4)
func (p *procState) netLine(m string) {
	switch {
	case strings.HasPrefix(m, "Using network "):
		p.network = netName(strings.TrimPrefix(m, "Using network "))
	case strings.HasPrefix(m, "Using internal Network "):
		p.network = netName(strings.TrimPrefix(m, "Using internal Network "))
	case strings.HasPrefix(m, "Assigned NET plugin ") && strings.HasSuffix(m, " to comm"):
		p.assignedNet = netName(strings.TrimSuffix(strings.TrimPrefix(m, "Assigned NET plugin "), " to comm"))
	case strings.HasPrefix(m, "NET/Plugin: Loaded net plugin "), strings.HasPrefix(m, "NET/Plugin : Loaded net plugin "):
		// "Loaded net plugin FastSocket (v4)": NCCL tries a plugin that
		// loads before its own networks.
		_, name, _ := strings.Cut(m, "Loaded net plugin ")
		if i := strings.LastIndex(name, " ("); i > 0 {
			name = name[:i]
		}
		p.loadedNet = netName(name)
	case strings.HasPrefix(m, "NET/IB : No device found"), strings.HasPrefix(m, "Net/IB: call to devices() returned 0 devices"):
		p.ibNoDevice = true
	case strings.Contains(m, "Failed to open libibverbs.so"):
		// No verbs library, so no InfiniBand or RoCE: NCCL goes on to
		// the next network (sockets).
		p.ibNoDevice, p.ibVerbsMissing = true, true
	case strings.HasPrefix(m, "NET/IB : Using "):
		list, oob, _ := strings.Cut(strings.TrimPrefix(m, "NET/IB : Using "), ";")
		for _, d := range netDeviceList(list) {
			p.ibDevices = addBounded(p.ibDevices, d, MaxNetDevices)
		}
		p.noteAddr(strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(oob), "OOB")), false)
	case strings.HasPrefix(m, "NET/IB: [") || strings.HasPrefix(m, "NET/IB : ["):
		_, list, _ := strings.Cut(m, ":")
		for _, d := range netDeviceList(list) {
			p.ibDevices = addBounded(p.ibDevices, d, MaxNetDevices)
		}
	case strings.HasPrefix(m, "NET/Socket : Using "):
		for i, d := range netDeviceList(strings.TrimPrefix(m, "NET/Socket : Using ")) {
			p.socketIfs = addBounded(p.socketIfs, socketInterface(d), MaxNetDevices)
			if i == 0 {
				p.noteAddr(d, false)
			}
		}
	case strings.HasPrefix(m, "NET : Using interface "):
		d := strings.TrimSpace(strings.TrimPrefix(m, "NET : Using interface "))
		p.socketIfs = addBounded(p.socketIfs, truncate(socketInterface(d), maxNameBytes), MaxNetDevices)
		p.noteAddr(d, false)
	case strings.HasPrefix(m, "Bootstrap : Using "), strings.HasPrefix(m, "Bootstrap: Using "):
		_, rest, _ := strings.Cut(m, "Using ")
		if ds := netDeviceList(rest); len(ds) > 0 {
			p.noteAddr(ds[0], true)
		}
	case strings.HasPrefix(m, "Failed to initialize NET plugin "):
		p.pluginFailures = addBounded(p.pluginFailures,
			truncate(RedactText(strings.TrimPrefix(m, "Failed to initialize NET plugin ")), maxNameBytes), MaxNetDevices)
	case strings.Contains(m, "GPU Direct RDMA Disabled for"):
		// Sockets never do GPUDirect RDMA; NCCL says so for each
		// interface, which is no finding.
		if !strings.HasPrefix(m, "NET/Socket") {
			p.gdrNotes = addBounded(p.gdrNotes, truncate(RedactText(m), MaxWarningBytes), MaxGDRNotes)
		}
	case strings.Contains(m, "GPU Direct RDMA Enabled for"):
		p.gdrEnabled = true
	case strings.HasPrefix(m, "NET/OFI "):
		p.ofiLine(strings.TrimPrefix(m, "NET/OFI "))
	case strings.HasPrefix(m, "CUDA Dev ") && strings.Contains(m, " NIC distance"):
		// "CUDA Dev 0[0], AWS Libfabric NIC distance :  SYS"
		if _, rest, ok := strings.Cut(m, ", "); ok {
			name, _, _ := strings.Cut(rest, " NIC distance")
			p.distanceNet = netName(name)
		}
	}
}

// ofiLine reads aws-ofi-nccl's own lines ("NET/OFI " cut off).
func (p *procState) ofiLine(m string) {
	p.ofi = true
	switch {
	case strings.HasPrefix(strings.ToLower(m), "selected provider is "):
		prov := m[len("selected provider is "):]
		if i := strings.IndexAny(prov, " ,("); i >= 0 {
			prov = prov[:i]
		}
		p.ofiProvider = truncate(prov, maxNameBytes)
	case strings.HasPrefix(m, "NIC group ") && strings.Contains(m, " device #"):
		f := strings.Fields(m)
		if dev := f[len(f)-1]; strings.Count(dev, ":") == 2 {
			p.ofiDevices = addBounded(p.ofiDevices, truncate(dev, maxNameBytes), MaxNetDevices)
		}
	case strings.Contains(m, "disabling GDR"):
		p.ofiNoGDR = true
	}
}

// netName bounds a network name as NCCL printed it.
func netName(s string) string { return truncate(strings.TrimSpace(s), maxNameBytes) }

// noteAddr keeps the address of an "eth0:10.0.0.1<0>" entry as the host's,
// the bootstrap's first: it tells two hosts of one name apart. Loopback
// and link-local addresses are every host's, and say nothing.
func (p *procState) noteAddr(entry string, bootstrap bool) {
	if p.hostAddrBootstrap || p.hostAddr != "" && !bootstrap {
		return
	}
	_, addr, ok := strings.Cut(socketInterface(entry), ":")
	addr = strings.TrimSpace(addr)
	if !ok || addr == "" || strings.HasPrefix(addr, "127.") || addr == "::1" || strings.HasPrefix(strings.ToLower(addr), "fe80:") {
		return
	}
	p.hostAddr = truncate(addr, maxNameBytes)
	p.hostAddrBootstrap = bootstrap
}

// netDeviceList reads the devices of "[0]mlx5_0:1/IB [1]mlx5_1:1/RoCE [RO]",
// "[0]={[0] mlx5_2:1/RoCE, [1] mlx5_3:1/RoCE} [1]={...}" (NICs NCCL merged
// into one) and "[0]eth0:192.0.2.2<0> [1]eth1:...": each "name:port" or
// "name:address" entry, in order; "[N]" indexes, braces and flags go.
func netDeviceList(s string) []string {
	s, _, _ = strings.Cut(s, ";")
	var out []string
	for _, f := range strings.FieldsFunc(s, func(r rune) bool {
		return r == ' ' || r == '\t' || r == '{' || r == '}' || r == ',' || r == '='
	}) {
		// Drop the "[N]" indexes glued before a name.
		for strings.HasPrefix(f, "[") {
			end := strings.IndexByte(f, ']')
			if end < 0 {
				break
			}
			if _, ok := atoiPositive([]byte(f[1:end])); !ok {
				break
			}
			f = f[end+1:]
		}
		if f == "" || f[0] == '[' || !strings.Contains(f, ":") {
			continue
		}
		out = append(out, truncate(f, maxNameBytes))
		if len(out) >= MaxNetDevices {
			break
		}
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

// deviceName is a NIC's name without the port's link layer or address:
// "mlx5_0:1/RoCE" → "mlx5_0:1", "eth0:10.0.0.1" → "eth0".
func deviceName(d string, socket bool) string {
	if socket {
		name, _, _ := strings.Cut(d, ":")
		return name
	}
	name, _, _ := strings.Cut(d, "/")
	return name
}
