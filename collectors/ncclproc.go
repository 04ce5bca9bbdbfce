package collectors

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/alecthomas/kingpin/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/procfs"
	"go.uber.org/zap"

	"github.com/gpudiag/gpudiag/engine"
	"github.com/gpudiag/gpudiag/hostfs"
	"github.com/gpudiag/gpudiag/nccl"
	"github.com/gpudiag/gpudiag/safetext"
	"github.com/gpudiag/gpudiag/sample"
)

type ncclProcOptions struct {
	maxScan int
}

// ncclProcDefaults are the flags' defaults, also in force when the
// collectors are built without parsing flags (tests, embedding).
var ncclProcDefaults = ncclProcOptions{maxScan: 256}

var ncclProcFlags = ncclProcDefaults

func init() {
	register(collectorSpec[sample.NCCLHostProcesses, *ncclProcCollector]{
		key:       sample.NCCLProcKey,
		defaultOn: true,
		help:      "Processes of distributed jobs (those mapping libnccl, and GPU processes): NCCL library versions, NCCL settings from their environment (allow-listed variables only), job identity, and their NCCL_DEBUG_FILE logs for the nccl collector",
		flags: func(app *kingpin.Application) {
			app.Flag("collector.ncclproc.max-scan",
				"Most memory maps (/proc/<pid>/maps) read per scan, GPU processes first; the rest are read in later scans.").
				Default(strconv.Itoa(ncclProcDefaults.maxScan)).IntVar(&ncclProcFlags.maxScan)
		},
		newCollector: func(cfg Config) (*ncclProcCollector, error) { return newNCCLProcCollector(cfg, ncclProcFlags) },
		metrics:      (&ncclProcCollector{}).Metrics,
		ownInterval:  &intervalFlag{value: 15 * time.Second, help: "How often the node's processes are scanned for libnccl; each scan reads every process's stat and the memory map of new or grown ones. 0 uses --sample.interval."},
	})
}

const (
	// ncclProcEnvironBytes bounds what is read of one environ file. Linux
	// caps exec's arguments and environment together at a quarter of the
	// stack limit (2 MiB under the usual 8 MiB), and a Kubernetes pod's
	// service-link variables alone can take hundreds of KiB.
	ncclProcEnvironBytes = 1 << 20
	// ncclProcEnvironChunk is the one read buffer, reused and wiped after
	// every file; an entry longer than it is skipped unseen (no
	// allow-listed value comes near it).
	ncclProcEnvironChunk = 64 << 10
	ncclProcEnvMaxVars   = 64
	// ncclProcEnvValueBytes cuts kept values: CUDA_VISIBLE_DEVICES with
	// eight UUIDs is about 330 bytes.
	ncclProcEnvValueBytes = 1 << 10
	// ncclProcMaxReported bounds the processes a sample lists.
	ncclProcMaxReported = 1024
	// ncclProcMaxLogFiles bounds the debug files handed to the nccl
	// collector, which follows at most its own max-files of them anyway.
	ncclProcMaxLogFiles = 64
)

// ncclProcCollector finds the processes of distributed jobs: every process
// that maps a libnccl, found by a bounded scan of /proc (NVML often cannot
// see the PIDs of containers), and the GPU processes the GPU collector
// lists. For each it reads which libnccl it maps, the NCCL-related
// variables of its environment and nothing else, its container, pod and
// Slurm job, and where its NCCL_DEBUG_FILE log is, which it publishes for
// the nccl collector.
//
// A scan reads every process's stat (a few hundred bytes) and only the
// maps of processes it has not read yet or whose virtual size grew since by
// as much as loading libnccl grows it (ncclScan.due); a process known to
// map libnccl is not read again. Environment, cgroup and namespaces are read once per
// process.
type ncclProcCollector struct {
	interval time.Duration
	host     hostfs.FS
	proc     procfs.FS // host's procfs handle, for the files procfs parses
	shared   *Shared
	log      *zap.Logger
	opts     ncclProcOptions
	hostname func() (string, error)
	now      func() time.Time

	// The daemon's mount and UTS namespaces and PID 1's network namespace;
	// 0 when unknown.
	selfMnt, selfUTS, hostNet uint32

	// reader reads every process's stat each scan; stats are the last
	// scan's, whose size sizes the next.
	reader  *hostfs.TaskStatReader
	stats   map[int]hostfs.TaskStat
	scanned map[hostfs.ProcID]*ncclScan
	details map[hostfs.ProcID]*ncclProcDetails
	// gpuUUIDs caches each GPU's UUID by PCI bus ID, from the driver's
	// /proc/driver/nvidia/gpus/<bus>/information.
	gpuUUIDs map[string]string
	// cursor is the PID after which the next scan starts reading maps, so
	// that under the limit every process gets its turn.
	cursor     int
	environBuf []byte
	// identityRefused counts the processes whose job identity variable
	// was refused, by variable (sample.JobIdentityRefused).
	identityRefused map[string]uint64
}

