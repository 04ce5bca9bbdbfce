// Command exporter is the gpudiag daemon: it samples GPUs and the host on its
// own clock and serves the result to Prometheus.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"syscall"
	"text/template"
	"time"

	"github.com/KimMachineGun/automemlimit/memlimit"
	"github.com/alecthomas/kingpin/v2"
	"github.com/alecthomas/units"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	versioncollector "github.com/prometheus/client_golang/prometheus/collectors/version"
	"github.com/prometheus/common/version"
	"github.com/prometheus/exporter-toolkit/web"
	"github.com/prometheus/exporter-toolkit/web/kingpinflag"
	"go.uber.org/zap"
	"golang.org/x/net/netutil"

	"github.com/gpudiag/gpudiag/analyzers"
	gdcollectors "github.com/gpudiag/gpudiag/collectors"
	"github.com/gpudiag/gpudiag/diagnose"
	"github.com/gpudiag/gpudiag/engine"
	"github.com/gpudiag/gpudiag/logging"
	"github.com/gpudiag/gpudiag/record"
	"github.com/gpudiag/gpudiag/record/replay"
	"github.com/gpudiag/gpudiag/server"
)

// DefaultPort is gpudiag's port. The Prometheus exporter range 9100–9999 is
// fully allocated; see README "Port".
const DefaultPort = "10910"

// healthMaxConnections caps the health listener's connections.
const healthMaxConnections = 16

func main() {
	// The Go runtime's soft memory limit: 75% of the daemon's cgroup limit
	// (the container's limits.memory, systemd's MemoryMax). The other
	// quarter is for what the runtime does not count, NVML's or DCGM's own
	// allocations (16 MB measured with NVML) and the binary's pages, so the
	// collector works harder before the kernel would kill the daemon. No
	// limit outside a cgroup that sets one; GOMEMLIMIT, or AUTOMEMLIMIT (a
	// ratio, or "off"), in the environment take precedence.
	_, _ = memlimit.Set(memlimit.WithRatio(0.75))
	applyGOMAXPROCS = true
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	code, err := run(ctx, os.Args[1:], os.Stdout, os.Stderr, nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, "gpudiag:", err)
	}
	os.Exit(code)
}

type options struct {
	web            *web.FlagConfig
	telemetryPath  string
	maxRequests    int
	disableExpMets bool
	// gpuIdentity puts gdcollectors.GPUIdentityLabels on every GPU series.
	gpuIdentity    bool
	interval       time.Duration
	quietInterval  time.Duration
	timeout        time.Duration
	windowDuration time.Duration
	windowBytes    units.Base2Bytes
	procPath       string
	sysPath        string
	log            *logging.Config
	diagnoseSpan   time.Duration
	diagnoseRate   float64
	diagnoseBurst  int
	http           httpFlags
	command        string
	diagnoseFor    time.Duration
	diagnoseFormat string
	recordPath     string
	replayPath     string
	replaySpeed    float64
	replayLoop     bool
	replayLive     []string
	job            jobOptions
	nccl           ncclOptions
	cpuProfile     string
	pprof          bool
	grafanaURL     string
	gomaxprocs     int
	memoryLimit    units.Base2Bytes
}

// applyGOMAXPROCS is set by main: --runtime.gomaxprocs changes the process's
// runtime, which tests that call run in their own process must not.
var applyGOMAXPROCS bool

// httpFlags bound what clients can hold of the HTTP server (issue 15;
// docs/security.md "Network clients").
type httpFlags struct {
	maxConnections      int
	readTimeout         time.Duration
	writeTimeout        time.Duration
	idleTimeout         time.Duration
	healthAddress       string
	diagnoseGlobalRate  float64
	diagnoseGlobalBurst int
	trustedProxies      []string
	trusted             []netip.Prefix // trustedProxies, parsed
}

