package collectors

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/procfs"
	"go.uber.org/zap"

	"github.com/gpudiag/gpudiag/engine"
	"github.com/gpudiag/gpudiag/hostfile"
	"github.com/gpudiag/gpudiag/hostfs"
	"github.com/gpudiag/gpudiag/sample"
)

func init() {
	register(sample.TuningKey, true,
		"Host tuning facts: THP, swap, CPU governors, NUMA balancing, ephemeral ports, support daemons, kernel, device IRQ affinity, C-states, isolated CPUs, hugepages, vm.dirty",
		nil,
		newTuningCollector,
		(&tuningCollector{}).Metrics,
		withInterval(30*time.Second, "How often the tuning collector samples; these settings change rarely and the process scan is not free."))
}

// tuningDaemons are the support daemons whose presence the audit checks:
// irqbalance (moves device interrupts, can undo manual affinity),
// nvidia-persistenced (keeps GPUs initialised between jobs), the fabric
// manager (required on NVSwitch hosts) and the DCGM host engine.
var tuningDaemons = []string{"irqbalance", "nvidia-persistenced", "nv-fabricmanager", "nv-hostengine"}

// tuningCommLen is the kernel's TASK_COMM_LEN less the NUL: /proc/<pid>/comm
// holds at most this many bytes of the program name.
const tuningCommLen = 15

type tuningCollector struct {
	host     hostfs.FS
	proc     procfs.FS // host's procfs handle, for the files procfs parses
	interval time.Duration
	log      *zap.Logger
	now      func() time.Time
	// comms reads the processes' names through one buffer, kept, when no
	// scan of every process is published fresh (Shared.ProcessScan).
	comms  *hostfs.TaskStatReader
	shared *Shared
	// ports is the last count of the ephemeral range's sockets, carried
	// while /proc/net/sockstat says too few TCP sockets exist to matter.
	ports ephemeralCount
}

// ephemeralCount is one walk of the TCP tables over one port range.
type ephemeralCount struct {
	at                    time.Time
	first, last           int
	sockets, distinctPort int
}

func newTuningCollector(cfg Config) (*tuningCollector, error) {
	host, err := hostfs.NewFS(cfg.ProcPath, cfg.SysPath)
	if err != nil {
		return nil, fmt.Errorf("procfs at %s: %w", cfg.ProcPath, err)
	}
	cfg = cfg.withDefaults()
	log := cfg.Logger
	return &tuningCollector{host: host, proc: host.Procfs(), comms: host.NewTaskStatReader(), shared: cfg.Shared,
		interval: cfg.OwnInterval, log: log, now: time.Now}, nil
}

func (c *tuningCollector) Name() string { return sample.TuningKey.Name() }

// Interval asks the engine for a clock of its own: these facts change on an
// administrator's action, not per second, and a full /proc scan every second
// would cost more than everything else the daemon reads.
func (c *tuningCollector) Interval() time.Duration { return c.interval }

func (c *tuningCollector) Sample(ctx context.Context) (*sample.HostTuning, error) {
	t := &sample.HostTuning{}
	steps := []func(*sample.HostTuning) error{
		c.readTHP, c.readSwap, c.readGovernors, c.readNUMABalancing,
		func(t *sample.HostTuning) error { return c.readEphemeralPorts(ctx, t) }, c.readKernel,
		func(t *sample.HostTuning) error { return c.scanDaemons(ctx, t) },
		c.readDeviceIRQs, c.readCPUIdle, c.readCmdline, c.readHugepages, c.readDirty,
	}
	for _, step := range steps {
		if err := step(t); err != nil {
			return nil, err
		}
	}
	return t, nil
}

