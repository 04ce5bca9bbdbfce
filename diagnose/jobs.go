package diagnose

import (
	"regexp"
	"slices"
	"strings"

	"github.com/gpudiag/gpudiag/analyzers"
	"github.com/gpudiag/gpudiag/sample"
)

// jobEvidence says who runs on each GPU in use, from the newest readings
// of the kubelet's assignments (podresources), the GPU processes' cgroups
// (gpuprocess) and the job processes' environments (ncclproc). Each source
// is read whatever its age: jobs change at their start and end, and a
// source on a slower clock is still right between its readings.
func jobEvidence(b *build) {
	in := b.in
	e, ok := newest(b.gpus)
	if !ok {
		return
	}
	gpus := e.Sample
	byUUID := map[string]int{}
	inUse := map[int]bool{}
	for _, d := range gpus.Devices {
		if d.UUID != "" {
			byUUID[d.UUID] = d.Index
		}
		// In MIG mode the kubelet names the GPU's MIG devices.
		for _, m := range d.MIGDevices {
			byUUID[m] = d.Index
		}
		inUse[d.Index] = len(d.Processes) > 0
	}
	jobs := map[int]*analyzers.GPUJob{}
	job := func(gpu int) *analyzers.GPUJob {
		if jobs[gpu] == nil {
			jobs[gpu] = &analyzers.GPUJob{GPU: gpu, Source: analyzers.JobSourceNone}
		}
		return jobs[gpu]
	}
	rank := map[string]int{analyzers.JobSourceKubernetes: 0, analyzers.JobSourceSlurm: 1, analyzers.JobSourceTorchrun: 2, analyzers.JobSourceNone: 3}
	// offer sets the GPU's identity unless a better source already did.
	offer := func(gpu int, j analyzers.GPUJob) {
		cur := job(gpu)
		if rank[j.Source] < rank[cur.Source] || (j.Source == cur.Source && cur.JobID == "" && j.JobID != "") {
			j.GPU = gpu
			*cur = j
		}
	}
	// Every identity is checked against its scheduler's format
	// (sample.ValidJobIdentity) whichever sample it comes from: the live
	// collectors drop and count what they refuse, and a recorded trace is
	// checked here. A refused one is not offered, and the next source
	// names the job.
	valid := sample.ValidJobIdentity
	// The kubelet's last answer names pods until it ages out (a kubelet
	// that stopped answering: sample.PodResourcesAgeOutIntervals).
	if pr := b.pods; pr != nil && !pr.Sample.AgedOut(pr.Time, in.Now) {
		for _, a := range pr.Sample.Assignments {
			if gpu, ok := byUUID[a.DeviceID]; ok {
				inUse[gpu] = true
				if valid(sample.K8sNamespace, a.Namespace) && valid(sample.K8sPod, a.Pod) && valid(sample.K8sContainer, a.Container) {
					offer(gpu, analyzers.GPUJob{Source: analyzers.JobSourceKubernetes, JobID: podOwner(a.Pod),
						Namespace: a.Namespace, Pod: a.Pod, Container: a.Container})
				}
			}
		}
	}
	if gp, ok := newest(b.processes); ok {
		for _, g := range gp.Sample.GPUs {
			for _, p := range g.Processes {
				switch {
				case valid(sample.SlurmJobIDVar, p.SlurmJobID):
					offer(g.GPU, analyzers.GPUJob{Source: analyzers.JobSourceSlurm, JobID: p.SlurmJobID})
				case valid(sample.K8sPodUID, p.PodUID):
					offer(g.GPU, analyzers.GPUJob{Source: analyzers.JobSourceKubernetes, JobID: "pod-" + p.PodUID})
				}
			}
		}
	}
	if np, ok := newest(b.ncclScans); ok {
		for _, p := range np.Sample.Processes {
			for _, gpu := range p.GPUs {
				if id, ok := p.EnvValue(sample.SlurmJobIDVar); ok && valid(sample.SlurmJobIDVar, id) {
					offer(gpu, analyzers.GPUJob{Source: analyzers.JobSourceSlurm, JobID: id})
				} else if valid(sample.SlurmJobIDVar, p.SlurmJobID) {
					offer(gpu, analyzers.GPUJob{Source: analyzers.JobSourceSlurm, JobID: p.SlurmJobID})
				}
				// torchrun's default rendezvous ID is "none": no
				// identity (ValidJobIdentity refuses it).
				if id, ok := p.EnvValue(sample.TorchrunRunIDVar); ok && valid(sample.TorchrunRunIDVar, id) {
					offer(gpu, analyzers.GPUJob{Source: analyzers.JobSourceTorchrun, JobID: id})
				}
			}
		}
	}
	for gpu, used := range inUse {
		if used {
			job(gpu)
		}
	}
	for _, j := range jobs {
		in.Jobs = append(in.Jobs, *j)
	}
	slices.SortFunc(in.Jobs, func(a, b analyzers.GPUJob) int { return a.GPU - b.GPU })
}

var (
	// podRandomSuffix is the 5-character suffix Kubernetes adds to
	// generated names (k8s.io/apimachinery/pkg/util/rand's alphabet has no
	// vowels and no 0, 1, 3).
	podRandomSuffix = regexp.MustCompile(`-[bcdfghjklmnpqrstvwxz2456789]{5}$`)
	// podTemplateHash is a ReplicaSet's pod-template-hash before it.
	podTemplateHash = regexp.MustCompile(`-[bcdfghjklmnpqrstvwxz2456789]{6,10}$`)
	podIndex        = regexp.MustCompile(`-[0-9]+$`)
	// podRole is the replica type the training operators put in their
	// pods' names (<job>-<role>-<index>: Kubeflow's PyTorchJob, MPIJob,
	// TFJob; Spark's driver and executors).
	podRole = regexp.MustCompile(`-(master|worker|launcher|chief|ps|evaluator|driver|exec|executor)$`)
)

// podOwner names the workload a pod belongs to from the pod's name, which
// is all the kubelet's PodResources API gives: the name of its job
// (<job>-worker-3, <job>-<index>-<random>, <job>-<random>), StatefulSet
// (<name>-<ordinal>) or Deployment (<name>-<hash>-<random>). The same on
// every node of one job, it is what the job's series are joined on. A
// name it cannot strip is returned whole.
func podOwner(pod string) string {
	name := pod
	if m := podRandomSuffix.FindString(name); m != "" && len(name) > len(m) {
		name = strings.TrimSuffix(name, m)
		if h := podTemplateHash.FindString(name); h != "" && len(name) > len(h) && !podIndex.MatchString(name) {
			name = strings.TrimSuffix(name, h)
		}
	}
	for i := 0; i < 2; i++ {
		if m := podIndex.FindString(name); m != "" && len(name) > len(m) {
			name = strings.TrimSuffix(name, m)
		}
	}
	if m := podRole.FindString(name); m != "" && len(name) > len(m) {
		name = strings.TrimSuffix(name, m)
	}
	return name
}
