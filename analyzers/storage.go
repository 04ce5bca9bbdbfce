package analyzers

import (
	"fmt"
	"math"
	"sort"
	"strings"

	"github.com/gpudiag/gpudiag/sample"
)

// Storage and the input pipeline's filesystem (seed-001 rows 1–3, 9–11,
// 13 and GDS §5.4): where each GPU's data comes from, and, when a GPU is
// bound by storage reads, what about that path slows it.

// StorageInput is what the storage checks read: filled by
// diagnose.storageEvidence from the dataset, cpu and diskstats collectors,
// then told by Analyze which GPUs wait on storage (WithVerdicts).
type StorageInput struct {
	GPUs []GPUStorage
	// NFS holds each NFS mount the GPUs read from, its newest READ rates.
	NFS []NFSRead
	// NodeRefaultsPerSecond is /proc/vmstat workingset_refault_file per
	// second over the span, NaN when not measured.
	NodeRefaultsPerSecond float64
	// GDS is nil when the nvidia-fs driver is not loaded; its increases
	// are NaN when fewer than two readings cover the window.
	GDS *GDSWindow
	// StorageBound says, per GPU, whether its verdict is io/storage_read.
	StorageBound map[int]bool
	// Neighbours are the cgroups beside the GPUs' that feel memory or I/O
	// pressure (the dataset collector's newest scan).
	Neighbours []sample.CgroupNeighbour
	// NodeDisks are the node's disks in diskstats' newest reading.
	NodeDisks []sample.Disk
}

// GPUStorage is one GPU's data path.
type GPUStorage struct {
	GPU    int
	Mounts []sample.DatasetMount
	// CgroupRefaultsPerSecond is the GPU's memory cgroup's file refaults
	// per second, NaN when not measured; CgroupLimitBytes 0 when unlimited.
	CgroupRefaultsPerSecond float64
	CgroupLimitBytes        float64
	CgroupCurrentBytes      float64
	// CgroupPath is the GPU's first process's cgroup, CgroupPressure what
	// its tasks stall on (nil shares: unknown).
	CgroupPath     string
	CgroupPressure sample.CgroupPressure
	// Disk is the disk the GPU's processes wait on (eBPF), else the disk
	// under the mount holding most of their files; Queue its settings and
	// Rates its newest interval, nil when unknown.
	Disk  string
	Queue *sample.DiskQueue
	Rates *sample.DiskRates
}

// NFSRead is one NFS mount's READ statistics over its newest interval.
type NFSRead struct {
	MountPoint, Server string
	RSize              uint64
	OpsPerSecond       float64
	BytesPerSecond     float64
	RTTSeconds         float64
	ExecuteSeconds     float64
}

// GDSWindow is the nvidia-fs driver's activity over the window.
type GDSWindow struct {
	ReadsIncrease, ErrorsIncrease float64
}

// WithVerdicts returns a copy of s that knows which GPUs are storage-bound.
func (s *StorageInput) WithVerdicts(gpus []GPUVerdict) *StorageInput {
	if s == nil {
		return nil
	}
	c := *s
	c.StorageBound = map[int]bool{}
	for _, g := range gpus {
		c.StorageBound[g.GPU] = g.Class == ClassIO && g.SubKind == SubStorageRead
	}
	return &c
}

