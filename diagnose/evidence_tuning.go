package diagnose

import (
	"github.com/gpudiag/gpudiag/engine"
	"github.com/gpudiag/gpudiag/sample"
)

// tuningEvidence keeps the host's newest tuning facts for the audit. They
// are sampled every 30 s or so: the newest is taken whatever its age, they
// change rarely.
func tuningEvidence(w *engine.Window, b *build) {
	if t, ok := engine.Latest(w, sample.TuningKey); ok {
		b.in.Audit.Tuning = t.Sample
	}
}