// ncclScan is what one read of a process's memory map found.
type ncclScan struct {
	vsize     uint64 // the process's virtual size when read
	at        time.Time
	denied    bool
	libraries []sample.NCCLLibrary
	err       string
}

// ncclLoadGrowth is how much a process's virtual size grows when it loads
// libnccl: the library maps 274 MiB (2.18, r-x 204 MiB and r-- 70 MiB), and
// the libraries that bundle NCCL (libtorch_cuda) more. A smaller growth is
// the process's heap and stacks moving, which Python, Go and Java daemons do
// between any two scans; re-reading their maps for it was most of the scan.
const ncclLoadGrowth = 64 << 20

// ncclMapsMaxAge bounds how long a process read without libnccl goes
// unread while its virtual size changes by less than ncclLoadGrowth: one
// that freed about as much as the library mapped within one interval.
const ncclMapsMaxAge = 10 * time.Minute

// due tells whether a process read without libnccl is read again: its
// virtual size grew by ncclLoadGrowth since, or changed at all once the
// read is ncclMapsMaxAge old. A process known to map libnccl, or whose map
// was refused, is not.
func (s *ncclScan) due(vsize uint64, now time.Time) bool {
	switch {
	case s.denied || len(s.libraries) > 0 || vsize == s.vsize:
		return false
	case vsize >= s.vsize+ncclLoadGrowth:
		return true
	default:
		return now.Sub(s.at) >= ncclMapsMaxAge
	}
}

// ncclProcDetails are read once per process.
type ncclProcDetails struct {
	nspid                                   int
	comm                                    string
	env                                     []sample.NCCLEnv
	envTruncated                            bool
	cgroup, containerID, podUID, slurmJobID string
	hostNetwork                             *bool
	hostname, hostnameSource                string
	debugFile, debugFileErr                 string
	// debugFileRoot and debugFileName: debugFile is debugFileName
	// resolved inside debugFileRoot (the process's root directory), or
	// debugFileName itself when the root is empty.
	debugFileRoot, debugFileName string
	// topoFileMissing: NCCL_TOPO_FILE names a file that does not exist
	// in the process's mount namespace.
	topoFileMissing bool
	// rdmaDevicesHidden: the process runs in another mount namespace (a
	// container) that has no /dev/infiniband.
	rdmaDevicesHidden bool
	// uids are the process's real, effective, saved and filesystem user
	// IDs; nil when its status was unreadable.
	uids             []uint32
	unreadable, errs []string
}

func newNCCLProcCollector(cfg Config, opts ncclProcOptions) (*ncclProcCollector, error) {
	if opts.maxScan < 1 {
		return nil, fmt.Errorf("--collector.ncclproc.max-scan must be at least 1 (got %d)", opts.maxScan)
	}
	if _, err := os.Stat(cfg.ProcPath); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	host, err := hostfs.NewFS(cfg.ProcPath, cfg.SysPath)
	if err != nil {
		return nil, err
	}
	pfs := host.Procfs()
	cfg = cfg.withDefaults()
	log := cfg.Logger
	shared := cfg.Shared
	c := &ncclProcCollector{
		host: host, proc: pfs, shared: shared, log: log, opts: opts, interval: cfg.OwnInterval, hostname: os.Hostname,
		now: time.Now, reader: host.NewTaskStatReader(), scanned: map[hostfs.ProcID]*ncclScan{}, details: map[hostfs.ProcID]*ncclProcDetails{}, gpuUUIDs: map[string]string{},
	}
	if self, err := pfs.Self(); err == nil {
		if ns, err := self.Namespaces(); err == nil {
			c.selfMnt, c.selfUTS = ns["mnt"].Inode, ns["uts"].Inode
		}
	}
	if init, err := pfs.Proc(1); err == nil {
		if ns, err := init.Namespaces(); err == nil {
			c.hostNet = ns["net"].Inode
		}
	}
	if c.selfMnt == 0 || c.selfUTS == 0 {
		log.Debug("own namespaces unknown: NCCL debug files are reached through /proc/<pid>/root and host names read from the process's /etc/hostname",
			zap.String("proc", cfg.ProcPath))
	}
	return c, nil
}

