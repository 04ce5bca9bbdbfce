package diagnose

import (
	"github.com/gpudiag/gpudiag/engine"
	"github.com/gpudiag/gpudiag/sample"
)

// netDevEvidence keeps the newest reading of the network interfaces for the
// audit, whatever its age: interfaces change rarely.
func netDevEvidence(w *engine.Window, b *build) {
	if e, ok := engine.Latest(w, sample.NetDevKey); ok {
		b.in.Audit.NetDevices = e.Sample
	}
}
