package analyzers

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gpudiag/gpudiag/sample"
)

// Checks of how a distributed job sets up its collectives: communicators
// created over and over (nccl collector's CommInits through the window),
// and GPU ranks of a multi-process job that run their collectives without
// NCCL (ncclproc).

// NCCLStartupGrace is how long after the daemon first sees a process's
// log the communicators it creates count as start-up: a job creates its
// world communicator and its data, tensor and pipeline parallel subgroups
// (tens at most) in its first seconds, and some lazily at the first
// collective of each group (the first pipeline send), within its first
// steps.
const NCCLStartupGrace = 60 * time.Second

// NCCLChurnPerMinute is the rate of new communicators after start-up above
// which nccl_communicator_churn fires. seeds-002-004 F10: any init after
// the steady state is churn, and an init costs seconds (32 communicators
// took 2–3 minutes instead of 2–3 seconds) with worse-than-linear scaling
// in the ranks; more than one a minute, and at least NCCLChurnMin of them,
// means the job re-creates groups as it runs instead of reusing them, and
// one late lazy creation does not fire it.
const (
	NCCLChurnPerMinute = 1.0
	NCCLChurnMin       = 2
)

func auditDistributed(a AuditInput) []Finding {
	out := auditCommChurn(a.NCCLHistory, a.NCCLProcesses)
	out = append(out, auditNCCLErrorHandlingOff(a.NCCLProcesses)...)
	out = append(out, auditNCCLTopoFileMissing(a.NCCLProcesses)...)
	out = append(out, auditCUDAVisibleDevicesShared(a.NCCLProcesses)...)
	out = append(out, auditRDMADevicesHidden(a.NCCLProcesses, a.LastIB)...)
	return append(out, auditBackendNotNCCL(a.NCCLProcesses, a.NCCL)...)
}

// auditNCCLErrorHandlingOff reports jobs whose NCCL ranks run with
// PyTorch's asynchronous NCCL error handling switched off: a rank that
// dies or stops then leaves the others blocked in their collective for
// good, holding the GPUs, instead of failing at the collective timeout so
// that the scheduler restarts the job (seeds-002-004 F13: "keep explicitly
// setting this value"). PyTorch reads TORCH_NCCL_ASYNC_ERROR_HANDLING, or
// the older NCCL_ASYNC_ERROR_HANDLING when that is unset; 0 is "no
// handling". Unset is no finding: PyTorch's default is on (3, tear the
// process down, since 2.2; its documentation lists the values).
// TORCH_NCCL_BLOCKING_WAIT=1 makes wait() raise at the timeout instead,
// which PyTorch then uses in place of the asynchronous handling: no
// finding either. A warning: nothing is wrong until a rank fails, and
// then nccl_collective_stalled pages; this is for working hours.
func auditNCCLErrorHandlingOff(procs *sample.NCCLHostProcesses) []Finding {
	var out []Finding
	for _, j := range ranksByJob(procs, func(p *sample.NCCLHostProcess) bool {
		_, off := errorHandlingOff(p)
		return off
	}) {
		setting, _ := errorHandlingOff(j.ranks[0])
		f := Finding{Check: "nccl_error_handling_off", Severity: SeverityWarning,
			Summary: fmt.Sprintf("%s (%s) run with %s: if a rank dies or stops, the others wait in their collective forever, holding their GPUs, instead of failing at the timeout",
				j.who("the node's NCCL processes"), whoList(j.pids()), setting),
			Fix: "unset it (PyTorch's default tears the process down on a NCCL error or timeout) or set TORCH_NCCL_ASYNC_ERROR_HANDLING=3, with a collective timeout in init_process_group, so the scheduler restarts the job from its checkpoint"}
		j.onGPUs(&f)
		out = append(out, f)
	}
	return out
}

