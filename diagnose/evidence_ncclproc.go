package diagnose

import (
	"slices"
	"strings"
	"time"

	"github.com/gpudiag/gpudiag/engine"
	"github.com/gpudiag/gpudiag/sample"
)

// ncclProcessEvidence keeps, for the audit, the newest scan of the NCCL
// processes, and adds their NCCL settings to their GPUs'. The scan runs on a
// slower clock than the span, and changes rarely: the newest is taken
// whatever its age. The window's scans are kept for the ranks and the jobs:
// a rank gone since the newest scan is found in an older one.
func ncclProcessEvidence(w *engine.Window, b *build) {
	in := b.in
	b.ncclScans = engine.Range(w, sample.NCCLProcKey, time.Time{})
	e, ok := newest(b.ncclScans)
	if !ok {
		return
	}
	in.Audit.NCCLProcesses = e.Sample
	for _, p := range e.Sample.Processes {
		if p.ForkOf != 0 {
			continue // a forked worker repeats its parent
		}
		for i := range in.GPUs {
			if !slices.Contains(p.GPUs, in.GPUs[i].Index) {
				continue
			}
			in.GPUs[i].NCCLEnv = mergeEnv(in.GPUs[i].NCCLEnv, ncclVariables(p.Env))
			if p.MapsNCCL() {
				in.GPUs[i].NCCL = true
			}
		}
	}
}

// ncclVariables keeps the NCCL_* variables of a process's environment.
func ncclVariables(env []sample.NCCLEnv) []sample.NCCLEnv {
	var out []sample.NCCLEnv
	for _, e := range env {
		if strings.HasPrefix(e.Name, "NCCL_") {
			out = append(out, e)
		}
	}
	return out
}