const (
	// nfsSlowReadSeconds: mean RTT of an NFS READ at which the server (or
	// the path to it) is the bound. A 1 MiB READ is 0.08 ms on the wire at
	// 100 Gb/s and 0.34 ms at 25 Gb/s; a server answering from its cache
	// or NVMe replies in 1–2 ms. 10 ms is a disk seek or a queue on the
	// server: one stream then reads at most ~100 MB/s at rsize 1 MiB, half
	// the 200 MB/s per GPU the seed (001 §5.1) quotes to keep a GPU busy.
	nfsSlowReadSeconds = 0.010
	// nfsMinReadOps: READs per second below which an RTT mean is noise.
	nfsMinReadOps = 10
	// nfsGoodRSize: the seed's rsize (001 §5.6, row 10).
	nfsGoodRSize = 1 << 20
	// refaultBytesPerSecond: page-cache refaults (4 KiB pages) marking a
	// dataset that does not fit: 100 MiB/s read back soon after eviction is
	// half the 200 MB/s one GPU consumes (seed-001 §5.1), so storage reads
	// the same bytes again within an epoch instead of serving them from RAM.
	refaultBytesPerSecond = 100 << 20
	// cgroupFullRatio: memory.current over memory.max at which the
	// container's limit, not the node's RAM, evicts the page cache.
	cgroupFullRatio = 0.9
	// readAheadMinBytes: the kernel's default read_ahead_kb (128) that the
	// seed (001 §5.3, row 2) says to raise to "a few MB" for streaming.
	readAheadMinBytes = 128 << 10
	// readAheadSequentialBytes: mean read request size at which the reads
	// fill the read-ahead window: a sequential stream (seed row 2).
	readAheadSequentialBytes = 128 << 10
	// queueFullRatio: mean queue depth over nr_requests at which the
	// request budget, not the device, caps the outstanding I/O (seed row 3).
	queueFullRatio = 0.9
	// smallReadBytes: mean read request size below which a disk serves
	// small random reads, not a stream (seed-001 row 5: "avg read <64 KB +
	// high IOPS + GPU starving"; "1 MB chunks will yield better throughput
	// than 4 KB chunks"). smallReadMinIOPS: the reads per second from which
	// they are many; the seed gives no number, and a hundred 64 KiB reads
	// a second (6 MB/s) starve no GPU on their own.
	smallReadBytes   = 64 << 10
	smallReadMinIOPS = 100
	// neighbourIOPressure, neighbourMemoryPressure: the share of 10 s
	// ("some avg10") that both the GPU's cgroup and a group beside it stall
	// on I/O or memory for their contention to be a noisy neighbour's. I/O:
	// the node-level mark of an I/O-starved node (Thresholds.IOPressure's
	// default). Memory: seeds-000-003 row 3 proposes PSI memory full over
	// 1% with swapping; a tenth of the time stalled is well past that and
	// needs no swap reading.
	neighbourIOPressure     = 0.2
	neighbourMemoryPressure = 0.1
	// overlayMinFiles: open files on the container's overlay, with none
	// more on any volume, from which the data is read through the overlay.
	overlayMinFiles = 4
)

// generalNetworkFS says whether a mount is a general-purpose network
// filesystem, the kind dataset_on_network_fs is about: NFS, SMB/CIFS,
// 9p, GlusterFS, and FUSE clients (object stores through s3fs, gcsfuse,
// blobfuse; FUSE also rules out GPUDirect Storage, seed-001 row 26). One
// server, or an HTTP object store, serves every reader (seed-001 row 11:
// NFS "only for modest scales such as a few nodes"). Parallel filesystems
// (Lustre, GPFS / Storage Scale, WekaFS, BeeGFS, CephFS) are what the
// seed recommends instead: a dataset there is no finding, and a GPU bound
// by them is named by the storage-bound verdict. fuseblk is a local disk
// through FUSE (ntfs-3g, exfat).
func generalNetworkFS(m sample.DatasetMount) bool {
	switch m.FSType {
	case "nfs", "nfs4", "cifs", "smb3", "9p", "glusterfs":
		return true
	}
	return strings.HasPrefix(m.FSType, "fuse.")
}