func (c *tuningCollector) readTHP(t *sample.HostTuning) error {
	dir := c.host.SysPath("kernel/mm/transparent_hugepage")
	for _, f := range []struct {
		name string
		dst  *string
	}{{"enabled", &t.TransparentHugepage}, {"defrag", &t.TransparentHugepageDefrag}} {
		path := filepath.Join(dir, f.name)
		b, err := hostfs.ReadAttr(path)
		if errors.Is(err, fs.ErrNotExist) {
			continue // kernel built without THP
		}
		if err != nil {
			return err
		}
		v, err := hostfs.ActiveChoice(string(b))
		if err != nil {
			return fmt.Errorf("parsing %s: %w", path, err)
		}
		*f.dst = v
	}
	return nil
}

func (c *tuningCollector) readSwap(t *sample.HostTuning) error {
	v, err := c.host.SysctlInts("vm.swappiness")
	if err != nil {
		return err
	}
	if len(v) == 1 {
		t.Swappiness = &v[0]
	}
	// procfs opens /proc/swaps itself, blocking, and reads at most 1 MiB.
	err = hostfile.Check(c.host.ProcPath("swaps"), procSwapsBytes)
	var swaps []*procfs.Swap
	if err == nil {
		swaps, err = c.proc.Swaps()
	}
	if errors.Is(err, fs.ErrNotExist) {
		return nil // kernel built without swap
	}
	if err != nil {
		return fmt.Errorf("%s: %w", c.host.ProcPath("swaps"), err)
	}
	t.SwapDevices = len(swaps)
	for _, s := range swaps {
		t.SwapBytes += uint64(s.Size) * 1024 // /proc/swaps is in KiB
		t.SwapUsedBytes += uint64(s.Used) * 1024
		if strings.HasPrefix(s.Filename, "/dev/zram") {
			t.SwapZramDevices++
		}
	}
	return nil
}

// readGovernors reads the governor through each CPU's cpufreq link rather
// than procfs's SystemCpufreq, which reads a dozen files per CPU (current
// frequency included, which the kernel may make wait) to give this one.
func (c *tuningCollector) readGovernors(t *sample.HostTuning) error {
	paths, err := filepath.Glob(c.host.SysPath("devices/system/cpu/cpu[0-9]*/cpufreq/scaling_governor"))
	if err != nil {
		return err
	}
	for _, p := range paths {
		b, err := hostfs.ReadAttr(p)
		if errors.Is(err, fs.ErrNotExist) {
			continue // CPU went offline since the glob
		}
		if err != nil {
			return err
		}
		g := strings.TrimSpace(string(b))
		if g == "" {
			return fmt.Errorf("%s is empty", p)
		}
		if t.ScalingGovernors == nil {
			t.ScalingGovernors = map[string]int{}
			t.ScalingGovernorCPUs = map[string][]int{}
			if d, err := hostfs.ReadAttr(filepath.Join(filepath.Dir(p), "scaling_driver")); err == nil {
				t.ScalingDriver = strings.TrimSpace(string(d))
			}
		}
		t.ScalingGovernors[g]++
		// The path is .../cpu<N>/cpufreq/scaling_governor.
		if n, err := strconv.Atoi(strings.TrimPrefix(filepath.Base(filepath.Dir(filepath.Dir(p))), "cpu")); err == nil {
			t.ScalingGovernorCPUs[g] = append(t.ScalingGovernorCPUs[g], n)
		}
	}
	for _, cpus := range t.ScalingGovernorCPUs {
		slices.Sort(cpus)
	}
	return nil
}

func (c *tuningCollector) readNUMABalancing(t *sample.HostTuning) error {
	v, err := c.host.SysctlInts("kernel.numa_balancing")
	if err != nil {
		return err
	}
	if len(v) == 1 {
		t.NUMABalancing = &v[0]
	}
	return nil
}

// ephemeralRecount and ephemeralWalkShare decide when the TCP tables are
// walked for the ephemeral port count. A walk of /proc/net/tcp{,6} visits
// every bucket of the kernel's TCP hash table, sized by the host's memory
// (524,288 buckets and 15 ms of kernel time on a 128 GB host) however few
// sockets there are, while /proc/net/sockstat{,6} holds the namespace's TCP
// socket counts in one small read. Every sample reads sockstat; the tables
// are walked when its count reaches ephemeralWalkShare of the range (the
// ports could then be near running out; the audit warns at 80%) or falls
// below the ports last counted (that count is out of date), and otherwise at
// least every ephemeralRecount for the gauges.
const (
	ephemeralRecount   = 5 * time.Minute
	ephemeralWalkShare = 0.1
)

