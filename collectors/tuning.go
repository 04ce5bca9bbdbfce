package collectors

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"sort"
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
		"Host tuning facts: THP, swap, CPU governors, NUMA balancing, ephemeral ports, support daemons, kernel",
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
}

func newTuningCollector(cfg Config) (*tuningCollector, error) {
	host, err := hostfs.NewFS(cfg.ProcPath, cfg.SysPath)
	if err != nil {
		return nil, fmt.Errorf("procfs at %s: %w", cfg.ProcPath, err)
	}
	cfg = cfg.withDefaults()
	log := cfg.Logger
	return &tuningCollector{host: host, proc: host.Procfs(), interval: cfg.OwnInterval, log: log}, nil
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
		}
		t.ScalingGovernors[g]++
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
	return nil
}

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
// "nvidia-persiste".
func (c *tuningCollector) scanDaemons(ctx context.Context, t *sample.HostTuning) error {
	want := make(map[string]string, len(tuningDaemons))
	t.Processes = make(map[string]bool, len(tuningDaemons))
	for _, d := range tuningDaemons {
		want[d[:min(len(d), tuningCommLen)]] = d
		t.Processes[d] = false
	}
	procs, err := c.proc.AllProcs()
	if err != nil {
		return fmt.Errorf("listing %s: %w", c.host.ProcPath(), err)
	}
	for _, p := range procs {
		if err := ctx.Err(); err != nil {
			return err
		}
		comm, err := p.Comm()
		if err != nil {
			// Exited since the listing, or hidden from us: not a daemon we
			// can see either way.
			c.log.Debug("skipping process", zap.Int("pid", p.PID), zap.Error(err))
			continue
		}
		if d, ok := want[comm]; ok {
			t.Processes[d] = true
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
		"TCP sockets (IPv4 and IPv6, any state including TIME_WAIT) whose local port lies in the ephemeral range, in the daemon's network namespace.")
	hostPortsInUseDesc = tuningDesc("ephemeral_ports_in_use", "Distinct ephemeral-range ports held by at least one TCP socket.")
	hostPortUsageDesc  = tuningDesc("ephemeral_port_usage_ratio", "Fraction of the ephemeral port range held by TCP sockets (ephemeral_ports_in_use over the range size).")
	hostProcessDesc    = tuningDesc("process_running", "1 when a process of this support daemon runs on the host, else 0.", "process")
	hostKernelDesc     = tuningDesc("kernel_info", "Running kernel release.", "release")
)

func (c *tuningCollector) Metrics(t *sample.HostTuning, emit func(prometheus.Metric)) {
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		emit(prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...))
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
}