// auditStorage runs the storage checks.
func auditStorage(a AuditInput) []Finding {
	s := a.Storage
	if s == nil {
		return nil
	}
	var out []Finding
	anyBound := false
	for _, b := range s.StorageBound {
		anyBound = anyBound || b
	}
	nfsByMount := map[string]NFSRead{}
	for _, n := range s.NFS {
		nfsByMount[n.MountPoint] = n
	}
	nfsBound := map[string]bool{} // NFS mounts an io-bound GPU reads from
	for i := range s.GPUs {
		g := &s.GPUs[i]
		idx := g.GPU
		bound := s.StorageBound[idx]
		f := func(check string, sev Severity, device, summary, fix string, ev ...Evidence) {
			out = append(out, Finding{Check: check, Severity: sev, GPU: &idx, Device: device, Summary: summary, Fix: fix, Evidence: ev})
		}
		boundNote := ""
		if bound {
			boundNote = " while the GPU waits on storage reads"
		}
		overlayFiles, volumeFiles := 0, 0
		for _, m := range g.Mounts {
			files := Evidence{Signal: "dataset_open_files", Value: float64(m.Files), Unit: "files", Op: "info"}
			switch {
			case m.FSType == "overlay":
				overlayFiles += m.Files
			case m.Disk != "" || m.Network():
				volumeFiles += m.Files
			}
			if dataFiles := m.Files - m.WrittenFiles; dataFiles > 0 && generalNetworkFS(m) {
				files.Value = float64(dataFiles)
				sev := SeverityInfo
				if bound {
					sev = SeverityWarning
					if strings.HasPrefix(m.FSType, "nfs") {
						nfsBound[m.MountPoint] = true
					}
				}
				summary := fmt.Sprintf("the GPU's processes read %d file(s) from %s, a %s network filesystem (%s)%s",
					dataFiles, m.MountPoint, m.FSType, m.Source, boundNote)
				if n, ok := nfsByMount[m.MountPoint]; ok && n.RSize > 0 && n.RSize < nfsGoodRSize {
					summary += fmt.Sprintf("; rsize is %d KiB", n.RSize>>10)
					files = Evidence{Signal: "nfs_rsize_bytes", Value: float64(n.RSize), Unit: "B", Op: "<", Threshold: nfsGoodRSize}
				}
				f("dataset_on_network_fs", sev, m.MountPoint, summary,
					"stage the dataset on local NVMe (or a node-local cache) before the job, or shard it per node; for NFS mount with rsize=1048576,noatime,actimeo=60,lookupcache=pos and several servers; a parallel filesystem (Lustre, WekaFS) scales where one NFS server does not",
					files)
			}
			if atimeWrites(m) && (bound || !m.HasOption("relatime")) {
				mode := "strictatime"
				if m.HasOption("relatime") {
					mode = "relatime"
				}
				f("dataset_atime", SeverityInfo, m.MountPoint,
					fmt.Sprintf("the dataset mount %s (%s) updates access times (%s): reading a file writes its inode%s", m.MountPoint, m.FSType, mode, boundNote),
					"remount the dataset noatime (mount -o remount,noatime, or in fstab / the volume's mountOptions); a read-only mount (ro) writes no access times")
			}
		}
		if overlayFiles >= overlayMinFiles && overlayFiles > volumeFiles {
			f("dataset_overlay", SeverityInfo, "/",
				fmt.Sprintf("%d of the GPU's open files are read through the container's overlay filesystem, %d from volumes: the data ships in the image or was written into the container", overlayFiles, volumeFiles),
				"mount the dataset as a volume (hostPath, a local PV, or the storage's CSI driver) instead of baking it into the image: overlay lookups cross every layer and its copy-up doubles writes",
				Evidence{Signal: "overlay_open_files", Value: float64(overlayFiles), Unit: "files", Op: ">=", Threshold: overlayMinFiles})
		}
		if bound {
			out = append(out, auditBlockQueue(idx, g)...)
			out = append(out, smallReads(idx, g)...)
			out = append(out, singleDisk(idx, g, s.NodeDisks)...)
		}
		if bound && !math.IsNaN(g.CgroupRefaultsPerSecond) && g.CgroupRefaultsPerSecond*4096 >= refaultBytesPerSecond {
			pf := pageCacheThrash(g.CgroupRefaultsPerSecond, "the GPU's container")
			pf.GPU = &idx
			if g.CgroupLimitBytes > 0 && g.CgroupCurrentBytes >= cgroupFullRatio*g.CgroupLimitBytes {
				pf.Summary += fmt.Sprintf("; the container uses %.1f of its %.1f GiB memory limit, so the limit evicts the page cache",
					g.CgroupCurrentBytes/(1<<30), g.CgroupLimitBytes/(1<<30))
				pf.Evidence = append(pf.Evidence, Evidence{Signal: "cgroup_memory_used_ratio", Value: round(g.CgroupCurrentBytes / g.CgroupLimitBytes), Unit: "ratio", Op: ">=", Threshold: cgroupFullRatio})
				pf.Fix = "raise the container's memory limit to hold the dataset (page cache counts against it), or stream it with direct I/O (O_DIRECT, GDS) and a larger prefetch instead of relying on the cache"
			}
			out = append(out, pf)
		}
	}
	if anyBound && !math.IsNaN(s.NodeRefaultsPerSecond) && s.NodeRefaultsPerSecond*4096 >= refaultBytesPerSecond {
		out = append(out, pageCacheThrash(s.NodeRefaultsPerSecond, "the node"))
	}
	out = append(out, noisyNeighbours(s)...)
	out = append(out, nfsSlowReads(s, nfsBound)...)
	out = append(out, gdsFindings(s, anyBound)...)
	return out
}

