package collectors

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/alecthomas/kingpin/v2"
	"github.com/alecthomas/units"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/gpudiag/gpudiag/engine"
	"github.com/gpudiag/gpudiag/hostfile"
	"github.com/gpudiag/gpudiag/nccl"
	"github.com/gpudiag/gpudiag/sample"
)

// ncclDefaults are the flags' defaults, also in force when the collectors
// are built without parsing flags (tests, embedding).
var ncclDefaults = ncclOptions{retention: 10 * time.Minute, maxFiles: 32, maxReadBytes: 4 << 20}

var ncclFlags = struct {
	globs        []string
	retention    time.Duration
	maxFiles     int
	maxReadBytes units.Base2Bytes
}{
	retention:    ncclDefaults.retention,
	maxFiles:     ncclDefaults.maxFiles,
	maxReadBytes: units.Base2Bytes(ncclDefaults.maxReadBytes),
}

func init() {
	register(collectorSpec[sample.NCCL, *ncclCollector]{
		key:       sample.NCCLKey,
		defaultOn: true,
		help:      "NCCL communication paths (transports, fallbacks, overrides) from NCCL_DEBUG=INFO logs",
		flags: func(app *kingpin.Application) {
			app.Flag("collector.nccl.log-glob",
				"Glob of this node's NCCL debug logs to follow (NCCL_DEBUG=INFO written through NCCL_DEBUG_FILE, or captured stdout); repeatable. Files named by running processes' NCCL_DEBUG_FILE are followed as well.").
				StringsVar(&ncclFlags.globs)
			app.Flag("collector.nccl.retention",
				"How long a finished job's state stays in the metrics after its communicators end or its log file vanishes.").
				Default(ncclDefaults.retention.String()).DurationVar(&ncclFlags.retention)
			app.Flag("collector.nccl.max-files",
				"Most log files followed at once; past it the most recently modified win.").
				Default(strconv.Itoa(ncclDefaults.maxFiles)).IntVar(&ncclFlags.maxFiles)
			app.Flag("collector.nccl.max-read-bytes",
				"Most bytes read from all logs per sample; a log written faster is caught up over later samples.").
				Default(units.Base2Bytes(ncclDefaults.maxReadBytes).String()).BytesVar(&ncclFlags.maxReadBytes)
		},
		newCollector: func(cfg Config) (*ncclCollector, error) {
			return newNCCLCollector(cfg, ncclOptions{
				globs:        ncclFlags.globs,
				retention:    ncclFlags.retention,
				maxFiles:     ncclFlags.maxFiles,
				maxReadBytes: int(ncclFlags.maxReadBytes),
			})
		},
		metrics:    (&ncclCollector{}).Metrics,
		cumulative: true,
	})
}

// ncclPerFileReadBytes keeps one busy log (NCCL_DEBUG_SUBSYS=COLL writes a
// line per collective) from taking a whole sample's budget.
const ncclPerFileReadBytes = 1 << 20

type ncclOptions struct {
	globs        []string
	retention    time.Duration
	maxFiles     int
	maxReadBytes int
	// hostname is this node's; empty reads os.Hostname.
	hostname string
	now      func() time.Time
}

type ncclCollector struct {
	opts   ncclOptions
	shared *Shared
	log    *zap.Logger

	followers map[string]*ncclFollower
	// next rotates which follower reads first, so that every log gets its
	// share of the byte budget.
	next       int
	linesTotal uint64
	bytesTotal uint64
	// overLimit is the count of named logs last warned about as past
	// max-files, and overLimitAt when: the warning is given when the
	// count changes, at most once per ncclOverLimitWarnEvery.
	overLimit   int
	overLimitAt time.Time
	// globTruncated: the glob's directory had more entries than are
	// listed per sample, last time (warned once when it starts).
	globTruncated map[string]bool
}

// ncclOverLimitWarnEvery rate-limits the warning about logs past
// --collector.nccl.max-files, whose count can change every sample.
const ncclOverLimitWarnEvery = 10 * time.Minute

