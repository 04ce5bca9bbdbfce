package analyzers

import (
	"fmt"
	"maps"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/gpudiag/gpudiag/sample"
)

// GPU configuration: states of a GPU and its driver that bound the work
// without being a fault of the hardware: memory nearly full, processes
// time-slicing the GPU, MIG, NVLinks down, the NVSwitch fabric not ready, a
// driver older than the job's CUDA. Each finding page is
// docs/runbooks/findings/<check>.md.

// memoryNearFull is the share of device memory in use above which a busy
// GPU is short of memory. At 95% an 80 GB H100 has 4 GB left: less than
// one more activation or optimizer buffer of a large model, so PyTorch's
// caching allocator starts freeing its cache and retrying (cudaFree
// synchronizes the device) and the next larger allocation fails with an
// out-of-memory error. JAX preallocates 75% by default and stays below;
// TensorFlow without memory growth takes nearly all of it by design, which
// the summary says.
const memoryNearFull = 0.95

// timeSliceShare is the per-process SM share (NVML process utilization)
// above which a process is counted as computing: below it a process holds a
// context and little more (a monitoring tool, an idle notebook), and the
// GPU is not really shared.
const timeSliceShare = 0.05

// nvlinksByModel is the number of NVLinks a GPU model has, from NVIDIA's
// datasheets (total NVLink bandwidth over the per-link rate, both ways):
// H100 SXM5 and H200 SXM 900 GB/s = 18 × 50 GB/s (NVLink 4); H800 SXM5
// 400 GB/s = 8 links; A100 SXM4 600 GB/s = 12 × 50 GB/s (NVLink 3); A800
// SXM4 400 GB/s = 8; B200 and GB200 1.8 TB/s = 18 × 100 GB/s (NVLink 5);
// GH200 900 GB/s = 18. The match is on the name NVML and DCGM report; PCIe
// cards (names with "PCIe" or "NVL", which use bridges of 2 or 4 GPUs) are
// left out: their link count depends on the bridges fitted. The first
// matching entry wins.
var nvlinksByModel = []struct {
	name  string
	links int
}{
	{"GH200", 18},
	{"GB200", 18},
	{"B200", 18},
	{"H100 80GB HBM3", 18}, // H100 SXM5, as NVML names it
	{"H100 SXM", 18},
	{"H200", 18},
	{"H800", 8},
	{"A100-SXM", 12},
	{"A800-SXM", 8},
}

// expectedNVLinks is the model's NVLink count, 0 when unknown.
func expectedNVLinks(model string) int {
	if strings.Contains(model, "PCIe") || strings.Contains(model, "NVL") {
		return 0
	}
	for _, m := range nvlinksByModel {
		if strings.Contains(model, m.name) {
			return m.links
		}
	}
	return 0
}

func nvlinksUp(d *sample.GPU) int {
	n := 0
	for _, l := range d.Links {
		if l.Up {
			n++
		}
	}
	return n
}