func (c *ncclProcCollector) Name() string { return sample.NCCLProcKey.Name() }

// Interval gives the scan its own, slower clock: see the interval flag.
func (c *ncclProcCollector) Interval() time.Duration { return c.interval }

// ncclFoundProcess is a process the sample reports.
type ncclFoundProcess struct {
	id   hostfs.ProcID
	stat hostfs.TaskStat
	gpus []int // from NVML
}

func (c *ncclProcCollector) Sample(ctx context.Context) (*sample.NCCLHostProcesses, error) {
	out := &sample.NCCLHostProcesses{}
	now := c.now()
	refs := c.shared.GPUs()
	nvmlGPUs := map[int][]int{}
	for _, r := range refs {
		for _, pid := range r.PIDs {
			if !slices.Contains(nvmlGPUs[int(pid)], r.Index) {
				nvmlGPUs[int(pid)] = append(nvmlGPUs[int(pid)], r.Index)
			}
		}
	}

	// Every process's stat, through one held /proc and one buffer: the
	// scan runs over every process on the host.
	var procs []int
	stats := make(map[int]hostfs.TaskStat, len(c.stats))
	complete := true
	comms := map[string]bool{}
	err := c.reader.EachProcess(ctx, func(st hostfs.TaskStat) {
		procs = append(procs, st.PID)
		stats[st.PID] = st
		if comm := c.reader.CommBytes(); !comms[string(comm)] {
			comms[string(comm)] = true
		}
	}, func(pid int, err error) {
		c.log.Debug("process stat unparseable", zap.Int("pid", pid), zap.Error(err))
	})
	switch {
	case ctx.Err() != nil:
		complete = false
	case err != nil:
		return nil, fmt.Errorf("listing %s: %w", c.host.ProcPath(), err)
	}
	c.stats = stats
	if complete {
		c.shared.SetProcessScan(&ProcessScan{At: now, Stats: stats, Comms: comms})
	}

	// GPU processes first, then the others from where the last scan
	// stopped.
	order := make([]int, 0, len(stats))
	for _, pid := range procs {
		if nvmlGPUs[pid] != nil {
			order = append(order, pid)
		}
	}
	firstOther := len(order)
	var before []int
	for _, pid := range procs {
		if nvmlGPUs[pid] != nil {
			continue
		}
		if pid > c.cursor {
			order = append(order, pid)
		} else {
			before = append(before, pid)
		}
	}
	order = append(order, before...)

	budget := c.opts.maxScan
	live := make(map[hostfs.ProcID]bool, len(order))
	var found []ncclFoundProcess
	lastRead, stopped := 0, false
	for i, pid := range order {
		st := stats[pid]
		id := hostfs.ProcID{PID: pid, StartTicks: st.Starttime}
		live[id] = true
		onGPU := nvmlGPUs[pid] != nil
		if st.VSize == 0 && !onGPU {
			continue // a kernel thread or a zombie: nothing mapped
		}
		s := c.scanned[id]
		if s == nil || s.due(st.VSize, now) {
			if budget <= 0 || ctx.Err() != nil {
				out.Unscanned++
				stopped = true
			} else {
				budget--
				if i >= firstOther {
					lastRead = pid
				}
				next, ok := c.readMaps(pid, st.VSize, now)
				if !ok {
					continue // vanished
				}
				out.MapsRead++
				s = next
				c.scanned[id] = s
			}
		}
		if s != nil && s.denied {
			out.Unreadable++
		}
		if onGPU || (s != nil && len(s.libraries) > 0) {
			found = append(found, ncclFoundProcess{id: id, stat: st, gpus: nvmlGPUs[pid]})
		}
	}
	if stopped {
		c.cursor = lastRead
	} else {
		c.cursor = 0
	}
	if complete {
		for id := range c.scanned {
			if !live[id] {
				delete(c.scanned, id)
			}
		}
	}

	c.report(ctx, out, found, stats, refs)
	out.JobIdentityRefused = maps.Clone(c.identityRefused)
	return out, nil
}

