package analyzers

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/gpudiag/gpudiag/sample"
)

// AuditInput is what the configuration and health audit reads: the newest
// sample of each collector, the readings of the span whose counters tell
// events in it, and per-GPU activity.
type AuditInput struct {
	// GPUReadings and IBReadings are every reading of the span, oldest
	// first: a counter of a GPU or port that grew between two of its
	// readings is an event in the span, followed from the GPU's or port's
	// own first reading and counted from zero after it went back (a GPU
	// reset zeroes the replay counter, perfquery -R a port's), the rules
	// in sample/span.go. LastGPUs and LastIB are the newest.
	GPUReadings []*sample.GPUs
	LastGPUs    *sample.GPUs
	Tuning      *sample.HostTuning
	IBReadings  []*sample.InfiniBand
	LastIB      *sample.InfiniBand
	// FirstCPU and LastCPU are the oldest and newest reading: the node's
	// OOM kill and swap counters only go back on a reboot, which the
	// window does not outlive.
	FirstCPU, LastCPU *sample.CPU
	Processes         *sample.GPUProcesses
	NCCL              *sample.NCCL
	// NCCLHistory is every reading of the NCCL logs in the window, oldest
	// first: communicator churn is a rate over minutes, longer than a span.
	NCCLHistory []sample.Timed[*sample.NCCL]
	// Kubelet is the newest reading of the kubelet's resource managers.
	Kubelet *sample.Kubelet
	// NCCLProcesses and NetDevices are the newest scan of the jobs'
	// processes and the newest reading of the network interfaces.
	NCCLProcesses *sample.NCCLHostProcesses
	NUMA          *sample.NUMA
	NetDevices    *sample.NetDevices
	// Storage is where the GPUs' data comes from (storage.go), nil when
	// the dataset collector gave no reading.
	Storage *StorageInput
	// Busy says, per GPU index, whether it was busy over the span (SM or
	// NVML utilization ≥ 0.5): some checks only mean something under load.
	Busy map[int]bool
	// CPUPressure is the node's PSI cpu "some" share over the span (NaN
	// when not measured) and CPUPressureLimit the Thresholds.CPUPressure
	// that marks the CPUs contended; Analyze sets both, and a zero limit
	// elsewhere reads as not measured.
	CPUPressure, CPUPressureLimit float64
}

// cpuContended is whether the node's CPUs were contended over the span.
func (a AuditInput) cpuContended() bool {
	return a.CPUPressureLimit > 0 && a.CPUPressure >= a.CPUPressureLimit // false when NaN
}

// throttleReasons are clock event reasons that cost performance when the GPU
// is busy, with the severity each deserves. The software power cap is the
// normal state of a GPU running at its power limit: worth knowing, not alarming.
var throttleReasons = map[string]Severity{
	"hw_slowdown":             SeverityWarning,
	"sw_thermal_slowdown":     SeverityWarning,
	"hw_thermal_slowdown":     SeverityCritical,
	"hw_power_brake_slowdown": SeverityCritical,
	"sw_power_cap":            SeverityInfo,
}

// auditChecks are the audit's checks, in the order they run. Each reads
// what it needs of the AuditInput and finds nothing where that is absent.
// sortFindings ranks their findings; the order here decides between
// findings it ranks equal (the same severity, check and GPU).
var auditChecks = []func(AuditInput) []Finding{
	auditGPUs,
	auditGPUDriver,
	auditGPUConfig,
	auditGPUHealth,
	auditTuningAnyNode,
	auditTuningGPUNode,
	auditInfiniBand,
	auditDeviceLinks,
	auditProcesses,
	auditLimits,
	auditDataLoaderWorkers,
	auditDataLoaderRespawns,
	auditPlacement,
	auditOMPAffinity,
	auditNodeRemoteAllocations,
	auditNCCL,
	auditStorage,
	auditDistributed,
	auditKubelet,
	auditOOMKills,
}

