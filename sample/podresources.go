package sample

import "time"

// PodResourcesKey is the podresources collector's key: its samples are
// *PodResources.
var PodResourcesKey = NewKey[PodResources]("podresources")

// PodResources is one reading of the kubelet's PodResources API: which pod
// and container holds each device the kubelet assigned. It says nothing of
// pods without devices.
type PodResources struct {
	// Available is false when the kubelet's socket is absent (not a
	// Kubernetes node, or the socket directory not mounted): no error,
	// nothing to read.
	Available bool `json:"available"`
	// Assignments lists every device of a resource the collector keeps
	// (NVIDIA GPUs and MIG slices), in the kubelet's order.
	Assignments []DeviceAssignment `json:"assignments,omitempty"`
	// Dropped counts assignments past the per-sample bound.
	Dropped int `json:"dropped,omitempty"`
	// Allocatable are the NVIDIA devices the kubelet may hand out at all
	// (GetAllocatableResources), nil when the kubelet does not answer it
	// (before Kubernetes 1.23, or the call disabled).
	Allocatable []string `json:"allocatable,omitempty"`
	// Refused counts the assignments whose namespace, pod or container
	// name is not a Kubernetes name (ValidJobIdentity): their device is
	// kept, their names are left empty and name no job.
	Refused int `json:"refused,omitempty"`
	// IntervalSeconds is the collector's interval: the reading names the
	// GPUs' pods for PodResourcesAgeOutIntervals of them (AgedOut). 0 in
	// traces recorded before it was kept: such a reading never ages out.
	IntervalSeconds float64 `json:"interval_seconds,omitempty"`
}

// PodResourcesAgeOutIntervals is how many of its collector's intervals a
// kubelet's answer names the GPUs' pods once the kubelet stops answering
// (the List call fails or times out; a kubelet whose socket went away
// names no pod at once). Within them one failed call, a kubelet restarting,
// does not unname every GPU; past them the pods may have gone, and the
// GPUs' jobs are named by the next source (the processes' cgroups and
// environments). While the answer is kept, the collector's health says it
// is stale (its error, gpudiag_collector_success 0).
const PodResourcesAgeOutIntervals = 3

// AgedOut reports whether the reading, taken at t, is too old at now to
// name pods: PodResourcesAgeOutIntervals intervals have passed without a
// newer one.
func (s *PodResources) AgedOut(t, now time.Time) bool {
	if s.IntervalSeconds <= 0 {
		return false
	}
	return now.Sub(t).Seconds() >= PodResourcesAgeOutIntervals*s.IntervalSeconds
}

// DeviceAssignment is one device held by one container.
type DeviceAssignment struct {
	Namespace string `json:"namespace"`
	Pod       string `json:"pod"`
	Container string `json:"container"`
	// Resource is the extended resource name (nvidia.com/gpu,
	// nvidia.com/mig-1g.10gb).
	Resource string `json:"resource"`
	// DeviceID is what the device plugin calls the device: the GPU's UUID
	// (GPU-…) or a MIG device's (MIG-…).
	DeviceID string `json:"device_id"`
}

// SizeBytes estimates the memory a reading holds, for the window's budget.
func (s *PodResources) SizeBytes() int {
	n := 48
	for _, a := range s.Allocatable {
		n += 16 + len(a)
	}
	for i := range s.Assignments {
		a := &s.Assignments[i]
		n += 96 + len(a.Namespace) + len(a.Pod) + len(a.Container) + len(a.Resource) + len(a.DeviceID)
	}
	return n
}
