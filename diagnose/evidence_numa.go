package diagnose

import (
	"github.com/gpudiag/gpudiag/engine"
	"github.com/gpudiag/gpudiag/sample"
)

// numaEvidence keeps the newest NUMA reading for the placement audit (a job
// whose GPUs sit on different NUMA nodes talks over the inter-socket link)
// and for the fabric (how far each GPU sits from each RDMA port).
func numaEvidence(w *engine.Window, b *build) {
	if e, ok := engine.Latest(w, sample.NUMAKey); ok {
		b.in.Audit.NUMA = e.Sample
	}
}