// Audit runs every check of auditChecks. Findings are sorted by severity,
// then check, then GPU, so the output is stable.
func Audit(a AuditInput) []Finding {
	var out []Finding
	for _, check := range auditChecks {
		out = append(out, check(a)...)
	}
	return sortFindings(withoutDisabled(out))
}

// disabledRules names rules that are switched off: finding checks
// ("swap_active") and verdicts ("io/storage_read"). It is set only by the
// package's tests (TestMain reads it from the environment of a test
// binary that TestSeedConditionTestsFire runs again) to prove that the
// tests claimed for a condition fire its rules: with the rules off, each
// must fail. The daemon never sets it, so it is always empty there.
var disabledRules map[string]bool

// withoutDisabled drops the findings of disabledRules' checks.
func withoutDisabled(fs []Finding) []Finding {
	if len(disabledRules) == 0 {
		return fs
	}
	return slices.DeleteFunc(fs, func(f Finding) bool { return disabledRules[f.Check] })
}

// verdictDisabled says whether v's class and sub-kind are switched off in
// disabledRules: the rule that gave it is then passed over as if it had
// not matched.
func verdictDisabled(v Verdict) bool {
	return len(disabledRules) > 0 && disabledRules[string(v.Class)+"/"+v.SubKind]
}

// auditOOMKills reports the kernel's OOM killer running in the span: the
// node's counter grew between the span's oldest and newest CPU reading.
func auditOOMKills(a AuditInput) []Finding {
	if a.LastCPU == nil || a.FirstCPU == nil || !a.LastCPU.VM.HasOOMKills || a.LastCPU.VM.OOMKills <= a.FirstCPU.VM.OOMKills {
		return nil
	}
	n := a.LastCPU.VM.OOMKills - a.FirstCPU.VM.OOMKills
	return []Finding{{Check: "oom_kill", Severity: SeverityCritical,
		Summary:  fmt.Sprintf("the kernel OOM killer ran %d time(s) in the span", n),
		Evidence: []Evidence{{Signal: "oom_kills", Value: float64(n), Op: ">", Threshold: 0}},
		Fix:      "find the killed process in the kernel log; give the job's container a memory request that fits, and limit its noisy neighbours"}}
}

// sortFindings orders findings by severity, then check, then GPU, so the
// output is stable.
func sortFindings(out []Finding) []Finding {
	order := map[Severity]int{SeverityCritical: 0, SeverityWarning: 1, SeverityInfo: 2}
	sort.SliceStable(out, func(i, j int) bool {
		if order[out[i].Severity] != order[out[j].Severity] {
			return order[out[i].Severity] < order[out[j].Severity]
		}
		if out[i].Check != out[j].Check {
			return out[i].Check < out[j].Check
		}
		return gpuOf(out[i]) < gpuOf(out[j])
	})
	return out
}

func gpuOf(f Finding) int {
	if f.GPU == nil {
		return -1
	}
	return *f.GPU
}

// ncclUsesGDR reports whether a current process's NCCL log shows network
// connections over GPUDirect RDMA.
func ncclUsesGDR(s *sample.NCCL) bool {
	if s == nil {
		return false
	}
	for _, g := range s.GPUs {
		p := s.Process(g)
		if !p.Current {
			continue
		}
		for _, t := range p.Transports {
			if strings.HasSuffix(t.Transport, "+GDRDMA") {
				return true
			}
		}
	}
	return false
}

// gpuLostFix is what to do about a GPU that does not answer.
const gpuLostFix = "check the kernel log for XID 79 (fallen off the bus) and the GPU's power and cooling; drain the node and reset or replace the GPU"

// auditBackend reports GPUs read through a fallback backend: the readings
// go on, but DCGM's profiling (SM activity on GPUs without GPM) is gone
// until the preferred backend answers again.
func auditBackend(s *sample.GPUs) []Finding {
	fb := s.Fallback
	if fb == nil {
		return nil
	}
	return []Finding{{Check: "gpu_backend_fallback", Severity: SeverityWarning, Kind: fb.Preferred,
		Summary: fmt.Sprintf("GPUs are read through %s since %s because %s failed: %s",
			s.Backend, fb.Since.UTC().Format(time.RFC3339), fb.Preferred, fb.Reason),
		Fix: "check the DCGM hostengine (systemctl status nvidia-dcgm; journalctl -u nvidia-dcgm); gpudiag reconnects by itself, at most every 5 minutes, and switches back once it answers"}}
}

