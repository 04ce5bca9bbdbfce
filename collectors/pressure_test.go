package collectors

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap"

	"github.com/gpudiag/gpudiag/internal/hosttest"
	"github.com/gpudiag/gpudiag/sample"
)

func newTestPressure(t *testing.T, proc string) (*pressureCollector, *fakeClock) {
	t.Helper()
	c, err := newPressureCollector(Config{ProcPath: proc, SysPath: fixtureSys, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	clk := &fakeClock{t: time.Unix(1_700_000_000, 0)}
	c.now = clk.now
	return c, clk
}

func samplePressure(t *testing.T, c *pressureCollector) *sample.Pressure {
	return sampleAs[sample.Pressure](t, c)
}

func TestPressureFixture(t *testing.T) {
	c, _ := newTestPressure(t, fixtureProc)
	s := samplePressure(t, c)
	if len(s.Resources) != 4 {
		t.Fatalf("%d resources; want cpu, io, memory, irq", len(s.Resources))
	}
	io := s.Resource("io")
	if io == nil || io.Some == nil || io.Full == nil ||
		*io.Some != (sample.PressureLine{TotalMicroseconds: 456789012, Avg10: 0.1234}) ||
		*io.Full != (sample.PressureLine{TotalMicroseconds: 345678901, Avg10: 0.1001}) {
		t.Fatalf("io %+v", io)
	}
	if irq := s.Resource("irq"); irq == nil || irq.Some != nil || irq.Full == nil || irq.Full.TotalMicroseconds != 7654321 {
		t.Fatalf("irq %+v", irq)
	}

	m := sampledMetrics{asEngine(c), s}
	want := `
# HELP gpudiag_pressure_cpu_waiting_seconds_total Time at least one runnable task waited for a CPU (PSI cpu some).
# TYPE gpudiag_pressure_cpu_waiting_seconds_total counter
gpudiag_pressure_cpu_waiting_seconds_total 987.654321
# HELP gpudiag_pressure_cpu_stalled_seconds_total Time all non-idle tasks waited for a CPU at once (PSI cpu full). Always 0 system-wide: it is defined per cgroup only.
# TYPE gpudiag_pressure_cpu_stalled_seconds_total counter
gpudiag_pressure_cpu_stalled_seconds_total 0
# HELP gpudiag_pressure_io_waiting_seconds_total Time at least one task was stalled on block I/O (PSI io some).
# TYPE gpudiag_pressure_io_waiting_seconds_total counter
gpudiag_pressure_io_waiting_seconds_total 456.789012
# HELP gpudiag_pressure_io_stalled_seconds_total Time all non-idle tasks were stalled on block I/O at once (PSI io full): time the node did no work for lack of I/O.
# TYPE gpudiag_pressure_io_stalled_seconds_total counter
gpudiag_pressure_io_stalled_seconds_total 345.678901
# HELP gpudiag_pressure_memory_waiting_seconds_total Time at least one task was stalled on memory: reclaim, swap-in, refaults of evicted page cache (PSI memory some).
# TYPE gpudiag_pressure_memory_waiting_seconds_total counter
gpudiag_pressure_memory_waiting_seconds_total 1.234567
# HELP gpudiag_pressure_memory_stalled_seconds_total Time all non-idle tasks were stalled on memory at once (PSI memory full): thrashing.
# TYPE gpudiag_pressure_memory_stalled_seconds_total counter
gpudiag_pressure_memory_stalled_seconds_total 0.234567
# HELP gpudiag_pressure_irq_stalled_seconds_total Time CPUs spent in hard and soft interrupts while tasks waited for them (PSI irq full).
# TYPE gpudiag_pressure_irq_stalled_seconds_total counter
gpudiag_pressure_irq_stalled_seconds_total 7.654321
`
	if err := testutil.CollectAndCompare(m, strings.NewReader(want)); err != nil {
		t.Fatal(err)
	}
	lintWithPromtool(t, m)
}

func TestPressureIntervalRatiosAndReset(t *testing.T) {
	proc := t.TempDir()
	io := filepath.Join(proc, "pressure", "io")
	write := func(some, full string) {
		hosttest.WriteFile(t, io, "some avg10=0.00 avg60=0.00 avg300=0.00 total="+some+"\nfull avg10=0.00 avg60=0.00 avg300=0.00 total="+full+"\n")
	}
	write("1000000", "500000")
	c, clk := newTestPressure(t, proc)
	samplePressure(t, c)

	// 10 s later: 4 s with some task stalled, 2.5 s with all stalled.
	write("5000000", "3000000")
	clk.t = clk.t.Add(10 * time.Second)
	r := samplePressure(t, c).Resource("io")
	if r.Some.IntervalRatio != 0.4 || r.Full.IntervalRatio != 0.25 {
		t.Fatalf("ratios some %v full %v; want 0.4, 0.25", r.Some.IntervalRatio, r.Full.IntervalRatio)
	}

	// Totals that fall (they should not short of a reboot) give zero, not a
	// negative ratio.
	write("10", "5")
	clk.t = clk.t.Add(10 * time.Second)
	r = samplePressure(t, c).Resource("io")
	if r.Some.IntervalRatio != 0 || r.Full.IntervalRatio != 0 {
		t.Fatalf("ratios across a reset: some %v full %v", r.Some.IntervalRatio, r.Full.IntervalRatio)
	}

	// PSI's clock runs slightly ahead of ours: the ratio stays at most 1.
	write("10000010", "5")
	clk.t = clk.t.Add(9 * time.Second)
	if r = samplePressure(t, c).Resource("io"); r.Some.IntervalRatio != 1 {
		t.Fatalf("ratio %v; want clamped to 1", r.Some.IntervalRatio)
	}
}

// Kernels before 5.13 have no cpu full line and no irq file; the series are
// left out rather than reported as zero, and the file named unmeasured.
func TestPressureOldKernel(t *testing.T) {
	proc := t.TempDir()
	line := "some avg10=0.00 avg60=0.00 avg300=0.00 total=42\n"
	hosttest.WriteFile(t, filepath.Join(proc, "pressure", "cpu"), line)
	hosttest.WriteFile(t, filepath.Join(proc, "pressure", "io"), line+strings.Replace(line, "some", "full", 1))
	hosttest.WriteFile(t, filepath.Join(proc, "pressure", "memory"), line+strings.Replace(line, "some", "full", 1))
	c, _ := newTestPressure(t, proc)
	s := samplePressure(t, c)
	if cpu := s.Resource("cpu"); cpu == nil || cpu.Full != nil || s.Resource("irq") != nil {
		t.Fatalf("resources %+v", s.Resources)
	}
	// The missing file is named in the collector's health.
	if got := s.UnmeasuredFields(); !slices.Equal(got, []string{"pressure/irq"}) {
		t.Errorf("unmeasured %q; want pressure/irq", got)
	}
	m := sampledMetrics{asEngine(c), s}
	if n := testutil.CollectAndCount(m); n != 5 {
		t.Fatalf("%d series; want 5", n)
	}
	if n := testutil.CollectAndCount(m, "gpudiag_pressure_cpu_stalled_seconds_total", "gpudiag_pressure_irq_stalled_seconds_total"); n != 0 {
		t.Fatalf("%d series the kernel does not have", n)
	}
}

func TestPressureUnavailable(t *testing.T) {
	_, err := newPressureCollector(Config{ProcPath: t.TempDir()})
	if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "CONFIG_PSI") {
		t.Fatalf("error %v; want ErrUnavailable naming CONFIG_PSI", err)
	}
}

func TestPressureMalformed(t *testing.T) {
	for name, text := range map[string]string{
		"empty":          "",
		"not a number":   "some avg10=x avg60=0.00 avg300=0.00 total=1\n",
		"truncated line": "some avg10=0.00 avg60=0.00 avg300=0.00 tot",
	} {
		t.Run(name, func(t *testing.T) {
			proc := t.TempDir()
			path := filepath.Join(proc, "pressure", "memory")
			hosttest.WriteFile(t, path, text)
			c, _ := newTestPressure(t, proc)
			_, err := c.Sample(context.Background())
			if err == nil || !strings.Contains(err.Error(), path) {
				t.Fatalf("error %v; want one naming %s", err, path)
			}
		})
	}
}

// A /proc/pressure whose files are all unreadable or absent is a failure
// that says why, not a successful sample with no data.
func TestPressureNothingReadable(t *testing.T) {
	proc := t.TempDir()
	dir := filepath.Join(proc, "pressure")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	c, _ := newTestPressure(t, proc)
	_, err := c.Sample(context.Background())
	if err == nil || !strings.Contains(err.Error(), dir) || !strings.Contains(err.Error(), "no pressure file readable") ||
		!strings.Contains(err.Error(), "cpu: absent") {
		t.Fatalf("empty %s: %v; want an error naming it and why", dir, err)
	}
	if os.Geteuid() == 0 {
		return // mode 000 does not deny root
	}
	for _, res := range pressureResources {
		hosttest.WriteFile(t, filepath.Join(dir, res), "some avg10=0.00 avg60=0.00 avg300=0.00 total=1\n")
		if err := os.Chmod(filepath.Join(dir, res), 0); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.Sample(context.Background()); err == nil || !strings.Contains(err.Error(), "cpu: permission denied") {
		t.Fatalf("every file mode 000: %v; want an error saying permission denied", err)
	}
}

func TestPressureLive(t *testing.T) {
	if _, err := os.Stat("/proc/pressure"); err != nil {
		_, err := newPressureCollector(Config{ProcPath: "/proc"})
		if !errors.Is(err, ErrUnavailable) {
			t.Fatalf("no /proc/pressure here, yet the constructor said %v", err)
		}
		t.Skip("kernel without PSI")
	}
	c, err := newPressureCollector(Config{ProcPath: "/proc", Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	s := secondSample[sample.Pressure](t, c)
	for _, name := range []string{"cpu", "io", "memory"} {
		r := s.Resource(name)
		if r == nil || r.Some == nil {
			t.Fatalf("%s: %+v", name, r)
		}
		for _, l := range []*sample.PressureLine{r.Some, r.Full} {
			if l != nil && (l.IntervalRatio < 0 || l.IntervalRatio > 1 || l.Avg10 < 0 || l.Avg10 > 1) {
				t.Errorf("%s: %+v", name, l)
			}
		}
	}
	lintWithPromtool(t, sampledMetrics{asEngine(c), s})
}
