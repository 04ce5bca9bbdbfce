package analyzers

import "math"

// Analyze produces the diagnosis for in. prev is the previous diagnosis (nil
// at start) and carries the hysteresis state: a GPU's reported class changes
// only after the new class has won t.Hysteresis analyses in a row.
func Analyze(in Input, prev *Diagnosis, t Thresholds) Diagnosis {
	// The evidence names the span its means are over: the input's, which
	// for diagnose --for and /diagnose?window= is not the daemon's span.
	if in.SpanSeconds > 0 {
		t.SpanSeconds = in.SpanSeconds
	}
	d := Diagnosis{SchemaVersion: SchemaVersion, Time: in.Now, SpanSeconds: in.SpanSeconds, Jobs: in.Jobs}
	attributeRDMA(in.GPUs, in.Node)
	groups := groupGPUs(in)
	d.GPUs = gpuVerdicts(in, groups, prev, t)
	d.Inputs = inputsSeen(in)
	d.Node, d.Groups, d.FreeGPUs = nodeVerdict(in, groups, d.GPUs)
	d.Node.Since = in.Now
	if prev != nil && prev.Node.Class == d.Node.Class {
		d.Node.Since = prev.Node.Since
	}
	d.Stragglers = FindStragglers(in.GPUs, d.GPUs, t)
	if len(d.Stragglers) > 0 {
		d.Node.Summary += "; straggler GPUs hold the others back"
	}
	audit := in.Audit
	audit.Busy = map[int]bool{}
	for _, w := range in.GPUs {
		audit.Busy[w.Index] = w.SMActive >= t.SMActiveCompute || w.Utilization >= 0.5
	}
	audit.CPUPressure, audit.CPUPressureLimit = in.Node.CPUPressure, t.CPUPressure
	audit.Storage = audit.Storage.WithVerdicts(d.GPUs)
	d.Findings = sortFindings(append(Audit(audit), withoutDisabled(fabricFindings(in, d.GPUs, t))...))
	if d.Findings == nil {
		d.Findings = []Finding{}
	}
	return d
}

// inputsSeen says what the diagnosis could see: the GPU samples over the
// span, where SM activity came from, whether any host evidence (the GPU
// processes' CPU, the node's pressure) was read, and the GPU backend.
func inputsSeen(in Input) InputsSummary {
	var seen InputsSummary
	for _, w := range in.GPUs {
		seen.GPUSamples += w.Samples
		if w.ActivitySource != "" {
			seen.ActivitySource = string(w.ActivitySource)
		}
		if !math.IsNaN(w.ProcessCPUCores) {
			seen.HostEvidence = true
		}
	}
	if !math.IsNaN(in.Node.CPUPressure) || !math.IsNaN(in.Node.IOPressure) {
		seen.HostEvidence = true
	}
	if s := in.Audit.LastGPUs; s != nil {
		seen.GPUBackend, seen.GPUBackendFallback = s.Backend, s.Fallback
	}
	return seen
}
