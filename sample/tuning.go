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
	// SwapZramDevices counts the swap areas on a zram device (/dev/zramN):
	// compressed RAM, not a disk, and not in fstab.
	SwapZramDevices int `json:"swap_zram_devices,omitempty"`

	// ScalingGovernors counts online CPUs per cpufreq governor; absent when
	// the host exposes no cpufreq (most VMs).
	ScalingGovernors map[string]int `json:"scaling_governors,omitempty"`
	// ScalingGovernorCPUs lists the online CPUs on each governor, in
	// order, to tell the CPUs local to a GPU from the others; absent in
	// recordings made before it was read.
	ScalingGovernorCPUs map[string][]int `json:"scaling_governor_cpus,omitempty"`
	// ScalingDriver is the cpufreq driver (cpufreq/scaling_driver of the
	// first CPU): intel_pstate and amd-pstate-epp in active mode give
	// "powersave" a meaning of their own (a dynamic policy), unlike
	// acpi-cpufreq, intel_cpufreq (intel_pstate passive) and amd-pstate
	// (passive or guided), where it is the generic governor.
	ScalingDriver string `json:"scaling_driver,omitempty"`

	// NUMABalancing is kernel.numa_balancing (0 off, 1 on, 2 memory
	// tiering); nil on kernels built without it.
	NUMABalancing *int `json:"numa_balancing,omitempty"`

	// EphemeralPortFirst and EphemeralPortLast are net.ipv4.ip_local_port_range.
	EphemeralPortFirst int `json:"ephemeral_port_first,omitempty"`
	EphemeralPortLast  int `json:"ephemeral_port_last,omitempty"`
	// EphemeralPortSockets counts TCP sockets (IPv4 and IPv6, any state,
	// TIME_WAIT included) whose local port lies in the range;
	// EphemeralPortsInUse counts the distinct ports they hold. Both are of the
	// network namespace the daemon reads /proc/net from, and of the last
	// walk of its TCP tables: the tuning collector walks them when
	// /proc/net/sockstat counts a tenth of the range in TCP sockets, else
	// at least every 5 minutes.
	EphemeralPortSockets int `json:"ephemeral_port_sockets"`
	EphemeralPortsInUse  int `json:"ephemeral_ports_in_use"`

	// Processes says, for each support daemon the collector looks for
	// (irqbalance, nvidia-persistenced, ...), whether one is running.
	Processes map[string]bool `json:"processes,omitempty"`

	KernelRelease string `json:"kernel_release,omitempty"`

	// GPUPCIDrivers counts the NVIDIA GPUs on the PCI bus by the kernel
	// driver bound to each (nvidia, nouveau, vfio-pci; "none" when no
	// driver took it), whatever the GPU backend sees.
	GPUPCIDrivers map[string]int `json:"gpu_pci_drivers,omitempty"`

	// DeviceIRQs are the MSI vectors of the GPUs and RDMA NICs and where
	// they are served, one entry per device with a known NUMA node and at
	// least one vector.
	DeviceIRQs []DeviceIRQs `json:"device_irqs,omitempty"`

	// DeviceLinks are the PCIe links of the NICs, RDMA devices and NVMe
	// controllers, one entry per PCI function whose link sysfs reports.
	DeviceLinks []DeviceLink `json:"device_links,omitempty"`

	// CPUIdleStates are the CPUs' idle states (cpuidle), shallowest
	// first; absent without cpuidle (most VMs).
	CPUIdleStates []CPUIdleState `json:"cpu_idle_states,omitempty"`
	// Cmdline holds the boot parameters that shape CPU isolation and idle
	// states, as given on /proc/cmdline ("" not given).
	Cmdline KernelCmdline `json:"cmdline,omitzero"`
	// IsolatedCPUs and NohzFullCPUs count the members of
	// /sys/devices/system/cpu/{isolated,nohz_full} (nil when the kernel
	// has no such file); IsolatedCPUList is the former as the kernel
	// prints it.
	IsolatedCPUs    *int   `json:"isolated_cpus,omitempty"`
	IsolatedCPUList string `json:"isolated_cpu_list,omitempty"`
	NohzFullCPUs    *int   `json:"nohz_full_cpus,omitempty"`

	// Hugepages are the explicit hugepage pools per page size.
	Hugepages []HugepagePool `json:"hugepages,omitempty"`
	// DirtyRatio, DirtyBackgroundRatio (percent of reclaimable memory)
	// and DirtyBytes, DirtyBackgroundBytes (0 unless set, and then they
	// override the ratios) are the vm.dirty* sysctls; nil when absent.
	DirtyRatio           *int `json:"vm_dirty_ratio,omitempty"`
	DirtyBackgroundRatio *int `json:"vm_dirty_background_ratio,omitempty"`
	DirtyBytes           *int `json:"vm_dirty_bytes,omitempty"`
	DirtyBackgroundBytes *int `json:"vm_dirty_background_bytes,omitempty"`
}