// gpuEvents is what one GPU's counters say happened in the span.
type gpuEvents struct {
	replays sample.SpanCounter // PCIe replays, from the readings that carry it
	// XIDs: a GPU's reading lists the XIDs seen so far, so an XID absent
	// from one of its readings had not occurred then and counts from zero.
	readings int
	xidsPrev map[uint64]uint64
	xids     map[uint64]float64
}

// spanGPUEvents follows each GPU's event counters through the readings.
func spanGPUEvents(readings []*sample.GPUs) map[int]*gpuEvents {
	out := map[int]*gpuEvents{}
	for _, s := range readings {
		if s == nil {
			continue
		}
		for i := range s.Devices {
			d := &s.Devices[i]
			ev := out[d.Index]
			if ev == nil {
				ev = &gpuEvents{xids: map[uint64]float64{}}
				out[d.Index] = ev
			}
			// A GPU that does not answer has no replay count: the next
			// reading that has one continues from the last, not zero.
			if r, ok := d.Values.Get(sample.PCIeReplaysTotal); ok {
				ev.replays.Add(time.Time{}, r)
			}
			if ev.readings > 0 {
				for xid, n := range d.XIDErrors {
					ev.xids[xid] += sample.CounterIncrease(float64(ev.xidsPrev[xid]), float64(n))
				}
			}
			ev.xidsPrev = d.XIDErrors
			ev.readings++
		}
	}
	return out
}

