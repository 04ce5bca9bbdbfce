package diagnose

import (
	"github.com/gpudiag/gpudiag/engine"
	"github.com/gpudiag/gpudiag/sample"
)

// kubeletEvidence keeps the kubelet's newest configuration for the audit.
func kubeletEvidence(w *engine.Window, b *build) {
	if k, ok := engine.Latest(w, sample.KubeletKey); ok {
		b.in.Audit.Kubelet = k.Sample
	}
}