// check refuses settings that would not do what they say.
func (h *httpFlags) check(o *options) error {
	for name, d := range map[string]time.Duration{"--web.read-timeout": h.readTimeout,
		"--web.write-timeout": h.writeTimeout, "--web.idle-timeout": h.idleTimeout} {
		if d < 0 {
			return fmt.Errorf("%s %s is negative", name, d)
		}
	}
	if h.maxConnections < 0 {
		return fmt.Errorf("--web.max-connections %d is negative", h.maxConnections)
	}
	if o.diagnoseRate > 0 && o.diagnoseBurst < 1 {
		return fmt.Errorf("--web.diagnose-burst %d would refuse every /diagnose request; at least 1", o.diagnoseBurst)
	}
	if h.diagnoseGlobalRate > 0 && h.diagnoseGlobalBurst < 1 {
		return fmt.Errorf("--web.diagnose-global-burst %d would refuse every /diagnose request; at least 1", h.diagnoseGlobalBurst)
	}
	if h.healthAddress != "" {
		if _, _, err := net.SplitHostPort(h.healthAddress); err != nil {
			return fmt.Errorf("--web.health-address: %w", err)
		}
	}
	var err error
	if h.trusted, err = diagnose.ParseTrustedProxies(h.trustedProxies); err != nil {
		return fmt.Errorf("--web.diagnose-trusted-proxy: %w", err)
	}
	return nil
}

func parseFlags(args []string) (*options, error) {
	app, o := newApp()
	cmd, err := app.Parse(args)
	if err != nil {
		return nil, err
	}
	o.command = cmd
	if o.recordPath != "" && o.replayPath != "" {
		return nil, errors.New("--record and --replay exclude each other")
	}
	if o.replayLoop && (o.replayPath == "" || cmd == "diagnose") {
		return nil, errors.New("--replay.loop needs --replay and the serve command (diagnose reads the trace once)")
	}
	if len(o.replayLive) > 0 && o.replayPath == "" {
		return nil, errors.New("--replay.live-collector needs --replay")
	}
	if o.replaySpeed < 0 {
		return nil, fmt.Errorf("--replay.speed %v is negative", o.replaySpeed)
	}
	if o.gomaxprocs < 0 {
		return nil, fmt.Errorf("--runtime.gomaxprocs %d is negative", o.gomaxprocs)
	}
	if err := o.http.check(o); err != nil {
		return nil, err
	}
	if o.grafanaURL != "" {
		if u, err := url.Parse(o.grafanaURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, fmt.Errorf("--web.grafana-url %q: want an http or https URL, like https://grafana.example.com", o.grafanaURL)
		}
	}
	if o.interval < 100*time.Millisecond {
		return nil, fmt.Errorf("--sample.interval %s is below 100ms, the shortest span GPM can measure", o.interval)
	}
	return o, nil
}

