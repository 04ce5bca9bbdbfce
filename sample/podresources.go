package sample

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
