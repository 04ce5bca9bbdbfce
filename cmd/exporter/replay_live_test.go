package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"github.com/gpudiag/gpudiag/internal/kubelettest"
	"github.com/gpudiag/gpudiag/sample"
)

// A replayed node beside a live kubelet (a real gRPC server with the
// kubelet's API): the job identity comes from the live podresources
// collector, joined with the replayed GPUs by UUID.
func TestReplayWithLivePodResources(t *testing.T) {
	path := filepath.Join(tracesDir, "allreduce_p2p_disabled.gdrec")
	var uuids []string
	for _, f := range readFrames(t, path) {
		if f.Collector != sample.GPUKey.Name() {
			continue
		}
		var s sample.GPUs
		if err := json.Unmarshal(f.Sample, &s); err != nil {
			t.Fatal(err)
		}
		for _, d := range s.Devices {
			uuids = append(uuids, d.UUID)
		}
		break
	}
	if len(uuids) != 2 {
		t.Fatalf("trace GPUs %v", uuids)
	}
	socket := filepath.Join(kubelettest.SocketDir(t), "kubelet.sock")
	kubelettest.Serve(t, socket, &kubelettest.Kubelet{Resp: kubelettest.Pod("research", "llama-worker-0", "trainer", uuids...)})

	addr := freeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan error, 1)
	go func() {
		_, err := run(ctx, []string{"--web.listen-address=" + addr, "--replay=" + path, "--replay.loop", "--replay.speed=1",
			"--replay.live-collector=podresources", "--collector.podresources.socket=" + socket,
			"--collector.podresources.interval=1s", "--web.disable-exporter-metrics"}, io.Discard, io.Discard, nil)
		stopped <- err
	}()
	client := &http.Client{Timeout: 30 * time.Second}
	defer func() {
		cancel()
		if err := <-stopped; err != nil {
			t.Error(err)
		}
		client.CloseIdleConnections()
	}()
	hangGuard := time.Now().Add(2 * time.Minute) // not a timing assertion: a stuck daemon
	for {
		if time.Now().After(hangGuard) {
			t.Fatal("no job identity from the live kubelet after 2 minutes")
		}
		time.Sleep(200 * time.Millisecond)
		fams, ok := scrapeFamilies(t, client, "http://"+addr+"/metrics")
		if !ok {
			continue
		}
		jobs := fams["gpudiag_gpu_job_info"].GetMetric()
		found := 0
		for _, m := range jobs {
			if labelValue(m, "k8s_pod") == "llama-worker-0" && labelValue(m, "job_id") == "llama" &&
				labelValue(m, "job_source") == "kubernetes" && labelValue(m, "k8s_namespace") == "research" {
				found++
			}
		}
		if found == 2 {
			if v := seriesValue(fams["gpudiag_kubelet_podresources_available"], nil); v != 1 {
				t.Errorf("podresources available %v", v)
			}
			return
		}
		if found > 2 {
			t.Fatalf("job series %v", jobs)
		}
	}
}

// A collector run live beside a replay shares the replay's window: the
// window's self-metrics are exported once, and the gather has no error (both
// engines exported every window family, 39 gather errors a scrape).
func TestReplayWithLiveCollectorGathersWithoutError(t *testing.T) {
	td := startDaemon(t, nil, "--replay="+filepath.Join(tracesDir, "bf16_gemm.gdrec"), "--replay.speed=0",
		"--replay.live-collector=ncclproc", "--collector.ncclproc.interval=100ms")
	td.waitFor(t, "replayed and live samples in the window", func(m metrics) bool {
		gpu, _ := m.value("gpudiag_window_samples", "collector", "gpu")
		live, _ := m.value("gpudiag_window_samples", "collector", "ncclproc")
		return gpu > 0 && live > 0
	})
	fams, err := td.gatherer().Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	seen := map[string]bool{}
	for _, mf := range fams {
		if seen[mf.GetName()] {
			t.Errorf("family %s exported twice", mf.GetName())
		}
		seen[mf.GetName()] = true
	}
	for _, name := range []string{"gpudiag_window_samples", "gpudiag_window_bytes", "gpudiag_window_span_seconds"} {
		if !seen[name] {
			t.Errorf("no %s", name)
		}
	}
}