// newApp declares every flag; the README test walks the same model.
func newApp() (*kingpin.Application, *options) {
	app := kingpin.New("gpudiag", "gpudiag: says what bounds each GPU of this node (compute, communication, I/O or host), with evidence and a fix.")
	o := &options{}
	o.web = kingpinflag.AddFlags(app, ":"+DefaultPort)
	app.Flag("web.telemetry-path", "Path under which to expose metrics.").Default("/metrics").StringVar(&o.telemetryPath)
	app.Flag("web.max-requests", "Maximum number of parallel scrape requests; 0 disables the limit.").Default("40").IntVar(&o.maxRequests)
	app.Flag("web.disable-exporter-metrics", "Exclude the Go runtime, process and promhttp metrics of the exporter itself.").BoolVar(&o.disableExpMets)
	app.Flag("metrics.gpu-identity-labels", "Put uuid, model, pod, namespace and container on every gpudiag_gpu_* series with a gpu label, as dcgm-exporter does (five more label values a series; a series starts anew when a new pod takes its GPU).").BoolVar(&o.gpuIdentity)
	app.Flag("sample.interval", "How often collectors sample. GPM needs at least 100ms between samples.").Default("1s").DurationVar(&o.interval)
	app.Flag("sample.quiet-interval", "How often the host collectors sample, and the node is analysed (at least once a --diagnose.span), while no GPU of the node has work (every GPU idle with no process): the GPUs keep --sample.interval, and the first sign of work brings every collector and the analysis back to it at once. 0 or anything up to --sample.interval keeps every collector at --sample.interval.").Default("5s").DurationVar(&o.quietInterval)
	app.Flag("sample.timeout", "How long one collector's sample may take before it is reported failed; 0 means the sample interval.").Default("0s").DurationVar(&o.timeout)
	app.Flag("window.duration", "Span of recent samples kept in memory for the analyzers.").Default("10m").DurationVar(&o.windowDuration)
	app.Flag("window.max-bytes", "Memory bound of the sample window whatever the number of GPUs; the span shrinks to fit.").Default("16MiB").BytesVar(&o.windowBytes)
	app.Flag("diagnose.span", "Span of samples each verdict is computed over.").Default("10s").DurationVar(&o.diagnoseSpan)
	app.Flag("web.diagnose-rate", "Requests per second /diagnose serves each client (remote IP; token bucket); 0 disables the per-client limit.").Default("2").Float64Var(&o.diagnoseRate)
	app.Flag("web.diagnose-burst", "Burst of /diagnose requests each client may make above its rate.").Default("20").IntVar(&o.diagnoseBurst)
	app.Flag("web.diagnose-global-rate", "Requests per second /diagnose serves all clients together, a ceiling that protects the node; 0 disables it.").Default("10").Float64Var(&o.http.diagnoseGlobalRate)
	app.Flag("web.diagnose-global-burst", "Burst of /diagnose requests of all clients together above the global rate.").Default("40").IntVar(&o.http.diagnoseGlobalBurst)
	app.Flag("web.diagnose-trusted-proxy", "A reverse proxy (CIDR or address) whose X-Forwarded-For names the /diagnose client for the per-client limit (repeatable); anyone else's X-Forwarded-For is ignored.").PlaceHolder("CIDR").StringsVar(&o.http.trustedProxies)
	app.Flag("web.grafana-url", "Grafana the /diagnose page links to: its node dashboard (uid gpudiag-node) for this instance; empty: no link.").PlaceHolder("URL").StringVar(&o.grafanaURL)
	app.Flag("web.max-connections", "Most connections open at once on each listen address; more wait in the kernel's queue until one closes. Bounds the daemon's file descriptors and memory; 0 disables the limit.").Default("256").IntVar(&o.http.maxConnections)
	app.Flag("web.read-timeout", "Longest time a client may take to send a whole request; 0 disables it.").Default("30s").DurationVar(&o.http.readTimeout)
	app.Flag("web.write-timeout", "Longest time a response may take to write (a pprof profile gets its ?seconds= on top); a client that stops reading loses the connection then. 0 disables it.").Default("1m").DurationVar(&o.http.writeTimeout)
	app.Flag("web.idle-timeout", "How long a keep-alive connection may wait for its next request before the daemon closes it; 0 means the read timeout.").Default("2m").DurationVar(&o.http.idleTimeout)
	app.Flag("web.health-address", "Also serve /healthz alone, without TLS or basic auth, on this address (host:port), for probes that cannot authenticate; empty: off. The Kubernetes DaemonSet uses 127.0.0.1:10911.").PlaceHolder("HOST:PORT").StringVar(&o.http.healthAddress)
	app.Flag("record", "Append every sample to this file (a compact, crash-safe trace; see docs/record.md).").PlaceHolder("FILE").StringVar(&o.recordPath)
	app.Flag("replay", "Drive the daemon from a recorded trace instead of the live collectors, in the trace's own time.").PlaceHolder("FILE").StringVar(&o.replayPath)
	app.Flag("replay.speed", "Replay speed as a multiple of real time; 0 replays as fast as possible.").Default("1").Float64Var(&o.replaySpeed)
	app.Flag("web.enable-pprof", "Serve Go's runtime profiles under /debug/pprof/, behind the web config's TLS and basic auth like every endpoint; off by default.").BoolVar(&o.pprof)
	app.Flag("replay.live-collector", "With --replay, also run this collector live beside the trace (repeatable), e.g. podresources against the node's kubelet: its samples join the replayed ones in the same window. It must not be in the trace.").PlaceHolder("NAME").StringsVar(&o.replayLive)
	app.Flag("replay.loop", "Replay the trace over and over as if live (demos, soak tests): the trace starts now, each pass follows the last, counters carry on across passes and NCCL facts persist (docs/record.md).").BoolVar(&o.replayLoop)
	app.Flag("debug.cpu-profile", "Write a Go CPU profile of the whole run to this file (for `go tool pprof`); nothing is served over HTTP.").PlaceHolder("FILE").StringVar(&o.cpuProfile)
	app.Flag("runtime.memory-limit", "Soft limit on the memory the Go runtime manages (GOMEMLIMIT): past it the garbage collector runs more often rather than let the heap grow toward the container's limit. The daemon's Go heap is a few MiB in steady state and the window is bounded on its own (--window.max-bytes); NVML's own memory and the binary's pages are outside this limit. GOMEMLIMIT in the environment takes precedence; 0 sets none.").Default("128MiB").BytesVar(&o.memoryLimit)
	app.Flag("runtime.gomaxprocs", "Most CPUs that run the daemon's Go code at once (GOMAXPROCS). Its work is small reads on many clocks that mostly wait in the kernel or NVML; on a host with many CPUs more only spreads the Go scheduler's and garbage collector's work over idle CPUs. GOMAXPROCS in the environment takes precedence; 0 keeps Go's choice (the CPUs the daemon may use).").Default("1").IntVar(&o.gomaxprocs)
	app.Flag("path.procfs", "procfs mountpoint.").Default("/proc").StringVar(&o.procPath)
	app.Flag("path.sysfs", "sysfs mountpoint.").Default("/sys").StringVar(&o.sysPath)
	o.log = logging.AddFlags(app)
	gdcollectors.AddFlags(app)
	app.Command("serve", "Run the daemon: sample on its own clock and serve /metrics and /diagnose (the default).").Default()
	diag := app.Command("diagnose", "Sample for a while, print the diagnosis and exit: 0 healthy, 2 findings, 3 a bottleneck (communication, I/O, host), 4 GPUs not classifiable, 5 no GPU, 1 error.")
	diag.Flag("for", "How long to sample before diagnosing.").Default("30s").DurationVar(&o.diagnoseFor)
	diag.Flag("format", "Output format: text or json.").Default("text").EnumVar(&o.diagnoseFormat, "text", "json")
	job := app.Command("job", "Diagnose one training job across its nodes from Prometheus (the daemons' series joined on gpudiag_gpu_job_info) and exit: 0 healthy, 2 findings, 3 a bottleneck (communication, I/O, host), 1 error or no such job.")
	job.Flag("prometheus.url", "The Prometheus that scrapes the job's nodes.").Required().StringVar(&o.job.prometheusURL)
	job.Flag("job-id", "The job as gpudiag names it: the Slurm job ID, the Kubernetes workload, torchrun's run ID.").StringVar(&o.job.sel.JobID)
	job.Flag("job-source", "slurm, kubernetes or torchrun, when two sources share the ID.").StringVar(&o.job.sel.JobSource)
	job.Flag("pod", "A Kubernetes pod of the job, namespace/name, instead of --job-id.").StringVar(&o.job.sel.Pod)
	job.Flag("format", "Output format: text or json.").Default("text").EnumVar(&o.job.format, "text", "json")
	job.Flag("timeout", "Deadline for all the queries.").Default("30s").DurationVar(&o.job.timeout)
	job.Flag("query-timeout", "Deadline for each query; a Prometheus slower than this is named as the cause.").Default("10s").DurationVar(&o.job.queryTimeout)
	job.Flag("max-response-bytes", "Largest answer read from Prometheus for one query; a larger one is an error, not memory.").Default("32MiB").BytesVar(&o.job.maxResponseBytes)
	job.Flag("window", "Range of the rates (SM activity, port traffic), as the recording rules' 5m; shorter for a job that just started.").Default("5m").DurationVar(&o.job.window)
	addNCCLCommand(app, &o.nccl)
	app.Version(version.Print("gpudiag"))
	app.HelpFlag.Short('h')
	app.UsageFuncs(template.FuncMap{"OwnFlags": ownFlags})
	app.UsageTemplate(strings.Replace(kingpin.DefaultUsageTemplate,
		"{{if .Context.Flags -}}\nFlags:\n{{.Context.Flags|FlagsToTwoColumns|FormatTwoColumns}}",
		"{{if OwnFlags .Context.SelectedCommand .Context.Flags -}}\nFlags:\n{{OwnFlags .Context.SelectedCommand .Context.Flags|FlagsToTwoColumns|FormatTwoColumns}}", 1))
	return app, o
}