// errorHandlingOff says whether an NCCL rank switched the asynchronous
// error handling off, and by which setting (NAME=value).
func errorHandlingOff(p *sample.NCCLHostProcess) (string, bool) {
	if !p.MapsNCCL() {
		return "", false // no NCCL in the process
	}
	if v, ok := p.EnvValue("TORCH_NCCL_BLOCKING_WAIT"); ok && strings.TrimSpace(v) == "1" {
		return "", false
	}
	name := "TORCH_NCCL_ASYNC_ERROR_HANDLING"
	v, ok := p.EnvValue(name)
	if !ok {
		name = "NCCL_ASYNC_ERROR_HANDLING"
		v, ok = p.EnvValue(name)
	}
	if !ok || strings.TrimSpace(v) != "0" {
		return "", false
	}
	return name + "=" + v, true
}

// jobRanks are the ranks of one job on the node that a check selected.
type jobRanks struct {
	name  string // sample.NCCLHostProcess.Job(); empty without a job identity
	ranks []*sample.NCCLHostProcess
}

// ranksByJob groups the NCCL processes keep selects by job, jobs in name
// order, ranks as listed. A forked worker (a DataLoader's) is never a rank.
func ranksByJob(procs *sample.NCCLHostProcesses, keep func(*sample.NCCLHostProcess) bool) []jobRanks {
	if procs == nil {
		return nil
	}
	byName := map[string]*jobRanks{}
	for i := range procs.Processes {
		p := &procs.Processes[i]
		if p.ForkOf != 0 || !keep(p) {
			continue
		}
		name := p.Job()
		if byName[name] == nil {
			byName[name] = &jobRanks{name: name}
		}
		byName[name].ranks = append(byName[name].ranks, p)
	}
	out := make([]jobRanks, 0, len(byName))
	for _, name := range slices.Sorted(maps.Keys(byName)) {
		out = append(out, *byName[name])
	}
	return out
}

// who names the job in a summary, anonymous when its ranks carry no job
// identity.
func (j jobRanks) who(anonymous string) string {
	if j.name == "" {
		return anonymous
	}
	return j.name
}

func (j jobRanks) pids() []string {
	out := make([]string, len(j.ranks))
	for i, p := range j.ranks {
		out[i] = fmt.Sprintf("pid %d", p.PID)
	}
	return out
}

// onGPUs sets the finding's GPUs to the ranks' (sorted, once each), and
// its GPU when there is one.
func (j jobRanks) onGPUs(f *Finding) {
	var gpus []int
	for _, p := range j.ranks {
		for _, g := range p.GPUs {
			if !slices.Contains(gpus, g) {
				gpus = append(gpus, g)
			}
		}
	}
	slices.Sort(gpus)
	f.GPUs = gpus
	if len(gpus) == 1 {
		g := gpus[0]
		f.GPU = &g
	}
}

// commInits follows one process's CommInits through the readings.
type commInits struct {
	host  string
	pid   int
	path  string
	first time.Time
	// base is the count at the end of the start-up grace, when, and the
	// increase since.
	baseAt    time.Time
	based     bool
	prev      int
	increase  int
	last      time.Time
	lastInits int
}