// auditGPUConfig runs the configuration checks over the newest GPU reading.
func auditGPUConfig(a AuditInput) []Finding {
	s := a.LastGPUs
	if s == nil {
		return nil
	}
	var out []Finding
	// The NVLinks up on each GPU of a model: what its peers show. A GPU in
	// MIG mode is no peer: NVLink P2P is off between MIG instances.
	peerUp := map[string][]int{}
	for i := range s.Devices {
		d := &s.Devices[i]
		if d.Up && !migOn(d) {
			peerUp[d.Model] = append(peerUp[d.Model], nvlinksUp(d))
		}
	}
	multiGPUJobs := jobGPUs(a.NCCLProcesses)
	for i := range s.Devices {
		d := &s.Devices[i]
		if !d.Up {
			continue
		}
		idx := d.Index
		f := func(check string, sev Severity, summary, fix string, ev ...Evidence) {
			out = append(out, Finding{Check: check, Severity: sev, GPU: &idx, Summary: summary, Fix: fix, Evidence: ev})
		}
		v := d.Values

		if used, ok := v.Get(sample.MemoryUsedBytes); ok && a.Busy[idx] {
			if total, ok := v.Get(sample.MemoryTotalBytes); ok && total > 0 && used/total >= memoryNearFull {
				f("gpu_memory_near_full", SeverityWarning,
					fmt.Sprintf("the busy GPU has %.1f of %.1f GiB of memory in use (%.0f%%): allocations retry after freeing the allocator's cache, which synchronizes the GPU, and the next larger one fails (a framework that preallocates all memory, as TensorFlow does by default, reads so by design)",
						used/(1<<30), total/(1<<30), used/total*100),
					"reduce the batch size or sequence length, enable activation checkpointing or ZeRO/FSDP sharding; with PyTorch, look at torch.cuda.memory_summary() for fragmentation and set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True",
					Evidence{Signal: "memory_used_ratio", Value: round(used / total), Unit: "ratio", Op: ">=", Threshold: memoryNearFull})
			}
		}

		if sum, ok := timeSliced(d, a.Busy[idx]); ok {
			f("gpu_time_sliced", SeverityWarning, sum,
				"give each process its own GPU, or share it through MPS (nvidia-cuda-mps-control -d; the Kubernetes device plugin's sharing.mps) or MIG instead of time-slicing; set the compute mode to Exclusive_Process (nvidia-smi -c 3) where one process per GPU is meant",
				Evidence{Signal: "compute_processes", Value: float64(len(d.Processes)), Op: ">=", Threshold: 2})
		}

		mig, migOK := v.Get(sample.MIGModeEnabled)
		if pending, ok := v.Get(sample.MIGModePending); ok && migOK && pending != mig {
			f("mig_mode_pending", SeverityWarning,
				fmt.Sprintf("MIG mode is %s and becomes %s only at the next GPU reset: until then the GPU runs in its old mode and the MIG layout (or its absence) is not what was configured",
					onOff(mig), onOff(pending)),
				fmt.Sprintf("drain the GPU and reset it (nvidia-smi -r -i %d) or reboot the node; to drop the change instead, set the mode back (nvidia-smi -i %d -mig %.0f)", idx, idx, mig),
				Evidence{Signal: "mig_mode_pending", Value: pending, Op: "info", Threshold: mig})
		}
		if migOK && mig == 1 {
			for _, j := range multiGPUJobs {
				if !slices.Contains(j.gpus, idx) {
					continue
				}
				f("mig_job_spans_gpus", SeverityWarning,
					fmt.Sprintf("MIG is on, and %s uses GPUs %s: between MIG instances NCCL has no NVLink or P2P path (CUDA IPC does not cross MIG instances) and its collectives go through host memory or the network",
						j.name, joinInts(j.gpus)),
					"run multi-GPU jobs on whole GPUs (nvidia-smi -i <gpu> -mig 0 and a reset), and keep MIG for single-GPU work such as inference and notebooks")
			}
		}

		if sum, sev, want, ok := nvlinkDown(d, peerUp[d.Model]); ok && !migOn(d) {
			f("nvlink_links_down", sev, sum,
				"check the links (nvidia-smi nvlink -s -i <gpu>, nvidia-smi nvlink -e for error counters) and the kernel log for XID 74; on NVSwitch systems check nvidia-fabricmanager's log. A link that stays down after a GPU reset or reboot needs the vendor's service",
				Evidence{Signal: "nvlinks_up", Value: float64(nvlinksUp(d)), Op: "<", Threshold: float64(want)})
		}

		if state, ok := v.Get(sample.FabricState); ok && state != sample.FabricNotSupported {
			status, statusOK := v.Get(sample.FabricStatus)
			if state != sample.FabricCompleted || (statusOK && status != 0) {
				where := "the driver reports a fabric state only for GPUs attached to an NVSwitch fabric"
				if viaSwitch(s.Topology, idx) {
					where = "its NVLinks go through NVSwitches"
				}
				what := fmt.Sprintf("the GPU's NVLink fabric registration is %s", fabricStateName(state))
				if state == sample.FabricCompleted {
					what = fmt.Sprintf("the GPU's NVLink fabric registration completed with error %.0f", status)
				}
				f("fabric_manager_not_ready", SeverityCritical,
					what+" ("+where+"): CUDA fails on it with error 802 (\"system not yet initialized\") and NCCL cannot use the NVLinks",
					"start nvidia-fabricmanager of exactly the driver's version (systemctl enable --now nvidia-fabricmanager; its package version must equal "+driverVersion(s)+"), read /var/log/fabricmanager.log, and reset the GPUs or reboot if it reports an error",
					Evidence{Signal: "fabric_state", Value: state, Op: "<", Threshold: sample.FabricCompleted})
			}
		}
	}
	out = append(out, auditDriverCUDA(s, a.NCCLProcesses)...)
	return out
}