// nfsSlowReads reports the NFS mounts that GPUs waiting on storage read
// from (nfsBound) whose READs are slow on the wire.
func nfsSlowReads(s *StorageInput, nfsBound map[string]bool) []Finding {
	var out []Finding
	for _, n := range s.NFS {
		if !nfsBound[n.MountPoint] || n.OpsPerSecond < nfsMinReadOps || n.RTTSeconds < nfsSlowReadSeconds {
			continue
		}
		f := Finding{Check: "nfs_slow_reads", Severity: SeverityWarning, Device: n.MountPoint,
			Summary: fmt.Sprintf("NFS READs from %s (%s) take %.1f ms each on the wire (%.1f ms with the client's queue) at %.0f READ/s, %.0f MB/s, while GPUs wait on storage",
				n.MountPoint, n.Server, n.RTTSeconds*1e3, n.ExecuteSeconds*1e3, n.OpsPerSecond, n.BytesPerSecond/1e6),
			Evidence: []Evidence{{Signal: "nfs_read_rtt_seconds", Value: round(n.RTTSeconds), Unit: "s", Op: ">=", Threshold: nfsSlowReadSeconds},
				{Signal: "nfs_read_ops_per_second", Value: round(n.OpsPerSecond), Op: "info"}},
			Fix: "the NFS server or the network to it is the bound: compare the client NIC's throughput with its line rate (at line rate, the link is the limit); otherwise spread the dataset over several servers, serve it from NVMe, or move to a parallel filesystem; stage hot shards on local NVMe"}
		if n.RSize > 0 && n.RSize < nfsGoodRSize {
			f.Summary += fmt.Sprintf("; rsize is %d KiB", n.RSize>>10)
			f.Evidence = append(f.Evidence, Evidence{Signal: "nfs_rsize_bytes", Value: float64(n.RSize), Unit: "B", Op: "<", Threshold: nfsGoodRSize})
			f.Fix = "remount with rsize=1048576 (fewer, larger READs); " + f.Fix
		}
		out = append(out, f)
	}
	return out
}

// gdsFindings reports GPUDirect Storage erring, or loaded and unused while
// GPUs wait on storage (anyBound).
func gdsFindings(s *StorageInput, anyBound bool) []Finding {
	var out []Finding
	if g := s.GDS; g != nil {
		if g.ErrorsIncrease > 0 {
			out = append(out, Finding{Check: "gds_errors", Severity: SeverityWarning,
				Summary:  fmt.Sprintf("the GPUDirect Storage driver (nvidia-fs) counted %.0f error(s) in the window: cuFile falls back to the slower compatibility path or fails the read", g.ErrorsIncrease),
				Evidence: []Evidence{{Signal: "gds_errors", Value: g.ErrorsIncrease, Op: ">", Threshold: 0}},
				Fix:      "run gdscheck -p to see which filesystems and devices support GDS, check the kernel log (dmesg | grep nvidia-fs) and cufile.log; DMA map errors point to IOMMU settings or BAR1 exhaustion (nvidia-smi -q -d MEMORY)"})
		}
		if anyBound && g.ReadsIncrease == 0 {
			out = append(out, Finding{Check: "gds_available_unused", Severity: SeverityInfo,
				Summary:  "the GPUDirect Storage driver (nvidia-fs) is loaded but made no reads in the window while GPUs wait on storage: the data goes through the page cache and a CPU copy",
				Evidence: []Evidence{{Signal: "gds_reads", Value: 0, Op: "<=", Threshold: 0}},
				Fix:      "read through cuFile (kvikio, DALI's GDS reader, torch's GDS storage) from a GDS-capable filesystem (ext4/XFS on local NVMe, NVMe-oF, supported parallel filesystems); gdsio -x 0 against -x 2 shows the gain on this node"})
		}
	}
	return out
}

