// Package collectors holds one file per collector. Each file registers its
// collector in init() with a name, whether it is on by default, its own flags
// and a constructor; AddFlags and Build do the rest, as node_exporter does.
//
// Adding a collector: one file here (register + Sample + Metrics), one
// fixture under testdata/, one test.
package collectors

import (
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/alecthomas/kingpin/v2"
	"go.uber.org/zap"

	"github.com/gpudiag/gpudiag/engine"
	"github.com/gpudiag/gpudiag/gpu"
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
	// GPU opens the GPU collector's backends; the openers it leaves nil
	// open the real ones as the --collector.gpu.* flags say (tests set
	// fakes).
	GPU gpu.Options
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
}

var registry = map[string]*registration{}

// register is called from each collector file's init.
func register(name string, defaultOn bool, help string, flags func(*kingpin.Application),
	newFunc func(Config) (engine.Collector, error)) {
	if _, dup := registry[name]; dup {
		panic("collector registered twice: " + name)
	}
	registry[name] = &registration{name: name, defaultOn: defaultOn, help: help, flags: flags, newFunc: newFunc}
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

// AddFlags adds --collector.<name> (negatable as --no-collector.<name>) and
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
		if r.flags != nil {
			r.flags(app)
		}
	}
}

// Build constructs the enabled collectors. A collector whose constructor
// reports ErrUnavailable is skipped with an info log; any other error fails.
func Build(cfg Config) ([]engine.Collector, error) {
	cfg = cfg.withDefaults()
	var out []engine.Collector
	for _, name := range Names() {
		r := registry[name]
		on := r.defaultOn
		if r.enabledVal != nil {
			on = *r.enabledVal
		}
		if !on {
			continue
		}
		c, err := r.newFunc(cfg)
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
