package diagnose

import (
	"reflect"
	"testing"
	"time"

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
	w.Add(sample.GPUKey.Name(), t0, &sample.GPUs{Devices: []sample.GPU{
		dev(0, "GPU-a", 10), dev(1, "GPU-b"), dev(2, "GPU-c", 12), dev(3, "GPU-d", 13), dev(4, "GPU-e", 14), dev(5, "GPU-f"), inMIG}})
	w.Add(sample.PodResourcesKey.Name(), t0, &sample.PodResources{Available: true, Assignments: []sample.DeviceAssignment{
		{Namespace: "research", Pod: "llama-worker-3", Container: "trainer", Resource: "nvidia.com/gpu", DeviceID: "GPU-a"},
		{Namespace: "research", Pod: "llama-worker-3", Container: "trainer", Resource: "nvidia.com/gpu", DeviceID: "GPU-b"},
		{Namespace: "users", Pod: "nb-0", Container: "jupyter", Resource: "nvidia.com/mig-1g.18gb", DeviceID: "MIG-zzz"},
	}})
	w.Add(sample.GPUProcessKey.Name(), t0, &sample.GPUProcesses{GPUs: []sample.GPUProcessGroup{
		{GPU: 0, Processes: []sample.GPUProcess{{PID: 10, PodUID: "11111111-2222-3333-4444-555555555555"}}},
		{GPU: 2, Processes: []sample.GPUProcess{{PID: 12, SlurmJobID: "4127"}}},
	}})
	w.Add(sample.NCCLProcKey.Name(), t0, &sample.NCCLHostProcesses{Processes: []sample.NCCLHostProcess{
		{PID: 12, GPUs: []int{2}, Env: []sample.NCCLEnv{{Name: "TORCHELASTIC_RUN_ID", Value: "r1"}}},
		{PID: 13, GPUs: []int{3}, Env: []sample.NCCLEnv{{Name: "TORCHELASTIC_RUN_ID", Value: "run-42"}}},
		{PID: 14, GPUs: []int{4}, Env: []sample.NCCLEnv{{Name: "TORCHELASTIC_RUN_ID", Value: "none"}}},
	}})
	var in analyzers.Input
	jobEvidence(w, t0, &in)
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