// auditGPUs reads each GPU's newest state and the events its counters
// count over the span.
func auditGPUs(a AuditInput) []Finding {
	if a.LastGPUs == nil {
		return nil
	}
	out := auditBackend(a.LastGPUs)
	events := spanGPUEvents(a.GPUReadings)
	for i := range a.LastGPUs.Devices {
		d := &a.LastGPUs.Devices[i]
		idx := d.Index
		f := func(check string, sev Severity, summary, fix string, ev ...Evidence) {
			out = append(out, Finding{Check: check, Severity: sev, GPU: &idx, Summary: summary, Fix: fix, Evidence: ev})
		}
		if !d.Up {
			f("gpu_lost", SeverityCritical, "the GPU does not answer: "+d.Error, gpuLostFix)
			continue
		}
		v := d.Values
		if x, ok := v.Get(sample.PersistenceModeEnabled); ok && x == 0 {
			f("persistence_mode_off", SeverityWarning, "persistence mode is off: the driver tears the GPU down between jobs, and each job start pays a second or two to bring it back",
				"enable nvidia-persistenced (systemctl enable --now nvidia-persistenced) or nvidia-smi -pm 1")
		}
		if x, ok := v.Get(sample.ECCEnabled); ok && x == 0 {
			f("ecc_off", SeverityWarning, "ECC is off: memory errors go undetected and can silently corrupt results",
				"enable ECC (nvidia-smi -e 1) and reset the GPU; datacenter GPUs ship with it on")
		}
		if x, ok := v.Get(sample.ECCUncorrectedErrorsTotal); ok && x > 0 {
			// Where the GPU reports it, where: DRAM (remapped rows retire
			// it) or SRAM (on-chip, only a reset clears it).
			ev := []Evidence{{Signal: "ecc_uncorrected_errors", Value: x, Op: ">", Threshold: 0}}
			for _, c := range d.ECCErrors {
				if c.Counter == sample.ECCVolatile && c.Type == sample.ECCUncorrected && c.Count > 0 {
					ev = append(ev, Evidence{Signal: "ecc_uncorrected_errors_" + c.Location, Value: c.Count, Op: ">", Threshold: 0})
				}
			}
			f("ecc_uncorrectable", SeverityCritical, fmt.Sprintf("%.0f uncorrectable ECC error(s) since the driver loaded", x),
				"drain the node; if row remapping does not retire the rows after a GPU reset, replace the GPU", ev...)
		}
		if x, ok := v.Get(sample.RowRemapFailed); ok && x == 1 {
			f("row_remap_failed", SeverityCritical, "a memory row remap failed: the GPU has no spare rows left for a failing address",
				"drain the node and replace the GPU")
		} else if x, ok := v.Get(sample.RowRemapPending); ok && x == 1 {
			f("row_remap_pending", SeverityWarning, "a memory row remap waits for a GPU reset to take effect",
				"drain the GPU and reset it (nvidia-smi -r) at the next opportunity")
		}
		if w, ok := v.Get(sample.PCIeLinkWidth); ok {
			if mw, ok := v.Get(sample.PCIeLinkMaxWidth); ok && w < mw {
				f("pcie_link_degraded", SeverityWarning, fmt.Sprintf("the PCIe link runs at x%.0f of x%.0f: host↔GPU bandwidth is cut in proportion", w, mw),
					"reseat the GPU or riser, check the slot's bifurcation settings in the BIOS; a link that trained narrow stays so until reboot",
					Evidence{Signal: "pcie_link_width", Value: w, Op: "<", Threshold: mw})
			}
		}
		// The link generation drops at idle to save power, so only a busy
		// GPU below its maximum generation is degraded.
		if g, ok := v.Get(sample.PCIeLinkGeneration); ok && a.Busy[idx] {
			if mg, ok := v.Get(sample.PCIeLinkMaxGeneration); ok && g < mg {
				f("pcie_link_degraded", SeverityWarning, fmt.Sprintf("the PCIe link runs at Gen%.0f of Gen%.0f while the GPU is busy", g, mg),
					"check the slot and riser generation settings in the BIOS and the PCIe replay counter; reseat the card",
					Evidence{Signal: "pcie_link_generation", Value: g, Op: "<", Threshold: mg})
			}
		}
		if ev := events[idx]; ev != nil {
			if n := ev.replays.Increase(); n > 0 {
				f("pcie_replays", SeverityWarning, fmt.Sprintf("%.0f PCIe replays in the span: the link retransmits, a sign of a marginal slot, riser or card", n),
					"reseat the GPU and riser; if replays keep rising, replace the riser or move the GPU",
					Evidence{Signal: "pcie_replays", Value: n, Op: ">", Threshold: 0})
			}
			for _, xid := range slices.Sorted(maps.Keys(ev.xids)) {
				if n := ev.xids[xid]; n > 0 {
					sev, class := xidSeverity(xid)
					f("xid", sev, fmt.Sprintf("XID %d reported %.0f time(s) in the span (%s)", xid, n, class),
						xidFix(xid), Evidence{Signal: fmt.Sprintf("xid_%d", xid), Value: n, Op: ">", Threshold: 0})
				}
			}
		}
		if a.Busy[idx] && d.ClockEventReasons != 0 {
			for _, r := range sample.ClockEventReasons {
				sev, costly := throttleReasons[r.Name]
				if !costly || d.ClockEventReasons&r.Bit == 0 {
					continue
				}
				f("clocks_throttled", sev, "the GPU is busy and its clocks are held down: "+strings.ReplaceAll(r.Name, "_", " "),
					throttleFix(r.Name))
			}
		}
	}
	return out
}

// hardwareXIDs are the XIDs NVIDIA's XID catalogue ties to the GPU, its
// memory, links or firmware rather than to the program: 48 double-bit
// ECC, 61/62 internal micro-controller halt, 63/64 row remapping, 74
// NVLink, 79 fallen off the bus, 92 high single-bit ECC rate, 94/95
// contained/uncontained ECC, 119/120 GSP timeout/error, 140 unrecovered
// ECC. They take the GPU (and the next job on it) down: critical, drain
// the node. The GPUDiagXIDError alert's critical rule lists the same set
// (TestXIDClassesMatchTheAlert).
var hardwareXIDs = []uint64{48, 61, 62, 63, 64, 74, 79, 92, 94, 95, 119, 120, 140}

