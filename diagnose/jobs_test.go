package diagnose

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpudiag/gpudiag/analyzers"
	"github.com/gpudiag/gpudiag/engine"
	"github.com/gpudiag/gpudiag/sample"
)

func TestPodOwner(t *testing.T) {
	for pod, want := range map[string]string{
		"llama-70b-worker-3":      "llama-70b",     // Kubeflow PyTorchJob
		"llama-70b-master-0":      "llama-70b",     // its master
		"bert-launcher":           "bert",          // MPIJob launcher
		"bert-worker-12":          "bert",          // MPIJob worker
		"pretrain-7-x2b4k":        "pretrain",      // indexed Job
		"pretrain-x2b4k":          "pretrain",      // Job
		"ray-head-0":              "ray-head",      // StatefulSet
		"serve-7d9c5b8f6d-x2b4k":  "serve",         // Deployment
		"train-trainer-0-3-x2b4k": "train-trainer", // JobSet: jobset-replicatedjob-job-pod-random
		"notebook":                "notebook",      // a bare pod
		"worker-3":                "worker",        // nothing but a role would be empty
		"abc-aeiou":               "abc-aeiou",     // vowels: not a generated suffix
	} {
		if got := podOwner(pod); got != want {
			t.Errorf("podOwner(%q) = %q, want %q", pod, got, want)
		}
	}
}

// Each source names the GPUs it knows; the kubelet beats Slurm beats
// torchrun, and a GPU in use that nothing names is said to be so.
func TestJobEvidence(t *testing.T) {
	w := engine.NewWindow(time.Hour, 64<<20)
	t0 := time.Unix(1000, 0)
	dev := func(i int, uuid string, pids ...uint32) sample.GPU {
		d := sample.GPU{Index: i, UUID: uuid, Up: true, Values: sample.NewValues()}
		for _, p := range pids {
			d.Processes = append(d.Processes, sample.Process{PID: p})
		}
		return d
	}
	inMIG := dev(6, "GPU-g")
	inMIG.MIGDevices = []string{"MIG-zzz", "MIG-yyy"}
	put(w, sample.GPUKey, t0, &sample.GPUs{Devices: []sample.GPU{
		dev(0, "GPU-a", 10), dev(1, "GPU-b"), dev(2, "GPU-c", 12), dev(3, "GPU-d", 13), dev(4, "GPU-e", 14), dev(5, "GPU-f"), inMIG}})
	put(w, sample.PodResourcesKey, t0, &sample.PodResources{Available: true, Assignments: []sample.DeviceAssignment{
		{Namespace: "research", Pod: "llama-worker-3", Container: "trainer", Resource: "nvidia.com/gpu", DeviceID: "GPU-a"},
		{Namespace: "research", Pod: "llama-worker-3", Container: "trainer", Resource: "nvidia.com/gpu", DeviceID: "GPU-b"},
		{Namespace: "users", Pod: "nb-0", Container: "jupyter", Resource: "nvidia.com/mig-1g.18gb", DeviceID: "MIG-zzz"},
	}})
	put(w, sample.GPUProcessKey, t0, &sample.GPUProcesses{GPUs: []sample.GPUProcessGroup{
		{GPU: 0, Processes: []sample.GPUProcess{{PID: 10, PodUID: "11111111-2222-3333-4444-555555555555"}}},
		{GPU: 2, Processes: []sample.GPUProcess{{PID: 12, SlurmJobID: "4127"}}},
	}})
	put(w, sample.NCCLProcKey, t0, &sample.NCCLHostProcesses{Processes: []sample.NCCLHostProcess{
		{PID: 12, GPUs: []int{2}, Env: []sample.NCCLEnv{{Name: "TORCHELASTIC_RUN_ID", Value: "r1"}}},
		{PID: 13, GPUs: []int{3}, Env: []sample.NCCLEnv{{Name: "TORCHELASTIC_RUN_ID", Value: "run-42"}}},
		{PID: 14, GPUs: []int{4}, Env: []sample.NCCLEnv{{Name: "TORCHELASTIC_RUN_ID", Value: "none"}}},
	}})
	var in analyzers.Input
	jobEvidence(readInto(w, t0, &in, gpuEvidence, processEvidence, ncclProcessEvidence, podResourcesEvidence))
	want := []analyzers.GPUJob{
		{GPU: 0, Source: "kubernetes", JobID: "llama", Namespace: "research", Pod: "llama-worker-3", Container: "trainer"},
		{GPU: 1, Source: "kubernetes", JobID: "llama", Namespace: "research", Pod: "llama-worker-3", Container: "trainer"},
		{GPU: 2, Source: "slurm", JobID: "4127"},
		{GPU: 3, Source: "torchrun", JobID: "run-42"},
		{GPU: 4, Source: "none"},
		{GPU: 6, Source: "kubernetes", JobID: "nb", Namespace: "users", Pod: "nb-0", Container: "jupyter"},
	}
	if !reflect.DeepEqual(in.Jobs, want) {
		t.Errorf("jobs\n%+v\nwant\n%+v", in.Jobs, want)
	}
}