func migOn(d *sample.GPU) bool {
	x, ok := d.Values.Get(sample.MIGModeEnabled)
	return ok && x == 1
}

func onOff(x float64) string {
	if x == 1 {
		return "on"
	}
	return "off"
}

func fabricStateName(x float64) string {
	switch x {
	case sample.FabricNotStarted:
		return "not started"
	case sample.FabricInProgress:
		return "in progress"
	}
	return fmt.Sprintf("in state %.0f", x)
}

func driverVersion(s *sample.GPUs) string {
	if s.DriverVersion == "" {
		return "the driver's"
	}
	return s.DriverVersion
}

func viaSwitch(t *sample.Topology, idx int) bool {
	if t == nil {
		return false
	}
	for _, p := range t.Pairs {
		if p.ViaSwitch && (p.A == idx || p.B == idx) {
			return true
		}
	}
	return false
}

// timeSliced says whether several processes take turns on the busy GPU
// without MPS: compute mode Default (Exclusive_Process admits one), no MPS
// process, MIG off (MIG instances do not time-slice each other), and, where
// NVML measures per-process SM shares, at least two processes computing.
func timeSliced(d *sample.GPU, busy bool) (string, bool) {
	v := d.Values
	mode, ok1 := v.Get(sample.ComputeMode)
	mps, ok2 := v.Get(sample.MPSProcesses)
	if !busy || len(d.Processes) < 2 || !ok1 || mode != sample.ComputeModeDefault || !ok2 || mps > 0 {
		return "", false
	}
	if mig, ok := v.Get(sample.MIGModeEnabled); ok && mig == 1 {
		return "", false
	}
	var shares []string
	computing, measured := 0, 0
	for _, p := range d.Processes {
		if p.SMUtil == nil {
			continue
		}
		measured++
		if *p.SMUtil >= timeSliceShare {
			computing++
		}
		shares = append(shares, fmt.Sprintf("pid %d %.0f%%", p.PID, *p.SMUtil*100))
	}
	if measured == len(d.Processes) && computing < 2 {
		return "", false
	}
	sum := fmt.Sprintf("%d compute processes share the busy GPU by time-slicing (compute mode Default, no MPS server): each runs only in its time slice, with a context switch between slices, and their kernels never overlap",
		len(d.Processes))
	if len(shares) > 0 {
		sum += "; SM share per process: " + strings.Join(shares, ", ")
	}
	return sum, true
}

// nvlinkDown compares a GPU's NVLinks up with its model's count and with
// the most its peers of the same model have up. A GPU that reports no
// NVLink while its peers report none either tells nothing (a VM, a
// PCIe-only board).
func nvlinkDown(d *sample.GPU, peers []int) (summary string, sev Severity, want int, ok bool) {
	up := nvlinksUp(d)
	want = expectedNVLinks(d.Model)
	peerMax := 0
	if len(peers) > 0 {
		peerMax = slices.Max(peers)
	}
	if len(d.Links) == 0 && peerMax == 0 {
		return "", "", 0, false
	}
	var why []string
	if want > 0 && up < want {
		why = append(why, fmt.Sprintf("the %s has %d", d.Model, want))
	}
	if up < peerMax {
		why = append(why, fmt.Sprintf("other GPUs of the node of the same model have %d up", peerMax))
	}
	if len(why) == 0 {
		return "", "", 0, false
	}
	sev = SeverityWarning
	if up == 0 && peerMax > 0 {
		sev = SeverityCritical
	}
	return fmt.Sprintf("%d NVLink(s) up, but %s: traffic to its peers runs at the links left (or over PCIe with none), and every collective of its job at that pace",
		up, strings.Join(why, ", and ")), sev, max(want, peerMax), true
}

// gpuJob is a job of the node using several GPUs.
type gpuJob struct {
	name string
	gpus []int
}