// report reads the details of the processes found and fills the sample.
func (c *ncclProcCollector) report(ctx context.Context, out *sample.NCCLHostProcesses, found []ncclFoundProcess,
	stats map[int]hostfs.TaskStat, refs []GPURef) {
	isNCCL := map[int]bool{}
	for _, f := range found {
		if s := c.scanned[f.id]; s != nil && len(s.libraries) > 0 {
			isNCCL[f.id.PID] = true
		}
	}
	keep := map[hostfs.ProcID]bool{}
	byPID := map[int]*ncclProcDetails{}
	for _, f := range found {
		d := c.details[f.id]
		if d == nil {
			if ctx.Err() != nil {
				continue
			}
			var ok bool
			if d, ok = c.readDetails(f.id.PID); !ok {
				continue
			}
			c.details[f.id] = d
		}
		keep[f.id] = true
		byPID[f.id.PID] = d
		st := f.stat
		p := sample.NCCLHostProcess{
			PID: f.id.PID, NSPID: d.nspid, PPID: st.PPID, StartTicks: st.Starttime, Comm: d.comm, OnGPU: f.gpus != nil,
			Env: d.env, EnvTruncated: d.envTruncated,
			Cgroup: d.cgroup, ContainerID: d.containerID, PodUID: d.podUID, SlurmJobID: d.slurmJobID,
			HostNetwork: d.hostNetwork, Hostname: d.hostname, HostnameSource: d.hostnameSource,
			DebugFile: d.debugFile, DebugFileError: d.debugFileErr, TopoFileMissing: d.topoFileMissing, RDMADevicesHidden: d.rdmaDevicesHidden,
			Unreadable: d.unreadable, Errors: d.errs,
		}
		if s := c.scanned[f.id]; s != nil {
			p.Libraries = s.libraries
			if s.err != "" {
				p.Errors = append(append([]string(nil), p.Errors...), s.err)
			}
			if s.denied {
				p.Unreadable = append(append([]string(nil), p.Unreadable...), "maps")
			}
		} else {
			p.MapsUnread = true
		}
		// A child forked without exec keeps its parent's memory image,
		// stack included; exec randomises the stack anew.
		if parent, ok := stats[st.PPID]; ok && isNCCL[st.PPID] && isNCCL[p.PID] &&
			st.StartStack != 0 && st.StartStack == parent.StartStack {
			p.ForkOf = st.PPID
		}
		switch {
		case f.gpus != nil:
			p.GPUs, p.GPUSource = slices.Sorted(slices.Values(f.gpus)), "nvml"
		default:
			if gpus, ok := c.visibleGPUs(&p, refs); ok {
				p.GPUs, p.GPUSource = gpus, "visible_devices"
			}
		}
		if p.ForkOf != 0 {
			// It inherited its parent's open log; a file named after its
			// own PID is never written.
			p.DebugFile, p.DebugFileError = "", ""
		}
		out.Processes = append(out.Processes, p)
	}
	for id := range c.details {
		if !keep[id] {
			delete(c.details, id)
		}
	}

	if len(out.Processes) > ncclProcMaxReported {
		// Forked workers are left out first: their parents say the same.
		sort.SliceStable(out.Processes, func(i, j int) bool {
			return (out.Processes[i].ForkOf == 0) && (out.Processes[j].ForkOf != 0)
		})
		out.Dropped = len(out.Processes) - ncclProcMaxReported
		out.Processes = out.Processes[:ncclProcMaxReported]
	}
	sort.Slice(out.Processes, func(i, j int) bool { return out.Processes[i].PID < out.Processes[j].PID })

	seen := map[string]bool{}
	var logs []NCCLLogFile
	add := func(onGPU bool) {
		for i := range out.Processes {
			p := &out.Processes[i]
			if p.OnGPU == onGPU && p.DebugFile != "" && !seen[p.DebugFile] && len(out.LogFiles) < ncclProcMaxLogFiles {
				seen[p.DebugFile] = true
				out.LogFiles = append(out.LogFiles, p.DebugFile)
				d := byPID[p.PID]
				logs = append(logs, NCCLLogFile{Path: p.DebugFile, Root: d.debugFileRoot, Name: d.debugFileName,
					CheckOwner: true, OwnerUIDs: d.uids})
			}
		}
	}
	add(true)
	add(false)
	c.shared.SetNCCLLogFiles(logs)
}

