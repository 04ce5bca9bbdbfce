package collectors

import (
	"context"
	"errors"
	"io"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/gpudiag/gpudiag/engine"
)

// One Sample and Metrics of each host collector on this machine's /proc and
// /sys, then ("cycle") one engine cycle of the collectors that
// scripts/bench/host_vs_node_exporter.sh sets against node_exporter: what the
// daemon does per interval, the metric families prepared and the window fed.
// The cost depends on the host (disks, NICs, HCAs, NUMA nodes, PCI devices),
// so compare runs on one machine only. gpuprocess and tcp are left out: they
// read only the GPUs' processes, which a bench host lacks.
func BenchmarkHostCollectorsLive(b *testing.B) {
	cfg := Config{ProcPath: "/proc", SysPath: "/sys", Logger: zap.NewNop()}
	hostCollectors := []struct {
		name string
		open func() (engine.Collector, error)
	}{
		{"cpu", func() (engine.Collector, error) { return asEngineErr(newCPUCollector(cfg)) }},
		{"diskstats", func() (engine.Collector, error) {
			filter, err := newDiskFilter("", defaultDiskExclude, false)
			if err != nil {
				return nil, err
			}
			return asEngineErr(newDiskstatsCollector(cfg, filter))
		}},
		{"infiniband", func() (engine.Collector, error) { return asEngineErr(newInfiniBandCollector(cfg)) }},
		{"netdev", func() (engine.Collector, error) {
			return asEngineErr(newNetdevCollector(cfg, "", netdevDefaultExclude))
		}},
		{"numa", func() (engine.Collector, error) { return asEngineErr(newNUMACollector(cfg)) }},
		{"pressure", func() (engine.Collector, error) { return asEngineErr(newPressureCollector(cfg)) }},
		{"tuning", func() (engine.Collector, error) { return asEngineErr(newTuningCollector(cfg)) }},
	}
	for _, hc := range hostCollectors {
		b.Run(hc.name, func(b *testing.B) {
			c, err := hc.open()
			if errors.Is(err, ErrUnavailable) {
				b.Skip(err)
			}
			if err != nil {
				b.Fatal(err)
			}
			if cl, ok := c.(io.Closer); ok {
				b.Cleanup(func() { _ = cl.Close() })
			}
			ctx := context.Background()
			var series int
			count := func(prometheus.Metric) { series++ }
			b.ReportAllocs()
			for b.Loop() {
				s, err := c.Sample(ctx)
				if err != nil {
					b.Fatal(err)
				}
				series = 0
				c.Metrics(s, count)
			}
			b.ReportMetric(float64(series), "series")
		})
	}

	b.Run("cycle", func(b *testing.B) {
		window := engine.NewWindow(10*time.Minute, 16<<20)
		e := engine.New(engine.Options{Interval: time.Second, Window: window})
		for _, hc := range hostCollectors {
			if !slices.Contains(nodeExporterGround, hc.name) {
				continue
			}
			c, err := hc.open()
			if errors.Is(err, ErrUnavailable) {
				continue
			}
			if err != nil {
				b.Fatal(err)
			}
			e.Add(c, 0)
		}
		ctx := context.Background()
		b.ReportAllocs()
		for b.Loop() {
			e.SampleOnce(ctx)
		}
		for _, st := range e.Statuses() {
			if !st.Success {
				b.Fatalf("%s: %s", st.Name, st.LastError)
			}
		}
	})
}

// nodeExporterGround are the collectors covering what node_exporter's
// diskstats, pressure, meminfo_numa, infiniband and netdev read.
var nodeExporterGround = []string{"diskstats", "infiniband", "netdev", "numa", "pressure"}
