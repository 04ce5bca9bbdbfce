package sample

// PressureKey is the pressure collector's key: its samples are *Pressure.
var PressureKey = NewKey[Pressure]("pressure")

// Pressure is one reading of the kernel's pressure stall information (PSI):
// how much wall time tasks lost waiting for CPU, I/O, memory or interrupts.
type Pressure struct {
	// IntervalSeconds is the time since the previous reading; 0 on the first.
	IntervalSeconds float64            `json:"interval_seconds,omitempty"`
	Resources       []PressureResource `json:"resources"`
	// Unmeasured names the resources whose file was not there or not
	// readable (irq before 6.1 or without CONFIG_IRQ_TIME_ACCOUNTING).
	Unmeasured []string `json:"unmeasured,omitempty"`
}

// UnmeasuredFields names, for the collector's health, the resources not
// read: "pressure/irq".
func (p *Pressure) UnmeasuredFields() []string {
	out := make([]string, 0, len(p.Unmeasured))
	for _, r := range p.Unmeasured {
		out = append(out, "pressure/"+r)
	}
	return out
}

// PressureResource is one file of /proc/pressure.
type PressureResource struct {
	// Resource is cpu, io, memory or irq.
	Resource string `json:"resource"`
	// Some is the time at least one task was stalled on the resource, Full
	// the time all non-idle tasks were stalled at once. Either is nil when
	// the kernel has no such line (cpu full before 5.13, irq some never).
	Some *PressureLine `json:"some,omitempty"`
	Full *PressureLine `json:"full,omitempty"`
}

// PressureLine is one some or full line.
type PressureLine struct {
	TotalMicroseconds uint64 `json:"total_us"`
	// Avg10 is the kernel's own running average over the last 10 s, 0–1.
	Avg10 float64 `json:"avg10"`
	// IntervalRatio is the share of the interval since the previous reading
	// spent stalled, 0–1; 0 on the first reading or after a reset.
	IntervalRatio float64 `json:"interval_ratio"`
}

// Resource returns the named resource, or nil when the kernel lacks it.
func (p *Pressure) Resource(name string) *PressureResource {
	for i := range p.Resources {
		if p.Resources[i].Resource == name {
			return &p.Resources[i]
		}
	}
	return nil
}

// SizeBytes estimates the memory a reading holds, for the window's budget.
func (p *Pressure) SizeBytes() int {
	return 32 + len(p.Resources)*(48+2*32) + len(p.Unmeasured)*24
}
