package diagnose

import (
	"time"

	"github.com/gpudiag/gpudiag/analyzers"
)

// Report is a diagnosis as it is served (/diagnose, the diagnose command):
// the analyzers' Diagnosis and the health of every collector when it was
// served, so a verdict made without a failing collector's samples says so.
// Its JSON is the Diagnosis's members, then collectors. The text and the
// page render the report alone: what they show beside the diagnosis (the
// verdicts' history, each GPU's model, processes and sparklines) is in it
// too, read when it is served, and left out of the JSON.
type Report struct {
	analyzers.Diagnosis
	Collectors []CollectorHealth `json:"collectors,omitempty"`

	// Served is the samples' clock when the report was served: the
	// verdicts' ages count to it and the timeline ends at it. Zero: the
	// diagnosis's time.
	Served time.Time `json:"-"`
	// History is the verdicts' history (Runner.History), for the timeline.
	History []HistoryEntry `json:"-"`
	// TimelineStart is where the page's timeline and sparklines begin:
	// the window's oldest time the history covers.
	TimelineStart time.Time `json:"-"`
	// Models counts the node's GPU models ("8 × H100"), for the page.
	Models string `json:"-"`
	// GPUContext is what the page shows of each GPU beside its verdict.
	GPUContext map[int]GPUContext `json:"-"`
}

// GPUContext is what the window says of one GPU when the page is served.
type GPUContext struct {
	Model string
	// Processes names its processes, a few of them.
	Processes []string
	// Transport is what NCCL's log says its connections took.
	Transport string
	Sparks    []Sparkline
}

// newReport is the diagnosis d served at now, with the collectors' health
// when they are known.
func newReport(d *analyzers.Diagnosis, health []CollectorHealth, now time.Time) *Report {
	// A copy: d may be the runner's shared latest diagnosis.
	return &Report{Diagnosis: *d, Collectors: health, Served: now}
}

// addHistory adds the verdicts' history, for the timeline of the text and
// the page.
func (r *Runner) addHistory(rep *Report) {
	rep.History = r.History()
}

// maxProcessNames bounds the processes a GPU's card names.
const maxProcessNames = 5

// addGPUContext adds what the page shows of the node and each GPU beside
// the verdicts, read from the window by the GPU, gpuprocess and nccl
// evidence: over the history's part of the window (addHistory first).
func (r *Runner) addGPUContext(rep *Report) {
	start := rep.Served.Add(-r.hist.maxAge)
	if len(rep.History) > 0 && rep.History[0].Start.After(start) {
		start = rep.History[0].Start
	}
	rep.TimelineStart = start
	gpus, sparks := gpuPageEvidence(r.window, start, rep.Served)
	procs, ok := processNames(r.window, maxProcessNames)
	if !ok {
		procs = pidNames(gpus, maxProcessNames)
	}
	transports := ncclTransports(r.window)
	var models map[int]string
	rep.Models, models = modelNames(gpus)
	rep.GPUContext = make(map[int]GPUContext, len(rep.GPUs))
	for _, g := range rep.GPUs {
		rep.GPUContext[g.GPU] = GPUContext{Model: models[g.GPU], Processes: procs[g.GPU],
			Transport: transports[g.GPU], Sparks: sparks[g.GPU]}
	}
}
