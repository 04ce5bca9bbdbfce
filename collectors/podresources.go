package collectors

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/alecthomas/kingpin/v2"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/gpudiag/gpudiag/engine"
	"github.com/gpudiag/gpudiag/safetext"
	"github.com/gpudiag/gpudiag/sample"
)

// podResourcesOptions are the collector's flags.
type podResourcesOptions struct {
	socket  string
	timeout time.Duration
}

var podResourcesDefaults = podResourcesOptions{
	socket:  "/var/lib/kubelet/pod-resources/kubelet.sock",
	timeout: 2 * time.Second,
}

var podResourcesFlags = podResourcesDefaults

func init() {
	register(collectorSpec[sample.PodResources, *podResourcesCollector]{
		key:       sample.PodResourcesKey,
		defaultOn: true,
		help:      "Which Kubernetes pod and container holds each GPU, from the kubelet's PodResources API (a unix socket; absent on other hosts)",
		flags: func(app *kingpin.Application) {
			app.Flag("collector.podresources.socket", "The kubelet's PodResources socket.").
				Default(podResourcesDefaults.socket).StringVar(&podResourcesFlags.socket)
			app.Flag("collector.podresources.timeout", "Deadline of one List call to the kubelet.").
				Default(podResourcesDefaults.timeout.String()).DurationVar(&podResourcesFlags.timeout)
		},
		newCollector: func(cfg Config) (*podResourcesCollector, error) {
			return newPodResourcesCollector(cfg, podResourcesFlags)
		},
		metrics:     (&podResourcesCollector{}).Metrics,
		ownInterval: &intervalFlag{value: 10 * time.Second, help: "How often the kubelet is asked which pod holds which GPU; pods start and stop in seconds at most."},
	})
}

const (
	// podResourcesMaxMessage bounds one answer of the kubelet: a node's
	// pods with every device, CPU and memory assignment take some KiB; a
	// hostile or broken peer cannot make the daemon take more.
	podResourcesMaxMessage = 4 << 20
	// podResourcesMaxAssignments bounds the devices kept per reading: an
	// 8-GPU node in MIG mode has at most 56 slices.
	podResourcesMaxAssignments = 1024
)

// gpuResourcePrefix selects the extended resources of NVIDIA's device
// plugin: nvidia.com/gpu, nvidia.com/mig-<profile>, nvidia.com/gpu.shared.
const gpuResourcePrefix = "nvidia.com/"

type podResourcesCollector struct {
	interval time.Duration
	// every is the interval it samples at: its own, else the daemon's.
	every time.Duration
	opts  podResourcesOptions
	log   *zap.Logger

	mu   sync.Mutex
	conn *grpc.ClientConn

	// answered is whether the kubelet's last answer still names pods:
	// set by an answer, cleared by the socket going away or by
	// PodResourcesAgeOutIntervals failed calls in a row; failures counts
	// the calls failed since an answer.
	answered bool
	failures int
	// refusing is whether the last answer held a name that is not a
	// Kubernetes name, to log it when it starts.
	refusing bool
}

func newPodResourcesCollector(cfg Config, opts podResourcesOptions) (*podResourcesCollector, error) {
	cfg = cfg.withDefaults()
	if opts.timeout <= 0 {
		return nil, fmt.Errorf("--collector.podresources.timeout must be positive, not %s", opts.timeout)
	}
	every := cfg.OwnInterval
	if every <= 0 {
		every = cfg.Interval
	}
	return &podResourcesCollector{interval: cfg.OwnInterval, every: every, opts: opts, log: cfg.Logger}, nil
}

func (c *podResourcesCollector) Name() string { return sample.PodResourcesKey.Name() }

// Interval gives the collector its own clock: --collector.podresources.interval.
func (c *podResourcesCollector) Interval() time.Duration { return c.interval }