// applicationXIDs are the XIDs the catalogue gives the program as the
// usual cause: 13 graphics engine exception, 31 MMU fault (an illegal
// address), 43 a channel stopped (a killed or faulting kernel). The job
// failed, but the GPU serves the next one: a warning for the job's owner,
// not a page; the same XID across jobs on one GPU points at the hardware
// (the runbook says how to tell). 45 is the driver cleaning up a channel
// after its process was killed or after another XID: it follows an event
// reported on its own, so it is info.
var applicationXIDs = map[uint64]Severity{13: SeverityWarning, 31: SeverityWarning, 43: SeverityWarning, 45: SeverityInfo}

// xidSeverity ranks an XID by its class, with the class's name for the
// summary. An XID in neither list is a warning, as the alert has it: the
// catalogue's other entries are driver, display or rare events whose
// meaning depends on the driver version.
func xidSeverity(xid uint64) (Severity, string) {
	if slices.Contains(hardwareXIDs, xid) {
		return SeverityCritical, "a hardware or firmware XID"
	}
	if sev, ok := applicationXIDs[xid]; ok {
		return sev, "usually an application fault"
	}
	return SeverityWarning, "not classed: see NVIDIA's XID catalogue"
}

func xidFix(xid uint64) string {
	switch xid {
	case 48, 63, 64, 92, 94, 95:
		return "a memory (ECC) event: check remapped rows; drain and reset the GPU, replace it if it repeats"
	case 79:
		return "the GPU fell off the bus: drain the node, check power, cooling and the PCIe slot; reboot"
	case 74:
		return "an NVLink error: check the NVLink and NVSwitch state (nvidia-smi nvlink -s) and the fabric manager"
	case 13, 31, 43:
		return "usually an application fault (illegal memory access, a kernel killed): check the job's logs first; the same XID across different jobs on this GPU points at the GPU: drain it and run dcgmi diag -r 3"
	case 45:
		return "the driver cleaned up after a killed process or an earlier XID: look at the XID reported before it"
	case 61, 62, 119, 120:
		return "the GPU's internal micro-controller or GSP firmware failed: drain the node and reset the GPU (nvidia-smi -r) or reboot; update the driver if it repeats"
	case 140:
		return "an ECC error the GPU could not recover from: drain the node, reset the GPU, check remapped rows; replace it if it repeats"
	}
	return "look the XID up in NVIDIA's XID catalogue and the kernel log (dmesg | grep -i xid)"
}

func throttleFix(reason string) string {
	switch reason {
	case "sw_power_cap":
		return "the GPU runs at its power limit; normal under heavy load. If the limit was lowered (nvidia-smi -pl), raise it"
	case "hw_power_brake_slowdown":
		return "the power supply asserted the brake: check PSU capacity and redundancy"
	}
	return "check cooling: inlet temperature, fans, airflow and blanking panels; compare with the other GPUs of the node"
}

// ibErrorCounters are the port counters whose growth is reported.
var ibErrorCounters = []sample.InfiniBandCounter{sample.IBSymbolErrors, sample.IBLinkDowned, sample.IBReceiveErrors, sample.IBLocalAckTimeoutErrors}

// ibPortErrors is one port's error counters' increases over the span.
type ibPortErrors struct {
	name     string
	counters map[sample.InfiniBandCounter]*sample.SpanCounter
}

