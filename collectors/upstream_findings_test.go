package collectors

import (
	"context"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/gpudiag/gpudiag/analyzers"
	"github.com/gpudiag/gpudiag/diagnose"
	"github.com/gpudiag/gpudiag/engine"
)

// upstreamFindings diagnoses an upstream tree as the daemon would with
// --path.procfs and --path.sysfs pointing there: every host collector
// sampled twice into the window, then one analysis of the span. It
// returns the findings as check:severity:device.
func upstreamFindings(t *testing.T, tree upstreamTree) []string {
	t.Helper()
	window := engine.NewWindow(10*time.Minute, 16<<20)
	e := engine.New(engine.Options{Interval: time.Hour, Window: window})
	for _, c := range upstreamHostCollectors(t, tree, "") {
		e.Add(c, time.Hour)
	}
	e.SampleOnce(context.Background())
	e.SampleOnce(context.Background())
	d := diagnose.NewRunner(window, analyzers.DefaultThresholds).Analyze(time.Now())
	var out []string
	for _, f := range d.Findings {
		out = append(out, f.Check+":"+string(f.Severity)+":"+f.Device)
	}
	slices.Sort(out)
	return out
}

// The daemon on hosts it was not written against raises only what their
// files say is wrong: each finding on node_exporter's and procfs's
// fixture trees is listed here with the lines of the tree that justify it,
// and a finding not listed (a false positive on a host nobody tuned for
// us) fails the test. Neither tree has a GPU, so the CPU governor counts
// every CPU, and neither names its cpufreq driver, so powersave is taken
// as the generic governor that holds the lowest clock.
func TestUpstreamFixtureFindings(t *testing.T) {
	for _, tc := range []struct {
		tree func(*testing.T) upstreamTree
		want map[string]string // finding: why the tree deserves it
	}{
		{nodeExporterTree, map[string]string{
			"cpu_governor:warning:": "sys/devices/system/cpu/cpu[0-3]/cpufreq/scaling_governor are all powersave",
			"swap_active:warning:": "proc/swaps lists /dev/zram0 (8 GiB, 76 KiB used) and the tree has no vm.swappiness: " +
				"the seed warns on swap unless swappiness is 0",
		}},
		{procfsTree, map[string]string{
			"cpu_governor:warning:":             "sys/devices/system/cpu/cpu[01]/cpufreq/scaling_governor are powersave",
			"ib_port_degraded:warning:mlx5_0/1": "sys/class/infiniband/mlx5_0/ports/1/rate is 25 Gb/sec (1X EDR): one lane of an HCA port's four",
			"swap_active:warning:":              "proc/swaps lists a swap area and proc/sys/vm/swappiness is 60",
		}},
	} {
		tree := tc.tree(t)
		got := upstreamFindings(t, tree)
		if want := slices.Sorted(maps.Keys(tc.want)); !slices.Equal(got, want) {
			t.Errorf("%s's tree: findings %q; want %q", tree.name, got, want)
		}
	}
}
