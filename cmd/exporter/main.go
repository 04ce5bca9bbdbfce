// Command exporter is the gpudiag daemon: it samples GPUs and the host on its
// own clock and serves the result to Prometheus.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/alecthomas/kingpin/v2"
	"github.com/alecthomas/units"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	versioncollector "github.com/prometheus/client_golang/prometheus/collectors/version"
	"github.com/prometheus/common/version"
	"github.com/prometheus/exporter-toolkit/web"
	"github.com/prometheus/exporter-toolkit/web/kingpinflag"
	"go.uber.org/zap"

	"github.com/gpudiag/gpudiag/analyzers"
	gdcollectors "github.com/gpudiag/gpudiag/collectors"
	"github.com/gpudiag/gpudiag/diagnose"
	"github.com/gpudiag/gpudiag/engine"
	"github.com/gpudiag/gpudiag/logging"
	"github.com/gpudiag/gpudiag/server"
)

// DefaultPort is gpudiag's port. The Prometheus exporter range 9100–9999 is
// fully allocated; see README "Port".
const DefaultPort = "10910"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stderr, nil); err != nil {
		fmt.Fprintln(os.Stderr, "gpudiag:", err)
		os.Exit(1)
	}
}

type options struct {
	web            *web.FlagConfig
	telemetryPath  string
	maxRequests    int
	disableExpMets bool
	interval       time.Duration
	timeout        time.Duration
	windowDuration time.Duration
	windowBytes    units.Base2Bytes
	procPath       string
	sysPath        string
	log            *logging.Config
	diagnoseSpan   time.Duration
	diagnoseRate   float64
	diagnoseBurst  int
}

func parseFlags(args []string) (*options, error) {
	app, o := newApp()
	if _, err := app.Parse(args); err != nil {
		return nil, err
	}
	if o.interval < 100*time.Millisecond {
		return nil, fmt.Errorf("--sample.interval %s is below 100ms, the shortest span GPM can measure", o.interval)
	}
	return o, nil
}

// newApp declares every flag; the README test walks the same model.
func newApp() (*kingpin.Application, *options) {
	app := kingpin.New("exporter", "gpudiag: GPU node diagnostics exporter.")
	o := &options{}
	o.web = kingpinflag.AddFlags(app, ":"+DefaultPort)
	app.Flag("web.telemetry-path", "Path under which to expose metrics.").Default("/metrics").StringVar(&o.telemetryPath)
	app.Flag("web.max-requests", "Maximum number of parallel scrape requests; 0 disables the limit.").Default("40").IntVar(&o.maxRequests)
	app.Flag("web.disable-exporter-metrics", "Exclude the Go runtime, process and promhttp metrics of the exporter itself.").BoolVar(&o.disableExpMets)
	app.Flag("sample.interval", "How often collectors sample. GPM needs at least 100ms between samples.").Default("1s").DurationVar(&o.interval)
	app.Flag("sample.timeout", "How long one collector's sample may take before it is reported failed; 0 means the sample interval.").Default("0s").DurationVar(&o.timeout)
	app.Flag("window.duration", "Span of recent samples kept in memory for the analyzers.").Default("10m").DurationVar(&o.windowDuration)
	app.Flag("window.max-bytes", "Memory bound of the sample window whatever the number of GPUs; the span shrinks to fit.").Default("16MiB").BytesVar(&o.windowBytes)
	app.Flag("diagnose.span", "Span of samples each verdict is computed over.").Default("10s").DurationVar(&o.diagnoseSpan)
	app.Flag("web.diagnose-rate", "Requests per second /diagnose serves (token bucket); 0 disables the limit.").Default("2").Float64Var(&o.diagnoseRate)
	app.Flag("web.diagnose-burst", "Burst of /diagnose requests allowed above the rate.").Default("5").IntVar(&o.diagnoseBurst)
	app.Flag("path.procfs", "procfs mountpoint.").Default("/proc").StringVar(&o.procPath)
	app.Flag("path.sysfs", "sysfs mountpoint.").Default("/sys").StringVar(&o.sysPath)
	o.log = logging.AddFlags(app)
	gdcollectors.AddFlags(app)
	app.Version(version.Print("gpudiag"))
	app.HelpFlag.Short('h')
	return app, o
}

// run starts the daemon and returns when ctx is done and everything it
// started has stopped. ready, when set, receives the bound server's handler
// for tests.
func run(ctx context.Context, args []string, logOut io.Writer, ready chan<- http.Handler) error {
	o, err := parseFlags(args)
	if err != nil {
		return err
	}
	log, err := logging.New(*o.log, logOut)
	if err != nil {
		return err
	}
	defer func() { _ = log.Sync() }()
	log.Info("starting gpudiag", zap.String("version", version.Info()), zap.String("build", version.BuildContext()))

	cs, err := gdcollectors.Build(gdcollectors.Config{ProcPath: o.procPath, SysPath: o.sysPath, Logger: log})
	if err != nil {
		return err
	}
	window := engine.NewWindow(o.windowDuration, int(o.windowBytes))
	thresholds := analyzers.DefaultThresholds
	thresholds.SpanSeconds = o.diagnoseSpan.Seconds()
	runner := diagnose.NewRunner(window, thresholds)
	eng := engine.New(engine.Options{Interval: o.interval, Timeout: o.timeout, Window: window, Logger: log,
		OnSample: runner.OnSample})
	for _, c := range cs {
		eng.Add(c, 0)
	}

	reg := prometheus.NewRegistry()
	reg.MustRegister(versioncollector.NewCollector("gpudiag"), runner.Metrics())
	var instr prometheus.Registerer
	if !o.disableExpMets {
		reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
		instr = reg
	}
	slogger := logging.Slog(log)
	handler, err := server.New(server.Options{TelemetryPath: o.telemetryPath, MaxRequests: o.maxRequests,
		Gatherer: server.Merge(eng, reg), Instrumenter: instr, Logger: slogger,
		Diagnose: runner.Handler(diagnose.HandlerOptions{MaxSpan: o.windowDuration,
			RatePerSecond: o.diagnoseRate, Burst: o.diagnoseBurst})})
	if err != nil {
		return err
	}

	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		eng.Run(runCtx)
	}()

	srv := &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second}
	serveErr := make(chan error, 1)
	wg.Add(1)
	go func() {
		defer wg.Done()
		serveErr <- web.ListenAndServe(srv, o.web, slogger)
	}()
	if ready != nil {
		ready <- handler
	}

	select {
	case <-ctx.Done():
		log.Info("shutting down")
	case err = <-serveErr:
		if errors.Is(err, http.ErrServerClosed) {
			err = nil
		}
	}
	shutdownCtx, cancelShutdown := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancelShutdown()
	_ = srv.Shutdown(shutdownCtx)
	cancel()
	wg.Wait()
	for _, c := range cs {
		if cl, ok := c.(io.Closer); ok {
			if cerr := cl.Close(); cerr != nil {
				log.Warn("closing collector", zap.String("collector", c.Name()), zap.Error(cerr))
			}
		}
	}
	log.Info("stopped")
	return err
}