// ncclGlobMaxEntries bounds the entries of one directory a log glob lists
// per sample: the directory may be one users write to, and filepath.Glob
// would hold the names of all its entries at once.
const ncclGlobMaxEntries = 1 << 16

// boundedGlob is filepath.Glob reading at most maxEntries entries of each
// directory whose entries the pattern's last element matches; truncated
// says some were left unread. Magic in the directory part is expanded by
// filepath.Glob (directories of directories are the operator's).
func boundedGlob(pattern string, maxEntries int) (matches []string, truncated bool) {
	dir, file := filepath.Split(pattern)
	if !hasGlobMeta(file) {
		m, _ := filepath.Glob(pattern) // patterns were checked at start-up
		return m, false
	}
	switch {
	case dir == "":
		dir = "."
	case len(dir) > 1:
		dir = dir[:len(dir)-1] // the trailing separator
	}
	dirs := []string{dir}
	if hasGlobMeta(dir) {
		dirs, _ = filepath.Glob(dir)
	}
	for _, d := range dirs {
		f, err := hostfile.OpenDir(d)
		if err != nil {
			continue
		}
		for seen := 0; ; {
			if seen >= maxEntries {
				truncated = true
				break
			}
			names, err := f.Readdirnames(min(1024, maxEntries-seen))
			seen += len(names)
			for _, n := range names {
				if ok, _ := filepath.Match(file, n); ok {
					matches = append(matches, filepath.Join(d, n))
				}
			}
			if err != nil || len(names) == 0 {
				break
			}
		}
		f.Close()
	}
	sort.Strings(matches)
	return matches, truncated
}