// atimeWrites says whether reading files of the mount writes access
// times: a writable local or network filesystem without noatime.
func atimeWrites(m sample.DatasetMount) bool {
	if m.HasOption("noatime") || m.HasOption("ro") {
		return false
	}
	return m.Disk != "" || m.Network()
}

func pageCacheThrash(refaults float64, where string) Finding {
	return Finding{Check: "page_cache_thrash", Severity: SeverityWarning,
		Summary: fmt.Sprintf("the page cache of %s reads back %.0f MiB/s it evicted shortly before, while GPUs wait on storage: the dataset does not fit in the cache, so every epoch reads it from storage again",
			where, refaults*4096/(1<<20)),
		Evidence: []Evidence{{Signal: "page_cache_refaults_per_second", Value: round(refaults), Unit: "pages/s", Op: ">=", Threshold: refaultBytesPerSecond / 4096}},
		Fix:      "if the dataset nearly fits, give the node (or container) the memory to hold it; otherwise stream it with large sequential reads or direct I/O (O_DIRECT, GDS) and shard it so each node reads its own part"}
}

// auditBlockQueue judges the settings of the disk a storage-bound GPU waits on.
func auditBlockQueue(idx int, g *GPUStorage) []Finding {
	if g.Queue == nil || g.Disk == "" {
		return nil
	}
	q := g.Queue
	var why []string
	var ev []Evidence
	sev := SeverityInfo
	var fixes []string
	if g.Rates != nil && q.ReadAheadBytes > 0 && q.ReadAheadBytes <= readAheadMinBytes && g.Rates.AverageReadBytes >= readAheadSequentialBytes {
		sev = SeverityWarning
		why = append(why, fmt.Sprintf("read_ahead_kb is %d while reads average %.0f KiB (a sequential stream)", q.ReadAheadBytes>>10, g.Rates.AverageReadBytes/1024))
		ev = append(ev, Evidence{Signal: "read_ahead_bytes", Value: float64(q.ReadAheadBytes), Unit: "B", Op: "<=", Threshold: readAheadMinBytes},
			Evidence{Signal: "disk_average_read_bytes", Value: round(g.Rates.AverageReadBytes), Unit: "B", Op: ">=", Threshold: readAheadSequentialBytes})
		fixes = append(fixes, fmt.Sprintf("raise read-ahead to a few MiB (blockdev --setra 8192 /dev/%s, or echo 4096 > /sys/block/%s/queue/read_ahead_kb, made permanent with a udev rule)", g.Disk, g.Disk))
	}
	if g.Rates != nil && q.NRRequests > 0 && g.Rates.AverageQueueDepth >= queueFullRatio*float64(q.NRRequests) {
		sev = SeverityWarning
		why = append(why, fmt.Sprintf("the queue holds %.0f requests on average of nr_requests %d", g.Rates.AverageQueueDepth, q.NRRequests))
		ev = append(ev, Evidence{Signal: "disk_average_queue_depth", Value: round(g.Rates.AverageQueueDepth), Unit: "requests", Op: ">=", Threshold: queueFullRatio * float64(q.NRRequests)})
		fixes = append(fixes, fmt.Sprintf("raise /sys/block/%s/queue/nr_requests (the request budget caps the outstanding I/O), or spread the reads over more disks", g.Disk))
	}
	if !q.Rotational && (q.Scheduler == "bfq" || q.Scheduler == "kyber") {
		why = append(why, "the I/O scheduler is "+q.Scheduler+" on a solid-state disk")
		fixes = append(fixes, fmt.Sprintf("use none or mq-deadline (echo none > /sys/block/%s/queue/scheduler)", g.Disk))
	}
	if len(why) == 0 {
		return nil
	}
	sort.Strings(why)
	return []Finding{{Check: "block_queue_settings", Severity: sev, GPU: &idx, Device: g.Disk,
		Summary:  fmt.Sprintf("the GPU waits on reads from %s and its queue settings hold them back: %s", g.Disk, strings.Join(why, "; ")),
		Evidence: ev, Fix: strings.Join(fixes, "; ")}}
}