// readEphemeralPorts counts the TCP sockets holding a port of the ephemeral
// range. Ports, not sockets, are what runs out: a connect() can share a local
// port with sockets to other destinations, a bind() cannot, so the usage
// ratio counts distinct ports.
func (c *tuningCollector) readEphemeralPorts(ctx context.Context, t *sample.HostTuning) error {
	v, err := c.host.SysctlInts("net.ipv4.ip_local_port_range")
	if err != nil || v == nil {
		return err
	}
	if len(v) != 2 || v[0] <= 0 || v[1] < v[0] {
		return fmt.Errorf("%s: want two ascending ports, got %v", c.host.ProcPath("sys/net/ipv4/ip_local_port_range"), v)
	}
	t.EphemeralPortFirst, t.EphemeralPortLast = v[0], v[1]
	now := c.now()
	if p := c.ports; p.first == v[0] && p.last == v[1] && now.Sub(p.at) < ephemeralRecount {
		// n bounds the ports held: a count above it is out of date.
		if n, ok := c.tcpSockets(); ok && p.distinctPort <= n && float64(n) < ephemeralWalkShare*float64(t.EphemeralPortRangeSize()) {
			t.EphemeralPortSockets, t.EphemeralPortsInUse = p.sockets, p.distinctPort
			return nil
		}
	}
	inUse := map[uint64]struct{}{}
	for _, table := range []string{"tcp", "tcp6"} {
		err := c.host.TCPLocalPorts(ctx, table, func(port uint64) {
			if port >= uint64(v[0]) && port <= uint64(v[1]) {
				t.EphemeralPortSockets++
				inUse[port] = struct{}{}
			}
		})
		if errors.Is(err, fs.ErrNotExist) {
			continue // IPv6 disabled
		}
		if err != nil {
			return err
		}
	}
	t.EphemeralPortsInUse = len(inUse)
	c.ports = ephemeralCount{at: now, first: v[0], last: v[1], sockets: t.EphemeralPortSockets, distinctPort: t.EphemeralPortsInUse}
	return nil
}

// tcpSockets is how many TCP sockets the namespace holds, from
// /proc/net/sockstat and sockstat6: those in use of both families and those
// in TIME_WAIT. It bounds the distinct local ports: a port is held by a
// socket in use or in TIME_WAIT, or by a connection being accepted on a
// listener's port, the listener counted. ok is false when it cannot say.
func (c *tuningCollector) tcpSockets() (int, bool) {
	n := 0
	for _, read := range []struct {
		file  string
		parse func() (*procfs.NetSockstat, error)
	}{{"sockstat", c.proc.NetSockstat}, {"sockstat6", c.proc.NetSockstat6}} {
		if err := hostfile.Check(c.host.ProcPath("net", read.file), procSockstatBytes); err != nil {
			if errors.Is(err, fs.ErrNotExist) && read.file == "sockstat6" {
				continue // IPv6 disabled
			}
			return 0, false
		}
		st, err := read.parse()
		if err != nil {
			return 0, false
		}
		found := false
		for _, p := range st.Protocols {
			if p.Protocol != "TCP" && p.Protocol != "TCP6" {
				continue
			}
			found = true
			n += p.InUse
			if p.TW != nil {
				n += *p.TW
			}
		}
		if !found {
			return 0, false
		}
	}
	return n, true
}

// procSockstatBytes bounds /proc/net/sockstat{,6}, read by procfs after
// hostfile.Check.
const procSockstatBytes = 1 << 16

// procSwapsBytes bounds /proc/swaps, read by procfs after hostfile.Check.
const procSwapsBytes = 1 << 20