// standaloneCommands read none of the daemon's flags: their help lists
// only their own flags and --help, not the daemon's hundreds.
var standaloneCommands = map[string]bool{"job": true, "nccl": true}

// ownFlags is the Flags section of the help: a standalone command's own
// flags and --help, every flag the context knows otherwise.
func ownFlags(cmd *kingpin.CmdModel, all []*kingpin.FlagModel) []*kingpin.FlagModel {
	if cmd == nil || !standaloneCommands[cmd.FullCommand] {
		return all
	}
	var own []*kingpin.FlagModel
	for _, f := range all {
		if f.Name == "help" {
			own = append(own, f)
		}
	}
	return append(own, cmd.Flags...)
}

// run parses args and runs the chosen command (serve by default). It returns
// the process exit code and, for failures, the error to print.
func run(ctx context.Context, args []string, out, logOut io.Writer, ready chan<- http.Handler) (int, error) {
	o, err := parseFlags(args)
	if err != nil {
		return exitError, err
	}
	log, err := logging.New(*o.log, logOut)
	if err != nil {
		return exitError, err
	}
	defer func() { _ = log.Sync() }()
	if applyGOMAXPROCS && o.gomaxprocs > 0 && os.Getenv("GOMAXPROCS") == "" {
		runtime.GOMAXPROCS(o.gomaxprocs)
	}
	if applyGOMAXPROCS && o.memoryLimit > 0 && os.Getenv("GOMEMLIMIT") == "" {
		debug.SetMemoryLimit(int64(o.memoryLimit))
	}
	if o.cpuProfile != "" {
		// A profile names the daemon's functions and its inputs' shapes:
		// the owner's only, like every file the daemon writes.
		f, err := os.OpenFile(o.cpuProfile, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
		if err != nil {
			return exitError, fmt.Errorf("--debug.cpu-profile: %w", err)
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return exitError, fmt.Errorf("--debug.cpu-profile: %w", err)
		}
		defer pprof.StopCPUProfile()
	}
	if o.command == "job" {
		return runJob(ctx, o.job, out)
	}
	if o.command == "nccl" {
		return runNCCL(ctx, o.nccl, out)
	}
	d, err := newDaemon(o, log)
	if err != nil {
		return exitError, err
	}
	defer d.close()
	if o.command == "diagnose" {
		return d.diagnoseOnce(ctx, out)
	}
	if err := d.serve(ctx, ready); err != nil {
		return exitError, err
	}
	return exitOK, nil
}

// daemon is everything both commands share: collectors on the engine's
// clock, the window, the analyzers' runner, and the registry.
type daemon struct {
	o      *options
	log    *zap.Logger
	cs     []engine.Collector
	window *engine.Window
	runner *diagnose.Runner
	eng    *engine.Engine
	reg    *prometheus.Registry
	now    func() time.Time

	// Replay mode: the trace's clock and what feeds the engine from it.
	clock    *replay.Clock
	replay   *replay.Replayer
	recorder *recorder
	// live are collectors run live beside the replay, on liveEng.
	live    []engine.Collector
	liveEng *engine.Engine
}

func newDaemon(o *options, log *zap.Logger) (*daemon, error) {
	log.Info("starting gpudiag", zap.String("version", version.Info()), zap.String("build", version.BuildContext()),
		zap.Int64("go_memory_limit_bytes", debug.SetMemoryLimit(-1)), zap.Int("gomaxprocs", runtime.GOMAXPROCS(0)))
	d := &daemon{o: o, log: log, now: time.Now}
	if o.replayPath != "" {
		names, intervals, first, err := replay.Scan(o.replayPath)
		if err != nil {
			return nil, err
		}
		var loops map[string]*replay.Loop
		if d.cs, _, loops, err = replay.Collectors(names, intervals, o.replayLoop, recordedCollector); err != nil {
			return nil, fmt.Errorf("replay %s: %w", o.replayPath, err)
		}
		d.clock = &replay.Clock{}
		d.replay = &replay.Replayer{Path: o.replayPath, Speed: o.replaySpeed, Loop: o.replayLoop,
			Gap: replay.LoopGap(intervals, o.interval), Lookup: recordedCollector, Clock: d.clock, Log: log}
		if o.replayLoop {
			// The loop looks live: the trace's start maps to now.
			d.replay.First, d.replay.Start, d.replay.Loops = first, time.Now(), loops
			d.clock.Set(d.replay.Start)
		} else {
			d.clock.Set(first)
		}
		if o.command == "diagnose" {
			d.replay.Speed = 0 // a trace is diagnosed as fast as it reads
		}
		d.now = d.clock.Now
		for _, n := range o.replayLive {
			if slices.Contains(names, n) {
				return nil, fmt.Errorf("--replay.live-collector=%s: the trace holds that collector's samples", n)
			}
		}
		if len(o.replayLive) > 0 {
			if d.live, err = gdcollectors.Build(gdcollectors.Config{ProcPath: o.procPath, SysPath: o.sysPath, Logger: log,
				Interval: o.interval, Only: o.replayLive}); err != nil {
				return nil, fmt.Errorf("--replay.live-collector: %w", err)
			}
		}
		log.Info("replaying a recorded trace instead of sampling", zap.String("file", o.replayPath),
			zap.Strings("collectors", names), zap.Float64("speed", o.replaySpeed), zap.Bool("loop", o.replayLoop))
	} else {
		cs, err := gdcollectors.Build(gdcollectors.Config{ProcPath: o.procPath, SysPath: o.sysPath, Logger: log, Interval: o.interval})
		if err != nil {
			return nil, err
		}
		d.cs = cs
	}
	d.window = engine.NewWindow(o.windowDuration, int(o.windowBytes))
	thresholds := analyzers.DefaultThresholds
	thresholds.SpanSeconds = o.diagnoseSpan.Seconds()
	d.runner = diagnose.NewRunner(d.window, thresholds)
	d.reg = prometheus.NewRegistry()
	// What the export boundary drops (a series client_golang refuses, a
	// panic in a Collect or a collector's Metrics) is counted in one
	// place, which the engine exports.
	drops := engine.NewDrops(log)
	d.reg.MustRegister(versioncollector.NewCollector("gpudiag"), d.runner.Metrics().CountDrops(drops),
		d.runner.AccountingMetrics().CountDrops(drops))
	analyse := d.runner.OnSample
	quietInterval := o.quietInterval
	var quiet *quietClock
	if d.replay != nil || o.command == "diagnose" || quietInterval <= o.interval {
		// A replay's samples come at their recorded times; a one-shot
		// diagnosis wants every reading its few seconds can give.
		quietInterval = 0
	} else {
		// A node whose GPUs have no work needs no host reading and no
		// analysis a second: the GPU samples say when it is quiet.
		// An analysis at least once a span: the GPU-hour accounting
		// counts a longer gap as time not analysed.
		quiet = &quietClock{interval: min(quietInterval, o.diagnoseSpan), analyse: analyse}
		analyse = quiet.OnSample
	}
	onSample := analyse
	if o.recordPath != "" {
		w, err := record.Create(o.recordPath)
		if err != nil {
			return nil, fmt.Errorf("--record: %w", err)
		}
		if w.TornBytes > 0 {
			log.Warn("the record file ended in a torn frame, as a crash mid-write leaves it; cut it off and appending after the last whole frame",
				zap.String("file", o.recordPath), zap.Int64("cut_bytes", w.TornBytes))
		}
		d.recorder = newRecorder(w, log)
		d.recorder.drops = drops
		d.reg.MustRegister(d.recorder)
		onSample = func(c string, t time.Time, s any) {
			analyse(c, t, s)
			d.recorder.OnSample(c, t, s)
		}
		log.Info("recording samples", zap.String("file", o.recordPath))
	}
	d.eng = engine.New(engine.Options{Interval: o.interval, Timeout: o.timeout, Window: d.window, Logger: log,
		OnSample: onSample, Now: d.now, Drops: drops, QuietInterval: quietInterval})
	if quiet != nil {
		quiet.eng = d.eng
	}
	d.runner.ReportCollectors(d.statuses)
	for _, c := range d.cs {
		d.eng.Add(c, 0)
	}
	if len(d.live) > 0 {
		// The live collectors beside a replay run on an engine of their
		// own, on the replay's clock, into the same window. The window is
		// the replay engine's, which alone exports its self-metrics (an
		// engine exports them for every collector of its window: two
		// engines made each series twice, a gather error each), so the
		// live engine adds its samples to it as it hands them on.
		for _, c := range d.live {
			d.window.Register(c.Name())
		}
		liveOnSample := func(c string, t time.Time, s any) {
			d.window.Add(c, t, s)
			onSample(c, t, s)
		}
		d.liveEng = engine.New(engine.Options{Interval: o.interval, Timeout: o.timeout, Logger: log,
			OnSample: liveOnSample, Now: d.now})
		for _, c := range d.live {
			d.liveEng.Add(c, 0)
		}
	}
	if d.replay != nil {
		d.replay.Engine, d.replay.Window = d.eng, d.window
	}
	return d, nil
}

// close releases the collectors (NVML shutdown, DCGM disconnect) and the
// record file.
func (d *daemon) close() {
	if d.recorder != nil {
		if err := d.recorder.Close(); err != nil {
			d.log.Warn("closing the record file", zap.Error(err))
		}
	}
	for _, c := range append(d.cs, d.live...) {
		if cl, ok := c.(io.Closer); ok {
			if err := cl.Close(); err != nil {
				d.log.Warn("closing collector", zap.String("collector", c.Name()), zap.Error(err))
			}
		}
	}
	d.log.Info("stopped")
}

// serve runs the collectors and the HTTP server until ctx is done, then stops
// both and waits for them.
func (d *daemon) serve(ctx context.Context, ready chan<- http.Handler) error {
	o := d.o
	var instr prometheus.Registerer
	if !o.disableExpMets {
		d.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
		instr = d.reg
	}
	slogger := logging.Slog(d.log)
	if o.pprof && (o.web.WebConfigFile == nil || *o.web.WebConfigFile == "") {
		d.log.Warn("--web.enable-pprof without --web.config.file: /debug/pprof is open to anyone who reaches the port")
	}
	handler, err := server.New(server.Options{TelemetryPath: o.telemetryPath, MaxRequests: o.maxRequests,
		Gatherer: d.gatherer(), Instrumenter: instr, Logger: slogger,
		Diagnose: d.runner.Handler(diagnose.HandlerOptions{MaxSpan: o.windowDuration,
			RatePerSecond: o.diagnoseRate, Burst: o.diagnoseBurst, GlobalRatePerSecond: o.http.diagnoseGlobalRate,
			GlobalBurst: o.http.diagnoseGlobalBurst, TrustedProxies: o.http.trusted, Now: d.now,
			GrafanaURL: o.grafanaURL, MetricsPath: o.telemetryPath}),
		Pprof: o.pprof})
	if err != nil {
		return err
	}
	// Listen before sampling starts: an address in use fails the start.
	httpOpts := server.HTTPOptions{ReadTimeout: o.http.readTimeout, WriteTimeout: o.http.writeTimeout,
		IdleTimeout: o.http.idleTimeout, Logger: slogger}
	listeners, err := server.Listen(o.web, o.http.maxConnections, slogger)
	if err != nil {
		return err
	}
	var healthSrv *http.Server
	var healthL net.Listener
	if o.http.healthAddress != "" {
		if healthL, err = net.Listen("tcp", o.http.healthAddress); err != nil {
			for _, l := range listeners {
				_ = l.Close()
			}
			return fmt.Errorf("--web.health-address: %w", err)
		}
		// Probes open a connection or two a period; the cap only bounds
		// what a local client could hold.
		healthL = netutil.LimitListener(healthL, healthMaxConnections)
		healthSrv = server.NewHTTPServer(server.HealthOnly(), httpOpts)
		d.log.Info("serving /healthz alone, without TLS or auth, for probes", zap.String("address", healthL.Addr().String()))
	}

	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		if d.replay == nil {
			d.eng.Run(runCtx)
			return
		}
		if d.liveEng != nil {
			wg.Add(1)
			go func() {
				defer wg.Done()
				d.liveEng.Run(runCtx)
			}()
		}
		if err := d.replay.Run(runCtx); err != nil {
			d.log.Error("replay", zap.Error(err))
		}
	}()

	srv := server.NewHTTPServer(handler, httpOpts)
	serveErr := make(chan error, 2)
	wg.Add(1)
	go func() {
		defer wg.Done()
		// ServeMultiple applies the web config (TLS, basic auth) and
		// closes nothing: the listeners are closed below.
		serveErr <- web.ServeMultiple(listeners, srv, o.web, slogger)
	}()
	if healthSrv != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			serveErr <- healthSrv.Serve(healthL)
		}()
	}
	if ready != nil {
		ready <- handler
	}

	select {
	case <-ctx.Done():
		d.log.Info("shutting down")
	case err = <-serveErr:
		if errors.Is(err, http.ErrServerClosed) {
			err = nil
		}
	}
	shutdownCtx, cancelShutdown := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancelShutdown()
	_ = srv.Shutdown(shutdownCtx)
	if healthSrv != nil {
		_ = healthSrv.Shutdown(shutdownCtx)
	}
	for _, l := range listeners {
		_ = l.Close()
	}
	cancel()
	wg.Wait()
	return err
}