// jobGPUs groups the processes into jobs (Slurm job, pod, else the node's
// NCCL processes, as auditPlacement does) and returns those on two GPUs or
// more.
func jobGPUs(procs *sample.NCCLHostProcesses) []gpuJob {
	if procs == nil {
		return nil
	}
	byJob := map[string]map[int]bool{}
	for i := range procs.Processes {
		p := &procs.Processes[i]
		j := p.Job()
		if j == "" && len(p.Libraries) == 0 {
			continue // a lone GPU process outside any job: not an NCCL rank
		}
		if byJob[j] == nil {
			byJob[j] = map[int]bool{}
		}
		for _, g := range p.GPUs {
			byJob[j][g] = true
		}
	}
	var out []gpuJob
	for j, gs := range byJob {
		if len(gs) < 2 {
			continue
		}
		name := j
		if name == "" {
			name = "the node's NCCL processes"
		}
		var gpus []int
		for g := range gs {
			gpus = append(gpus, g)
		}
		sort.Ints(gpus)
		out = append(out, gpuJob{name: name, gpus: gpus})
	}
	sort.Slice(out, func(i, k int) bool { return out[i].name < out[k].name })
	return out
}

var (
	requireCUDA = regexp.MustCompile(`(?:^|\s)cuda>=(\d+)\.(\d+)`)
	cudaVersion = regexp.MustCompile(`^(\d+)\.(\d+)`)
)

// requiredCUDA is the CUDA version a process needs, NVML-encoded (12040
// for 12.4), from NVIDIA_REQUIRE_CUDA ("cuda>=12.4 brand=tesla,…"), else
// CUDA_VERSION ("12.4.1"); 0 when neither says.
func requiredCUDA(env []sample.NCCLEnv) (int, string) {
	var fromVersion int
	var fromVersionText string
	for _, e := range env {
		switch e.Name {
		case "NVIDIA_REQUIRE_CUDA":
			if m := requireCUDA.FindStringSubmatch(e.Value); m != nil {
				return cudaCode(m[1], m[2]), "NVIDIA_REQUIRE_CUDA=" + strings.TrimSpace(m[0])
			}
		case "CUDA_VERSION":
			if m := cudaVersion.FindStringSubmatch(e.Value); m != nil {
				fromVersion, fromVersionText = cudaCode(m[1], m[2]), "CUDA_VERSION="+e.Value
			}
		}
	}
	return fromVersion, fromVersionText
}

func cudaCode(major, minor string) int {
	a, _ := strconv.Atoi(major)
	b, _ := strconv.Atoi(minor)
	return a*1000 + b*10
}

// auditDriverCUDA reports processes built for a newer CUDA than the driver
// supports, one finding per required version.
func auditDriverCUDA(s *sample.GPUs, procs *sample.NCCLHostProcesses) []Finding {
	if procs == nil || s.CUDADriverVersion <= 0 {
		return nil
	}
	type need struct {
		why  string
		pids []int
		gpus map[int]bool
	}
	byVersion := map[int]*need{}
	for i := range procs.Processes {
		p := &procs.Processes[i]
		if p.ForkOf != 0 {
			continue // a fork shares its parent's environment
		}
		v, why := requiredCUDA(p.Env)
		if v <= s.CUDADriverVersion {
			continue
		}
		n := byVersion[v]
		if n == nil {
			n = &need{why: why, gpus: map[int]bool{}}
			byVersion[v] = n
		}
		n.pids = append(n.pids, p.PID)
		for _, g := range p.GPUs {
			n.gpus[g] = true
		}
	}
	var out []Finding
	for _, v := range slices.Sorted(maps.Keys(byVersion)) {
		n := byVersion[v]
		gpus := slices.Sorted(maps.Keys(n.gpus))
		on := ""
		switch {
		case len(gpus) == 1:
			on = fmt.Sprintf(" on GPU %d", gpus[0])
		case len(gpus) > 1:
			on = " on GPUs " + joinInts(gpus)
		}
		who := "process " + strconv.Itoa(n.pids[0]) + on + " needs"
		if len(n.pids) > 1 {
			pids := make([]string, len(n.pids))
			for i, p := range n.pids {
				pids[i] = strconv.Itoa(p)
			}
			who = "processes " + strings.Join(pids, ", ") + on + " need"
		}
		f := Finding{Check: "driver_cuda_too_old", Severity: SeverityCritical,
			Summary: fmt.Sprintf("%s CUDA %s (%s) but driver %s supports CUDA %s at most: CUDA calls fail with cudaErrorInsufficientDriver (35), and PyTorch then finds no GPU and may run on the CPU",
				who, sample.CUDAVersionString(v), n.why, driverVersion(s), sample.CUDAVersionString(s.CUDADriverVersion)),
			Evidence: []Evidence{{Signal: "driver_cuda_version", Value: float64(s.CUDADriverVersion), Op: "<", Threshold: float64(v)}},
			Fix: fmt.Sprintf("upgrade the node's driver to a branch that supports CUDA %s, or run an image built for CUDA %s or older; CUDA forward compatibility (the cuda-compat package in the image, datacenter GPUs only) lets a newer CUDA run on an older driver branch, within NVIDIA's compatibility matrix",
				sample.CUDAVersionString(v), sample.CUDAVersionString(s.CUDADriverVersion))}
		if len(gpus) == 1 {
			f.GPU = &gpus[0]
		}
		out = append(out, f)
	}
	return out
}