func (c *tuningCollector) readKernel(t *sample.HostTuning) error {
	v, err := c.host.Sysctl("kernel.osrelease")
	if err != nil || v == nil {
		return err
	}
	t.KernelRelease = strings.Join(v, " ")
	return nil
}

// scanDaemons looks for the support daemons by /proc/<pid>/comm. comm is the
// program name cut to 15 bytes, so nvidia-persistenced shows as
// "nvidia-persiste". The names of a scan of every process published within
// the collector's interval (the ncclproc collector's, every 15 s) serve
// instead of reading every process's comm again.
func (c *tuningCollector) scanDaemons(ctx context.Context, t *sample.HostTuning) error {
	want := make(map[string]string, len(tuningDaemons))
	t.Processes = make(map[string]bool, len(tuningDaemons))
	for _, d := range tuningDaemons {
		want[d[:min(len(d), tuningCommLen)]] = d
		t.Processes[d] = false
	}
	if p := c.shared.ProcessScan(); p != nil && p.Comms != nil && c.now().Sub(p.At) < c.interval {
		for comm, d := range want {
			t.Processes[d] = p.Comms[comm]
		}
		return nil
	}
	err := c.comms.EachComm(ctx, func(_ int, comm []byte) {
		if d, ok := want[string(comm)]; ok {
			t.Processes[d] = true
		}
	}, func(pid int, err error) {
		c.log.Debug("process name unreadable", zap.Int("pid", pid), zap.Error(err))
	})
	switch {
	case ctx.Err() != nil:
		return ctx.Err()
	case err != nil:
		return fmt.Errorf("listing %s: %w", c.host.ProcPath(), err)
	}
	return nil
}

// nvidiaVendor is NVIDIA's PCI vendor ID; a GPU is a display controller
// (class 0x03xxxx) of that vendor (the NVSwitches are bridges, 0x0680).
const nvidiaVendor = 0x10de

// readDeviceIRQs counts the NVIDIA GPUs on the PCI bus by the driver bound
// to them and reads, for each of them and each RDMA device, its MSI vectors and how many are served by no CPU of its NUMA
// node. Devices whose node is unknown (-1, a VM) or that have no vector
// are left out.
func (c *tuningCollector) readDeviceIRQs(t *sample.HostTuning) error {
	nodeCPUs := map[int]map[int]bool{}
	local := func(node int) (map[int]bool, error) {
		if m, ok := nodeCPUs[node]; ok {
			return m, nil
		}
		cpus, _, err := c.host.CPUList("devices/system/node", fmt.Sprintf("node%d", node), "cpulist")
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, err
		}
		m := make(map[int]bool, len(cpus))
		for _, cpu := range cpus {
			m[cpu] = true
		}
		nodeCPUs[node] = m
		return m, nil
	}
	add := func(name, kind, busID, dir string, node int) error {
		if node < 0 {
			return nil
		}
		irqs, err := c.host.DeviceIRQs(dir)
		if err != nil || len(irqs) == 0 {
			return err
		}
		cpus, err := local(node)
		if err != nil || len(cpus) == 0 {
			return err // no cpulist for the node: nothing to compare with
		}
		d := sample.DeviceIRQs{Device: name, Kind: kind, PCIBusID: busID, NUMANode: node, Vectors: len(irqs)}
		for _, irq := range irqs {
			if !slices.ContainsFunc(irq.CPUs, func(cpu int) bool { return cpus[cpu] }) {
				d.Remote++
			}
		}
		t.DeviceIRQs = append(t.DeviceIRQs, d)
		return nil
	}
	busIDs, err := os.ReadDir(c.host.SysPath(hostfs.PCIDevicesDir))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	for _, e := range busIDs {
		id := e.Name()
		vendor, err := c.host.PCIHex(id, "vendor")
		if err != nil || vendor != nvidiaVendor {
			continue // unreadable or gone: not a GPU we can judge
		}
		if class, err := c.host.PCIHex(id, "class"); err != nil || class>>16 != 0x03 {
			continue
		}
		// The driver bound to the GPU: NVIDIA's, nouveau, vfio-pci, or
		// none, whatever the GPU backend could open.
		driver := "none"
		if target, err := os.Readlink(c.host.SysPath(hostfs.PCIDevicesDir, id, "driver")); err == nil {
			driver = filepath.Base(target)
		}
		if t.GPUPCIDrivers == nil {
			t.GPUPCIDrivers = map[string]int{}
		}
		t.GPUPCIDrivers[driver]++
		loc, err := c.host.PCILocality(id)
		if err != nil {
			continue
		}
		if err := add(id, "gpu", id, c.host.SysPath(hostfs.PCIDevicesDir, id), loc.NUMANode); err != nil {
			return err
		}
	}
	rdma, err := os.ReadDir(c.host.SysPath("class/infiniband"))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	for _, e := range rdma {
		busID, node, path := c.host.PCILocation(c.host.SysPath("class/infiniband", e.Name(), "device"))
		if busID == "" || path == nil {
			continue
		}
		dir := filepath.Join(append([]string{c.host.SysPath("devices")}, path...)...)
		if err := add(e.Name(), "rdma", busID, dir, node); err != nil {
			return err
		}
	}
	return nil
}

