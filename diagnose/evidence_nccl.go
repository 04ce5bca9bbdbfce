package diagnose

import (
	"slices"
	"time"

	"github.com/gpudiag/gpudiag/engine"
	"github.com/gpudiag/gpudiag/sample"
)

// Evidence from NCCL's own log (nccl collector): what NCCL says each GPU's
// process did.

// ncclEvidence attaches the newest NCCL facts of each GPU: transports used
// and fallbacks, and keeps the sample for the audit, the window's readings
// for the audit's history and the newest for the ranks and the fabric.
func ncclEvidence(w *engine.Window, b *build) {
	in := b.in
	in.Audit.NCCLHistory = engine.Range(w, sample.NCCLKey, time.Time{})
	e, ok := newest(in.Audit.NCCLHistory)
	if !ok {
		return
	}
	b.ncclLog = e.Sample
	if len(e.Sample.GPUs) == 0 {
		return
	}
	s := e.Sample
	in.Audit.NCCL = s
	for _, g := range s.GPUs {
		p := s.Process(g)
		if !p.Current {
			continue
		}
		for i := range in.GPUs {
			if in.GPUs[i].Index != g.GPU {
				continue
			}
			in.GPUs[i].NCCL = true
			in.GPUs[i].NCCLEnv = mergeEnv(in.GPUs[i].NCCLEnv, p.Env)
			for _, t := range p.Transports {
				in.GPUs[i].NCCLTransports = append(in.GPUs[i].NCCLTransports, t.Transport)
			}
			for _, f := range p.Fallbacks {
				in.GPUs[i].NCCLFallbacks = append(in.GPUs[i].NCCLFallbacks, f.Kind)
			}
		}
	}
}

// mergeEnv adds to env the variables of more it does not set yet: NCCL's
// log, read first, says what NCCL took.
func mergeEnv(env, more []sample.NCCLEnv) []sample.NCCLEnv {
	for _, e := range more {
		if !slices.ContainsFunc(env, func(x sample.NCCLEnv) bool { return x.Name == e.Name }) {
			env = append(env, e)
		}
	}
	return env
}
