package sample

import (
	"regexp"
	"strconv"
)

// Where a job's identity is read. The environment variables are the
// workload's own, and a workload can plant anything in them (escape
// sequences, 100 kB); the Kubernetes names come from the kubelet. Each is
// kept only in its scheduler's own format (ValidJobIdentity); these names,
// never the values, label the count of those refused.
const (
	// SlurmJobIDVar is Slurm's job ID: the allocation's number, which
	// Slurm writes "%u" (a uint32) wherever it sets the variable (sbatch,
	// salloc, srun, slurmd's prolog and the job's steps). Array and
	// heterogeneous jobs get their own number here; 1234_7 and 1234+0 are
	// squeue's spellings, never the variable's.
	SlurmJobIDVar = "SLURM_JOB_ID"
	// TorchrunRunIDVar is torchrun's rendezvous ID (--rdzv-id): a user's
	// string, a uuid4 under --standalone, "none" by default.
	TorchrunRunIDVar = "TORCHELASTIC_RUN_ID"
	// K8sNamespace, K8sPod and K8sContainer are the names the kubelet's
	// PodResources API gives: a namespace and a container are RFC 1123
	// labels, a pod an RFC 1123 subdomain (Kubernetes' object names).
	K8sNamespace = "k8s_namespace"
	K8sPod       = "k8s_pod"
	K8sContainer = "k8s_container"
	// K8sPodUID is a pod's UID as the cgroup path names it.
	K8sPodUID = "k8s_pod_uid"
)

// torchrunRunIDMaxBytes bounds a rendezvous ID: a uuid is 36 bytes, a job
// name a Kubernetes name at most.
const torchrunRunIDMaxBytes = 253

var (
	// torchrunRunIDPattern is a conservative run ID: what a uuid, a job
	// name, a Slurm job ID or a host:port-like tag is spelled with.
	torchrunRunIDPattern = regexp.MustCompile(`^[A-Za-z0-9._:-]+$`)
	dnsLabelPattern      = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)
	dnsSubdomainPattern  = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`)
	podUIDPattern        = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)
)

// ValidJobIdentity reports whether value is a job identity as the source
// (SlurmJobIDVar, TorchrunRunIDVar, K8s*) writes it. It is the one check of
// every identity gpudiag exports or shows, wherever it was read (a process's
// environment, its cgroup path, the kubelet, a recorded trace): a value it
// refuses is dropped, and the job falls back to the next source. An empty
// value, an unknown source and torchrun's "none" are no identity.
func ValidJobIdentity(source, value string) bool {
	switch source {
	case SlurmJobIDVar:
		if len(value) == 0 || len(value) > 10 || value[0] == '0' {
			return false
		}
		n, err := strconv.ParseUint(value, 10, 32)
		return err == nil && n > 0
	case TorchrunRunIDVar:
		return len(value) <= torchrunRunIDMaxBytes && value != "none" && torchrunRunIDPattern.MatchString(value)
	case K8sNamespace, K8sContainer:
		return len(value) <= 63 && dnsLabelPattern.MatchString(value)
	case K8sPod:
		return len(value) <= 253 && dnsSubdomainPattern.MatchString(value)
	case K8sPodUID:
		return podUIDPattern.MatchString(value)
	}
	return false
}

// NoJobIdentity reports whether value says the source names no job: an
// empty value, or torchrun's default run ID "none". Such a value is neither
// an identity nor refused.
func NoJobIdentity(source, value string) bool {
	return value == "" || source == TorchrunRunIDVar && value == "none"
}
