// Package collectors holds one file per collector. Each file registers its
// collector in init() with a name, whether it is on by default, its own flags
// and a constructor; AddFlags and Build do the rest, as node_exporter does.
//
// Adding a collector: one file here (a sample.Key in sample/, one register
// call, Sample and Metrics), one fixture (host files in the reference host
// tree, hostfs/testdata/host; others under testdata/), one test.
package collectors

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sort"
	"time"

	"github.com/alecthomas/kingpin/v2"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/gpudiag/gpudiag/engine"
	"github.com/gpudiag/gpudiag/gpu"
	"github.com/gpudiag/gpudiag/sample"
)

// Config is what every collector's constructor gets.
type Config struct {
	// ProcPath and SysPath are where the host's /proc and /sys are mounted.
	ProcPath string
	SysPath  string
	Logger   *zap.Logger
	// Shared carries the GPU collector's findings (bus IDs, PIDs) to the
	// host collectors. Build creates one when nil.
	Shared *Shared
	// Interval is the daemon's sampling interval (backends that average
	// over their own period, like DCGM, follow it).
	Interval time.Duration
	// OwnInterval is the collector's own clock, its
	// --collector.<name>.interval, for a collector registered with an
	// ownInterval; zero samples at Interval.
	OwnInterval time.Duration
	// GPU opens the GPU collector's backends; the openers it leaves nil
	// open the real ones as the --collector.gpu.* flags say (tests set
	// fakes).
	GPU gpu.Options
	// Only, when set, builds exactly these collectors whatever their
	// --collector.<name> flags: the live ones beside a replay.
	Only []string
}

// withDefaults fills what a constructor may be handed empty (tests build
// collectors directly): a no-op logger, a Shared of its own and the
// default sampling interval.
func (c Config) withDefaults() Config {
	if c.Logger == nil {
		c.Logger = zap.NewNop()
	}
	if c.Shared == nil {
		c.Shared = &Shared{}
	}
	if c.Interval <= 0 {
		c.Interval = time.Second // the daemon's default --sample.interval
	}
	return c
}

// ErrUnavailable is returned (wrapped) by a constructor when the collector has
// nothing to read on this host; the collector is then left out with an info
// log rather than failing the daemon.
var ErrUnavailable = errors.New("not available on this host")

type registration struct {
	name       string
	defaultOn  bool
	help       string
	flags      func(app *kingpin.Application)
	newFunc    func(Config) (engine.Collector, error)
	enabledVal *bool
	replay     replaySpec
	// latest is the collector's newest sample in a window, read by its key.
	latest func(*engine.Window) (any, bool)
	// interval is the collector's own clock; nil: the daemon's.
	interval *intervalFlag
}

// intervalFlag is a collector's --collector.<name>.interval.
type intervalFlag struct {
	help  string
	value time.Duration // the default until flags are parsed
}

// collectorSpec is everything the daemon needs to know of a collector, as
// its file's init hands it to register. The key names the collector and its
// sample type, from which the replay decoding and the window access follow.
type collectorSpec[S any, C typedCollector[S]] struct {
	key       sample.Key[S]
	defaultOn bool
	help      string
	// flags adds the collector's own flags; nil when it has none.
	flags        func(*kingpin.Application)
	newCollector func(Config) (C, error)
	// metrics must not depend on the live collector's state: a replay
	// calls it on a zero collector.
	metrics func(*S, func(prometheus.Metric))
	// ownInterval gives the collector a clock of its own,
	// --collector.<name>.interval, with this default and help; its
	// constructor finds the value in Config.OwnInterval. nil: the daemon's.
	ownInterval *intervalFlag
	// cumulative says that the collector's sample accumulates what it has
	// read since it started (the NCCL log tailer keeps a finished job's
	// facts for its retention), so a looped replay (--replay.loop) keeps
	// serving the previous pass's last sample until the trace's own catches
	// up, instead of forgetting the facts at every seam.
	cumulative bool
}

var registry = map[string]*registration{}

// register is called once from each collector file's init.
func register[S any, C typedCollector[S]](spec collectorSpec[S, C]) {
	key := spec.key
	name := key.Name()
	if _, dup := registry[name]; dup {
		panic("collector registered twice: " + name)
	}
	r := &registration{name: name, defaultOn: spec.defaultOn, help: spec.help, flags: spec.flags,
		newFunc: func(cfg Config) (engine.Collector, error) {
			c, err := spec.newCollector(cfg)
			if err != nil {
				return nil, err
			}
			return keyedCollector[S, C]{c}, nil
		},
		replay: replaySpec{newSample: key.New, cumulative: spec.cumulative,
			metrics: func(s any, emit func(prometheus.Metric)) { spec.metrics(s.(*S), emit) }},
		latest: func(w *engine.Window) (any, bool) {
			e, ok := engine.Latest(w, key)
			return e.Sample, ok
		},
		interval: spec.ownInterval}
	registry[name] = r
}