// auditCommChurn reports processes whose logs show communicators created
// at more than NCCLChurnPerMinute after their start-up grace, over the
// window's readings of the nccl collector. A count lower than the one
// before restarted (the collector met the log afresh): all of it is new.
func auditCommChurn(history []sample.Timed[*sample.NCCL], procs *sample.NCCLHostProcesses) []Finding {
	type key struct {
		path, host string
		pid        int
	}
	byKey := map[key]*commInits{}
	var order []key
	for _, r := range history {
		if r.Sample == nil {
			continue
		}
		for fi := range r.Sample.Files {
			f := &r.Sample.Files[fi]
			for pi := range f.Processes {
				p := &f.Processes[pi]
				k := key{f.Path, p.Host, p.PID}
				c := byKey[k]
				if c == nil {
					c = &commInits{host: p.Host, pid: p.PID, path: f.Path, first: r.Time, prev: p.CommInits}
					byKey[k] = c
					order = append(order, k)
				}
				if !c.based {
					if r.Time.Sub(c.first) >= NCCLStartupGrace {
						c.based, c.baseAt = true, r.Time
					}
				} else {
					c.increase += int(sample.CounterIncrease(float64(c.prev), float64(p.CommInits)))
				}
				c.prev, c.last, c.lastInits = p.CommInits, r.Time, p.CommInits
			}
		}
	}
	var out []Finding
	for _, k := range order {
		c := byKey[k]
		if !c.based {
			continue
		}
		minutes := c.last.Sub(c.baseAt).Minutes()
		if minutes <= 0 || c.increase < NCCLChurnMin {
			continue
		}
		rate := float64(c.increase) / minutes
		if rate <= NCCLChurnPerMinute {
			continue
		}
		// The log's path stays out of the finding's labels: it names a
		// process (%p) and would make a series per process.
		f := Finding{Check: "nccl_communicator_churn", Severity: SeverityWarning,
			Summary: fmt.Sprintf("process %s:%d (log %s) created %d NCCL communicators in the %.1f minutes after its first minute (%.1f a minute, %d in all): each init costs the job seconds of bootstrap, worse with more ranks",
				c.host, c.pid, c.path, c.increase, minutes, rate, c.lastInits),
			Evidence: []Evidence{{Signal: "nccl_comm_inits_per_minute", Value: round(rate), Op: ">", Threshold: NCCLChurnPerMinute}},
			Fix:      "create process groups once (torch.distributed.new_group() at start-up) and reuse them; never create and destroy communicators per iteration or per step"}
		if gpu, ok := gpuOfLogProcess(procs, c.pid); ok {
			f.GPU = &gpu
		}
		out = append(out, f)
	}
	return out
}

// gpuOfLogProcess finds the GPU of the process whose PID (in its own
// namespace, as NCCL prints it) is pid, when the scan knows exactly one.
func gpuOfLogProcess(procs *sample.NCCLHostProcesses, pid int) (int, bool) {
	if procs == nil {
		return 0, false
	}
	gpu, n := 0, 0
	for i := range procs.Processes {
		p := &procs.Processes[i]
		if p.NSPID == pid && p.OnGPU && len(p.GPUs) == 1 {
			gpu = p.GPUs[0]
			n++
		}
	}
	return gpu, n == 1
}

// auditBackendNotNCCL reports a GPU process of a multi-process job
// (WORLD_SIZE > 1, as torchrun and most launchers set it) whose memory map
// was read and holds no libnccl, and of whom NCCL's log says nothing: its
// collectives run on another backend, Gloo over TCP in PyTorch, through
// host memory and the network stack, an order of magnitude slower
// (seeds-002-004 F5). A framework that links NCCL statically maps no
// libnccl; its log (NCCL_DEBUG=INFO) would name the process.
func auditBackendNotNCCL(procs *sample.NCCLHostProcesses, logs *sample.NCCL) []Finding {
	if procs == nil {
		return nil
	}
	logged := map[int]bool{}
	if logs != nil {
		for _, f := range logs.Files {
			for _, p := range f.Processes {
				logged[p.PID] = true
			}
		}
	}
	var out []Finding
	for i := range procs.Processes {
		p := &procs.Processes[i]
		if !p.OnGPU || p.ForkOf != 0 || p.MapsNCCL() || !p.MapsKnown() || logged[p.NSPID] {
			continue
		}
		ws, _ := p.EnvValue("WORLD_SIZE")
		world, err := strconv.Atoi(ws)
		if err != nil || world <= 1 {
			continue
		}
		f := Finding{Check: "distributed_backend_not_nccl", Severity: SeverityWarning,
			Summary: fmt.Sprintf("GPU process %d (%s) is one of %d ranks (WORLD_SIZE) but maps no libnccl: its collectives run on another backend (Gloo over TCP in PyTorch), staged through host memory, an order of magnitude slower than NCCL",
				p.PID, p.Comm, world),
			Evidence: []Evidence{{Signal: "world_size", Value: float64(world), Op: ">", Threshold: 1}},
			Fix:      "initialise the process group with backend=\"nccl\" for GPU tensors (torch.distributed.init_process_group(backend=\"nccl\"), or \"cpu:gloo,cuda:nccl\"); if NCCL is linked statically, NCCL_DEBUG=INFO will show it in the job's log"}
		if len(p.GPUs) > 0 {
			gpu := p.GPUs[0]
			f.GPU = &gpu
		}
		out = append(out, f)
	}
	return out
}

