package analyzers

import (
	"strings"
	"testing"

	"github.com/gpudiag/gpudiag/sample"
)

func TestAuditKubelet(t *testing.T) {
	kubelet := func(cpu, topo string) *sample.Kubelet {
		return &sample.Kubelet{Found: true, CPUManagerPolicy: cpu, MemoryManagerPolicy: "None", TopologyManagerPolicy: topo, TopologyManagerScope: "container"}
	}
	remote := 0.8
	procs := func(pod string, remoteMem *float64, cpusRemote bool) *sample.GPUProcesses {
		return &sample.GPUProcesses{GPUs: []sample.GPUProcessGroup{{GPU: 5, NUMANode: 1, RemoteMemoryRatio: remoteMem, CPUsFullyRemote: cpusRemote,
			Processes: []sample.GPUProcess{{PID: 4242, OnGPU: true, PodUID: pod}}}}}
	}
	const pod = "6f1e2a3b-4c5d-4e6f-8a9b-0c1d2e3f4a5b"
	for _, tc := range []struct {
		name string
		in   AuditInput
		want string
	}{
		{"none/none, pod memory remote", AuditInput{Kubelet: kubelet("none", "none"), Processes: procs(pod, &remote, false)},
			"gpu_process_remote_memory:warning,kubelet_numa_unaware:warning"},
		{"static/best-effort, pod CPUs remote", AuditInput{Kubelet: kubelet("static", "best-effort"), Processes: procs(pod, nil, true)},
			"gpu_process_remote_cpus:warning,kubelet_numa_unaware:warning"},
		{"static/single-numa-node", AuditInput{Kubelet: kubelet("static", "single-numa-node"), Processes: procs(pod, &remote, false)},
			"gpu_process_remote_memory:warning"},
		{"none/restricted", AuditInput{Kubelet: kubelet("none", "restricted"), Processes: procs(pod, nil, true)},
			"gpu_process_remote_cpus:warning,kubelet_numa_unaware:warning"},
		{"placed well", AuditInput{Kubelet: kubelet("none", "none"), Processes: procs(pod, nil, false)}, ""},
		{"not a pod", AuditInput{Kubelet: kubelet("none", "none"), Processes: procs("", &remote, false)}, "gpu_process_remote_memory:warning"},
		{"no kubelet config", AuditInput{Kubelet: &sample.Kubelet{}, Processes: procs(pod, &remote, false)}, "gpu_process_remote_memory:warning"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := checks(Audit(tc.in)); got != tc.want {
				t.Fatalf("findings %q; want %q", got, tc.want)
			}
		})
	}
	fs := Audit(AuditInput{Kubelet: kubelet("none", "best-effort"), Processes: procs(pod, &remote, false)})
	f := fs[len(fs)-1]
	for _, want := range []string{"GPU 5 (node 1: 80% of memory remote)", "cpuManagerPolicy none", "topologyManagerPolicy best-effort"} {
		if !strings.Contains(f.Summary, want) {
			t.Errorf("summary %q lacks %q", f.Summary, want)
		}
	}
	if !strings.Contains(f.Fix, "single-numa-node") || !strings.Contains(f.Fix, "memoryManagerPolicy: Static") {
		t.Errorf("fix %q", f.Fix)
	}
}