// typedCollector is what a collector file implements: its samples are its
// key's type, so a collector cannot hand the window, the record or its own
// Metrics a sample of another collector's type; the compiler checks it
// where register is called.
type typedCollector[S any] interface {
	Name() string
	Sample(ctx context.Context) (*S, error)
	Metrics(s *S, emit func(prometheus.Metric))
}

// keyedCollector is a typedCollector as the engine runs it. The engine
// holds collectors of every type in one list, so the sample crosses it as
// any; it comes back as *S only here, from this collector's own Sample.
// The optional engine and daemon interfaces are passed through.
type keyedCollector[S any, C typedCollector[S]] struct{ c C }

func (k keyedCollector[S, C]) Name() string { return k.c.Name() }

func (k keyedCollector[S, C]) Sample(ctx context.Context) (any, error) {
	s, err := k.c.Sample(ctx)
	if s == nil {
		return nil, err // not a typed nil inside an any
	}
	return s, err
}

func (k keyedCollector[S, C]) Metrics(s any, emit func(prometheus.Metric)) { k.c.Metrics(s.(*S), emit) }

// Interval is the collector's own clock, 0 for the engine's.
func (k keyedCollector[S, C]) Interval() time.Duration {
	if iv, ok := any(k.c).(engine.Intervaler); ok {
		return iv.Interval()
	}
	return 0
}

// NextSample passes the collector's pace through (engine.Pacer); zero for
// a collector without one.
func (k keyedCollector[S, C]) NextSample() time.Duration {
	if p, ok := any(k.c).(engine.Pacer); ok {
		return p.NextSample()
	}
	return 0
}

// WatchesForWork passes the collector's engine.Sentinel through.
func (k keyedCollector[S, C]) WatchesForWork() bool {
	w, ok := any(k.c).(engine.Sentinel)
	return ok && w.WatchesForWork()
}

// Prompt passes the collector's prompt through (engine.Prompter); nil for
// a collector without one.
func (k keyedCollector[S, C]) Prompt() <-chan struct{} {
	if p, ok := any(k.c).(engine.Prompter); ok {
		return p.Prompt()
	}
	return nil
}

// Close releases what the collector holds (eBPF programs, NVML), if anything.
func (k keyedCollector[S, C]) Close() error {
	if cl, ok := any(k.c).(io.Closer); ok {
		return cl.Close()
	}
	return nil
}

// Names lists the registered collectors.
func Names() []string {
	out := make([]string, 0, len(registry))
	for n := range registry {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// AddFlags adds --collector.<name> (negatable as --no-collector.<name>),
// --collector.<name>.interval for a collector with a clock of its own, and
// each collector's own flags to app.
func AddFlags(app *kingpin.Application) {
	for _, name := range Names() {
		r := registry[name]
		state := "disabled"
		if r.defaultOn {
			state = "enabled"
		}
		r.enabledVal = app.Flag("collector."+name,
			fmt.Sprintf("%s (default: %s).", r.help, state)).Default(fmt.Sprint(r.defaultOn)).Bool()
		if iv := r.interval; iv != nil {
			app.Flag("collector."+name+".interval", iv.help).Default(iv.value.String()).DurationVar(&iv.value)
		}
		if r.flags != nil {
			r.flags(app)
		}
	}
}

// Build constructs the enabled collectors. A collector whose constructor
// reports ErrUnavailable is skipped with an info log; any other error fails.
func Build(cfg Config) ([]engine.Collector, error) {
	cfg = cfg.withDefaults()
	for _, name := range cfg.Only {
		if registry[name] == nil {
			return nil, fmt.Errorf("no collector named %q", name)
		}
	}
	var out []engine.Collector
	for _, name := range Names() {
		r := registry[name]
		on := r.defaultOn
		if r.enabledVal != nil {
			on = *r.enabledVal
		}
		if cfg.Only != nil {
			on = slices.Contains(cfg.Only, name)
		}
		if !on {
			continue
		}
		ccfg := cfg
		if r.interval != nil {
			ccfg.OwnInterval = r.interval.value
		}
		c, err := r.newFunc(ccfg)
		if errors.Is(err, ErrUnavailable) {
			cfg.Logger.Info("collector not available", zap.String("collector", name), zap.Error(err))
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("collector %s: %w", name, err)
		}
		out = append(out, c)
	}
	return out, nil
}