// auditNCCLTopoFileMissing reports jobs whose ranks set NCCL_TOPO_FILE to
// a file that does not exist where they run (the ncclproc collector looks
// in the process's mount namespace): seeds-000-003 row 43, "set but
// missing", info, fixed by mounting the file (a ConfigMap in the seed's
// example). NCCL then warns and detects the topology itself, which in a
// virtual machine misses what the file describes (which NIC and GPU share
// a PCIe switch): the job runs, perhaps slower, so info as the seed has it.
func auditNCCLTopoFileMissing(procs *sample.NCCLHostProcesses) []Finding {
	var out []Finding
	for _, j := range ranksByJob(procs, func(p *sample.NCCLHostProcess) bool { return p.TopoFileMissing }) {
		file, _ := j.ranks[0].EnvValue("NCCL_TOPO_FILE")
		f := Finding{Check: "nccl_topo_file_missing", Severity: SeverityInfo, Device: file,
			Summary: fmt.Sprintf("%s (%s) set NCCL_TOPO_FILE=%s, which does not exist where they run: NCCL detects the topology itself and, in a VM, misses the NIC and GPU placement the file describes",
				j.who("the node's NCCL processes"), whoList(j.pids()), file),
			Fix: "mount the topology file into the job's container at that path (a ConfigMap, or the VM image's file, e.g. under /opt/microsoft on Azure ND), or unset NCCL_TOPO_FILE where NCCL's own detection is right (bare metal)"}
		j.onGPUs(&f)
		out = append(out, f)
	}
	return out
}

// auditCUDAVisibleDevicesShared reports a job whose NCCL ranks on the node
// all carry the same CUDA_VISIBLE_DEVICES and so all run on the same one
// GPU: a value hard-coded for GPU 0 (seeds-000-003 row 40: "flag
// hard-coded CUDA_VISIBLE_DEVICES that assume physical GPU0") and copied
// to every rank, where each rank should have had its own GPU (torchrun's
// LOCAL_RANK, the device plugin's choice). The ranks then time-slice one
// GPU while the others idle, and NCCL refuses two ranks on one device
// ("Duplicate GPU detected") when they build a communicator. The same
// value in containers that each got another GPU (NVIDIA_VISIBLE_DEVICES)
// resolves to different GPUs and raises nothing, as does one list of
// several GPUs shared by ranks that each pick one. A warning: the job runs
// at a fraction of its GPUs; the fix is in its launch script.
func auditCUDAVisibleDevicesShared(procs *sample.NCCLHostProcesses) []Finding {
	var out []Finding
	for _, j := range ranksByJob(procs, (*sample.NCCLHostProcess).MapsNCCL) {
		value, gpu, ok := oneGPUForAll(j.ranks)
		if !ok {
			continue
		}
		out = append(out, Finding{Check: "cuda_visible_devices_shared", Severity: SeverityWarning, GPU: &gpu, GPUs: []int{gpu},
			Summary: fmt.Sprintf("%s (%s) all run with CUDA_VISIBLE_DEVICES=%q and so all on GPU %d: a value hard-coded for one GPU and copied to every rank, which share that GPU while the others idle (NCCL refuses two ranks on one GPU)",
				j.who("the node's NCCL processes"), whoList(j.pids()), value, gpu),
			Evidence: []Evidence{{Signal: "ranks_on_one_gpu", Value: float64(len(j.ranks)), Unit: "processes", Op: ">=", Threshold: 2}},
			Fix:      "drop the hard-coded CUDA_VISIBLE_DEVICES from the launch script: let torchrun's LOCAL_RANK pick the device (torch.cuda.set_device(local_rank)), or derive it per rank, or leave the choice to the Kubernetes device plugin"})
	}
	return out
}