// hasGlobMeta is whether path holds a glob metacharacter, as filepath.Glob
// decides it.
func hasGlobMeta(path string) bool {
	return strings.ContainsAny(path, `*?[\`)
}

// ncclSource is a log a source names now, and how to open it.
type ncclSource struct {
	path string
	open nccl.Opener
}

type ncclFollower struct {
	path    string
	tailer  *nccl.Tailer
	state   *nccl.Log
	exists  bool
	modTime time.Time
	// lastSeen is when a source last named the path and it existed; the
	// follower is dropped a retention after.
	lastSeen time.Time
	err      string
	dropped  uint64
	// endedAt is when each process was first seen ended, capped at the
	// file's mtime so that an old log read at start-up is not taken for a
	// job that just finished.
	endedAt map[string]time.Time
}

func newNCCLCollector(cfg Config, o ncclOptions) (*ncclCollector, error) {
	for _, g := range o.globs {
		if _, err := filepath.Match(g, ""); err != nil {
			return nil, fmt.Errorf("--collector.nccl.log-glob %q: %w", g, err)
		}
	}
	if o.retention <= 0 {
		o.retention = ncclDefaults.retention
	}
	if o.maxFiles <= 0 {
		o.maxFiles = ncclDefaults.maxFiles
	}
	if o.maxReadBytes <= 0 {
		o.maxReadBytes = ncclDefaults.maxReadBytes
	}
	if o.now == nil {
		o.now = time.Now
	}
	if o.hostname == "" {
		o.hostname, _ = os.Hostname()
	}
	cfg = cfg.withDefaults()
	log := cfg.Logger
	shared := cfg.Shared
	return &ncclCollector{opts: o, shared: shared, log: log, followers: map[string]*ncclFollower{}, globTruncated: map[string]bool{}}, nil
}

func (c *ncclCollector) Name() string { return sample.NCCLKey.Name() }

// Close releases the open log files.
func (c *ncclCollector) Close() error {
	for _, f := range c.followers {
		f.tailer.Close()
	}
	return nil
}

func (c *ncclCollector) Sample(ctx context.Context) (*sample.NCCL, error) {
	now := c.opts.now()
	named, skipped := c.namedPaths(now)
	if len(named) == 0 && len(c.followers) == 0 {
		return &sample.NCCL{LinesTotal: c.linesTotal, BytesTotal: c.bytesTotal, SkippedFiles: skipped}, nil
	}
	for _, src := range named {
		if c.followers[src.path] == nil {
			c.followers[src.path] = &ncclFollower{path: src.path, tailer: nccl.NewTailer(src.path, 0, 0).WithOpener(src.open),
				state: nccl.NewLog(), lastSeen: now, endedAt: map[string]time.Time{}}
		}
	}
	isNamed := make(map[string]bool, len(named))
	for _, src := range named {
		isNamed[src.path] = true
	}
	paths := c.sortedPaths()
	budget := c.opts.maxReadBytes
	for i := range paths {
		f := c.followers[paths[(c.next+i)%len(paths)]]
		if !isNamed[f.path] {
			// No source names it now (its process exited, its glob no
			// longer matches, or newer logs took its place under
			// max-files): its state is kept for the retention, but it is
			// not read, so that at most max-files logs are followed.
			_, err := os.Stat(f.path)
			f.exists = err == nil
			continue
		}
		if ctx.Err() != nil || budget <= 0 {
			continue
		}
		budget -= c.poll(f, min(budget, ncclPerFileReadBytes))
		if f.exists {
			f.lastSeen = now
		}
	}
	if len(paths) > 0 {
		c.next = (c.next + 1) % len(paths)
	}
	c.forget(now, isNamed)
	out := c.build(now, isNamed)
	out.SkippedFiles = skipped
	return out, nil
}

// forget drops the followers whose file has not been named and present for
// the retention, and, should logs come and go faster than that, the
// longest unseen past twice maxFiles, so open files and state stay bounded.
func (c *ncclCollector) forget(now time.Time, isNamed map[string]bool) {
	var stale []*ncclFollower
	for p, f := range c.followers {
		if now.Sub(f.lastSeen) > c.opts.retention {
			f.tailer.Close()
			delete(c.followers, p)
		} else if !isNamed[p] {
			stale = append(stale, f)
		}
	}
	excess := len(c.followers) - 2*c.opts.maxFiles
	if excess <= 0 {
		return
	}
	sort.Slice(stale, func(i, j int) bool { return stale[i].lastSeen.Before(stale[j].lastSeen) })
	for _, f := range stale[:min(excess, len(stale))] {
		f.tailer.Close()
		delete(c.followers, f.path)
	}
}

// namedPaths is the union of the glob matches and the published
// NCCL_DEBUG_FILE paths, the most recently modified first past maxFiles;
// skipped counts those left out. A glob's match is the operator's choice,
// type checked before it is opened (hostfile.OpenTyped: the directory may
// be users'); a published path is opened inside its process's root and
// only when that process's user owns it (NCCLLogFile).
func (c *ncclCollector) namedPaths(now time.Time) (out []ncclSource, skipped int) {
	seen := map[string]bool{}
	add := func(p string, open nccl.Opener) {
		p = filepath.Clean(p)
		if !seen[p] {
			seen[p] = true
			out = append(out, ncclSource{path: p, open: open})
		}
	}
	for _, g := range c.opts.globs {
		matches, truncated := boundedGlob(g, ncclGlobMaxEntries)
		if truncated && !c.globTruncated[g] {
			c.log.Warn("NCCL log glob's directory has more entries than are listed per sample; the rest are not matched",
				zap.String("glob", g), zap.Int("max_entries", ncclGlobMaxEntries))
		}
		c.globTruncated[g] = truncated
		for _, m := range matches {
			add(m, hostfile.OpenTyped)
		}
	}
	for _, l := range c.shared.NCCLLogFiles() {
		if l.Path != "" {
			add(l.Path, l.open)
		}
	}
	if len(out) <= c.opts.maxFiles {
		if c.overLimit != 0 {
			c.log.Info("NCCL logs within --collector.nccl.max-files again", zap.Int("logs", len(out)), zap.Int("max_files", c.opts.maxFiles))
			c.overLimit = 0
		}
		return out, 0
	}
	mtime := make(map[string]time.Time, len(out))
	for _, src := range out {
		if fi, err := os.Stat(src.path); err == nil {
			mtime[src.path] = fi.ModTime()
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return mtime[out[i].path].After(mtime[out[j].path]) })
	skipped = len(out) - c.opts.maxFiles
	// Logs left unread are a blind spot an operator must hear of, but
	// the count may change every sample: warn when it changes, at most
	// once per ncclOverLimitWarnEvery.
	level := zap.DebugLevel
	if len(out) != c.overLimit && (c.overLimitAt.IsZero() || now.Sub(c.overLimitAt) >= ncclOverLimitWarnEvery) {
		level = zap.WarnLevel
		c.overLimit, c.overLimitAt = len(out), now
	}
	c.log.Log(level, "more NCCL logs than --collector.nccl.max-files; following the most recently modified, the rest are not read",
		zap.Int("logs", len(out)), zap.Int("max_files", c.opts.maxFiles), zap.Int("skipped", skipped))
	return out[:c.opts.maxFiles], skipped
}

// open opens a log a process named (Shared.NCCLLogFiles) for reading:
// see hostfile.OpenInRoot and hostfile.Untrusted, and OwnerUIDs.
func (l NCCLLogFile) open(string) (*os.File, error) {
	var f *os.File
	var err error
	if l.Root != "" {
		f, err = hostfile.OpenInRoot(l.Root, l.Name)
	} else {
		f, err = hostfile.Untrusted(l.Path)
	}
	if err != nil || !l.CheckOwner {
		return f, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	switch {
	case !ok:
		err = errors.New("file owner unknown")
	case len(l.OwnerUIDs) == 0:
		err = fmt.Errorf("owned by uid %d, and the user of the process that names it is unknown: not followed", st.Uid)
	case !slices.Contains(l.OwnerUIDs, st.Uid):
		err = fmt.Errorf("owned by uid %d, not by the user (uid %d) of the process that names it: not followed", st.Uid, l.OwnerUIDs[0])
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("%s: %w", l.Path, err)
	}
	return f, nil
}

func (c *ncclCollector) sortedPaths() []string {
	out := make([]string, 0, len(c.followers))
	for p := range c.followers {
		out = append(out, p)
	}
	sort.Strings(out)
	return out
}

// poll reads new lines of one log into its state and returns the bytes read.
func (c *ncclCollector) poll(f *ncclFollower, budget int) int {
	res, err := f.tailer.Poll(budget, f.state.Feed, func(why nccl.ResetReason) {
		c.log.Debug("NCCL log started over", zap.String("path", f.path), zap.Stringer("reason", why))
		f.state.Reset()
		f.dropped = 0
		clear(f.endedAt)
	})
	f.exists = res.Exists
	if !res.ModTime.IsZero() {
		f.modTime = res.ModTime
	}
	f.dropped += uint64(res.Dropped)
	c.linesTotal += uint64(res.Lines)
	c.bytesTotal += uint64(res.Bytes)
	msg := ""
	if err != nil {
		msg = err.Error()
	}
	if msg != f.err && msg != "" {
		// Permission denied or a vanished directory: the log is skipped,
		// the collector does not fail.
		c.log.Debug("cannot read NCCL log", zap.String("path", f.path), zap.Error(err))
	}
	f.err = msg
	return res.Bytes
}

// ncclCandidate is a current process that names a GPU.
type ncclCandidate struct {
	gpu             sample.NCCLGPU
	modTime         time.Time
	initLine        uint64
	fileIdx, procID int
}

func (c *ncclCollector) build(now time.Time, isNamed map[string]bool) *sample.NCCL {
	out := &sample.NCCL{LinesTotal: c.linesTotal, BytesTotal: c.bytesTotal}
	gpus := c.shared.GPUs()
	gpuByBus := make(map[string]int, len(gpus))
	for _, g := range gpus {
		gpuByBus[strings.ToLower(g.PCIBusID)] = g.Index
	}
	paths := c.sortedPaths()
	summaries := make([][]nccl.Summary, len(paths))
	for i, p := range paths {
		summaries[i] = c.followers[p].state.Summaries()
	}

	// Which processes run on this node. When the logs carry this node's
	// host name, that name decides: a log gathering every node's ranks
	// (srun capturing all stdout) names other nodes, whose GPUs have the
	// same bus IDs as ours on identical servers. Otherwise (containers with
	// their own host names) a bus ID among this node's GPUs does.
	nodeHost := sample.LogHostname(c.opts.hostname)
	nodeNamed := false
	for i := range summaries {
		for j := range summaries[i] {
			nodeNamed = nodeNamed || summaries[i][j].Host == nodeHost
		}
	}
	busMatch := func(s *nccl.Summary) bool {
		for _, b := range s.PCIBusIDs() {
			if _, ok := gpuByBus[b]; ok {
				return true
			}
		}
		return false
	}
	onNode := func(s *nccl.Summary) bool {
		if nodeNamed {
			return s.Host == nodeHost
		}
		return len(gpus) == 0 || busMatch(s)
	}
	// Hosts as the logs tell them apart (nccl.HostIDs: the name, split by
	// bootstrap address and by ranks and GPUs two processes cannot share).
	var flat []nccl.Summary
	for i := range summaries {
		flat = append(flat, summaries[i]...)
	}
	hostIDs := nccl.HostIDs(flat)
	idsOfName := map[string]map[string]bool{}
	for k := range flat {
		if idsOfName[flat[k].Host] == nil {
			idsOfName[flat[k].Host] = map[string]bool{}
		}
		idsOfName[flat[k].Host][hostIDs[k]] = true
	}
	// provenOnNode is onNode with evidence, not by default. This node's
	// name proves nothing when the logs show two hosts of that name (every
	// node called "ubuntu"): which one is this node, they do not say.
	provenOnNode := func(s *nccl.Summary) bool {
		if nodeNamed {
			return s.Host == nodeHost && len(idsOfName[s.Host]) == 1
		}
		return busMatch(s)
	}
	// Ranks on this node: those of processes that share a host in the
	// logs, and those of processes proven on this node (containers give
	// ranks of one node different host names). A process's ranks are its
	// communicators', the local end of its connections, and the peers it
	// reaches over P2P or SHM.
	hostRanks := map[string]map[nccl.RankRef]bool{}
	nodeRanks := map[nccl.RankRef]bool{}
	k := 0
	for i := range summaries {
		for j := range summaries[i] {
			s := &summaries[i][j]
			set := hostRanks[hostIDs[k]]
			if set == nil {
				set = map[nccl.RankRef]bool{}
				hostRanks[hostIDs[k]] = set
			}
			k++
			proven := provenOnNode(s)
			add := func(r nccl.RankRef) {
				set[r] = true
				if proven {
					nodeRanks[r] = true
				}
			}
			for _, cm := range s.Comms {
				if cm.Key != "" && cm.Rank >= 0 {
					add(nccl.RankRef{Comm: cm.Key, Rank: cm.Rank})
				}
			}
			for _, r := range s.LocalRanks {
				add(r.RankRef)
			}
			for _, r := range s.NodePeers {
				add(r)
			}
		}
	}

	best := map[int]ncclCandidate{}
	k = 0
	for i, p := range paths {
		f := c.followers[p]
		file := sample.NCCLFile{Path: p, Exists: f.exists, Retained: !isNamed[p], Error: f.err, Versions: f.state.Versions(),
			DroppedLines: f.dropped, DroppedProcesses: f.state.DroppedProcesses()}
		for j := range summaries[i] {
			s := &summaries[i][j]
			local := provenOnNode(s)
			sameHost := hostRanks[hostIDs[k]]
			k++
			isLocal := func(comm string, rank int) bool {
				r := nccl.RankRef{Comm: comm, Rank: rank}
				return sameHost[r] || local && nodeRanks[r]
			}
			proc := s.Sample(s.Fallbacks(isLocal))
			key := s.Host + ":" + strconv.Itoa(s.PID)
			if proc.Ended {
				if _, ok := f.endedAt[key]; !ok {
					f.endedAt[key] = minTime(now, f.modTime)
				}
			} else {
				delete(f.endedAt, key)
			}
			proc.Current = !proc.Ended || now.Sub(f.endedAt[key]) < c.opts.retention
			if proc.Current && onNode(s) {
				for _, g := range ncclGPUsOf(s, gpuByBus, len(gpus) > 0) {
					cand := ncclCandidate{gpu: g, modTime: f.modTime, initLine: s.LastInitLine(), fileIdx: i, procID: j}
					if prev, ok := best[g.GPU]; !ok || cand.newerThan(prev) {
						best[g.GPU] = cand
					}
				}
			}
			file.Processes = append(file.Processes, proc)
		}
		out.Files = append(out.Files, file)
	}
	for _, cand := range best {
		g := cand.gpu
		g.File, g.Process = cand.fileIdx, cand.procID
		out.GPUs = append(out.GPUs, g)
	}
	sort.Slice(out.GPUs, func(i, j int) bool { return out.GPUs[i].GPU < out.GPUs[j].GPU })
	return out
}

func (a ncclCandidate) newerThan(b ncclCandidate) bool {
	if !a.modTime.Equal(b.modTime) {
		return a.modTime.After(b.modTime)
	}
	return a.initLine > b.initLine
}

func minTime(a, b time.Time) time.Time {
	if b.IsZero() || a.Before(b) {
		return a
	}
	return b
}

// ncclGPUsOf maps a process's communicators to GPU indexes: by PCI bus ID
// when the node's GPUs are known (a bus ID not among them is another node's
// log and names no GPU here), else by NCCL's own device numbers.
func ncclGPUsOf(s *nccl.Summary, gpuByBus map[string]int, gpusKnown bool) []sample.NCCLGPU {
	var out []sample.NCCLGPU
	seen := map[int]bool{}
	for _, cm := range s.Comms {
		g := sample.NCCLGPU{GPU: -1, PCIBusID: cm.PCIBusID}
		if idx, ok := gpuByBus[cm.PCIBusID]; ok && cm.PCIBusID != "" {
			g.GPU, g.Matched = idx, true
		} else if !gpusKnown {
			if cm.NVMLDev >= 0 {
				g.GPU = cm.NVMLDev
			} else {
				g.GPU = cm.CudaDev
			}
		}
		if g.GPU < 0 || seen[g.GPU] {
			continue
		}
		seen[g.GPU] = true
		out = append(out, g)
	}
	return out
}

// ncclEnvAllowList are the overrides worth a series: the ones that disable
// or force a path, an algorithm or a NIC. Others stay in the sample.
var ncclEnvAllowList = map[string]bool{
	"NCCL_P2P_DISABLE": true, "NCCL_P2P_LEVEL": true, "NCCL_P2P_USE_CUDA_MEMCPY": true,
	"NCCL_SHM_DISABLE": true, "NCCL_IB_DISABLE": true, "NCCL_IB_HCA": true,
	"NCCL_NET": true, "NCCL_NET_PLUGIN": true, "NCCL_NET_GDR_LEVEL": true, "NCCL_NET_GDR_READ": true,
	"NCCL_SOCKET_IFNAME": true, "NCCL_NSOCKS_PERTHREAD": true, "NCCL_SOCKET_NTHREADS": true,
	"NCCL_ALGO": true, "NCCL_PROTO": true, "NCCL_NVLS_ENABLE": true, "NCCL_CUMEM_ENABLE": true,
	"NCCL_COLLNET_ENABLE": true, "NCCL_CROSS_NIC": true, "NCCL_IGNORE_CPU_AFFINITY": true,
	"NCCL_BUFFSIZE": true, "NCCL_MIN_NCHANNELS": true, "NCCL_MAX_NCHANNELS": true,
}

const ncclGPUHelp = " gpu is the GPU whose PCI bus ID the process's NCCL init line names (NCCL's nvmlDev, or cudaDev, when this node's GPU list is unavailable); per GPU the process that initialised last is shown."

var (
	ncclTransportDesc = ncclDesc("transport_info",
		"A transport class (P2P, SHM, NET/Socket, NET/IB, NET/IB+GDRDMA, NET/other, NET/other+GDRDMA, COLLNET, NVLS) the GPU's NCCL connections use, from the NCCL_DEBUG=INFO channel lines."+ncclGPUHelp,
		"gpu", "transport")
	ncclFallbackDesc = ncclDesc("fallback",
		"Whether the GPU's NCCL communication took a slower path than the node offers (1) or not (0), by kind: p2p_disabled, shm_disabled, socket_instead_of_ib, ib_without_gdr, p2p_copy_fallback, net_within_node. Absent when no current log names the GPU."+ncclGPUHelp,
		"gpu", "kind")
	ncclEnvDesc = ncclDesc("env_override_info",
		"An NCCL setting the GPU's process overrode through its environment (NCCL_P2P_DISABLE, NCCL_SHM_DISABLE, NCCL_IB_DISABLE, NCCL_NET, NCCL_SOCKET_IFNAME, NCCL_ALGO, NCCL_PROTO and others that force a path); value cut to 64 bytes."+ncclGPUHelp,
		"gpu", "variable", "value")
	ncclWarningsDesc = ncclDesc("warnings_total",
		"NCCL WARN lines logged by the GPU's process."+ncclGPUHelp, "gpu")
	ncclCommInitsDesc = ncclDesc("communicator_inits_total",
		"NCCL communicators the GPU's process initialised; a count that keeps rising after start-up is communicator churn."+ncclGPUHelp, "gpu")
	ncclVersionDesc = ncclDesc("version_info",
		"An NCCL version (as NCCL prints it, e.g. 2.28.9+cuda13.0) that a current log on this node reports; more than one means ranks run different NCCL builds.",
		"version")
	ncclFilesDesc = ncclDesc("log_files", "NCCL debug logs followed that exist now.")
	ncclLinesDesc = ncclDesc("log_lines_total", "Lines read from NCCL debug logs.")
	ncclBytesDesc = ncclDesc("log_bytes_total", "Bytes read from NCCL debug logs.")
)

func (c *ncclCollector) Metrics(r *sample.NCCL, emit func(prometheus.Metric)) {
	files := 0
	versions := map[string]bool{}
	for i := range r.Files {
		f := &r.Files[i]
		if f.Exists && !f.Retained {
			files++
			for _, v := range f.Versions {
				versions[v] = true
			}
		}
		for j := range f.Processes {
			if f.Processes[j].Current {
				for _, v := range f.Processes[j].Versions {
					versions[v] = true
				}
			}
		}
	}
	emit(engine.NewSeries(ncclFilesDesc, prometheus.GaugeValue, float64(files)))
	emit(engine.NewSeries(ncclLinesDesc, prometheus.CounterValue, float64(r.LinesTotal)))
	emit(engine.NewSeries(ncclBytesDesc, prometheus.CounterValue, float64(r.BytesTotal)))
	for v := range versions {
		emit(engine.NewSeries(ncclVersionDesc, prometheus.GaugeValue, 1, v))
	}
	for _, g := range r.GPUs {
		p := r.Process(g)
		id := strconv.Itoa(g.GPU)
		for _, t := range p.Transports {
			emit(engine.NewSeries(ncclTransportDesc, prometheus.GaugeValue, 1, id, t.Transport))
		}
		taken := map[string]bool{}
		for _, fb := range p.Fallbacks {
			taken[fb.Kind] = true
		}
		for _, kind := range nccl.FallbackKinds {
			emit(engine.NewSeries(ncclFallbackDesc, prometheus.GaugeValue, boolFloat(taken[kind]), id, kind))
		}
		for _, e := range p.Env {
			if ncclEnvAllowList[e.Name] {
				emit(engine.NewSeries(ncclEnvDesc, prometheus.GaugeValue, 1, id, e.Name,
					ncclTruncateLabel(e.Value)))
			}
		}
		emit(engine.NewSeries(ncclWarningsDesc, prometheus.CounterValue, float64(p.WarningsTotal), id))
		emit(engine.NewSeries(ncclCommInitsDesc, prometheus.CounterValue, float64(p.CommInits), id))
	}
}
