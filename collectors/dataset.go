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
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/procfs"
	"go.uber.org/zap"

	"github.com/gpudiag/gpudiag/engine"
	"github.com/gpudiag/gpudiag/hostfile"
	"github.com/gpudiag/gpudiag/hostfs"
	"github.com/gpudiag/gpudiag/sample"
)

func init() {
	register(collectorSpec[sample.Datasets, *datasetCollector]{
		key:          sample.DatasetKey,
		defaultOn:    true,
		help:         "Where the GPUs' processes read their data: the filesystems of their open files (/proc/<pid>/fd, mountinfo), NFS READ latency (mountstats), their memory cgroup's page-cache refaults, GPUDirect Storage counters",
		newCollector: newDatasetCollector,
		metrics:      (&datasetCollector{}).Metrics,
		ownInterval:  &intervalFlag{value: 15 * time.Second, help: "How often the dataset collector scans the GPU processes' open files; the files a job reads change by the epoch, and the scan reads every descriptor."},
	})
}

const (
	// datasetMaxProcesses bounds the processes scanned per GPU: the GPU's
	// own and their descendants (DataLoader workers), breadth-first.
	datasetMaxProcesses = 64
	// datasetMaxFDs bounds the descriptors looked at per GPU, over its
	// processes: a loader holding a million small files open is seen
	// through its first few thousand.
	datasetMaxFDs = 8192
	// datasetScanBudget bounds the time of one scan over all GPUs.
	datasetScanBudget = 2 * time.Second
	// procMountinfoBytes bounds /proc/<pid>/mountinfo (a Kubernetes node
	// has a few hundred mounts of some 150 bytes).
	procMountinfoBytes = 4 << 20
)

type datasetCollector struct {
	interval time.Duration
	host     hostfs.FS
	shared   *Shared
	log      *zap.Logger
	now      func() time.Time

	prevTime     time.Time
	prevNFS      map[string]sample.NFSMount // by server and mount point
	prevRefaults map[string]uint64          // by cgroup path
	// treeThreads is how many threads the last scan's walk met: the next
	// weighs their children files against a parent scan.
	treeThreads int
	// parents carries every host process's parent between parent scans.
	parents *hostfs.ParentIndex
	// openFiles reads each process's descriptors through buffers kept
	// from one process and one scan to the next, and keeps each
	// process's descriptor directory and listing (KeepListings).
	openFiles *hostfs.OpenFileReader
	// sampling is held by Sample, so that Close leaves alone the
	// directories of a scan the engine gave up on and left running.
	sampling sync.Mutex
}

func newDatasetCollector(cfg Config) (*datasetCollector, error) {
	host, err := hostfs.NewFS(cfg.ProcPath, cfg.SysPath)
	if err != nil {
		return nil, fmt.Errorf("procfs at %s: %w", cfg.ProcPath, err)
	}
	cfg = cfg.withDefaults()
	c := &datasetCollector{interval: cfg.OwnInterval, host: host, shared: cfg.Shared, log: cfg.Logger, now: time.Now}
	c.parents = hostfs.NewParentIndex(func() time.Time { return c.now() })
	c.openFiles = host.NewOpenFileReader()
	c.openFiles.KeepListings(datasetListingMaxAge)
	return c, nil
}

// datasetListingMaxAge is how long a process's listing of data files
// stands while its count of open descriptors does not move: four scans at
// the default interval. A loader opening or closing a file moves the
// count; one that closes a file and opens another in the same breath is
// seen within this age.
const datasetListingMaxAge = time.Minute

// Close closes the descriptor directories held between scans, unless a
// scan is still running (the daemon is exiting: they close with it).
func (c *datasetCollector) Close() error {
	if !c.sampling.TryLock() {
		return nil
	}
	defer c.sampling.Unlock()
	return c.openFiles.Close()
}

func (c *datasetCollector) Name() string { return sample.DatasetKey.Name() }

// Interval gives the collector its own clock: --collector.dataset.interval.
// Without it the scan ran on the daemon's clock, every second.
func (c *datasetCollector) Interval() time.Duration { return c.interval }

// mountTable is one mount namespace's mounts, as a process's mountinfo
// lists them.
type mountTable struct {
	byID   map[int]*procfs.MountInfo
	mounts []*procfs.MountInfo
}

