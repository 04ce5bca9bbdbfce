package collectors

import (
	"context"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/gpudiag/gpudiag/engine"
	"github.com/gpudiag/gpudiag/hostfs"
	"github.com/gpudiag/gpudiag/sample"
)

// The host tuning audit: one file per source of its facts (tuning_*.go),
// each with its read, its series and their descriptions.

func init() {
	register(collectorSpec[sample.HostTuning, *tuningCollector]{
		key:          sample.TuningKey,
		defaultOn:    true,
		help:         "Host tuning facts: THP, swap, CPU governors, NUMA balancing, ephemeral ports, support daemons, kernel, device IRQ affinity, C-states, isolated CPUs, hugepages, vm.dirty",
		newCollector: newTuningCollector,
		metrics:      (&tuningCollector{}).Metrics,
		ownInterval:  &intervalFlag{value: 30 * time.Second, help: "How often the tuning collector samples; these settings change rarely and the process scan is not free."},
	})
}

type tuningCollector struct {
	host     hostfs.FS
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

func newTuningCollector(cfg Config) (*tuningCollector, error) {
	host, err := hostfs.NewFS(cfg.ProcPath, cfg.SysPath)
	if err != nil {
		return nil, fmt.Errorf("procfs at %s: %w", cfg.ProcPath, err)
	}
	cfg = cfg.withDefaults()
	return &tuningCollector{host: host, comms: host.NewTaskStatReader(), shared: cfg.Shared,
		interval: cfg.OwnInterval, log: cfg.Logger, now: time.Now}, nil
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
		c.readDeviceIRQs, c.readDeviceLinks, c.readCPUIdle, c.readCmdline, c.readHugepages, c.readDirty,
	}
	for _, step := range steps {
		if err := step(t); err != nil {
			return nil, err
		}
	}
	return t, nil
}

func tuningDesc(name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc(engine.Namespace+"_host_"+name, help, labels, nil)
}

// tuningGauge emits one gauge of a tuning fact.
type tuningGauge func(d *prometheus.Desc, v float64, labels ...string)

// tuningMetrics emit each source's series.
var tuningMetrics = []func(*sample.HostTuning, tuningGauge){
	thpMetrics, swapMetrics, governorMetrics, numaBalancingMetrics, ephemeralPortMetrics, daemonMetrics,
	kernelMetrics, deviceIRQMetrics, cpuIdleMetrics, cmdlineMetrics, hugepageMetrics, dirtyMetrics,
}

func (c *tuningCollector) Metrics(t *sample.HostTuning, emit func(prometheus.Metric)) {
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		emit(engine.NewSeries(d, prometheus.GaugeValue, v, labels...))
	}
	for _, metrics := range tuningMetrics {
		metrics(t, gauge)
	}
}