// Exit codes of the diagnose command; documented in the README. When several
// apply, the first in this order wins: error, bottleneck, unclassified, no
// GPU, findings, healthy. A bound node says so whatever its findings, and a
// node with no GPU is never called healthy: a GPU node whose driver is gone
// must not pass a health check.
const (
	exitOK         = 0 // healthy: compute-bound or idle, no warning or critical finding
	exitError      = 1 // the command could not run
	exitFindings   = 2 // warning or critical findings, no bottleneck
	exitBottleneck = 3 // the node is communication-, I/O- or host-bound
	exitUnknown    = 4 // GPUs present but none could be classified
	exitNoGPU      = 5 // no GPU seen: no GPU backend (driver missing) or none on the host
)

// diagnoseOnce samples for --for, prints the diagnosis of that span and
// returns the exit code that summarises it.
func (d *daemon) diagnoseOnce(ctx context.Context, out io.Writer) (int, error) {
	// The first sample's time: a trace's start, or now.
	start := d.now()
	if d.replay != nil {
		// A trace is diagnosed over its last --for.
		if err := d.replay.Run(ctx); err != nil {
			return exitError, err
		}
	} else {
		runCtx, cancel := context.WithTimeout(ctx, d.o.diagnoseFor)
		defer cancel()
		d.eng.Run(runCtx)
		if ctx.Err() != nil {
			return exitError, ctx.Err()
		}
	}
	// What was sampled, not --for: a trace shorter than --for, or a run
	// cut short, is diagnosed over what it holds.
	span := min(d.o.diagnoseFor, d.now().Sub(start))
	if span <= 0 {
		span = d.o.diagnoseFor
	}
	diag := d.diagnosisOver(span)
	hist := d.runner.History()
	diagnose.HeldSince(&diag.Diagnosis, hist)
	switch d.o.diagnoseFormat {
	case "json":
		if err := diagnose.WriteJSON(out, &diag); err != nil {
			return exitError, err
		}
	default:
		diagnose.WriteTextTimeline(out, &diag, hist)
	}
	return exitCode(&diag.Diagnosis), nil
}

