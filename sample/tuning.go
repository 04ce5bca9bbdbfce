package sample

// TuningKey is the tuning collector's key: its samples are *HostTuning.
var TuningKey = NewKey[HostTuning]("tuning")

// HostTuning is one reading of the host settings that decide how well a GPU
// node feeds its GPUs. It states facts; judging them is the audit's job.
// A setting the host does not expose is left at its zero value (strings
// empty, pointers nil, maps absent).
type HostTuning struct {
	// TransparentHugepage and TransparentHugepageDefrag are the active THP
	// modes (always, madvise, never; defrag also defer, defer+madvise).
	TransparentHugepage       string `json:"thp_enabled,omitempty"`
	TransparentHugepageDefrag string `json:"thp_defrag,omitempty"`

	Swappiness *int `json:"vm_swappiness,omitempty"`
	// SwapDevices counts active swap areas (rows of /proc/swaps); the
	// sizes add them up.
	SwapDevices   int    `json:"swap_devices"`
	SwapBytes     uint64 `json:"swap_bytes"`
	SwapUsedBytes uint64 `json:"swap_used_bytes"`

	// ScalingGovernors counts online CPUs per cpufreq governor; absent when
	// the host exposes no cpufreq (most VMs).
	ScalingGovernors map[string]int `json:"scaling_governors,omitempty"`

	// NUMABalancing is kernel.numa_balancing (0 off, 1 on, 2 memory
	// tiering); nil on kernels built without it.
	NUMABalancing *int `json:"numa_balancing,omitempty"`

	// EphemeralPortFirst and EphemeralPortLast are net.ipv4.ip_local_port_range.
	EphemeralPortFirst int `json:"ephemeral_port_first,omitempty"`
	EphemeralPortLast  int `json:"ephemeral_port_last,omitempty"`
	// EphemeralPortSockets counts TCP sockets (IPv4 and IPv6, any state,
	// TIME_WAIT included) whose local port lies in the range;
	// EphemeralPortsInUse counts the distinct ports they hold. Both are of the
	// network namespace the daemon reads /proc/net from.
	EphemeralPortSockets int `json:"ephemeral_port_sockets"`
	EphemeralPortsInUse  int `json:"ephemeral_ports_in_use"`

	// Processes says, for each support daemon the collector looks for
	// (irqbalance, nvidia-persistenced, ...), whether one is running.
	Processes map[string]bool `json:"processes,omitempty"`

	KernelRelease string `json:"kernel_release,omitempty"`
}

// EphemeralPortRangeSize is the number of ports in the ephemeral range, 0
// when the range is unknown.
func (t *HostTuning) EphemeralPortRangeSize() int {
	if t.EphemeralPortLast < t.EphemeralPortFirst || t.EphemeralPortFirst <= 0 {
		return 0
	}
	return t.EphemeralPortLast - t.EphemeralPortFirst + 1
}

// EphemeralPortUsage is the fraction of the ephemeral range held by at least
// one TCP socket, 0–1; 0 when the range is unknown.
func (t *HostTuning) EphemeralPortUsage() float64 {
	n := t.EphemeralPortRangeSize()
	if n == 0 {
		return 0
	}
	return float64(t.EphemeralPortsInUse) / float64(n)
}

// SizeBytes estimates the memory a reading holds, for the window's budget.
func (t *HostTuning) SizeBytes() int {
	n := 160 + len(t.TransparentHugepage) + len(t.TransparentHugepageDefrag) + len(t.KernelRelease)
	for g := range t.ScalingGovernors {
		n += 48 + len(g)
	}
	for p := range t.Processes {
		n += 48 + len(p)
	}
	return n
}