// Sample lists the pods' device assignments. The socket is looked for on
// every sample: the kubelet may start after the daemon, or restart (gRPC
// then reconnects the same connection by itself).
func (c *podResourcesCollector) Sample(ctx context.Context) (*sample.PodResources, error) {
	st, err := os.Stat(c.opts.socket)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		c.close()
		c.answered, c.failures = false, 0
		return &sample.PodResources{IntervalSeconds: c.every.Seconds()}, nil
	case err != nil:
		return nil, c.failed(err)
	case st.Mode()&fs.ModeSocket == 0:
		return nil, c.failed(fmt.Errorf("%s is not a unix socket (%s)", c.opts.socket, st.Mode().Type()))
	}
	client, err := c.client()
	if err != nil {
		return nil, c.failed(err)
	}
	ctx, cancel := context.WithTimeout(ctx, c.opts.timeout)
	defer cancel()
	resp, err := client.List(ctx, &podresourcesv1.ListPodResourcesRequest{})
	if err != nil {
		return nil, c.failed(fmt.Errorf("kubelet PodResources List on %s: %w", c.opts.socket, err))
	}
	if c.failures > 0 {
		c.log.Info("the kubelet answers again: its pods name the GPUs' jobs", zap.Int("failed_calls", c.failures))
	}
	c.answered, c.failures = true, 0
	s := podAssignments(resp)
	s.IntervalSeconds = c.every.Seconds()
	c.noteRefused(s.Refused)
	// Which devices the kubelet manages at all: a GPU in use that is not
	// among them runs outside Kubernetes. Kubelets before 1.23 lack the
	// call; that is no error.
	if alloc, err := client.GetAllocatableResources(ctx, &podresourcesv1.AllocatableResourcesRequest{}); err == nil {
		s.Allocatable = allocatableGPUs(alloc)
	} else {
		c.log.Debug("kubelet GetAllocatableResources", zap.Error(err))
	}
	return s, nil
}

// failed says, in the error the collector's health shows, what a failed
// call does to the pods' identity: the last answer still names the GPUs'
// pods, stale, for sample.PodResourcesAgeOutIntervals intervals after it,
// and is then dropped. Each phase has one text, so that the engine logs the
// failure when it starts and when the identity is dropped, not every
// interval.
func (c *podResourcesCollector) failed(err error) error {
	if !c.answered && c.failures == 0 {
		return err // no answer named pods
	}
	c.failures++
	keep := time.Duration(sample.PodResourcesAgeOutIntervals) * c.every
	if c.failures >= sample.PodResourcesAgeOutIntervals {
		c.answered = false
	}
	if c.failures == sample.PodResourcesAgeOutIntervals {
		c.log.Warn("the kubelet has not answered for its age-out: the GPUs' pods are no longer named by it",
			zap.Int("intervals", sample.PodResourcesAgeOutIntervals), zap.Duration("age_out", keep))
	}
	if !c.answered {
		return fmt.Errorf("%w; the pods' identity of its last answer was dropped %d intervals (%s) after it", err,
			sample.PodResourcesAgeOutIntervals, keep)
	}
	return fmt.Errorf("%w; stale: the pods of its last answer name the GPUs' jobs until %d intervals (%s) after it, then are dropped",
		err, sample.PodResourcesAgeOutIntervals, keep)
}

// noteRefused logs, when it starts, a kubelet answer naming a pod with a
// name that is no Kubernetes name (the count is in the sample).
func (c *podResourcesCollector) noteRefused(refused int) {
	if refused > 0 && !c.refusing {
		c.log.Warn("the kubelet named pods with names that are not Kubernetes names: their devices name no job; counted in gpudiag_kubelet_podresources_refused_assignments",
			zap.Int("assignments", refused))
	}
	c.refusing = refused > 0
}

// allocatableGPUs keeps the NVIDIA devices of the kubelet's allocatable
// resources, bounded like the assignments.
func allocatableGPUs(resp *podresourcesv1.AllocatableResourcesResponse) []string {
	out := []string{}
	for _, dev := range resp.GetDevices() {
		if !strings.HasPrefix(dev.GetResourceName(), gpuResourcePrefix) {
			continue
		}
		for _, id := range dev.GetDeviceIds() {
			if len(out) < podResourcesMaxAssignments {
				out = append(out, bounded(id))
			}
		}
	}
	return out
}