func (c *tuningCollector) readCPUIdle(t *sample.HostTuning) error {
	states, err := c.host.CPUIdleStates()
	if err != nil {
		return err
	}
	for _, s := range states {
		t.CPUIdleStates = append(t.CPUIdleStates, sample.CPUIdleState{Name: s.Name, LatencyMicros: s.LatencyMicros, CPUs: s.CPUs, Enabled: s.Enabled})
	}
	return nil
}

func (c *tuningCollector) readCmdline(t *sample.HostTuning) error {
	cl, err := c.host.Cmdline()
	if err != nil {
		return err
	}
	t.Cmdline = sample.KernelCmdline{Isolcpus: cl.Isolcpus, NohzFull: cl.NohzFull,
		IntelIdleMaxCstate: cl.IntelIdleMaxCstate, ProcessorMaxCstate: cl.ProcessorMaxCstate}
	for _, f := range []struct {
		name string
		n    **int
		list *string
	}{{"isolated", &t.IsolatedCPUs, &t.IsolatedCPUList}, {"nohz_full", &t.NohzFullCPUs, nil}} {
		cpus, text, err := c.host.CPUList("devices/system/cpu", f.name)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return err
		}
		n := len(cpus)
		*f.n = &n
		if f.list != nil {
			*f.list = text
		}
	}
	return nil
}

func (c *tuningCollector) readHugepages(t *sample.HostTuning) error {
	pools, err := c.host.Hugepages()
	if err != nil {
		return err
	}
	for _, p := range pools {
		t.Hugepages = append(t.Hugepages, sample.HugepagePool{PageBytes: p.PageBytes, Total: p.Total, Free: p.Free})
	}
	return nil
}

func (c *tuningCollector) readDirty(t *sample.HostTuning) error {
	for _, f := range []struct {
		name string
		dst  **int
	}{{"vm.dirty_ratio", &t.DirtyRatio}, {"vm.dirty_background_ratio", &t.DirtyBackgroundRatio},
		{"vm.dirty_bytes", &t.DirtyBytes}, {"vm.dirty_background_bytes", &t.DirtyBackgroundBytes}} {
		v, err := c.host.SysctlInts(f.name)
		if err != nil {
			return err
		}
		if len(v) == 1 {
			*f.dst = &v[0]
		}
	}
	return nil
}

func tuningDesc(name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc(engine.Namespace+"_host_"+name, help, labels, nil)
}