// readMaps reads a process's memory map for libnccl files. ok is false
// when the process vanished.
func (c *ncclProcCollector) readMaps(pid int, vsize uint64, now time.Time) (*ncclScan, bool) {
	mapped, err := c.host.NCCLMaps(pid)
	switch {
	case err == nil:
	case hostfs.Vanished(err):
		return nil, false
	case errors.Is(err, fs.ErrPermission):
		c.log.Debug("memory map unreadable", zap.Int("pid", pid), zap.Error(err))
		return &ncclScan{vsize: vsize, at: now, denied: true}, true
	default:
		c.log.Debug("memory map unparseable", zap.Int("pid", pid), zap.Error(err))
		return &ncclScan{vsize: vsize, at: now, err: err.Error()}, true
	}
	s := &ncclScan{vsize: vsize, at: now}
	root := c.host.ProcRoot(pid)
	for _, m := range mapped {
		lib := sample.NCCLLibrary{Path: m.Path, Deleted: m.Deleted, Version: sample.NCCLLibraryVersionUnknown}
		if v := hostfs.NCCLVersionFromFileName(filepath.Base(m.Path)); v != "" {
			lib.Version, lib.VersionSource = v, "file_name"
		} else if !m.Deleted {
			// A deleted library may have been replaced by an upgrade, and
			// the package metadata would name the new version.
			if v := hostfs.PipNCCLVersion(root, m.Path); v != "" {
				lib.Version, lib.VersionSource = v, "pip_dist_info"
			}
		}
		s.libraries = append(s.libraries, lib)
	}
	return s, true
}

// readDetails reads what does not change over a process's life. ok is
// false when the process vanished.
func (c *ncclProcCollector) readDetails(pid int) (*ncclProcDetails, bool) {
	dir := c.host.ProcPath(strconv.Itoa(pid))
	d := &ncclProcDetails{nspid: pid}
	vanished := false
	// check sorts a read's error: vanished, unreadable (permission), or
	// unparseable. It returns true when the read succeeded.
	check := func(file string, err error) bool {
		switch {
		case err == nil:
			return true
		case hostfs.Vanished(err):
			vanished = true
		case errors.Is(err, fs.ErrPermission):
			c.log.Debug("process file unreadable", zap.Int("pid", pid), zap.String("file", file), zap.Error(err))
			d.unreadable = append(d.unreadable, file)
		default:
			d.errs = append(d.errs, fmt.Sprintf("%s/%s: %v", dir, file, err))
		}
		return false
	}
	p, err := c.proc.Proc(pid)
	if err != nil {
		return nil, false
	}
	// Read once per process (details are cached), unlike the scan's stat.
	if st, err := p.Stat(); check("stat", err) {
		d.comm = st.Comm
	}
	if st, err := p.NewStatus(); check("status", err) {
		if len(st.NSpids) > 0 {
			d.nspid = int(st.NSpids[len(st.NSpids)-1])
		}
		for _, u := range st.UIDs {
			d.uids = append(d.uids, uint32(u))
		}
	}
	env, err := c.keptEnviron(c.host.Environ(pid))
	if check("environ", err) {
		d.env, d.envTruncated = env.vars, env.truncated
		for _, r := range env.refused {
			c.refuseIdentity(pid, r)
		}
	}
	if cgs, err := p.Cgroups(); check("cgroup", err) {
		d.cgroup, d.containerID, d.podUID, d.slurmJobID = hostfs.CgroupIdentity(cgs)
	}
	if v, ok := envLookup(d.env, "SLURM_JOB_ID"); ok && v != "" {
		d.slurmJobID = v
	}
	// A missing ns directory leaves the namespaces unknown: the reads
	// above tell a vanished process.
	ns, err := p.Namespaces()
	if err != nil && !hostfs.Vanished(err) {
		check("ns", err)
	}
	if c.hostNet != 0 {
		if net, ok := ns["net"]; ok {
			host := net.Inode == c.hostNet
			d.hostNetwork = &host
		}
	}
	if uts, ok := ns["uts"]; ok && c.selfUTS != 0 && uts.Inode == c.selfUTS {
		if h, err := c.hostname(); err == nil && h != "" {
			d.hostname, d.hostnameSource = h, "uts_namespace"
		}
	}
	if d.hostname == "" {
		h, err := hostfs.ReadHostname(c.host.ProcRoot(pid))
		switch {
		case err == nil && h != "":
			d.hostname, d.hostnameSource = h, "etc_hostname"
		case errors.Is(err, fs.ErrNotExist):
			// No such file in the process's root, or the process is gone
			// (the reads above tell).
		case errors.Is(err, fs.ErrPermission):
			c.log.Debug("process host name unreadable", zap.Int("pid", pid), zap.Error(err))
		case err != nil:
			// A FIFO, device or oversized file where the host name
			// belongs: refused unread, and worth showing.
			d.errs = append(d.errs, err.Error())
		}
	}
	if vanished {
		return nil, false
	}

	level, _ := envLookup(d.env, "NCCL_DEBUG")
	pattern, _ := envLookup(d.env, "NCCL_DEBUG_FILE")
	if pattern != "" && nccl.WritesDebugFile(level) {
		root := ""
		if mnt, ok := ns["mnt"]; !ok || c.selfMnt == 0 || mnt.Inode != c.selfMnt {
			root = c.host.ProcRoot(pid)
		}
		name, err := ncclDebugFileName(pattern, slices.Contains(env.cut, "NCCL_DEBUG_FILE"), d.hostname, d.nspid, p.Cwd)
		if err != nil {
			d.debugFileErr = err.Error()
		} else {
			d.debugFile, d.debugFileRoot, d.debugFileName = filepath.Join(root, name), root, name
		}
	}
	// A container without /dev/infiniband cannot open the node's RDMA
	// devices: NCCL falls back to TCP sockets for inter-node traffic
	// (seeds-002-004 F1). Checked once, for a process in another mount
	// namespace than the daemon's; the analyzer weighs it against the
	// node's RDMA ports and the job's size.
	if mnt, ok := ns["mnt"]; ok && c.selfMnt != 0 && mnt.Inode != c.selfMnt {
		if _, err := os.Stat(filepath.Join(c.host.ProcRoot(pid), "dev", "infiniband")); errors.Is(err, fs.ErrNotExist) {
			d.rdmaDevicesHidden = true
		}
	}
	// NCCL_TOPO_FILE names the topology NCCL loads instead of detecting
	// it (a VM image's, where detection misses the NIC/GPU affinity);
	// NCCL only warns when the file is not there. Checked once, with the
	// details: a file restored later is seen with the next process. A
	// relative name is NCCL's working directory's, like the debug file's.
	if topo, ok := envLookup(d.env, "NCCL_TOPO_FILE"); ok && topo != "" && !slices.Contains(env.cut, "NCCL_TOPO_FILE") {
		root := ""
		if mnt, ok := ns["mnt"]; !ok || c.selfMnt == 0 || mnt.Inode != c.selfMnt {
			root = c.host.ProcRoot(pid)
		}
		name := topo
		if !filepath.IsAbs(name) {
			if cwd, err := p.Cwd(); err == nil {
				name = filepath.Join(cwd, name)
			} else {
				name = ""
			}
		}
		if name != "" {
			if _, err := os.Stat(filepath.Join(root, name)); errors.Is(err, fs.ErrNotExist) {
				d.topoFileMissing = true
			}
		}
	}
	return d, true
}

