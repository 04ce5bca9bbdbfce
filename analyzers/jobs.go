package analyzers

// Job sources, best first: a scheduler's identity beats a launcher's.
const (
	JobSourceKubernetes = "kubernetes"
	JobSourceSlurm      = "slurm"
	JobSourceTorchrun   = "torchrun"
	JobSourceNone       = "none"
)

// GPUJob says who runs on one GPU in use: the job as the scheduler or
// launcher names it, the same on every node of the job, so that
// Prometheus can join the nodes' series by it.
type GPUJob struct {
	GPU int `json:"gpu"`
	// Source is where the identity comes from (JobSource*); none: the GPU
	// is in use and nothing names its job.
	Source string `json:"source"`
	// JobID is the Slurm job ID, the Kubernetes job (the pod's owner, by
	// its name; the pod UID when only cgroups name it) or torchrun's run
	// ID.
	JobID     string `json:"job_id,omitempty"`
	Namespace string `json:"namespace,omitempty"`
	Pod       string `json:"pod,omitempty"`
	Container string `json:"container,omitempty"`
}