var (
	hostTHPDesc = tuningDesc("transparent_hugepage_info",
		"Active transparent hugepage modes: enabled (always, madvise, never) and defrag.", "enabled", "defrag")
	hostSwappinessDesc  = tuningDesc("vm_swappiness", "vm.swappiness: the kernel's willingness to swap anonymous memory out (0-200).")
	hostSwapDevicesDesc = tuningDesc("swap_devices", "Active swap areas (rows of /proc/swaps).")
	hostSwapSizeDesc    = tuningDesc("swap_size_bytes", "Size of all active swap areas.")
	hostSwapUsedDesc    = tuningDesc("swap_used_bytes", "Swap in use across all active swap areas.")
	hostGovernorDesc    = tuningDesc("cpu_scaling_governor_cpus", "CPUs running each cpufreq scaling governor.", "governor")
	hostNUMABalDesc     = tuningDesc("numa_balancing", "kernel.numa_balancing: 0 off, 1 automatic NUMA balancing, 2 memory tiering.")
	hostPortFirstDesc   = tuningDesc("ephemeral_port_range_first", "First port of net.ipv4.ip_local_port_range.")
	hostPortLastDesc    = tuningDesc("ephemeral_port_range_last", "Last port of net.ipv4.ip_local_port_range.")
	hostPortSocketsDesc = tuningDesc("ephemeral_port_sockets",
		"TCP sockets (IPv4 and IPv6, any state including TIME_WAIT) whose local port lies in the ephemeral range, in the daemon's network namespace; counted when /proc/net/sockstat holds a tenth of the range in TCP sockets, else at least every 5 minutes.")
	hostPortsInUseDesc = tuningDesc("ephemeral_ports_in_use", "Distinct ephemeral-range ports held by at least one TCP socket.")
	hostPortUsageDesc  = tuningDesc("ephemeral_port_usage_ratio", "Fraction of the ephemeral port range held by TCP sockets (ephemeral_ports_in_use over the range size).")
	hostProcessDesc    = tuningDesc("process_running", "1 when a process of this support daemon runs on the host, else 0.", "process")
	hostKernelDesc     = tuningDesc("kernel_info", "Running kernel release.", "release")
	hostIRQVectorsDesc = tuningDesc("irq_vectors", "MSI vectors of a GPU (device = PCI bus ID) or RDMA device.", "device", "kind", "numa_node")
	hostIRQRemoteDesc  = tuningDesc("irq_remote_ratio",
		"Share of a device's MSI vectors served by no CPU of its NUMA node (effective_affinity_list, else smp_affinity_list).", "device", "kind", "numa_node")
	hostCStateDesc = tuningDesc("cpu_idle_state_info",
		"A cpuidle state the CPUs declare; enabled says whether any CPU may enter it.", "state", "enabled")
	hostCStateLatencyDesc = tuningDesc("cpu_idle_state_latency_seconds", "Exit latency the idle driver declares for a cpuidle state.", "state")
	hostDeepestIdleDesc   = tuningDesc("cpu_deepest_idle_latency_seconds", "Exit latency of the deepest cpuidle state some CPU may enter.")
	hostIsolatedDesc      = tuningDesc("isolated_cpus", "CPUs in /sys/devices/system/cpu/isolated (isolcpus=): left out of scheduler load balancing.")
	hostNohzFullDesc      = tuningDesc("nohz_full_cpus", "CPUs in /sys/devices/system/cpu/nohz_full (adaptive-tick, nohz_full=).")
	hostHugepagesDesc     = tuningDesc("hugepages", "Explicit hugepages configured per page size (nr_hugepages).", "page_size")
	hostHugepagesFreeDesc = tuningDesc("hugepages_free", "Explicit hugepages free per page size.", "page_size")
	hostDirtyRatioDesc    = tuningDesc("vm_dirty_ratio", "vm.dirty_ratio: percent of reclaimable memory that may be dirty before writers are throttled.")
	hostDirtyBgRatioDesc  = tuningDesc("vm_dirty_background_ratio", "vm.dirty_background_ratio: percent of reclaimable memory dirty before background writeback starts.")
	hostDirtyBytesDesc    = tuningDesc("vm_dirty_bytes", "vm.dirty_bytes: when non-zero, the dirty limit in bytes (overrides vm.dirty_ratio).")
	hostDirtyBgBytesDesc  = tuningDesc("vm_dirty_background_bytes", "vm.dirty_background_bytes: when non-zero, overrides vm.dirty_background_ratio.")
)