// diagnosisOver is the diagnosis of the last span of the window (at most
// the window's duration), with the collectors' health.
func (d *daemon) diagnosisOver(span time.Duration) diagnose.Report {
	if span > d.o.windowDuration {
		span = d.o.windowDuration
	}
	return diagnose.Report{Diagnosis: d.runner.Over(d.now(), span), Collectors: diagnose.Health(d.statuses())}
}

// statuses are the collectors' health, the live ones beside a replay
// included.
func (d *daemon) statuses() []engine.Status {
	st := d.eng.Statuses()
	if d.liveEng != nil {
		st = append(st, d.liveEng.Statuses()...)
	}
	return st
}

// gatherer serves the collectors' metrics and the daemon's own, with the
// GPUs' identity on their series when --metrics.gpu-identity-labels.
func (d *daemon) gatherer() prometheus.Gatherer {
	var g prometheus.Gatherer
	if d.liveEng != nil {
		// Both engines export the collectors' health families:
		// prometheus.Gatherers merges them series by series.
		g = server.Merge(prometheus.Gatherers{d.eng, d.liveEng}, d.reg)
	} else {
		g = server.Merge(d.eng, d.reg)
	}
	if d.o.gpuIdentity {
		g = gdcollectors.WithGPUIdentityLabels(g, d.window, func() time.Time { return d.now() })
	}
	return g
}

func exitCode(d *analyzers.Diagnosis) int {
	switch d.Node.Class {
	case analyzers.ClassCommunication, analyzers.ClassIO, analyzers.ClassHost:
		return exitBottleneck
	case analyzers.ClassUnknown:
		switch {
		case d.Node.SubKind == analyzers.SubGPUDown:
			// A GPU lost leads the node's verdict (it is critical), with
			// its gpu_lost finding: known broken, not unclassified.
			return exitFindings
		case len(d.GPUs) > 0:
			return exitUnknown
		}
		return exitNoGPU
	}
	for _, f := range d.Findings {
		if f.Severity == analyzers.SeverityCritical || f.Severity == analyzers.SeverityWarning {
			return exitFindings
		}
	}
	return exitOK
}

// recordedCollector is the collectors' registry as the replay looks a recorded
// collector up by name.
func recordedCollector(name string) (replay.Recorded, error) {
	rc, err := gdcollectors.ReplayCollector(name)
	if err != nil {
		return nil, err
	}
	return rc, nil
}