// Identities that are not in their scheduler's format, as a recorded trace
// can hold them (the live collectors refuse them before): none is offered,
// and each GPU falls back to the next source.
func TestJobEvidenceRefusesForeignIdentity(t *testing.T) {
	w := engine.NewWindow(time.Hour, 64<<20)
	t0 := time.Unix(1000, 0)
	var devs []sample.GPU
	for i, uuid := range []string{"GPU-a", "GPU-b", "GPU-c", "GPU-d"} {
		devs = append(devs, sample.GPU{Index: i, UUID: uuid, Up: true, Values: sample.NewValues(),
			Processes: []sample.Process{{PID: uint32(10 + i)}}})
	}
	put(w, sample.GPUKey, t0, &sample.GPUs{Devices: devs})
	put(w, sample.PodResourcesKey, t0, &sample.PodResources{Available: true, Assignments: []sample.DeviceAssignment{
		{Namespace: "research", Pod: strings.Repeat("a", 252) + "\xc3", Container: "trainer", DeviceID: "GPU-a"},
		{Namespace: "\x1b]0;owned\x07", Pod: "web-0", Container: "c", DeviceID: "GPU-b"},
	}})
	put(w, sample.GPUProcessKey, t0, &sample.GPUProcesses{GPUs: []sample.GPUProcessGroup{
		{GPU: 0, Processes: []sample.GPUProcess{{PID: 10, SlurmJobID: "\x1b[2J", PodUID: "11111111-2222-3333-4444-555555555555"}}},
		{GPU: 1, Processes: []sample.GPUProcess{{PID: 11, PodUID: "../../etc"}}},
	}})
	put(w, sample.NCCLProcKey, t0, &sample.NCCLHostProcesses{Processes: []sample.NCCLHostProcess{
		{PID: 12, GPUs: []int{2}, SlurmJobID: "4127", Env: []sample.NCCLEnv{{Name: "SLURM_JOB_ID", Value: "4127\r\nfake row"}}},
		{PID: 13, GPUs: []int{3}, Env: []sample.NCCLEnv{{Name: "TORCHELASTIC_RUN_ID", Value: strings.Repeat("r", 1024)}}},
	}})
	var in analyzers.Input
	jobEvidence(readInto(w, t0, &in, gpuEvidence, processEvidence, ncclProcessEvidence, podResourcesEvidence))
	want := []analyzers.GPUJob{
		{GPU: 0, Source: "kubernetes", JobID: "pod-11111111-2222-3333-4444-555555555555"},
		{GPU: 1, Source: "none"},
		{GPU: 2, Source: "slurm", JobID: "4127"},
		{GPU: 3, Source: "none"},
	}
	if !reflect.DeepEqual(in.Jobs, want) {
		t.Errorf("jobs\n%+v\nwant\n%+v", in.Jobs, want)
	}
}

// A kubelet that answered, then stops answering (issue 34, item 7): its
// last answer named the GPU's pod for as long as the window held it. Now it
// names it for sample.PodResourcesAgeOutIntervals of the collector's
// intervals (stale, as the collector's health says meanwhile:
// TestPodResourcesStaleThenDropped in collectors), and after them no
// gpudiag_gpu_job_info series carries a k8s_pod: the GPU is named by the
// next source, its process's cgroup.
func TestJobEvidenceKubeletAgesOut(t *testing.T) {
	w := engine.NewWindow(time.Hour, 64<<20)
	r := NewRunner(w, analyzers.DefaultThresholds)
	const interval = 10 * time.Second
	put(w, sample.PodResourcesKey, t0, &sample.PodResources{Available: true, IntervalSeconds: interval.Seconds(),
		Assignments: []sample.DeviceAssignment{{Namespace: "research", Pod: "llama-worker-3", Container: "trainer",
			Resource: "nvidia.com/gpu", DeviceID: "GPU-a"}}})
	put(w, sample.GPUProcessKey, t0, &sample.GPUProcesses{GPUs: []sample.GPUProcessGroup{
		{GPU: 0, Processes: []sample.GPUProcess{{PID: 10, PodUID: "11111111-2222-3333-4444-555555555555"}}}}})
	for step := time.Duration(0); step <= sample.PodResourcesAgeOutIntervals+1; step++ {
		now := t0.Add(step * interval)
		g := &sample.GPUs{Devices: []sample.GPU{{Index: 0, UUID: "GPU-a", Up: true, Values: sample.NewValues(),
			Processes: []sample.Process{{PID: 10}}}}}
		put(w, sample.GPUKey, now, g)
		r.OnSample(sample.GPUKey.Name(), now, g)
		pod, jobID := "", ""
		reg := prometheus.NewPedanticRegistry()
		reg.MustRegister(r.Metrics())
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() == "gpudiag_gpu_job_info" {
				pod, jobID = labelNamed(mf.GetMetric()[0], "k8s_pod"), labelNamed(mf.GetMetric()[0], "job_id")
			}
		}
		named := step < sample.PodResourcesAgeOutIntervals
		if named && (pod != "llama-worker-3" || jobID != "llama") ||
			!named && (pod != "" || jobID != "pod-11111111-2222-3333-4444-555555555555") {
			t.Errorf("%d intervals after the kubelet's last answer: k8s_pod %q, job_id %q", step, pod, jobID)
		}
	}
}