func (c *tuningCollector) Metrics(t *sample.HostTuning, emit func(prometheus.Metric)) {
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		emit(engine.NewSeries(d, prometheus.GaugeValue, v, labels...))
	}
	if t.TransparentHugepage != "" || t.TransparentHugepageDefrag != "" {
		gauge(hostTHPDesc, 1, t.TransparentHugepage, t.TransparentHugepageDefrag)
	}
	if t.Swappiness != nil {
		gauge(hostSwappinessDesc, float64(*t.Swappiness))
	}
	gauge(hostSwapDevicesDesc, float64(t.SwapDevices))
	gauge(hostSwapSizeDesc, float64(t.SwapBytes))
	gauge(hostSwapUsedDesc, float64(t.SwapUsedBytes))
	governors := make([]string, 0, len(t.ScalingGovernors))
	for g := range t.ScalingGovernors {
		governors = append(governors, g)
	}
	sort.Strings(governors)
	for _, g := range governors {
		gauge(hostGovernorDesc, float64(t.ScalingGovernors[g]), g)
	}
	if t.NUMABalancing != nil {
		gauge(hostNUMABalDesc, float64(*t.NUMABalancing))
	}
	if t.EphemeralPortRangeSize() > 0 {
		gauge(hostPortFirstDesc, float64(t.EphemeralPortFirst))
		gauge(hostPortLastDesc, float64(t.EphemeralPortLast))
		gauge(hostPortSocketsDesc, float64(t.EphemeralPortSockets))
		gauge(hostPortsInUseDesc, float64(t.EphemeralPortsInUse))
		gauge(hostPortUsageDesc, t.EphemeralPortUsage())
	}
	for _, d := range tuningDaemons {
		if running, ok := t.Processes[d]; ok {
			gauge(hostProcessDesc, boolFloat(running), d)
		}
	}
	if t.KernelRelease != "" {
		gauge(hostKernelDesc, 1, t.KernelRelease)
	}
	for _, d := range t.DeviceIRQs {
		node := strconv.Itoa(d.NUMANode)
		gauge(hostIRQVectorsDesc, float64(d.Vectors), d.Device, d.Kind, node)
		gauge(hostIRQRemoteDesc, d.RemoteRatio(), d.Device, d.Kind, node)
	}
	seen := map[string]bool{}
	for _, s := range t.CPUIdleStates {
		if seen[s.Name] {
			continue // two states of one name (a driver quirk): one series
		}
		seen[s.Name] = true
		gauge(hostCStateDesc, 1, s.Name, strconv.FormatBool(s.Enabled > 0))
		gauge(hostCStateLatencyDesc, float64(s.LatencyMicros)/1e6, s.Name)
	}
	if l := t.DeepestEnabledIdleLatency(); l >= 0 {
		gauge(hostDeepestIdleDesc, float64(l)/1e6)
	}
	if t.IsolatedCPUs != nil {
		gauge(hostIsolatedDesc, float64(*t.IsolatedCPUs))
	}
	if t.NohzFullCPUs != nil {
		gauge(hostNohzFullDesc, float64(*t.NohzFullCPUs))
	}
	for _, p := range t.Hugepages {
		size := strconv.FormatUint(p.PageBytes, 10)
		gauge(hostHugepagesDesc, float64(p.Total), size)
		gauge(hostHugepagesFreeDesc, float64(p.Free), size)
	}
	for _, f := range []struct {
		d *prometheus.Desc
		v *int
	}{{hostDirtyRatioDesc, t.DirtyRatio}, {hostDirtyBgRatioDesc, t.DirtyBackgroundRatio}, {hostDirtyBytesDesc, t.DirtyBytes}, {hostDirtyBgBytesDesc, t.DirtyBackgroundBytes}} {
		if f.v != nil {
			gauge(f.d, float64(*f.v))
		}
	}
}
