package collectors

import (
	"context"
	"errors"
	"io/fs"
	"path/filepath"
	"regexp"
	"time"

	"github.com/alecthomas/kingpin/v2"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpudiag/gpudiag/engine"
	"github.com/gpudiag/gpudiag/hostfile"
	"github.com/gpudiag/gpudiag/hostfs"
	"github.com/gpudiag/gpudiag/sample"
)

// The kubelet collector reads the kubelet's CPU, memory and topology
// manager policies from its config file and the managers' checkpoints,
// read-only. It is a collector of its own, not part of tuning: its files
// live outside /proc and /sys (under the kubelet's root directory, which
// the daemon mounts on Kubernetes only), it has its own flags, and on a
// node without a kubelet it reads nothing and exports nothing.

// kubeletOptions are the collector's flags.
type kubeletOptions struct {
	config, rootDir string
}

var kubeletDefaults = kubeletOptions{config: "/var/lib/kubelet/config.yaml", rootDir: "/var/lib/kubelet"}

var kubeletFlags = kubeletDefaults

func init() {
	register(collectorSpec[sample.Kubelet, *kubeletCollector]{
		key:       sample.KubeletKey,
		defaultOn: true,
		help:      "The kubelet's CPU, memory and topology manager policies, from its config file and the managers' state files (absent on other hosts)",
		flags: func(app *kingpin.Application) {
			app.Flag("collector.kubelet.config", "The kubelet's config file (KubeletConfiguration), read-only; absent: nothing is exported.").
				Default(kubeletDefaults.config).StringVar(&kubeletFlags.config)
			app.Flag("collector.kubelet.root-dir", "The kubelet's root directory, where its CPU and memory managers write cpu_manager_state and memory_manager_state.").
				Default(kubeletDefaults.rootDir).StringVar(&kubeletFlags.rootDir)
		},
		newCollector: func(cfg Config) (*kubeletCollector, error) { return newKubeletCollector(cfg, kubeletFlags), nil },
		metrics:      (&kubeletCollector{}).Metrics,
		ownInterval:  &intervalFlag{value: 30 * time.Second, help: "How often the kubelet's config and manager state files are read; they change when the kubelet restarts or a pod with exclusive CPUs starts."},
	})
}

type kubeletCollector struct {
	opts     kubeletOptions
	interval time.Duration
}

func newKubeletCollector(cfg Config, opts kubeletOptions) *kubeletCollector {
	return &kubeletCollector{opts: opts, interval: cfg.OwnInterval}
}

func (c *kubeletCollector) Name() string { return sample.KubeletKey.Name() }

// Interval asks the engine for a clock of its own.
func (c *kubeletCollector) Interval() time.Duration { return c.interval }

func (c *kubeletCollector) Sample(context.Context) (*sample.Kubelet, error) {
	k := &sample.Kubelet{}
	b, err := hostfile.Read(c.opts.config, hostfs.KubeletFileBytes)
	if errors.Is(err, fs.ErrNotExist) {
		return k, nil // not a Kubernetes node, or the file is not mounted
	}
	if err != nil {
		return nil, err
	}
	cfg, err := hostfs.ParseKubeletConfig(c.opts.config, b)
	if err != nil {
		return nil, err
	}
	// The kubelet's defaults (KubeletConfiguration v1beta1). A policy
	// becomes a label value: anything the kubelet could not accept is
	// exported as "invalid".
	k.Found, k.ConfigPath = true, c.opts.config
	k.CPUManagerPolicy = kubeletPolicy(cfg.CPUManagerPolicy, "none")
	k.MemoryManagerPolicy = kubeletPolicy(cfg.MemoryManagerPolicy, "None")
	k.TopologyManagerPolicy = kubeletPolicy(cfg.TopologyManagerPolicy, "none")
	k.TopologyManagerScope = kubeletPolicy(cfg.TopologyManagerScope, "container")
	k.ReservedSystemCPUs = cfg.ReservedSystemCPUs
	// A state file that cannot be read or parsed is reported in the
	// sample, not as the collector's failure: the policies stand.
	if s, ok := c.readState("cpu_manager_state", k); ok {
		k.CPUManagerState = true
		k.CPUManagerPolicy = kubeletPolicy(s.PolicyName, k.CPUManagerPolicy)
		k.DefaultCPUSet, k.ExclusiveCPUPods, k.ExclusiveContainers = s.DefaultCPUSet, s.Pods, s.Containers
	}
	if s, ok := c.readState("memory_manager_state", k); ok {
		k.MemoryManagerState = true
		k.MemoryManagerPolicy = kubeletPolicy(s.PolicyName, k.MemoryManagerPolicy)
		k.PinnedMemoryPods, k.PinnedMemContainers = s.Pods, s.Containers
	}
	return k, nil
}

func (c *kubeletCollector) readState(name string, k *sample.Kubelet) (hostfs.ManagerState, bool) {
	path := filepath.Join(c.opts.rootDir, name)
	b, err := hostfile.Read(path, hostfs.KubeletFileBytes)
	if errors.Is(err, fs.ErrNotExist) {
		return hostfs.ManagerState{}, false
	}
	var s hostfs.ManagerState
	if err == nil {
		s, err = hostfs.ParseManagerState(path, b)
	}
	if err != nil {
		k.Errors = append(k.Errors, hostfs.WithPath(path, err).Error())
		return hostfs.ManagerState{}, false
	}
	return s, true
}

// kubeletPolicyPattern is a policy name as the kubelet knows them (none,
// static, Static, best-effort, single-numa-node, prefer-closest-numa-nodes).
var kubeletPolicyPattern = regexp.MustCompile(`^[A-Za-z][A-Za-z-]{0,31}$`)

// kubeletPolicy is s, def when s is empty, "invalid" when s cannot be a
// policy name.
func kubeletPolicy(s, def string) string {
	switch {
	case s == "":
		return def
	case !kubeletPolicyPattern.MatchString(s):
		return "invalid"
	}
	return s
}

var (
	kubeletPolicyDesc = prometheus.NewDesc(engine.Namespace+"_kubelet_resource_managers_info",
		"The kubelet's CPU, memory and topology manager policies (its defaults where the config leaves them out; the state files' policy where they exist).",
		[]string{"cpu_manager", "memory_manager", "topology_manager", "topology_scope"}, nil)
	kubeletExclusiveDesc = prometheus.NewDesc(engine.Namespace+"_kubelet_exclusive_cpu_containers",
		"Containers the static CPU manager gives exclusive CPUs (cpu_manager_state entries).", nil, nil)
	kubeletPinnedMemDesc = prometheus.NewDesc(engine.Namespace+"_kubelet_pinned_memory_containers",
		"Containers the Static memory manager pins to NUMA nodes (memory_manager_state entries).", nil, nil)
)

func (c *kubeletCollector) Metrics(k *sample.Kubelet, emit func(prometheus.Metric)) {
	if !k.Found {
		return
	}
	emit(engine.NewSeries(kubeletPolicyDesc, prometheus.GaugeValue, 1,
		k.CPUManagerPolicy, k.MemoryManagerPolicy, k.TopologyManagerPolicy, k.TopologyManagerScope))
	if k.CPUManagerState {
		emit(engine.NewSeries(kubeletExclusiveDesc, prometheus.GaugeValue, float64(k.ExclusiveContainers)))
	}
	if k.MemoryManagerState {
		emit(engine.NewSeries(kubeletPinnedMemDesc, prometheus.GaugeValue, float64(k.PinnedMemContainers)))
	}
}