// lookup finds the mount a file was opened through: by fdinfo's mount ID
// when the kernel gave it, else the longest mount point the path lies
// under (the last mounted wins among equals, as it hides the others).
func (t *mountTable) lookup(f hostfs.OpenFile) *procfs.MountInfo {
	if f.HasMountID {
		if m := t.byID[f.MountID]; m != nil {
			return m
		}
	}
	var best *procfs.MountInfo
	for _, m := range t.mounts {
		mp := unescapeMount(m.MountPoint)
		if mp == "/" || f.Path == mp || strings.HasPrefix(f.Path, mp+"/") {
			if best == nil || len(mp) >= len(unescapeMount(best.MountPoint)) {
				best = m
			}
		}
	}
	return best
}

// unescapeMount undoes the octal escapes the kernel writes in mountinfo
// for space, tab, newline and backslash.
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	r := strings.NewReplacer(`\040`, " ", `\011`, "\t", `\012`, "\n", `\134`, `\`)
	return r.Replace(s)
}

func (c *datasetCollector) mounts(pid int) (*mountTable, error) {
	path := c.host.ProcPath(strconv.Itoa(pid), "mountinfo")
	if err := hostfile.Check(path, procMountinfoBytes); err != nil {
		return nil, err
	}
	ms, err := c.host.Procfs().GetProcMounts(pid)
	if err != nil {
		return nil, err
	}
	t := &mountTable{byID: map[int]*procfs.MountInfo{}, mounts: ms}
	for _, m := range ms {
		t.byID[m.MountID] = m
	}
	return t, nil
}

func (c *datasetCollector) Sample(ctx context.Context) (*sample.Datasets, error) {
	c.sampling.Lock()
	defer c.sampling.Unlock()
	now := c.now()
	deadline := time.Now().Add(datasetScanBudget) // the wall clock, not c.now, which tests set
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	out := &sample.Datasets{}
	interval := 0.0
	if !c.prevTime.IsZero() {
		interval = now.Sub(c.prevTime).Seconds()
		out.IntervalSeconds = interval
	}
	tree := c.host.NewProcTree()
	tree.ExpectThreads(c.treeThreads, nil)
	c.shared.seedParents(c.parents)
	tree.KeepParents(c.parents)
	trees := c.shared.ProcessTrees()
	nfsPID := map[string]int{} // NFS mount point → a process that sees it
	refaults := map[string]uint64{}
	for _, ref := range c.shared.GPUs() {
		if len(ref.PIDs) == 0 {
			continue
		}
		g := sample.DatasetGPU{GPU: ref.Index}
		type acc struct {
			m     sample.DatasetMount
			order int
		}
		byMount := map[string]*acc{}
		fds := 0
		for _, root := range ref.PIDs {
			if ctx.Err() != nil || time.Now().After(deadline) {
				g.Truncated = true
				break
			}
			table, err := c.mounts(int(root))
			if err != nil {
				if !hostfs.Vanished(err) {
					c.log.Debug("mountinfo unreadable", zap.Uint32("pid", root), zap.Error(err))
				}
				continue
			}
			if g.Cgroup == nil {
				g.Cgroup = c.cgroup(int(root), interval, refaults)
			}
			// The gpuprocess collector's tree when it has a fresh one
			// (Shared.ProcessTrees); else a walk of our own.
			procs, ok := trees.Tree(int(root), now)
			if !ok {
				procs = c.descendants(int(root), tree)
			} else if len(procs) > datasetMaxProcesses {
				procs = procs[:datasetMaxProcesses]
			}
			for _, pid := range procs {
				if fds >= datasetMaxFDs || time.Now().After(deadline) {
					g.Truncated = true
					break
				}
				files, truncated, err := c.openFiles.OpenFiles(pid, datasetMaxFDs-fds, deadline)
				if err != nil {
					c.log.Debug("open files unreadable", zap.Int("pid", pid), zap.Error(err))
					continue
				}
				g.Truncated = g.Truncated || truncated
				fds += len(files)
				for _, f := range files {
					m := table.lookup(f)
					if m == nil {
						continue
					}
					mp := unescapeMount(m.MountPoint)
					a := byMount[mp]
					if a == nil {
						if len(byMount) >= sample.DatasetMaxMounts {
							g.Truncated = true
							continue
						}
						a = &acc{m: c.describe(m), order: len(byMount)}
						byMount[mp] = a
					}
					a.m.Files++
					if f.Written {
						a.m.WrittenFiles++
					}
					if strings.HasPrefix(a.m.FSType, "nfs") {
						if _, ok := nfsPID[mp]; !ok {
							nfsPID[mp] = int(root)
						}
					}
				}
			}
		}
		for _, a := range byMount {
			g.Mounts = append(g.Mounts, a.m)
		}
		sort.Slice(g.Mounts, func(i, j int) bool {
			if g.Mounts[i].Files != g.Mounts[j].Files {
				return g.Mounts[i].Files > g.Mounts[j].Files
			}
			return g.Mounts[i].MountPoint < g.Mounts[j].MountPoint
		})
		out.GPUs = append(out.GPUs, g)
	}
	c.openFiles.EndScan()
	c.prevRefaults = refaults
	c.treeThreads = tree.ThreadsSeen()
	out.NFS = c.nfs(nfsPID, interval)
	out.Neighbours = c.neighbours(out.GPUs)
	if gds, err := c.host.NvidiaFSStats(); err == nil {
		out.GDS = (*sample.GDSStats)(gds)
	} else if !errors.Is(err, fs.ErrNotExist) {
		c.log.Debug("nvidia-fs stats unreadable", zap.Error(err))
	}
	c.prevTime = now
	return out, nil
}

// describe turns a mountinfo line into what the sample keeps: the
// per-mount options, and the whole disk under a block device.
func (c *datasetCollector) describe(m *procfs.MountInfo) sample.DatasetMount {
	d := sample.DatasetMount{MountPoint: unescapeMount(m.MountPoint), FSType: m.FSType, Source: unescapeMount(m.Source)}
	for o, v := range m.Options {
		if v != "" {
			o += "=" + v
		}
		d.Options = append(d.Options, o)
	}
	sort.Strings(d.Options)
	if !strings.HasPrefix(m.MajorMinorVer, "0:") {
		d.Disk = c.wholeDisk(m.MajorMinorVer)
	}
	return d
}

// wholeDisk names the disk under device major:minor: the device itself, or
// the disk a partition belongs to (/sys/dev/block/M:m is a link into
// /sys/devices/…/block/<disk>[/<partition>]).
func (c *datasetCollector) wholeDisk(majmin string) string {
	link := c.host.SysPath("dev", "block", majmin)
	target, err := os.Readlink(link)
	if err != nil {
		return ""
	}
	if _, err := os.Stat(filepath.Join(link, "partition")); err == nil {
		return filepath.Base(filepath.Dir(target))
	}
	return filepath.Base(target)
}

// descendants lists pid and the processes below it, breadth-first, at most
// datasetMaxProcesses.
func (c *datasetCollector) descendants(pid int, tree *hostfs.ProcTree) []int {
	out := []int{pid}
	seen := map[int]bool{pid: true}
	for i := 0; i < len(out) && len(out) < datasetMaxProcesses; i++ {
		kids, errs := tree.ChildrenOf(out[i])
		for _, err := range errs {
			c.log.Debug("children unreadable", zap.Int("pid", out[i]), zap.Error(err))
		}
		for _, k := range kids {
			if !seen[k] && len(out) < datasetMaxProcesses {
				seen[k] = true
				out = append(out, k)
			}
		}
	}
	return out
}

// cgroup reads the memory cgroup (v2) of pid and its refault rate since
// the previous scan; nil when the process is not in a v2 memory cgroup
// this collector can read.
func (c *datasetCollector) cgroup(pid int, interval float64, seen map[string]uint64) *sample.CgroupMemory {
	p, err := c.host.Procfs().Proc(pid)
	if err != nil {
		return nil
	}
	cgs, err := p.Cgroups()
	if err != nil {
		return nil
	}
	var path string
	for _, cg := range cgs {
		if cg.HierarchyID == 0 {
			path = cg.Path
		}
	}
	if path == "" {
		return nil
	}
	read, err := c.host.CgroupMemory(path)
	if err != nil {
		c.log.Debug("memory cgroup unreadable", zap.String("cgroup", path), zap.Error(err))
		return nil
	}
	m := &sample.CgroupMemory{Path: read.Path, LimitBytes: read.LimitBytes, CurrentBytes: read.CurrentBytes,
		FileBytes: read.FileBytes, RefaultsFile: read.RefaultsFile, Pressure: c.cgroupPressure(path)}
	seen[path] = m.RefaultsFile
	if prev, ok := c.prevRefaults[path]; ok && interval > 0 {
		r := sample.CounterRate(float64(prev), float64(m.RefaultsFile), interval)
		m.RefaultsPerSecond = &r
	}
	return m
}

// cgroupPressure reads what a cgroup's own tasks stall on: its
// memory.pressure and io.pressure "some avg10" as a share (the kernel
// prints percent). A file that is absent or odd leaves its share nil:
// unknown, not zero.
func (c *datasetCollector) cgroupPressure(path string) sample.CgroupPressure {
	var out sample.CgroupPressure
	for _, r := range []struct {
		resource string
		dst      **float64
	}{{"memory", &out.MemorySome}, {"io", &out.IOSome}} {
		if p, err := c.host.CgroupPSI(path, r.resource); err == nil && p.HasSome {
			v := p.Some.Avg10 / 100
			*r.dst = &v
		}
	}
	return out
}

// neighbours reads the pressure of the cgroups beside the GPUs' own: the
// other children of each GPU cgroup's grandparent (for a container of a
// Kubernetes pod, the other pods of its QoS slice; for a Docker or
// systemd scope, the root's other slices). A neighbour that stalls on
// memory or I/O while the GPU's group does too shares the contended
// resource with it (the noisy neighbour the seeds' rows 3 and 36 name).
// Groups that hold a GPU's processes, or none of whose pressure is above
// zero, are left out.
func (c *datasetCollector) neighbours(gpus []sample.DatasetGPU) []sample.CgroupNeighbour {
	var own []string
	parents := map[string]bool{}
	for _, g := range gpus {
		if g.Cgroup == nil || g.Cgroup.Path == "" || g.Cgroup.Path == "/" {
			continue
		}
		own = append(own, g.Cgroup.Path)
		if gp := filepath.Dir(filepath.Dir(filepath.Clean(g.Cgroup.Path))); gp != "" {
			parents[gp] = true
		}
	}
	holdsGPU := func(path string) bool {
		for _, o := range own {
			if o == path || strings.HasPrefix(o, path+"/") {
				return true
			}
		}
		return false
	}
	var out []sample.CgroupNeighbour
	for _, parent := range slices.Sorted(maps.Keys(parents)) {
		kids, err := c.host.CgroupChildren(parent, sample.DatasetMaxNeighbours)
		if err != nil {
			continue
		}
		for _, kid := range kids {
			if len(out) >= sample.DatasetMaxNeighbours {
				return out
			}
			if holdsGPU(kid) {
				continue
			}
			p := c.cgroupPressure(kid)
			if (p.MemorySome == nil || *p.MemorySome == 0) && (p.IOSome == nil || *p.IOSome == 0) {
				continue
			}
			out = append(out, sample.CgroupNeighbour{Path: kid, Pressure: p})
		}
	}
	return out
}

// nfs reads the NFS mounts the GPUs' files sit on, each through a process
// that sees it, with READ rates since the previous scan.
func (c *datasetCollector) nfs(pidOf map[string]int, interval float64) []sample.NFSMount {
	byPID := map[int][]hostfs.NFSMount{}
	var out []sample.NFSMount
	cur := map[string]sample.NFSMount{}
	for _, mp := range slices.Sorted(maps.Keys(pidOf)) {
		pid := pidOf[mp]
		stats, ok := byPID[pid]
		if !ok {
			var err error
			if stats, err = c.host.MountStats(pid); err != nil {
				c.log.Debug("mountstats unreadable", zap.Int("pid", pid), zap.Error(err))
			}
			byPID[pid] = stats
		}
		for _, read := range stats {
			// mountstats escapes a mount point as mountinfo does.
			if unescapeMount(read.MountPoint) != mp {
				continue
			}
			m := nfsMount(read)
			m.MountPoint = mp
			key := m.Server + " " + m.MountPoint
			if p, ok := c.prevNFS[key]; ok && interval > 0 {
				m.Rates = nfsRates(p, m, interval)
			}
			cur[key] = m
			out = append(out, m)
			break
		}
	}
	c.prevNFS = cur
	return out
}

func nfsMount(m hostfs.NFSMount) sample.NFSMount {
	return sample.NFSMount{MountPoint: m.MountPoint, Server: m.Server, FSType: m.FSType, RSize: m.RSize,
		ReadOps: m.ReadOps, ReadBytes: m.ReadBytes, ReadRTTMillis: m.ReadRTTMillis, ReadExecuteMillis: m.ReadExecuteMillis,
		ReadQueueMillis: m.ReadQueueMillis, ReadRetransmission: m.ReadRetransmission}
}

func nfsRates(p, m sample.NFSMount, interval float64) *sample.NFSReadRates {
	r := &sample.NFSReadRates{
		OpsPerSecond:   sample.CounterRate(float64(p.ReadOps), float64(m.ReadOps), interval),
		BytesPerSecond: sample.CounterRate(float64(p.ReadBytes), float64(m.ReadBytes), interval),
	}
	if ops := sample.CounterIncrease(float64(p.ReadOps), float64(m.ReadOps)); ops > 0 {
		r.RTTSeconds = sample.CounterIncrease(float64(p.ReadRTTMillis), float64(m.ReadRTTMillis)) / ops / 1000
		r.ExecuteSeconds = sample.CounterIncrease(float64(p.ReadExecuteMillis), float64(m.ReadExecuteMillis)) / ops / 1000
	}
	return r
}

// atimeMode is how the mount updates access times: noatime, relatime or
// strictatime (the kernel lists relatime unless told otherwise).
func atimeMode(m sample.DatasetMount) string {
	switch {
	case m.HasOption("noatime"):
		return "noatime"
	case m.HasOption("relatime"):
		return "relatime"
	}
	return "strictatime"
}

var (
	datasetMountDesc = prometheus.NewDesc(engine.Namespace+"_gpu_dataset_mount_info",
		"A filesystem the GPU's processes and their descendants hold regular files open on (at most 16 per GPU), with its type, source, access-time mode and whether it reads over the network.",
		[]string{"gpu", "mount_point", "fs_type", "source", "atime", "network"}, nil)
	datasetFilesDesc = prometheus.NewDesc(engine.Namespace+"_gpu_dataset_open_files",
		"Regular files the GPU's processes and their descendants hold open on the mount, as of the last scan (bounded to 8192 descriptors per GPU).",
		[]string{"gpu", "mount_point"}, nil)
	datasetTruncatedDesc = prometheus.NewDesc(engine.Namespace+"_gpu_dataset_scan_truncated",
		"1 when the last scan of the GPU's open files stopped at its bound (processes, descriptors, mounts or time).",
		[]string{"gpu"}, nil)
	cgroupLimitDesc = prometheus.NewDesc(engine.Namespace+"_gpu_cgroup_memory_limit_bytes",
		"memory.max of the memory cgroup (v2) of the GPU's first process; absent when unlimited.", []string{"gpu"}, nil)
	cgroupCurrentDesc = prometheus.NewDesc(engine.Namespace+"_gpu_cgroup_memory_current_bytes",
		"memory.current of the memory cgroup (v2) of the GPU's first process, page cache included.", []string{"gpu"}, nil)
	cgroupFileDesc = prometheus.NewDesc(engine.Namespace+"_gpu_cgroup_memory_file_bytes",
		"Page cache charged to the memory cgroup (v2) of the GPU's first process (memory.stat file).", []string{"gpu"}, nil)
	cgroupRefaultsDesc = prometheus.NewDesc(engine.Namespace+"_gpu_cgroup_page_cache_refaults_total",
		"File pages the memory cgroup (v2) of the GPU's first process read back soon after evicting them (memory.stat workingset_refault_file).", []string{"gpu"}, nil)
	nfsRSizeDesc = prometheus.NewDesc(engine.Namespace+"_nfs_read_size_bytes",
		"Negotiated NFS read size (rsize) of a mount the GPUs' processes read from.", []string{"mount_point", "server"}, nil)
	nfsReadOpsDesc = prometheus.NewDesc(engine.Namespace+"_nfs_read_operations_total",
		"NFS READ operations of the mount since it was mounted (mountstats).", []string{"mount_point", "server"}, nil)
	nfsReadBytesDesc = prometheus.NewDesc(engine.Namespace+"_nfs_read_bytes_total",
		"Bytes received by NFS READ operations of the mount since it was mounted (mountstats).", []string{"mount_point", "server"}, nil)
	nfsReadRTTDesc = prometheus.NewDesc(engine.Namespace+"_nfs_read_rtt_seconds_total",
		"Summed round-trip time of the mount's NFS READs (request sent to reply received); divided by the operations' rate it is the mean RTT per READ.", []string{"mount_point", "server"}, nil)
	nfsReadExecDesc = prometheus.NewDesc(engine.Namespace+"_nfs_read_execute_seconds_total",
		"Summed execute time of the mount's NFS READs (queued to done, the client's queueing included).", []string{"mount_point", "server"}, nil)
	gdsOpsDesc = prometheus.NewDesc(engine.Namespace+"_gds_operations_total",
		"GPUDirect Storage operations through the nvidia-fs driver since it loaded, by op (read, write).", []string{"op"}, nil)
	gdsBytesDesc = prometheus.NewDesc(engine.Namespace+"_gds_bytes_total",
		"Bytes moved by GPUDirect Storage through the nvidia-fs driver since it loaded (counted in MiB by the driver), by op.", []string{"op"}, nil)
	gdsErrorsDesc = prometheus.NewDesc(engine.Namespace+"_gds_errors_total",
		"GPUDirect Storage errors counted by the nvidia-fs driver since it loaded, by kind (read, write, io_state, dma_map).", []string{"kind"}, nil)
)

func (c *datasetCollector) Metrics(s *sample.Datasets, emit func(prometheus.Metric)) {
	for _, g := range s.GPUs {
		gpu := strconv.Itoa(g.GPU)
		for _, m := range g.Mounts {
			emit(engine.NewSeries(datasetMountDesc, prometheus.GaugeValue, 1, gpu, m.MountPoint, m.FSType, m.Source,
				atimeMode(m), strconv.FormatBool(m.Network())))
			emit(engine.NewSeries(datasetFilesDesc, prometheus.GaugeValue, float64(m.Files), gpu, m.MountPoint))
		}
		emit(engine.NewSeries(datasetTruncatedDesc, prometheus.GaugeValue, boolFloat(g.Truncated), gpu))
		if cg := g.Cgroup; cg != nil {
			if cg.LimitBytes > 0 {
				emit(engine.NewSeries(cgroupLimitDesc, prometheus.GaugeValue, float64(cg.LimitBytes), gpu))
			}
			emit(engine.NewSeries(cgroupCurrentDesc, prometheus.GaugeValue, float64(cg.CurrentBytes), gpu))
			emit(engine.NewSeries(cgroupFileDesc, prometheus.GaugeValue, float64(cg.FileBytes), gpu))
			emit(engine.NewSeries(cgroupRefaultsDesc, prometheus.CounterValue, float64(cg.RefaultsFile), gpu))
		}
	}
	for _, m := range s.NFS {
		if m.RSize > 0 {
			emit(engine.NewSeries(nfsRSizeDesc, prometheus.GaugeValue, float64(m.RSize), m.MountPoint, m.Server))
		}
		emit(engine.NewSeries(nfsReadOpsDesc, prometheus.CounterValue, float64(m.ReadOps), m.MountPoint, m.Server))
		emit(engine.NewSeries(nfsReadBytesDesc, prometheus.CounterValue, float64(m.ReadBytes), m.MountPoint, m.Server))
		emit(engine.NewSeries(nfsReadRTTDesc, prometheus.CounterValue, float64(m.ReadRTTMillis)/1000, m.MountPoint, m.Server))
		emit(engine.NewSeries(nfsReadExecDesc, prometheus.CounterValue, float64(m.ReadExecuteMillis)/1000, m.MountPoint, m.Server))
	}
	if g := s.GDS; g != nil {
		emit(engine.NewSeries(gdsOpsDesc, prometheus.CounterValue, float64(g.Reads), "read"))
		emit(engine.NewSeries(gdsOpsDesc, prometheus.CounterValue, float64(g.Writes), "write"))
		emit(engine.NewSeries(gdsBytesDesc, prometheus.CounterValue, float64(g.ReadMiB)*(1<<20), "read"))
		emit(engine.NewSeries(gdsBytesDesc, prometheus.CounterValue, float64(g.WriteMiB)*(1<<20), "write"))
		for _, e := range []struct {
			kind string
			n    uint64
		}{{"read", g.ReadErrors}, {"write", g.WriteErrors}, {"io_state", g.IOStateErrors}, {"dma_map", g.MapErrors}} {
			emit(engine.NewSeries(gdsErrorsDesc, prometheus.CounterValue, float64(e.n), e.kind))
		}
	}
}