// auditGPUDriver reports NVIDIA GPUs on the PCI bus that NVIDIA's driver
// does not drive (the tuning collector reads the driver each is bound
// to): CUDA, NVML and every GPU job need it, so such a GPU is lost to the
// node's jobs, which is critical. nouveau, the kernel's open driver, holds
// a GPU when it was not blacklisted and loaded first (seeds-002-004 C4: a
// driver not loaded); no driver at all means NVIDIA's is not loaded, or
// it could not take the GPU: one its version does not support (C2, too
// old for the GPU) or one it failed to initialise, which the kernel log
// tells apart. A GPU bound to vfio-pci is passed through to a virtual
// machine on purpose and is no finding.
func auditGPUDriver(a AuditInput) []Finding {
	if a.Tuning == nil || len(a.Tuning.GPUPCIDrivers) == 0 {
		return nil
	}
	drivers := a.Tuning.GPUPCIDrivers
	total := 0
	for _, n := range drivers {
		total += n
	}
	var out []Finding
	if n := drivers["nouveau"]; n > 0 {
		out = append(out, Finding{Check: "gpu_driver_missing", Kind: "nouveau", Severity: SeverityCritical,
			Summary:  fmt.Sprintf("%d of the %d NVIDIA GPUs on the PCI bus are driven by nouveau, the kernel's open driver: no CUDA job can use them", n, total),
			Evidence: []Evidence{{Signal: "gpus_on_nouveau", Value: float64(n), Unit: "GPUs", Op: ">", Threshold: 0}},
			Fix:      "blacklist nouveau (/etc/modprobe.d/blacklist-nouveau.conf: 'blacklist nouveau' and 'options nouveau modeset=0'), rebuild the initramfs (update-initramfs -u or dracut -f), reboot and load NVIDIA's driver"})
	}
	if n := drivers["none"]; n > 0 {
		f := Finding{Check: "gpu_driver_missing", Kind: "unbound", Severity: SeverityCritical,
			Evidence: []Evidence{{Signal: "gpus_without_driver", Value: float64(n), Unit: "GPUs", Op: ">", Threshold: 0}}}
		if drivers["nvidia"] > 0 {
			f.Summary = fmt.Sprintf("%d of the %d NVIDIA GPUs on the PCI bus have no driver bound while NVIDIA's drives the others: it could not take them", n, total)
			f.Fix = "dmesg | grep -i NVRM says why: 'RmInitAdapter failed' is the GPU (drain the node, reset or reseat it), 'not supported by the NVIDIA ... driver' a driver too old for this GPU (install a branch that supports it); nvidia-smi -L lists the GPUs it took"
		} else {
			f.Summary = fmt.Sprintf("%d NVIDIA GPU(s) on the PCI bus and no driver bound to any: NVIDIA's driver is not loaded", n)
			f.Fix = "modprobe nvidia, and if it fails read dmesg | grep -i NVRM: a module not built for this kernel (DKMS, the driver package for the running kernel), secure boot refusing an unsigned module, or a driver too old for the GPU (install a branch that supports it)"
		}
		out = append(out, f)
	}
	return out
}