// DeviceIRQs is one device's MSI vectors against its NUMA node.
type DeviceIRQs struct {
	// Device is the RDMA device's name (mlx5_0) or, for a GPU, its PCI
	// bus ID; Kind is "gpu" or "rdma".
	Device   string `json:"device"`
	Kind     string `json:"kind"`
	PCIBusID string `json:"pci_bus_id"`
	NUMANode int    `json:"numa_node"`
	// Vectors counts the MSI vectors read; Remote those served by no CPU
	// of the device's node (effective affinity, else smp_affinity).
	Vectors int `json:"vectors"`
	Remote  int `json:"remote"`
}

// RemoteRatio is the share of the device's vectors served off its node.
func (d DeviceIRQs) RemoteRatio() float64 {
	if d.Vectors == 0 {
		return 0
	}
	return float64(d.Remote) / float64(d.Vectors)
}

// CPUIdleState is one idle state the CPUs declare.
type CPUIdleState struct {
	Name string `json:"name"`
	// LatencyMicros is the exit latency the driver declares, µs (the
	// largest among the CPUs).
	LatencyMicros uint64 `json:"latency_us"`
	// CPUs declare it; Enabled CPUs may enter it (not disabled).
	CPUs    int `json:"cpus"`
	Enabled int `json:"enabled"`
}

// DeepestEnabledIdleLatency is the largest exit latency, µs, of a state
// some CPU may enter; -1 when no state is known.
func (t *HostTuning) DeepestEnabledIdleLatency() int {
	deepest := -1
	for _, s := range t.CPUIdleStates {
		if s.Enabled > 0 && int(s.LatencyMicros) > deepest {
			deepest = int(s.LatencyMicros)
		}
	}
	return deepest
}

// KernelCmdline is the boot parameters kept from /proc/cmdline.
type KernelCmdline struct {
	Isolcpus           string `json:"isolcpus,omitempty"`
	NohzFull           string `json:"nohz_full,omitempty"`
	IntelIdleMaxCstate string `json:"intel_idle_max_cstate,omitempty"`
	ProcessorMaxCstate string `json:"processor_max_cstate,omitempty"`
}

// HugepagePool is one page size's explicit hugepage pool.
type HugepagePool struct {
	PageBytes uint64 `json:"page_bytes"`
	Total     uint64 `json:"total"`
	Free      uint64 `json:"free"`
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

// DeviceLink is one device's PCIe link: what it trained to against what
// the function supports, and for a NIC the line rate its fastest port
// negotiated, which the link must carry.
type DeviceLink struct {
	// Device is the RDMA device (mlx5_0), the interface (eth0) or the NVMe
	// controller (nvme0); Kind is "rdma", "nic" or "nvme".
	Device   string `json:"device"`
	Kind     string `json:"kind"`
	PCIBusID string `json:"pci_bus_id"`

	CurrentGTs   float64 `json:"current_gts"`
	MaxGTs       float64 `json:"max_gts"`
	CurrentWidth int     `json:"current_width"`
	MaxWidth     int     `json:"max_width"`
	// PortBytesPerSecond is the fastest port's line rate, one direction
	// (an RDMA port's rate, an interface's speed); 0 unknown or not a NIC.
	PortBytesPerSecond float64 `json:"port_bps,omitempty"`
}

// PCIeBytesPerSecond is what a PCIe link of gts GT/s and width lanes
// carries one way, after line encoding: 8b/10b up to 5 GT/s (Gen1, Gen2),
// 128b/130b from 8 GT/s (Gen3 to Gen5; Gen6's FLIT mode costs about as
// much). Packet headers take a few percent more, which a comparison with
// a port's line rate does not need.
func PCIeBytesPerSecond(gts float64, width int) float64 {
	efficiency := 128.0 / 130
	if gts <= 5 {
		efficiency = 0.8
	}
	return gts * 1e9 * efficiency / 8 * float64(width)
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
	for _, d := range t.DeviceIRQs {
		n += 64 + len(d.Device) + len(d.Kind) + len(d.PCIBusID)
	}
	for _, s := range t.CPUIdleStates {
		n += 48 + len(s.Name)
	}
	for _, d := range t.DeviceLinks {
		n += 64 + len(d.Device) + len(d.Kind) + len(d.PCIBusID)
	}
	// What older readings lack adds nothing, so that their size (a metric
	// of the replayed traces) stays what it was.
	c := t.Cmdline
	n += len(c.Isolcpus) + len(c.NohzFull) + len(c.IntelIdleMaxCstate) + len(c.ProcessorMaxCstate) + len(t.IsolatedCPUList)
	n += 24 * len(t.Hugepages)
	for _, p := range []*int{t.IsolatedCPUs, t.NohzFullCPUs, t.DirtyRatio, t.DirtyBackgroundRatio, t.DirtyBytes, t.DirtyBackgroundBytes} {
		if p != nil {
			n += 8
		}
	}
	return n
}
