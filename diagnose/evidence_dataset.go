package diagnose

import (
	"time"

	"github.com/gpudiag/gpudiag/engine"
	"github.com/gpudiag/gpudiag/sample"
)

// datasetEvidence keeps the window's dataset scans: the newest says where
// each GPU's data comes from, the oldest with GPUDirect Storage counters
// how they grew (storageEvidence).
func datasetEvidence(w *engine.Window, b *build) {
	b.datasets = engine.Range(w, sample.DatasetKey, time.Time{})
}
