package collectors

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/gpudiag/gpudiag/engine"
	"github.com/gpudiag/gpudiag/hostfs"
	"github.com/gpudiag/gpudiag/sample"
)

func init() {
	register(collectorSpec[sample.Pressure, *pressureCollector]{
		key:          sample.PressureKey,
		defaultOn:    true,
		help:         "Pressure stall information (PSI) for CPU, I/O, memory and IRQ from /proc/pressure",
		newCollector: newPressureCollector,
		metrics:      (&pressureCollector{}).Metrics,
	})
}

// pressureResources are the files of /proc/pressure in the order exported.
// irq needs 6.1+ with CONFIG_IRQ_TIME_ACCOUNTING and is skipped without it.
var pressureResources = []string{"cpu", "io", "memory", "irq"}

type pressureCollector struct {
	host hostfs.FS
	dir  string
	log  *zap.Logger
	now  func() time.Time
	prev map[string]uint64 // "<resource> some|full" → total µs
	at   time.Time
}

func newPressureCollector(cfg Config) (*pressureCollector, error) {
	dir := filepath.Join(cfg.ProcPath, "pressure")
	if _, err := os.Stat(dir); err != nil {
		return nil, fmt.Errorf("%w: %s: kernel without pressure stall information (CONFIG_PSI), or booted with psi=0: %w",
			ErrUnavailable, dir, err)
	}
	host, err := hostfs.NewFS(cfg.ProcPath, cfg.SysPath)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	host = host.Holding() // the same files every second
	cfg = cfg.withDefaults()
	log := cfg.Logger
	return &pressureCollector{host: host, dir: dir, log: log, now: time.Now, prev: map[string]uint64{}}, nil
}

// Close closes the files held open.
func (c *pressureCollector) Close() error {
	c.host.CloseHeld()
	return nil
}

func (c *pressureCollector) Name() string { return sample.PressureKey.Name() }

func (c *pressureCollector) Sample(context.Context) (*sample.Pressure, error) {
	now := c.now()
	out := &sample.Pressure{}
	if !c.at.IsZero() {
		out.IntervalSeconds = now.Sub(c.at).Seconds()
	}
	next := make(map[string]uint64, len(c.prev))
	var skipped []string
	for _, res := range pressureResources {
		st, err := c.host.PSI(res)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			// irq needs 6.1+ and CONFIG_IRQ_TIME_ACCOUNTING.
			skipped = append(skipped, res+": absent")
			out.Unmeasured = append(out.Unmeasured, res)
			continue
		case errors.Is(err, fs.ErrPermission):
			c.log.Debug("pressure file unreadable", zap.String("resource", res), zap.Error(err))
			skipped = append(skipped, res+": permission denied")
			out.Unmeasured = append(out.Unmeasured, res)
			continue
		case err != nil:
			return nil, err
		}
		keys := pressureKeys[res]
		r := sample.PressureResource{Resource: res}
		if st.HasSome {
			r.Some = c.line(next, keys[0], st.Some, out.IntervalSeconds)
		}
		if st.HasFull {
			r.Full = c.line(next, keys[1], st.Full, out.IntervalSeconds)
		}
		out.Resources = append(out.Resources, r)
	}
	if len(out.Resources) == 0 {
		// A sample with no resource would pass for a node without
		// pressure; say why there is nothing instead.
		return nil, fmt.Errorf("%s: no pressure file readable (%s)", c.dir, strings.Join(skipped, ", "))
	}
	c.prev, c.at = next, now
	return out, nil
}

// pressureKeys are each resource's keys into prev, made once.
var pressureKeys = func() map[string][2]string {
	m := map[string][2]string{}
	for _, res := range pressureResources {
		m[res] = [2]string{res + " some", res + " full"}
	}
	return m
}()

func (c *pressureCollector) line(next map[string]uint64, key string, l hostfs.PSILine, seconds float64) *sample.PressureLine {
	out := &sample.PressureLine{TotalMicroseconds: l.TotalMicroseconds, Avg10: l.Avg10 / 100}
	if prev, ok := c.prev[key]; ok && seconds > 0 {
		stalled := sample.CounterDelta(float64(prev), float64(l.TotalMicroseconds)) / 1e6
		// PSI keeps its own clock; clamp the jitter against ours.
		out.IntervalRatio = math.Min(1, stalled/seconds)
	}
	next[key] = l.TotalMicroseconds
	return out
}

// pressureDescs holds the some (waiting) and full (stalled) metric of each
// resource, with node_exporter's names.
var pressureDescs = map[string][2]*prometheus.Desc{
	"cpu": {
		pressureDesc("cpu_waiting", "Time at least one runnable task waited for a CPU (PSI cpu some)."),
		pressureDesc("cpu_stalled", "Time all non-idle tasks waited for a CPU at once (PSI cpu full). Always 0 system-wide: it is defined per cgroup only."),
	},
	"io": {
		pressureDesc("io_waiting", "Time at least one task was stalled on block I/O (PSI io some)."),
		pressureDesc("io_stalled", "Time all non-idle tasks were stalled on block I/O at once (PSI io full): time the node did no work for lack of I/O."),
	},
	"memory": {
		pressureDesc("memory_waiting", "Time at least one task was stalled on memory: reclaim, swap-in, refaults of evicted page cache (PSI memory some)."),
		pressureDesc("memory_stalled", "Time all non-idle tasks were stalled on memory at once (PSI memory full): thrashing."),
	},
	"irq": {
		nil,
		pressureDesc("irq_stalled", "Time CPUs spent in hard and soft interrupts while tasks waited for them (PSI irq full)."),
	},
}

func pressureDesc(name, help string) *prometheus.Desc {
	return prometheus.NewDesc(engine.Namespace+"_pressure_"+name+"_seconds_total", help, nil, nil)
}

func (c *pressureCollector) Metrics(r *sample.Pressure, emit func(prometheus.Metric)) {
	for _, res := range r.Resources {
		descs := pressureDescs[res.Resource]
		if res.Some != nil && descs[0] != nil {
			emit(engine.NewSeries(descs[0], prometheus.CounterValue, float64(res.Some.TotalMicroseconds)/1e6))
		}
		if res.Full != nil && descs[1] != nil {
			emit(engine.NewSeries(descs[1], prometheus.CounterValue, float64(res.Full.TotalMicroseconds)/1e6))
		}
	}
}
