package diagnose

import (
	"fmt"
	"slices"
	"strings"
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

// ncclTransports says, per GPU, for the page, which transports its NCCL
// process's connections took and the fallbacks NCCL logged.
func ncclTransports(w *engine.Window) map[int]string {
	out := map[int]string{}
	n, ok := engine.Latest(w, sample.NCCLKey)
	if !ok {
		return out
	}
	for _, g := range n.Sample.GPUs {
		if g.File >= len(n.Sample.Files) || g.Process >= len(n.Sample.Files[g.File].Processes) {
			continue
		}
		p := n.Sample.Process(g)
		var parts []string
		for _, t := range p.Transports {
			parts = append(parts, fmt.Sprintf("%s ×%d", t.Transport, t.Connections))
		}
		s := strings.Join(parts, ", ")
		if p.Network != "" {
			s += "; network " + p.Network
		}
		var kinds []string
		for _, f := range p.Fallbacks {
			if !slices.Contains(kinds, f.Kind) {
				kinds = append(kinds, f.Kind)
			}
		}
		if len(kinds) > 0 {
			s += "; fallback " + strings.Join(kinds, ", ")
		}
		out[g.GPU] = strings.TrimPrefix(s, "; ")
	}
	return out
}
