package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpudiag/gpudiag/engine"
	"github.com/gpudiag/gpudiag/internal/kubelettest"
	"github.com/gpudiag/gpudiag/sample"
)

// The pod-name crash (issue 34, item 1): a kubelet names a pod 252 ASCII
// bytes and an "é". Cut at 253 bytes inside the "é", the name was invalid
// UTF-8, client_golang's MustNewConstMetric panicked in the registry's
// gather goroutine and the daemon exited on the first scrape after the
// analysis, again after every restart. Now the daemon keeps answering,
// every label value it exports is valid UTF-8, and the name, no Kubernetes
// name, is refused and counted.
func TestHostilePodNameDoesNotCrashTheDaemon(t *testing.T) {
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
	socket := filepath.Join(kubelettest.SocketDir(t), "kubelet.sock")
	pod := strings.Repeat("a", 252) + "é"
	kubelettest.Serve(t, socket, &kubelettest.Kubelet{Resp: kubelettest.Pod("research", pod, "trainer", uuids...)})

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
	for scrapes := 0; ; {
		if time.Now().After(hangGuard) {
			t.Fatal("no analysis of the kubelet's answer after 2 minutes")
		}
		time.Sleep(200 * time.Millisecond)
		fams, ok := scrapeFamilies(t, client, "http://"+addr+"/metrics")
		if !ok {
			continue
		}
		for name, mf := range fams {
			for _, m := range mf.GetMetric() {
				for _, l := range m.GetLabel() {
					if !utf8.ValidString(l.GetValue()) {
						t.Fatalf("%s{%s} is not valid UTF-8: %q", name, l.GetName(), l.GetValue())
					}
				}
			}
		}
		for _, m := range fams["gpudiag_gpu_job_info"].GetMetric() {
			if labelValue(m, "k8s_pod") != "" {
				t.Fatalf("a name that is no Kubernetes name named a pod: %q", labelValue(m, "k8s_pod"))
			}
		}
		// Done after a few scrapes of analyses that saw the kubelet's
		// answer, its two devices counted and their names refused: the
		// GPUs' job series exist once the analysis ran.
		if seriesValue(fams["gpudiag_kubelet_podresources_refused_assignments"], nil) == 2 && len(fams["gpudiag_gpu_job_info"].GetMetric()) > 0 {
			if scrapes++; scrapes == 5 {
				return
			}
		}
	}
}

// The recorder's Collect runs on client_golang's gather goroutine too: a
// panic in it (here a recorder whose file was never opened) is recovered
// and counted, and the registry's other collectors are still served.
func TestRecorderCollectPanicIsCounted(t *testing.T) {
	drops := engine.NewDrops(nil)
	reg := prometheus.NewRegistry()
	up := prometheus.NewGauge(prometheus.GaugeOpts{Name: "gpudiag_test_up", Help: "Up."})
	reg.MustRegister(&recorder{drops: drops}, up)
	for scrape := uint64(1); scrape <= 2; scrape++ {
		mfs, err := reg.Gather()
		if err != nil || len(mfs) != 1 || mfs[0].GetName() != "gpudiag_test_up" {
			t.Fatalf("scrape %d: %v, %v", scrape, mfs, err)
		}
		if n := drops.Total("recorder", engine.DropPanic); n != scrape {
			t.Fatalf("after scrape %d: %d panics counted", scrape, n)
		}
	}
}