// environRead is what readEnviron kept of an environment.
type environRead struct {
	vars []sample.NCCLEnv
	// truncated: the file was larger than the read bound, or a value or
	// the number of variables was cut; cut names the variables cut.
	truncated bool
	cut       []string
	// refused are the job identity variables not kept: their value is
	// not in the scheduler's format.
	refused []refusedVar
}

// refusedVar is a job identity variable not kept: its value cut for the
// log, and the value's length.
type refusedVar struct {
	name, value string
	bytes       int
}

// refusedName is whether a variable of this name was refused already.
func (env *environRead) refusedName(name []byte) bool {
	for _, r := range env.refused {
		if r.name == string(name) {
			return true
		}
	}
	return false
}

// refusedValueBytes bounds a refused value as logged.
const refusedValueBytes = 64

// refuseIdentity counts a process's refused job identity variable and logs
// the first of each variable, its value escaped and shortened.
func (c *ncclProcCollector) refuseIdentity(pid int, v refusedVar) {
	if c.identityRefused == nil {
		c.identityRefused = map[string]uint64{}
	}
	c.identityRefused[v.name]++
	if c.identityRefused[v.name] == 1 {
		c.log.Warn("a process's job identity is not in its scheduler's format: dropped, the job is named by the next source; later ones are counted in gpudiag_nccl_job_identity_refused_total",
			zap.Int("pid", pid), zap.String("variable", v.name), zap.String("value", safetext.Line(v.value, refusedValueBytes)),
			zap.Int("value_bytes", v.bytes))
	}
}

