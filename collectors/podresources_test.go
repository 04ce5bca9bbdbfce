package collectors

import (
	"bytes"
	"context"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/gpudiag/gpudiag/internal/kubelettest"
	"github.com/gpudiag/gpudiag/safetext"
	"github.com/gpudiag/gpudiag/sample"
)

func trainingPods() *podresourcesv1.ListPodResourcesResponse {
	return &podresourcesv1.ListPodResourcesResponse{PodResources: []*podresourcesv1.PodResources{
		{Name: "llama-worker-3", Namespace: "research", Containers: []*podresourcesv1.ContainerResources{
			{Name: "trainer", Devices: []*podresourcesv1.ContainerDevices{
				{ResourceName: "nvidia.com/gpu", DeviceIds: []string{"GPU-aaaa", "GPU-bbbb"}},
				{ResourceName: "rdma/hca_shared_devices_a", DeviceIds: []string{"hca0"}},
			}},
			{Name: "sidecar"},
		}},
		{Name: "notebook-0", Namespace: "users", Containers: []*podresourcesv1.ContainerResources{
			{Name: "jupyter", Devices: []*podresourcesv1.ContainerDevices{
				{ResourceName: "nvidia.com/mig-1g.18gb", DeviceIds: []string{"MIG-cccc"}},
			}},
		}},
		{Name: "web", Namespace: "default"},
	}}
}

func newPodResourcesTest(t *testing.T, socket string, timeout time.Duration) *podResourcesCollector {
	t.Helper()
	c, err := newPodResourcesCollector(rdmaConfig("", ""), podResourcesOptions{socket: socket, timeout: timeout})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func TestPodResourcesFromKubelet(t *testing.T) {
	socket := filepath.Join(kubelettest.SocketDir(t), "kubelet.sock")
	kubelettest.Serve(t, socket, &kubelettest.Kubelet{Resp: trainingPods()})
	s, err := newPodResourcesTest(t, socket, answers(t)).Sample(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	want := &sample.PodResources{Available: true, Assignments: []sample.DeviceAssignment{
		{Namespace: "research", Pod: "llama-worker-3", Container: "trainer", Resource: "nvidia.com/gpu", DeviceID: "GPU-aaaa"},
		{Namespace: "research", Pod: "llama-worker-3", Container: "trainer", Resource: "nvidia.com/gpu", DeviceID: "GPU-bbbb"},
		{Namespace: "users", Pod: "notebook-0", Container: "jupyter", Resource: "nvidia.com/mig-1g.18gb", DeviceID: "MIG-cccc"},
	}, IntervalSeconds: 1}
	if !reflect.DeepEqual(s, want) {
		t.Fatalf("got %+v\nwant %+v", s, want)
	}
}

// A kubelet that answers GetAllocatableResources says which devices it
// manages; one that does not (before 1.23) is no error.
func TestPodResourcesAllocatable(t *testing.T) {
	socket := filepath.Join(kubelettest.SocketDir(t), "kubelet.sock")
	kubelettest.Serve(t, socket, &kubelettest.Kubelet{Resp: trainingPods(), Allocatable: &podresourcesv1.AllocatableResourcesResponse{
		Devices: []*podresourcesv1.ContainerDevices{
			{ResourceName: "nvidia.com/gpu", DeviceIds: []string{"GPU-aaaa", "GPU-bbbb", "GPU-dddd"}},
			{ResourceName: "rdma/hca", DeviceIds: []string{"hca0"}}}}})
	s, err := newPodResourcesTest(t, socket, answers(t)).Sample(t.Context())
	if err != nil || !reflect.DeepEqual(s.Allocatable, []string{"GPU-aaaa", "GPU-bbbb", "GPU-dddd"}) || len(s.Assignments) != 3 {
		t.Fatalf("allocatable %v, %d assignments, %v", s.Allocatable, len(s.Assignments), err)
	}
}

// Off Kubernetes there is no socket: nothing to read, no error.
func TestPodResourcesNoKubelet(t *testing.T) {
	s, err := newPodResourcesTest(t, filepath.Join(t.TempDir(), "kubelet.sock"), time.Second).Sample(t.Context())
	if err != nil || s.Available || len(s.Assignments) != 0 {
		t.Fatalf("%+v %v", s, err)
	}
}

// A kubelet that does not answer in time costs the deadline, not a scrape.
// It answers after a day, past the test's time: the sample returns at its
// 200 ms deadline with the kubelet's call named, or never (a collector
// waiting for the kubelet); how long it took is not judged.
func TestPodResourcesSlowKubelet(t *testing.T) {
	socket := filepath.Join(kubelettest.SocketDir(t), "kubelet.sock")
	kubelettest.Serve(t, socket, &kubelettest.Kubelet{Resp: trainingPods(), Delay: 24 * time.Hour})
	c := newPodResourcesTest(t, socket, 200*time.Millisecond)
	var err error
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, err = c.Sample(t.Context())
	}()
	select {
	case <-done:
	case <-hangGuard(t):
		t.Fatal("the sample waited for a kubelet that does not answer, past its 200 ms deadline")
	}
	if err == nil || !strings.Contains(err.Error(), "DeadlineExceeded") {
		t.Fatalf("err %v", err)
	}
}

// answers is the List deadline of the tests whose kubelet answers: what
// they judge is the answer, so the deadline is the test's time, not a
// clock a loaded machine's gRPC handshake could outlast (a 200 ms one
// failed TestPodResourcesStaleThenDropped's first, answered, call).
func answers(t *testing.T) time.Duration { return untilHang(t) }

// The kubelet restarts: the socket goes away and comes back, and the
// collector follows without being restarted itself.
func TestPodResourcesKubeletRestart(t *testing.T) {
	socket := filepath.Join(kubelettest.SocketDir(t), "kubelet.sock")
	stop := kubelettest.Serve(t, socket, &kubelettest.Kubelet{Resp: trainingPods()})
	c := newPodResourcesTest(t, socket, answers(t))
	if s, err := c.Sample(t.Context()); err != nil || len(s.Assignments) != 3 {
		t.Fatalf("before: %+v %v", s, err)
	}
	stop()
	os.Remove(socket)
	if s, err := c.Sample(t.Context()); err != nil || s.Available {
		t.Fatalf("while down: %+v %v", s, err)
	}
	kubelettest.Serve(t, socket, &kubelettest.Kubelet{Resp: &podresourcesv1.ListPodResourcesResponse{}})
	if s, err := c.Sample(t.Context()); err != nil || !s.Available || len(s.Assignments) != 0 {
		t.Fatalf("after: %+v %v", s, err)
	}
}

// Something that is not the kubelet on the socket, a file in its place, or
// an answer past the message bound: a clear error, never a hang.
func TestPodResourcesGarbage(t *testing.T) {
	dir := kubelettest.SocketDir(t)
	socket := filepath.Join(dir, "junk.sock")
	l, err := net.Listen("unix", socket)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			conn.Write([]byte("HTTP/1.1 400 Bad Request\r\n\r\nnot grpc"))
			conn.Close()
		}
	}()
	if _, err := newPodResourcesTest(t, socket, 500*time.Millisecond).Sample(t.Context()); err == nil {
		t.Error("garbage answer: no error")
	}
	file := filepath.Join(dir, "file.sock")
	os.WriteFile(file, nil, 0o600)
	if _, err := newPodResourcesTest(t, file, time.Second).Sample(t.Context()); err == nil || !strings.Contains(err.Error(), "not a unix socket") {
		t.Errorf("regular file: %v", err)
	}
	huge := &podresourcesv1.ListPodResourcesResponse{}
	for i := 0; i < 200; i++ {
		huge.PodResources = append(huge.PodResources, &podresourcesv1.PodResources{Name: strings.Repeat("p", 30000), Namespace: "x"})
	}
	big := filepath.Join(dir, "big.sock")
	kubelettest.Serve(t, big, &kubelettest.Kubelet{Resp: huge})
	if _, err := newPodResourcesTest(t, big, answers(t)).Sample(t.Context()); err == nil || !strings.Contains(err.Error(), "ResourceExhausted") {
		t.Errorf("6 MB answer: %v", err)
	}
}