// spanIBCounters follows the given counters of each port through the
// readings, in the order the ports first appear. A counter the HCA does not
// expose is absent, not zero, and is not followed.
func spanIBCounters(readings []*sample.InfiniBand, counters []sample.InfiniBandCounter) []*ibPortErrors {
	var out []*ibPortErrors
	byName := map[string]*ibPortErrors{}
	for _, s := range readings {
		if s == nil {
			continue
		}
		for i := range s.Ports {
			p := &s.Ports[i]
			name := fmt.Sprintf("%s/%d", p.Device, p.Port)
			pe := byName[name]
			if pe == nil {
				pe = &ibPortErrors{name: name, counters: map[sample.InfiniBandCounter]*sample.SpanCounter{}}
				byName[name] = pe
				out = append(out, pe)
			}
			for _, c := range counters {
				n, ok := p.Counters[c]
				if !ok {
					continue
				}
				if pe.counters[c] == nil {
					pe.counters[c] = &sample.SpanCounter{}
				}
				pe.counters[c].Add(time.Time{}, float64(n))
			}
		}
	}
	return out
}

// auditIBPortsDown reports the RDMA ports that are not active although the
// node's NCCL ranks name them in NCCL_IB_HCA: a rail the job was set up to
// use is lost, and NCCL either drops it (its traffic crowds the other
// rails) or fails to start (seeds-002-004 N5, C8: a port that stays down,
// where link_downed growth only shows a port that flaps). A port an
// administrator disabled (phys_state Disabled) is meant to be down; a port
// no rank names (a second port never cabled) is nobody's rail. A warning:
// the job runs on fewer rails, and the fix is a cable or a switch port.
func auditIBPortsDown(last *sample.InfiniBand, procs *sample.NCCLHostProcesses) []Finding {
	if procs == nil {
		return nil
	}
	var out []Finding
	for i := range last.Ports {
		p := &last.Ports[i]
		if p.Active() || p.PhysState == "Disabled" {
			continue
		}
		var pids []string
		spec := ""
		for j := range procs.Processes {
			r := &procs.Processes[j]
			if r.ForkOf != 0 || !r.MapsNCCL() {
				continue
			}
			if v, ok := r.EnvValue("NCCL_IB_HCA"); ok && ncclIBHCAUses(v, p.Device, p.Port) {
				pids = append(pids, fmt.Sprintf("pid %d", r.PID))
				spec = v
			}
		}
		if len(pids) == 0 {
			continue
		}
		name := fmt.Sprintf("%s/%d", p.Device, p.Port)
		out = append(out, Finding{Check: "ib_port_down", Severity: SeverityWarning, Device: name,
			Summary: fmt.Sprintf("port %s is %s (%s), but NCCL ranks on the node (%s) are set to use it (NCCL_IB_HCA=%s): a rail of the job is lost",
				name, p.State, p.PhysState, whoList(pids), spec),
			Evidence: []Evidence{{Signal: "port_state_id", Value: float64(p.StateID), Op: "!=", Threshold: 4}},
			Fix:      "ibstat shows the port's state: Polling means no link partner (the cable, the transceiver or the switch port; mlxlink -d <dev> -p <port>), Init or Armed a link up but not brought in by the subnet manager (check opensm or the UFM); until it is back, drain the node or list only the active HCAs in NCCL_IB_HCA"})
	}
	return out
}

// ncclIBHCAUses says whether an NCCL_IB_HCA value selects a port: a comma
// list of HCA names, each with an optional :port, matched as prefixes
// unless the list starts with "=" (exact names); a leading "^" excludes
// the listed ones instead (NCCL's environment documentation).
func ncclIBHCAUses(spec, device string, port uint) bool {
	spec = strings.TrimSpace(spec)
	exclude := strings.HasPrefix(spec, "^")
	spec = strings.TrimPrefix(spec, "^")
	exact := strings.HasPrefix(spec, "=")
	spec = strings.TrimPrefix(spec, "=")
	matched := false
	for _, entry := range strings.Split(spec, ",") {
		name, portText, hasPort := strings.Cut(strings.TrimSpace(entry), ":")
		if name == "" {
			continue
		}
		nameMatches := device == name || (!exact && strings.HasPrefix(device, name))
		if nameMatches && (!hasPort || portText == strconv.FormatUint(uint64(port), 10)) {
			matched = true
		}
	}
	return matched != exclude
}