// oneGPUForAll says whether two or more ranks all carry the same
// CUDA_VISIBLE_DEVICES and all run on the same one GPU. A rank without the
// variable, with another value, or whose GPU is unknown takes the job
// out: the ranks are not all alike.
func oneGPUForAll(ranks []*sample.NCCLHostProcess) (value string, gpu int, ok bool) {
	if len(ranks) < 2 || len(ranks[0].GPUs) != 1 {
		return "", 0, false
	}
	value, _ = ranks[0].EnvValue("CUDA_VISIBLE_DEVICES")
	gpu = ranks[0].GPUs[0]
	for _, p := range ranks {
		v, set := p.EnvValue("CUDA_VISIBLE_DEVICES")
		if !set || strings.TrimSpace(v) != strings.TrimSpace(value) || len(p.GPUs) != 1 || p.GPUs[0] != gpu {
			return "", 0, false
		}
	}
	return value, gpu, true
}

// auditRDMADevicesHidden reports a multi-node job whose ranks run in a
// container without /dev/infiniband on a node with active RDMA ports: NCCL
// cannot open the HCAs and sends the job's inter-node traffic over TCP
// sockets, at a fraction of the fabric's rate (seeds-002-004 F1, F2;
// seeds-000-003 row 42). A job is multi-node when a rank's WORLD_SIZE is
// more than its LOCAL_WORLD_SIZE (torchrun's); a single-node job needs no
// RDMA and raises nothing, nor does a node without an active port. A
// warning: the job runs, slowly; the fix is its pod spec.
func auditRDMADevicesHidden(procs *sample.NCCLHostProcesses, ib *sample.InfiniBand) []Finding {
	if procs == nil || ib == nil {
		return nil
	}
	var active []string
	for _, p := range ib.Ports {
		if p.State == "ACTIVE" {
			active = append(active, fmt.Sprintf("%s/%d", p.Device, p.Port))
		}
	}
	if len(active) == 0 {
		return nil
	}
	var out []Finding
	for _, j := range ranksByJob(procs, func(p *sample.NCCLHostProcess) bool {
		world, okW := envInt(p, "WORLD_SIZE")
		local, okL := envInt(p, "LOCAL_WORLD_SIZE")
		// Not a single-node job, nor one whose size is unknown.
		return p.RDMADevicesHidden && okW && okL && world > local
	}) {
		f := Finding{Check: "rdma_devices_hidden", Severity: SeverityWarning,
			Summary: fmt.Sprintf("%s (%s) run in a container without /dev/infiniband while the node has %d active RDMA port(s) (%s): NCCL cannot open them and sends the job's inter-node traffic over TCP sockets",
				j.who("a multi-node job's ranks"), whoList(j.pids()), len(active), strings.Join(active, ", ")),
			Evidence: []Evidence{{Signal: "active_rdma_ports", Value: float64(len(active)), Unit: "ports", Op: ">", Threshold: 0}},
			Fix:      "give the container the RDMA devices: the RDMA device plugin's resource (rdma/hca, or the SR-IOV network operator's), or --device=/dev/infiniband with the IPC_LOCK capability; NCCL_DEBUG=INFO then shows NET/IB instead of NET/Socket"}
		j.onGPUs(&f)
		out = append(out, f)
	}
	return out
}

// envInt is a process's allow-listed variable as a whole number.
func envInt(p *sample.NCCLHostProcess, name string) (int, bool) {
	v, ok := p.EnvValue(name)
	if !ok {
		return 0, false
	}
	n, err := strconv.Atoi(strings.TrimSpace(v))
	return n, err == nil
}