// noisyNeighbours reports a GPU whose cgroup stalls on I/O or memory while
// groups beside it (other pods, other slices) stall on the same resource:
// the GPU's processes feel a contention they share with a neighbour
// (seeds-000-003 rows 3 and 36: a greedy container with no memory limit,
// pods without I/O isolation). Host-wide pressure alone is no GPU's
// problem unless its own processes feel it, so the GPU's own group must
// be above the mark too. A warning: the job slows, and the fix (limits,
// io.max or io.weight, moving a pod) is the cluster owner's by day.
func noisyNeighbours(s *StorageInput) []Finding {
	var out []Finding
	for i := range s.GPUs {
		g := &s.GPUs[i]
		idx := g.GPU
		for _, r := range []struct {
			kind, what string
			limit      float64
			of         func(sample.CgroupPressure) *float64
			fix        string
		}{
			{"io", "I/O", neighbourIOPressure, func(p sample.CgroupPressure) *float64 { return p.IOSome },
				"give the GPU job's pod or the neighbours I/O limits (cgroup v2 io.max, or io.weight with the BFQ or io.cost controller; Kubernetes has no native I/O isolation), move the I/O-heavy neighbour to another node, or put the dataset on a disk of its own"},
			{"memory", "memory", neighbourMemoryPressure, func(p sample.CgroupPressure) *float64 { return p.MemorySome },
				"give every pod on the node a memory limit (requests and limits; memory.max), so that one without cannot push the node into reclaim, or move the greedy neighbour away"},
		} {
			own := r.of(g.CgroupPressure)
			if own == nil || *own < r.limit {
				continue
			}
			var names []string
			top := 0.0
			for _, n := range s.Neighbours {
				v := r.of(n.Pressure)
				if v == nil || *v < r.limit {
					continue
				}
				names = append(names, fmt.Sprintf("%s (%.0f%%)", n.Path, *v*100))
				top = max(top, *v)
			}
			if len(names) == 0 {
				continue
			}
			more := ""
			if len(names) > 3 {
				more = fmt.Sprintf(" and %d more", len(names)-3)
				names = names[:3]
			}
			// The neighbours' cgroups are named in the summary only: a
			// pod's cgroup holds its UID, an identity that never goes on
			// a label (Finding.Device), and would make a series per
			// neighbour.
			out = append(out, Finding{Check: "noisy_neighbour", Kind: r.kind, Severity: SeverityWarning, GPU: &idx,
				Summary: fmt.Sprintf("the GPU's processes (cgroup %s) stall on %s %.0f%% of the time, and so do groups beside them: %s%s; they contend for the node's %s",
					g.CgroupPath, r.what, *own*100, strings.Join(names, ", "), more, r.what),
				Evidence: []Evidence{
					{Signal: "cgroup_" + r.kind + "_pressure_some", Value: round(*own), Unit: "ratio", Op: ">=", Threshold: r.limit},
					{Signal: "neighbour_" + r.kind + "_pressure_some", Value: round(top), Unit: "ratio", Op: ">=", Threshold: r.limit},
				},
				Fix: r.fix})
		}
	}
	return out
}

// singleDiskIdleRatio: a sibling disk reading less than this share of the
// dataset disk's bytes is idle beside it (seed-001 row 6: "#4 true on one
// NVMe while sibling NVMe idle").
const singleDiskIdleRatio = 0.01