// keptEnviron reads an environment keeping only the allow-listed
// variables: the rest is never copied out of the read buffer, which is
// wiped before returning.
func (c *ncclProcCollector) keptEnviron(scan hostfs.EnvironSource) (environRead, error) {
	var env environRead
	if c.environBuf == nil {
		c.environBuf = make([]byte, ncclProcEnvironChunk)
	}
	truncated, err := scan(c.environBuf, ncclProcEnvironBytes, ncclEnvKept, func(name, value []byte) {
		if _, dup := envLookup(env.vars, string(name)); dup || env.refusedName(name) {
			return // the first one is what getenv returns
		}
		if len(env.vars) >= ncclProcEnvMaxVars {
			env.truncated = true
			return
		}
		// A workload writes its own environment, and a job identity
		// becomes the job_id label: kept only in its scheduler's format.
		if nccl.JobIdentityVar(string(name)) && !sample.NoJobIdentity(string(name), string(value)) &&
			!sample.ValidJobIdentity(string(name), string(value)) {
			// Copied for the log only, and bounded there.
			env.refused = append(env.refused, refusedVar{name: string(name),
				value: string(hostfs.CutUTF8(value, 4*refusedValueBytes)), bytes: len(value)})
			return
		}
		if nccl.EnvPolicy(name) == nccl.EnvNameOnly || nccl.SecretShaped(string(value)) {
			env.vars = append(env.vars, sample.NCCLEnv{Name: string(name), Value: nccl.Redacted})
			return
		}
		cut := len(value) > ncclProcEnvValueBytes
		v := strings.ToValidUTF8(string(hostfs.CutUTF8(value, ncclProcEnvValueBytes)), "\uFFFD")
		// A replacement character takes three bytes where the bad byte
		// took one: cut again.
		if len(v) > ncclProcEnvValueBytes {
			v, cut = string(hostfs.CutUTF8([]byte(v), ncclProcEnvValueBytes)), true
		}
		if cut {
			env.truncated = true
			env.cut = append(env.cut, string(name))
		}
		env.vars = append(env.vars, sample.NCCLEnv{Name: string(name), Value: v})
	})
	if err != nil {
		return environRead{}, err
	}
	env.truncated = env.truncated || truncated
	return env, nil
}

// ncclEnvKept is whether a variable is kept at all (nccl.EnvPolicy: the
// allow-list keeps values, other NCCL_*, UCX_* and TORCH_NCCL_* names keep
// only their name). No other variable is kept, logged or shown.
func ncclEnvKept(name []byte) bool { return nccl.EnvPolicy(name) != nccl.EnvDrop }

func envLookup(env []sample.NCCLEnv, name string) (string, bool) {
	for _, e := range env {
		if e.Name == name {
			return e.Value, true
		}
	}
	return "", false
}

// ncclDebugFileName is nccl.DebugFileName for a pattern read from the
// environment: unknown when the value was cut to ncclProcEnvValueBytes.
func ncclDebugFileName(pattern string, patternCut bool, hostname string, nspid int, cwd func() (string, error)) (string, error) {
	if patternCut {
		return "", fmt.Errorf("NCCL_DEBUG_FILE is longer than %d bytes", ncclProcEnvValueBytes)
	}
	return nccl.DebugFileName(pattern, hostname, nspid, cwd)
}

// visibleGPUs resolves the GPUs a process may use from its environment,
// against the node's GPUs. ok is false when the variables do not narrow
// them down (the process sees every GPU of a multi-GPU node) or cannot
// be resolved (MIG devices, GPUs the driver does not list).
func (c *ncclProcCollector) visibleGPUs(p *sample.NCCLHostProcess, refs []GPURef) ([]int, bool) {
	if len(refs) == 0 {
		return nil, false
	}
	all := make([]nccl.VisibleGPU, 0, len(refs))
	for _, r := range refs {
		all = append(all, nccl.VisibleGPU{Index: r.Index, BusID: r.PCIBusID})
	}
	sort.Slice(all, func(i, j int) bool { return all[i].Index < all[j].Index })
	uuid := func(g nccl.VisibleGPU) string { return c.gpuUUID(g.BusID) }
	cuda, cudaSet := p.EnvValue("CUDA_VISIBLE_DEVICES")
	nvidia, nvidiaSet := p.EnvValue("NVIDIA_VISIBLE_DEVICES")
	// NVIDIA_VISIBLE_DEVICES means something only to the container
	// runtime, when it created the process's container.
	nvidiaSet = nvidiaSet && p.ContainerID != ""
	gpus, ok := nccl.ResolveVisibleGPUs(all, cuda, cudaSet, nvidia, nvidiaSet, uuid)
	if !ok || len(gpus) == 0 || (len(gpus) == len(all) && len(all) > 1) {
		return nil, false
	}
	return gpus, true
}

// gpuUUID is a GPU's UUID from the driver's information file, cached
// once known.
func (c *ncclProcCollector) gpuUUID(busID string) string {
	if busID == "" {
		return ""
	}
	if u, ok := c.gpuUUIDs[busID]; ok {
		return u
	}
	u, err := c.host.NVIDIAGPUUUID(busID)
	if err != nil {
		c.log.Debug("GPU UUID unreadable", zap.String("pci_bus_id", busID), zap.Error(err))
		return ""
	}
	if u != "" {
		c.gpuUUIDs[busID] = u
	}
	return u
}