// auditInfiniBand reads the newest state of each port and the error
// counters' growth over the span's readings, a port that went away in the
// span included: its errors happened.
func auditInfiniBand(a AuditInput) []Finding {
	readings, last, gpus := a.IBReadings, a.LastIB, a.LastGPUs
	if last == nil {
		return nil
	}
	gdrInUse := ncclUsesGDR(a.NCCL)
	var out []Finding
	for i := range last.Ports {
		p := &last.Ports[i]
		name := fmt.Sprintf("%s/%d", p.Device, p.Port)
		if p.RateDegraded {
			summary := fmt.Sprintf("port %s runs at %.0f Gb/s, below its peers", name, p.RateBytesPerSecond*8/1e9)
			evidence := Evidence{Signal: "rate_bytes_per_second", Value: p.RateBytesPerSecond, Unit: "B/s", Op: "<", Threshold: 0}
			if p.WidthDegraded() {
				minWidth, trains := sample.InfiniBandMinWidth(p.LinkSpeed), "4X"
				if minWidth < 4 {
					trains = "4X, or 2X on a splitter cable"
				}
				summary = fmt.Sprintf("port %s trained at %dX %s (%.0f Gb/s), fewer lanes than an HCA port trains at (%s): lanes of its cable, optic or port failed",
					name, p.LinkWidth, p.LinkSpeed, p.RateBytesPerSecond*8/1e9, trains)
				evidence = Evidence{Signal: "link_width", Value: float64(p.LinkWidth), Unit: "lanes", Op: "<", Threshold: float64(minWidth)}
			}
			// Carrying traffic, the port sets the pace of every collective
			// that crosses it.
			if b := math.Max(p.Rates[sample.IBTransmitBytes], p.Rates[sample.IBReceiveBytes]); b > 0 && p.RateBytesPerSecond > 0 {
				summary += fmt.Sprintf(", and carries %.1f GB/s (%.0f%% of its rate): every collective through it runs at its pace", b/1e9, b/p.RateBytesPerSecond*100)
			}
			out = append(out, Finding{Check: "ib_port_degraded", Severity: SeverityWarning, Device: name,
				Summary:  summary,
				Evidence: []Evidence{evidence},
				Fix:      "check the cable or transceiver and the switch port (ibstat, mlxlink); a link that trained at a lower width or speed stays so until retrained"})
		}
	}
	for _, pe := range spanIBCounters(readings, ibErrorCounters) {
		for _, c := range ibErrorCounters {
			if sc := pe.counters[c]; sc != nil && sc.Increase() > 0 {
				out = append(out, Finding{Check: "ib_port_errors", Severity: SeverityWarning, Device: pe.name, Kind: string(c),
					Summary:  fmt.Sprintf("port %s counted %.0f %s in the span", pe.name, sc.Increase(), strings.ReplaceAll(string(c), "_", " ")),
					Evidence: []Evidence{{Signal: string(c), Value: sc.Increase(), Op: ">", Threshold: 0}},
					Fix:      "errors on a port slow every collective that crosses it: check the cable and transceiver, and the switch side (mlxlink -d <dev> -c)"})
			}
		}
	}
	out = append(out, auditRDMATransport(readings)...)
	out = append(out, auditIBPortsDown(last, a.NCCLProcesses)...)
	active := 0
	for i := range last.Ports {
		if last.Ports[i].Active() {
			active++
		}
	}
	// Without a peer-memory module GPUDirect RDMA still works through
	// DMA-BUF (open kernel modules, Linux 5.12+): NCCL's log showing GDRDMA
	// connections settles it.
	if active > 0 && gpus != nil && len(gpus.Devices) > 0 && last.GPUDirectRDMAModule == "" && !gdrInUse {
		out = append(out, Finding{Check: "gpudirect_rdma_missing", Severity: SeverityWarning,
			Summary: fmt.Sprintf("%d RDMA port(s) are active but neither nvidia_peermem nor nv_peer_mem is loaded: inter-node collectives copy through host memory", active),
			Fix:     "modprobe nvidia_peermem (and load it at boot); drivers using DMA-BUF need no module, check NCCL's log for GDRDMA"})
	}
	return out
}
