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
	prevByGPU := map[int]GPUVerdict{}
	if prev != nil {
		for _, g := range prev.GPUs {
			prevByGPU[g.GPU] = g
		}
	}
	attributeRDMA(in.GPUs, in.Node)
	groups := groupGPUs(in)
	grouped := make([]bool, len(in.GPUs))
	for _, gr := range groups {
		for _, i := range gr.members {
			grouped[i] = gr.grouped()
		}
	}
	fresh := make([]Verdict, len(in.GPUs))
	for i, w := range in.GPUs {
		fresh[i] = classifyGPU(w, in.Node, t, grouped[i])
	}
	waits := resolveWaits(in, groups, fresh, t)
	host := false
	for i, w := range in.GPUs {
		d.Inputs.GPUSamples += w.Samples
		if w.ActivitySource != "" {
			d.Inputs.ActivitySource = string(w.ActivitySource)
		}
		if !math.IsNaN(w.ProcessCPUCores) {
			host = true
		}
		g := GPUVerdict{GPU: w.Index, UUID: w.UUID, Verdict: fresh[i], WaitsFor: waits[i]}
		g.Since = in.Now
		p, ok := prevByGPU[w.Index]
		d.GPUs = append(d.GPUs, stabilize(p, ok, g, t.Hysteresis))
	}
	if !math.IsNaN(in.Node.CPUPressure) || !math.IsNaN(in.Node.IOPressure) {
		host = true
	}
	d.Inputs.HostEvidence = host
	if s := in.Audit.LastGPUs; s != nil {
		d.Inputs.GPUBackend, d.Inputs.GPUBackendFallback = s.Backend, s.Fallback
	}
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
	audit.Storage = audit.Storage.WithVerdicts(d.GPUs)
	d.Findings = sortFindings(append(Audit(audit), fabricFindings(in, d.GPUs, t)...))
	if d.Findings == nil {
		d.Findings = []Finding{}
	}
	return d
}

// stabilize applies hysteresis. The fresh verdict replaces the previous one
// when the class is the same (refreshing evidence, keeping Since), when there
// is no previous one, or when the new class has now won `need` times in a row.
// Otherwise the previous class is kept and the new one shown as Pending. A
// GPU going down or coming back is no noisy ratio but a fact the driver
// reports, so it shows at once.
func stabilize(prev GPUVerdict, havePrev bool, fresh GPUVerdict, need int) GPUVerdict {
	switch {
	case !havePrev:
		return fresh
	case prev.Class == fresh.Class && prev.SubKind == SubGPUDown && fresh.SubKind != SubGPUDown:
		return fresh // back up, but not yet classified: a new verdict
	case prev.Class == fresh.Class:
		fresh.Since = prev.Since
		return fresh
	case prev.SubKind == SubGPUDown || fresh.SubKind == SubGPUDown:
		return fresh
	}
	count := 1
	if prev.Pending == fresh.Class {
		count = prev.pendingCount + 1
	}
	if count >= need {
		return fresh
	}
	kept := prev
	kept.Pending = fresh.Class
	kept.pendingCount = count
	return kept
}