// ncclProcEnvMetricVars are the variables worth a series: those that
// switch NCCL's transports, algorithms or network interface.
var ncclProcEnvMetricVars = map[string]bool{
	"NCCL_P2P_DISABLE": true, "NCCL_SHM_DISABLE": true, "NCCL_IB_DISABLE": true, "NCCL_NET": true,
	"NCCL_SOCKET_IFNAME": true, "NCCL_NET_GDR_LEVEL": true, "NCCL_P2P_LEVEL": true, "NCCL_ALGO": true, "NCCL_PROTO": true,
}

var (
	ncclProcCountDesc = ncclDesc("processes",
		"Processes on this node that map a libnccl (found by scanning /proc), not counting workers forked from them without exec.")
	ncclProcLibraryDesc = ncclDesc("library_info",
		"A libnccl version mapped by a process on this node (x.y.z from the file name or its pip package, else unknown); more than one means processes run different NCCL builds.",
		"version")
	ncclProcEnvDesc = ncclDesc("process_env_info",
		"An NCCL setting that switches transports, algorithms or interfaces (NCCL_P2P_DISABLE, NCCL_SHM_DISABLE, NCCL_IB_DISABLE, NCCL_NET, NCCL_SOCKET_IFNAME, NCCL_NET_GDR_LEVEL, NCCL_P2P_LEVEL, NCCL_ALGO, NCCL_PROTO) found in the environment of an NCCL or GPU process; value cut to 64 bytes. gpu is a GPU the process runs on (listed by the driver, else named by its CUDA_VISIBLE_DEVICES), empty when unknown.",
		"gpu", "variable", "value")
	ncclProcUnreadDesc = ncclDesc("process_scan_unread_processes",
		"Processes whose memory map the last scan did not read: reason=limit (past --collector.ncclproc.max-scan or the sample deadline; read in a later scan) or permission (the daemon lacks root or CAP_SYS_PTRACE, or the process is shielded from it: not dumpable, or in another user namespace). NCCL users among them are not counted.",
		"reason")
	ncclProcIdentityRefusedDesc = ncclDesc("job_identity_refused_total",
		"Processes since the daemon started whose SLURM_JOB_ID (Slurm's decimal job number) or TORCHELASTIC_RUN_ID (letters, digits and ._:-, at most 253 bytes) was not in that format: the value is dropped, the job named by the next source, and the first of each variable logged. Absent while none was.",
		"variable")
)

func (c *ncclProcCollector) Metrics(r *sample.NCCLHostProcesses, emit func(prometheus.Metric)) {
	count := 0
	versions := map[string]bool{}
	type envSeries struct{ gpu, name, value string }
	envs := map[envSeries]bool{}
	for i := range r.Processes {
		p := &r.Processes[i]
		if p.MapsNCCL() && p.ForkOf == 0 {
			count++
		}
		for _, l := range p.Libraries {
			versions[l.Version] = true
		}
		gpus := []string{""}
		if len(p.GPUs) > 0 {
			gpus = gpus[:0]
			for _, g := range p.GPUs {
				gpus = append(gpus, strconv.Itoa(g))
			}
		}
		for _, e := range p.Env {
			if !ncclProcEnvMetricVars[e.Name] {
				continue
			}
			for _, g := range gpus {
				envs[envSeries{g, e.Name, ncclTruncateLabel(e.Value)}] = true
			}
		}
	}
	emit(engine.NewSeries(ncclProcCountDesc, prometheus.GaugeValue, float64(count)))
	for v := range versions {
		emit(engine.NewSeries(ncclProcLibraryDesc, prometheus.GaugeValue, 1, v))
	}
	for e := range envs {
		emit(engine.NewSeries(ncclProcEnvDesc, prometheus.GaugeValue, 1, e.gpu, e.name, e.value))
	}
	emit(engine.NewSeries(ncclProcUnreadDesc, prometheus.GaugeValue, float64(r.Unscanned), "limit"))
	emit(engine.NewSeries(ncclProcUnreadDesc, prometheus.GaugeValue, float64(r.Unreadable), "permission"))
	for _, v := range []string{sample.SlurmJobIDVar, sample.TorchrunRunIDVar} {
		if n := r.JobIdentityRefused[v]; n > 0 {
			emit(engine.NewSeries(ncclProcIdentityRefusedDesc, prometheus.CounterValue, float64(n), v))
		}
	}
}
