package diagnose

import (
	"time"

	"github.com/gpudiag/gpudiag/analyzers"
	"github.com/gpudiag/gpudiag/engine"
)

// FromWindow builds the analyzers' Input from the engine's window over the
// span that ends at now. The evidence files, one per collector key
// (evidence_<key>.go), are the only code that reads the window: each reads
// its own collector's samples by the collector's key, fills the Input
// fields that are its collector's alone, and keeps in the build what
// evidence joining several collectors needs. The joins (fabric.go, jobs.go,
// storage.go, ranks.go) read the build, never the window. The rules the
// readers follow to read a span are in sample/span.go.
func FromWindow(w *engine.Window, now time.Time, span time.Duration) analyzers.Input {
	in := analyzers.Input{Now: now, SpanSeconds: span.Seconds(), Node: analyzers.NaNNode()}
	b := &build{in: &in, since: now.Add(-span)}
	for _, read := range readers {
		read(w, b)
	}
	for _, join := range joins {
		join(b)
	}
	return in
}

// readers read the window, one collector each. The GPU reader comes first:
// the others follow each GPU from its job's start (spanStarts). NCCL's log
// is read before the NCCL processes' environment: the log says what NCCL
// took (mergeEnv). Adding a collector's evidence is a file of its own and
// its reader's line here.
var readers = []func(w *engine.Window, b *build){
	gpuEvidence,
	diskWaitEvidence,
	tcpEvidence, ncclEvidence, ncclProcessEvidence, netDevEvidence,
	pressureEvidence, cpuEvidence, diskEvidence,
	numaEvidence,
	processEvidence,
	rdmaPortEvidence,
	kubeletEvidence, tuningEvidence,
	podResourcesEvidence, datasetEvidence,
}

// joins combine what several readers kept. storageEvidence prefers the disk
// that diskWaitEvidence saw each GPU's processes wait on.
var joins = []func(b *build){
	gpuNICs,
	jobEvidence,
	storageEvidence,
	rankEvidence,
}