func TestPodResourcesBounds(t *testing.T) {
	resp := &podresourcesv1.ListPodResourcesResponse{}
	ids := make([]string, podResourcesMaxAssignments+5)
	for i := range ids {
		ids[i] = "GPU-" + strings.Repeat("x", 300)
	}
	resp.PodResources = []*podresourcesv1.PodResources{{Name: "p", Namespace: "n", Containers: []*podresourcesv1.ContainerResources{
		{Name: "c", Devices: []*podresourcesv1.ContainerDevices{{ResourceName: "nvidia.com/gpu", DeviceIds: ids}}}}}}
	s := podAssignments(resp)
	if len(s.Assignments) != podResourcesMaxAssignments || s.Dropped != 5 || len(s.Assignments[0].DeviceID) != 253 {
		t.Errorf("%d kept, %d dropped, id of %d bytes", len(s.Assignments), s.Dropped, len(s.Assignments[0].DeviceID))
	}
}

// The kubelet names a pod 252 ASCII bytes and an "é" (issue 34): cut at 253
// bytes inside the "é", the name was invalid UTF-8 and ended the daemon at
// the next scrape. Names that are not Kubernetes names (RFC 1123), that one,
// a namespace with an escape sequence, a 100 kB container, are refused:
// the device is kept and counted, its names are empty, the count is a
// gauge and the first such answer is logged. Every string of the sample is
// valid UTF-8 of at most 253 bytes.
func TestPodResourcesHostileNames(t *testing.T) {
	resp := kubelettest.Pod("research", strings.Repeat("a", 252)+"é", "trainer", "GPU-aaaa")
	resp.PodResources = append(resp.PodResources,
		kubelettest.Pod("\x1b]0;owned\x07", "web-0", "c", "GPU-bbbb").PodResources[0],
		kubelettest.Pod("users", "notebook-0", strings.Repeat("c", 100_000), "GPU-cccc").PodResources[0],
		kubelettest.Pod("users", "notebook-1", "jupyter", "GPU-dddd").PodResources[0])
	socket := filepath.Join(kubelettest.SocketDir(t), "kubelet.sock")
	kubelettest.Serve(t, socket, &kubelettest.Kubelet{Resp: resp})
	var logs bytes.Buffer
	c, err := newPodResourcesCollector(Config{Logger: zap.New(zapcore.NewCore(zapcore.NewJSONEncoder(zap.NewDevelopmentEncoderConfig()),
		zapcore.AddSync(&logs), zapcore.DebugLevel))}, podResourcesOptions{socket: socket, timeout: answers(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	for range 2 {
		s, err := c.Sample(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if len(s.Assignments) != 4 || s.Refused != 3 {
			t.Fatalf("%d assignments, %d refused; want 4 and 3", len(s.Assignments), s.Refused)
		}
		for _, a := range s.Assignments {
			for _, v := range []string{a.Namespace, a.Pod, a.Container, a.Resource, a.DeviceID} {
				if !utf8.ValidString(v) || len(v) > safetext.LabelMaxBytes {
					t.Errorf("%.40q: %d bytes, valid UTF-8 %v", v, len(v), utf8.ValidString(v))
				}
			}
			named := a.Pod != ""
			if named != (a.DeviceID == "GPU-dddd") || named && (a.Namespace != "users" || a.Container != "jupyter") {
				t.Errorf("assignment %+v", a)
			}
		}
		if m := metricsOf(t, c, s); !strings.Contains(m, "gpudiag_kubelet_podresources_refused_assignments 3") ||
			!strings.Contains(m, "gpudiag_kubelet_podresources_gpu_devices 4") {
			t.Errorf("metrics:\n%s", m)
		}
	}
	if n := strings.Count(logs.String(), "not Kubernetes names"); n != 1 {
		t.Errorf("%d logs of the refused names over two answers; want 1", n)
	}
	// Cut names stay valid UTF-8 wherever bounded is used.
	if got := bounded(strings.Repeat("a", 252) + "é"); !utf8.ValidString(got) || len(got) > 253 {
		t.Errorf("bounded cut to %q", got)
	}
}

// A kubelet that answered and then stops answering (issue 34, item 7):
// its last answer was the GPUs' pods for as long as the window held it. Now
// the collector's health says the identity is stale while
// sample.PodResourcesAgeOutIntervals failed calls have not passed, and that
// it was dropped after them (diagnose drops it from the jobs then:
// TestJobEvidenceKubeletAgesOut); the engine logs each text once.
func TestPodResourcesStaleThenDropped(t *testing.T) {
	socket := filepath.Join(kubelettest.SocketDir(t), "kubelet.sock")
	stop := kubelettest.Serve(t, socket, &kubelettest.Kubelet{Resp: trainingPods()})
	c := newPodResourcesTest(t, socket, answers(t))
	if s, err := c.Sample(t.Context()); err != nil || len(s.Assignments) != 3 || s.IntervalSeconds != 1 {
		t.Fatalf("answer: %+v %v", s, err)
	}
	stop()
	// The socket stays, and nothing answers on it: a hung kubelet.
	os.Remove(socket)
	l, err := net.Listen("unix", socket)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var texts []string
	for call := 1; call <= sample.PodResourcesAgeOutIntervals+2; call++ {
		// Nothing ever answers: each call ends at this 200 ms deadline,
		// the engine's, however slow the machine.
		ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
		_, err := c.Sample(ctx)
		cancel()
		if err == nil {
			t.Fatalf("call %d: no error from a kubelet that does not answer", call)
		}
		stale, dropped := strings.Contains(err.Error(), "stale:"), strings.Contains(err.Error(), "was dropped")
		if call < sample.PodResourcesAgeOutIntervals && (!stale || dropped) ||
			call >= sample.PodResourcesAgeOutIntervals && (stale || !dropped) {
			t.Errorf("call %d: %v", call, err)
		}
		texts = append(texts, strings.SplitN(err.Error(), "; ", 2)[1])
	}
	if distinct := len(slices.Compact(texts)); distinct != 2 {
		t.Errorf("%d distinct health texts over the failures; want 2 (stale, dropped): %q", distinct, texts)
	}
}

// metricsOf is the text the collector's Metrics makes of a sample.
func metricsOf(t *testing.T, c *podResourcesCollector, s *sample.PodResources) string {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(sampledMetrics{asEngine(c), s})
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	for _, mf := range mfs {
		if _, err := expfmt.MetricFamilyToText(&b, mf); err != nil {
			t.Fatal(err)
		}
	}
	return b.String()
}