// podAssignments keeps the NVIDIA devices of the kubelet's answer.
func podAssignments(resp *podresourcesv1.ListPodResourcesResponse) *sample.PodResources {
	s := &sample.PodResources{Available: true}
	for _, pod := range resp.GetPodResources() {
		for _, ctr := range pod.GetContainers() {
			for _, dev := range ctr.GetDevices() {
				if !strings.HasPrefix(dev.GetResourceName(), gpuResourcePrefix) {
					continue
				}
				for _, id := range dev.GetDeviceIds() {
					if len(s.Assignments) >= podResourcesMaxAssignments {
						s.Dropped++
						continue
					}
					a := sample.DeviceAssignment{
						Namespace: bounded(pod.GetNamespace()), Pod: bounded(pod.GetName()), Container: bounded(ctr.GetName()),
						Resource: bounded(dev.GetResourceName()), DeviceID: bounded(id)}
					if !validPodNames(pod.GetNamespace(), pod.GetName(), ctr.GetName()) {
						// The device is the kubelet's to count; the names
						// would become labels and /diagnose's text.
						a.Namespace, a.Pod, a.Container = "", "", ""
						s.Refused++
					}
					s.Assignments = append(s.Assignments, a)
				}
			}
		}
	}
	return s
}

// bounded cuts a name the kubelet sends: Kubernetes names are at most 253
// bytes; a longer one is not a name. It stays valid UTF-8 (safetext.Label):
// a cut inside a character ended the daemon (issue 34).
func bounded(s string) string { return safetext.Label(s) }

// validPodNames is whether the kubelet's names of a pod and container are
// Kubernetes names (sample.ValidJobIdentity), checked uncut.
func validPodNames(namespace, pod, container string) bool {
	return sample.ValidJobIdentity(sample.K8sNamespace, namespace) && sample.ValidJobIdentity(sample.K8sPod, pod) &&
		sample.ValidJobIdentity(sample.K8sContainer, container)
}

func (c *podResourcesCollector) client() (podresourcesv1.PodResourcesListerClient, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.conn == nil {
		conn, err := grpc.NewClient("unix://"+c.opts.socket,
			grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(podResourcesMaxMessage)))
		if err != nil {
			return nil, fmt.Errorf("kubelet PodResources socket %s: %w", c.opts.socket, err)
		}
		c.conn = conn
	}
	return podresourcesv1.NewPodResourcesListerClient(c.conn), nil
}

func (c *podResourcesCollector) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.conn != nil {
		_ = c.conn.Close()
		c.conn = nil
	}
}

// Close releases the connection to the kubelet.
func (c *podResourcesCollector) Close() error {
	c.close()
	return nil
}

var (
	podResourcesAvailableDesc = prometheus.NewDesc(engine.Namespace+"_kubelet_podresources_available",
		"1 when the kubelet's PodResources socket is present and answers, else 0 (not a Kubernetes node, or the socket is not mounted).", nil, nil)
	podResourcesDevicesDesc = prometheus.NewDesc(engine.Namespace+"_kubelet_podresources_gpu_devices",
		"NVIDIA devices (GPUs, MIG slices) the kubelet has assigned to containers.", nil, nil)
	podResourcesAllocatableDesc = prometheus.NewDesc(engine.Namespace+"_kubelet_podresources_allocatable_gpu_devices",
		"NVIDIA devices (GPUs, MIG slices) the kubelet may assign at all (GetAllocatableResources); absent when the kubelet does not answer that call.", nil, nil)
	podResourcesRefusedDesc = prometheus.NewDesc(engine.Namespace+"_kubelet_podresources_refused_assignments",
		"NVIDIA devices the kubelet's last answer assigned to a pod whose namespace, pod or container name is not a Kubernetes name (RFC 1123): the device is counted, its names are dropped and name no job. Absent while there is none.", nil, nil)
)

func (c *podResourcesCollector) Metrics(s *sample.PodResources, emit func(prometheus.Metric)) {
	emit(engine.NewSeries(podResourcesAvailableDesc, prometheus.GaugeValue, boolFloat(s.Available)))
	if s.Available {
		emit(engine.NewSeries(podResourcesDevicesDesc, prometheus.GaugeValue, float64(len(s.Assignments)+s.Dropped)))
	}
	if s.Allocatable != nil {
		emit(engine.NewSeries(podResourcesAllocatableDesc, prometheus.GaugeValue, float64(len(s.Allocatable))))
	}
	if s.Refused > 0 {
		emit(engine.NewSeries(podResourcesRefusedDesc, prometheus.GaugeValue, float64(s.Refused)))
	}
}