// singleDisk reports a storage-bound GPU that reads from one NVMe drive
// while other NVMe drives of the node sit idle: the dataset is not striped
// (RAID 0, "especially if a single disk cannot saturate your GPUs", seed-001
// row 6) and one drive's bandwidth caps the input pipeline. A striped array
// (md, a device-mapper volume) is not an nvme drive and raises nothing.
// Info: the idle drives may be the system's or another tenant's, which the
// node does not say; the storage-bound verdict is what warns.
func singleDisk(idx int, g *GPUStorage, disks []sample.Disk) []Finding {
	if !strings.HasPrefix(g.Disk, "nvme") || g.Rates == nil || g.Rates.ReadBytesPerSecond <= 0 {
		return nil
	}
	var idle []string
	for i := range disks {
		d := &disks[i]
		if d.Name == g.Disk || !strings.HasPrefix(d.Name, "nvme") || d.Rates == nil || (d.Queue != nil && d.Queue.Rotational) {
			continue
		}
		if d.Rates.ReadBytesPerSecond < singleDiskIdleRatio*g.Rates.ReadBytesPerSecond {
			idle = append(idle, d.Name)
		}
	}
	if len(idle) == 0 {
		return nil
	}
	sort.Strings(idle)
	return []Finding{{Check: "dataset_single_disk", Severity: SeverityInfo, GPU: &idx, Device: g.Disk,
		Summary: fmt.Sprintf("the GPU waits on reads from %s alone (%.0f MB/s) while %d other NVMe drive(s) of the node idle (%s): the dataset is not striped, and one drive's bandwidth caps the input pipeline",
			g.Disk, g.Rates.ReadBytesPerSecond/1e6, len(idle), strings.Join(idle, ", ")),
		Evidence: []Evidence{{Signal: "idle_nvme_drives", Value: float64(len(idle)), Unit: "drives", Op: ">", Threshold: 0}},
		Fix:      "stripe the data drives (mdadm --create --level=0 over the NVMe drives, or an LVM striped volume) and put the dataset on the array, or shard the dataset across the drives; leave out a drive that holds the system"}}
}

// smallReads reports a storage-bound GPU whose disk serves many small
// reads: a dataset of many small files, or random reads of small records,
// which the disk answers at a fraction of its streaming rate (seed-001
// row 5). A warning: the GPU waits now, and the fix is the dataset's
// format, for its owner by day.
func smallReads(idx int, g *GPUStorage) []Finding {
	if g.Disk == "" || g.Rates == nil || g.Rates.AverageReadBytes <= 0 ||
		g.Rates.AverageReadBytes >= smallReadBytes || g.Rates.ReadsPerSecond < smallReadMinIOPS {
		return nil
	}
	r := g.Rates
	return []Finding{{Check: "dataset_small_reads", Severity: SeverityWarning, GPU: &idx, Device: g.Disk,
		Summary: fmt.Sprintf("the GPU waits on reads from %s, which average %.1f KiB at %.0f reads/s (%.1f MB/s): small random reads or a dataset of many small files, served at a fraction of the disk's streaming rate",
			g.Disk, r.AverageReadBytes/1024, r.ReadsPerSecond, r.ReadBytesPerSecond/1e6),
		Evidence: []Evidence{
			{Signal: "disk_average_read_bytes", Value: round(r.AverageReadBytes), Unit: "B", Op: "<", Threshold: smallReadBytes},
			{Signal: "disk_reads_per_second", Value: round(r.ReadsPerSecond), Unit: "reads/s", Op: ">=", Threshold: smallReadMinIOPS},
		},
		Fix: "pack the samples into a few large files (WebDataset tar shards, TFRecord, Parquet, Arrow) read sequentially in 1 MiB or larger chunks; if the access must stay random, read with many parallel pread() threads or io_uring so the disk's queue stays deep, or stage the dataset in RAM (tmpfs) when it fits"}}
}

// StorageNote describes a GPU's data path for the storage_read verdict's
// summary: the filesystem its files come from and the disk's settings.
func StorageNote(g GPUStorage) string {
	var parts []string
	for _, m := range g.Mounts {
		if m.FSType == "overlay" || m.Disk != "" || m.Network() {
			parts = append(parts, fmt.Sprintf("data on %s (%s, %s)", m.MountPoint, m.FSType, m.Source))
			break
		}
	}
	if g.Disk != "" && g.Queue != nil {
		q := g.Queue
		s := fmt.Sprintf("%s: read_ahead_kb %d", g.Disk, q.ReadAheadBytes>>10)
		if q.Scheduler != "" {
			s += ", scheduler " + q.Scheduler
		}
		if q.NRRequests > 0 {
			s += fmt.Sprintf(", nr_requests %d", q.NRRequests)
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, "; ")
}
