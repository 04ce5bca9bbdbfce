package diagnose

import (
	"github.com/gpudiag/gpudiag/engine"
	"github.com/gpudiag/gpudiag/sample"
)

// podResourcesEvidence keeps the kubelet's newest device assignments, which
// name the pod on each GPU (jobEvidence).
func podResourcesEvidence(w *engine.Window, b *build) {
	if pr, ok := engine.Latest(w, sample.PodResourcesKey); ok {
		b.pods = &pr
	}
}
