package analyzers

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/gpudiag/gpudiag/sample"
)

var (
	nfsData = sample.DatasetMount{MountPoint: "/data", FSType: "nfs4", Source: "filer01:/export/imagenet",
		Options: []string{"relatime", "rw"}, Files: 12}
	localScratch = sample.DatasetMount{MountPoint: "/scratch", FSType: "ext4", Source: "/dev/nvme0n1p1",
		Options: []string{"rw"}, Disk: "nvme0n1", Files: 40}
	overlayRoot = sample.DatasetMount{MountPoint: "/", FSType: "overlay", Source: "overlay", Options: []string{"relatime", "rw"}, Files: 30}
)

// storageGPU is GPU 0 reading from mounts, with nothing else measured.
func storageGPU(mounts ...sample.DatasetMount) GPUStorage {
	nan := math.NaN()
	return GPUStorage{GPU: 0, Mounts: mounts, CgroupRefaultsPerSecond: nan, CgroupLimitBytes: 0, CgroupCurrentBytes: nan}
}

func findCheck(fs []Finding, check string) *Finding {
	for i := range fs {
		if fs[i].Check == check {
			return &fs[i]
		}
	}
	return nil
}

func TestAuditStorage(t *testing.T) {
	bound := map[int]bool{0: true}
	seqDisk := func(g GPUStorage) GPUStorage {
		g.Disk = "nvme0n1"
		g.Queue = &sample.DiskQueue{Scheduler: "none", ReadAheadBytes: 128 << 10, NRRequests: 1023}
		g.Rates = &sample.DiskRates{AverageReadBytes: 512 << 10, AverageQueueDepth: 3}
		return g
	}
	thrash := func(g GPUStorage) GPUStorage {
		g.CgroupRefaultsPerSecond = 60000 // 234 MiB/s
		g.CgroupLimitBytes, g.CgroupCurrentBytes = 16<<30, 15.9*(1<<30)
		return g
	}
	for _, tc := range []struct {
		name  string
		in    StorageInput
		check string
		sev   Severity
		has   string // in the summary
		none  bool   // the check must not fire
	}{
		{name: "NFS dataset, GPU busy", in: StorageInput{GPUs: []GPUStorage{storageGPU(nfsData)}, NodeRefaultsPerSecond: math.NaN()},
			check: "dataset_on_network_fs", sev: SeverityInfo, has: "nfs4 network filesystem"},
		{name: "NFS dataset, GPU storage-bound", in: StorageInput{GPUs: []GPUStorage{storageGPU(nfsData)}, NodeRefaultsPerSecond: math.NaN(), StorageBound: bound},
			check: "dataset_on_network_fs", sev: SeverityWarning, has: "waits on storage"},
		{name: "FUSE object store", in: StorageInput{GPUs: []GPUStorage{storageGPU(sample.DatasetMount{MountPoint: "/s3", FSType: "fuse.s3fs", Source: "s3fs", Files: 3})}, NodeRefaultsPerSecond: math.NaN()},
			check: "dataset_on_network_fs", sev: SeverityInfo, has: "fuse.s3fs"},
		// Parallel filesystems are what the storage seed recommends instead
		// of NFS: no finding, even storage-bound (the storage-bound verdict
		// still names them).
		{name: "Lustre dataset", in: StorageInput{GPUs: []GPUStorage{storageGPU(sample.DatasetMount{MountPoint: "/lustre", FSType: "lustre", Source: "10.0.0.1@o2ib:/fs", Files: 64})}, NodeRefaultsPerSecond: math.NaN(), StorageBound: bound},
			check: "dataset_on_network_fs", none: true},
		{name: "GPFS dataset", in: StorageInput{GPUs: []GPUStorage{storageGPU(sample.DatasetMount{MountPoint: "/gpfs", FSType: "gpfs", Source: "gpfs0", Files: 64})}, NodeRefaultsPerSecond: math.NaN()},
			check: "dataset_on_network_fs", none: true},
		{name: "WekaFS dataset", in: StorageInput{GPUs: []GPUStorage{storageGPU(sample.DatasetMount{MountPoint: "/mnt/weka", FSType: "wekafs", Source: "default", Files: 64})}, NodeRefaultsPerSecond: math.NaN()},
			check: "dataset_on_network_fs", none: true},
		{name: "BeeGFS dataset", in: StorageInput{GPUs: []GPUStorage{storageGPU(sample.DatasetMount{MountPoint: "/mnt/beegfs", FSType: "beegfs", Source: "beegfs_nodev", Files: 64})}, NodeRefaultsPerSecond: math.NaN()},
			check: "dataset_on_network_fs", none: true},
		// A log (or a checkpoint) open for writing in an NFS home is no
		// dataset read over the network.
		{name: "log in an NFS home", in: StorageInput{GPUs: []GPUStorage{storageGPU(localScratch, sample.DatasetMount{MountPoint: "/home", FSType: "nfs4", Source: "filer02:/home", Files: 1, WrittenFiles: 1})}, NodeRefaultsPerSecond: math.NaN()},
			check: "dataset_on_network_fs", none: true},
		{name: "NFS dataset beside its log", in: StorageInput{GPUs: []GPUStorage{storageGPU(sample.DatasetMount{MountPoint: "/home", FSType: "nfs4", Source: "filer02:/home", Files: 5, WrittenFiles: 1})}, NodeRefaultsPerSecond: math.NaN()},
			check: "dataset_on_network_fs", sev: SeverityInfo, has: "read 4 file(s) from /home"},
		{name: "SMB dataset", in: StorageInput{GPUs: []GPUStorage{storageGPU(sample.DatasetMount{MountPoint: "/smb", FSType: "cifs", Source: "//nas/data", Files: 3})}, NodeRefaultsPerSecond: math.NaN()},
			check: "dataset_on_network_fs", sev: SeverityInfo, has: "cifs"},
		{name: "slow NFS READs", in: StorageInput{GPUs: []GPUStorage{storageGPU(nfsData)}, NodeRefaultsPerSecond: math.NaN(), StorageBound: bound,
			NFS: []NFSRead{{MountPoint: "/data", Server: "filer01:/export/imagenet", RSize: 256 << 10, OpsPerSecond: 400, BytesPerSecond: 100e6, RTTSeconds: 0.025, ExecuteSeconds: 0.03}}},
			check: "nfs_slow_reads", sev: SeverityWarning, has: "rsize is 256 KiB"},
		{name: "fast NFS READs", in: StorageInput{GPUs: []GPUStorage{storageGPU(nfsData)}, NodeRefaultsPerSecond: math.NaN(), StorageBound: bound,
			NFS: []NFSRead{{MountPoint: "/data", RSize: 1 << 20, OpsPerSecond: 400, RTTSeconds: 0.002}}},
			check: "nfs_slow_reads", none: true},
		{name: "slow NFS READs, GPU not storage-bound", in: StorageInput{GPUs: []GPUStorage{storageGPU(nfsData)}, NodeRefaultsPerSecond: math.NaN(),
			NFS: []NFSRead{{MountPoint: "/data", OpsPerSecond: 400, RTTSeconds: 0.05}}},
			check: "nfs_slow_reads", none: true},
		{name: "strictatime local disk", in: StorageInput{GPUs: []GPUStorage{storageGPU(localScratch)}, NodeRefaultsPerSecond: math.NaN()},
			check: "dataset_atime", sev: SeverityInfo, has: "strictatime"},
		{name: "relatime only matters storage-bound", in: StorageInput{GPUs: []GPUStorage{storageGPU(nfsData)}, NodeRefaultsPerSecond: math.NaN()},
			check: "dataset_atime", none: true},
		{name: "relatime, storage-bound", in: StorageInput{GPUs: []GPUStorage{storageGPU(nfsData)}, NodeRefaultsPerSecond: math.NaN(), StorageBound: bound},
			check: "dataset_atime", sev: SeverityInfo, has: "relatime"},
		{name: "data in the image", in: StorageInput{GPUs: []GPUStorage{storageGPU(overlayRoot)}, NodeRefaultsPerSecond: math.NaN()},
			check: "dataset_overlay", sev: SeverityInfo, has: "overlay"},
		{name: "data on a volume, code in the image", in: StorageInput{GPUs: []GPUStorage{storageGPU(overlayRoot, localScratch)}, NodeRefaultsPerSecond: math.NaN()},
			check: "dataset_overlay", none: true},
		{name: "container limit evicts the cache", in: StorageInput{GPUs: []GPUStorage{thrash(storageGPU(nfsData))}, NodeRefaultsPerSecond: math.NaN(), StorageBound: bound},
			check: "page_cache_thrash", sev: SeverityWarning, has: "memory limit"},
		{name: "node cache thrash", in: StorageInput{GPUs: []GPUStorage{storageGPU(localScratch)}, NodeRefaultsPerSecond: 30000, StorageBound: bound},
			check: "page_cache_thrash", sev: SeverityWarning, has: "of the node"},
		{name: "refaults without storage wait", in: StorageInput{GPUs: []GPUStorage{thrash(storageGPU(localScratch))}, NodeRefaultsPerSecond: 30000},
			check: "page_cache_thrash", none: true},
		{name: "small read-ahead on a sequential stream", in: StorageInput{GPUs: []GPUStorage{seqDisk(storageGPU(localScratch))}, NodeRefaultsPerSecond: math.NaN(), StorageBound: bound},
			check: "block_queue_settings", sev: SeverityWarning, has: "read_ahead_kb is 128"},
		{name: "bfq on NVMe", in: StorageInput{GPUs: []GPUStorage{func() GPUStorage {
			g := seqDisk(storageGPU(localScratch))
			g.Queue.Scheduler, g.Queue.ReadAheadBytes = "bfq", 4<<20
			return g
		}()}, NodeRefaultsPerSecond: math.NaN(), StorageBound: bound},
			check: "block_queue_settings", sev: SeverityInfo, has: "bfq"},
		{name: "full request queue", in: StorageInput{GPUs: []GPUStorage{func() GPUStorage {
			g := seqDisk(storageGPU(localScratch))
			g.Queue.ReadAheadBytes, g.Queue.NRRequests, g.Rates.AverageQueueDepth = 4<<20, 64, 63
			return g
		}()}, NodeRefaultsPerSecond: math.NaN(), StorageBound: bound},
			check: "block_queue_settings", sev: SeverityWarning, has: "nr_requests 64"},
		{name: "queue settings of a disk nobody waits on", in: StorageInput{GPUs: []GPUStorage{seqDisk(storageGPU(localScratch))}, NodeRefaultsPerSecond: math.NaN()},
			check: "block_queue_settings", none: true},
		{name: "GDS errors", in: StorageInput{NodeRefaultsPerSecond: math.NaN(), GDS: &GDSWindow{ReadsIncrease: 100, ErrorsIncrease: 3}},
			check: "gds_errors", sev: SeverityWarning, has: "3 error"},
		{name: "GDS loaded, unused by a storage-bound job", in: StorageInput{GPUs: []GPUStorage{storageGPU(localScratch)}, NodeRefaultsPerSecond: math.NaN(), StorageBound: bound,
			GDS: &GDSWindow{}}, check: "gds_available_unused", sev: SeverityInfo, has: "page cache"},
		{name: "GDS in use", in: StorageInput{GPUs: []GPUStorage{storageGPU(localScratch)}, NodeRefaultsPerSecond: math.NaN(), StorageBound: bound,
			GDS: &GDSWindow{ReadsIncrease: 5000}}, check: "gds_available_unused", none: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := tc.in
			fs := Audit(AuditInput{Storage: &in})
			f := findCheck(fs, tc.check)
			if tc.none {
				if f != nil {
					t.Fatalf("%s fired: %+v", tc.check, *f)
				}
				return
			}
			if f == nil {
				t.Fatalf("%s did not fire; findings %s", tc.check, checks(fs))
			}
			if f.Severity != tc.sev || !strings.Contains(f.Summary, tc.has) || f.Fix == "" {
				t.Errorf("got %s %q (fix %q); want %s with %q", f.Severity, f.Summary, f.Fix, tc.sev, tc.has)
			}
		})
	}
}

// TestStorageThroughAnalyze: the verdict decides which GPUs are
// storage-bound, and the storage_read summary names the data path.
func TestStorageThroughAnalyze(t *testing.T) {
	w := h200(0.001, 0, 0, 0, 0, 0, 0, 0)
	w.ProcessCPUCores, w.ProcessIOWait = 0.1, 0.5
	g := storageGPU(localScratch)
	g.Disk, g.Queue = "nvme0n1", &sample.DiskQueue{Scheduler: "none", ReadAheadBytes: 128 << 10, NRRequests: 1023}
	g.Rates = &sample.DiskRates{AverageReadBytes: 1 << 20}
	w.StorageNote = StorageNote(g)
	node := NaNNode()
	node.IOPressure = 0.7
	in := Input{Now: time.Unix(0, 0), SpanSeconds: 10, GPUs: []GPUWindow{w}, Node: node,
		Audit: AuditInput{Storage: &StorageInput{GPUs: []GPUStorage{g}, NodeRefaultsPerSecond: math.NaN()}}}
	d := Analyze(in, nil, DefaultThresholds)
	if d.GPUs[0].SubKind != SubStorageRead {
		t.Fatalf("verdict %s/%s; want io/storage_read", d.GPUs[0].Class, d.GPUs[0].SubKind)
	}
	for _, want := range []string{"data on /scratch (ext4, /dev/nvme0n1p1)", "nvme0n1: read_ahead_kb 128, scheduler none, nr_requests 1023"} {
		if !strings.Contains(d.GPUs[0].Summary, want) {
			t.Errorf("summary %q lacks %q", d.GPUs[0].Summary, want)
		}
	}
	if findCheck(d.Findings, "block_queue_settings") == nil {
		t.Errorf("block_queue_settings did not fire on the storage-bound GPU: %s", checks(d.Findings))
	}
	if in.Audit.Storage.StorageBound != nil {
		t.Error("Analyze changed its input")
	}
}

// A storage-bound GPU whose disk serves many small reads reads a dataset of
// small files or small random records; large reads, few reads, or a GPU
// that does not wait on storage are no finding.
func TestAuditDatasetSmallReads(t *testing.T) {
	disk := func(avgRead, iops float64) GPUStorage {
		g := storageGPU(localScratch)
		g.Disk = "nvme0n1"
		g.Rates = &sample.DiskRates{AverageReadBytes: avgRead, ReadsPerSecond: iops, ReadBytesPerSecond: avgRead * iops}
		return g
	}
	bound := map[int]bool{0: true}
	for _, tc := range []struct {
		name    string
		in      StorageInput
		want    string
		summary string
	}{
		{name: "16 KiB reads, storage-bound", in: StorageInput{GPUs: []GPUStorage{disk(16<<10, 20000)}, StorageBound: bound},
			want: "dataset_small_reads:warning", summary: "average 16.0 KiB at 20000 reads/s"},
		{name: "1 MiB reads, storage-bound", in: StorageInput{GPUs: []GPUStorage{disk(1<<20, 3000)}, StorageBound: bound}},
		{name: "a trickle of small reads", in: StorageInput{GPUs: []GPUStorage{disk(4<<10, 50)}, StorageBound: bound}},
		{name: "small reads, GPU not waiting", in: StorageInput{GPUs: []GPUStorage{disk(16<<10, 20000)}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := tc.in
			in.NodeRefaultsPerSecond = math.NaN()
			var got []Finding
			for _, f := range Audit(AuditInput{Storage: &in}) {
				if f.Check == "dataset_small_reads" {
					got = append(got, f)
				}
			}
			if checks(got) != tc.want {
				t.Fatalf("findings %q; want %q", checks(got), tc.want)
			}
			if tc.want != "" && (!strings.Contains(got[0].Summary, tc.summary) || got[0].Device != "nvme0n1" || got[0].GPU == nil) {
				t.Errorf("finding %+v lacks %q", got[0], tc.summary)
			}
		})
	}
}

// A GPU whose cgroup stalls on I/O or memory while a group beside it does
// too shares a contended resource with a noisy neighbour; pressure in a
// neighbour the GPU's processes do not feel, or in the GPU's group alone,
// is no finding.
func TestAuditNoisyNeighbour(t *testing.T) {
	ratio := func(v float64) *float64 { return &v }
	gpu := func(p sample.CgroupPressure) GPUStorage {
		g := storageGPU(localScratch)
		g.CgroupPath, g.CgroupPressure = "/kubepods.slice/kubepods-burstable.slice/pod-train", p
		return g
	}
	backup := sample.CgroupNeighbour{Path: "/kubepods.slice/kubepods-burstable.slice/pod-backup", Pressure: sample.CgroupPressure{IOSome: ratio(0.6)}}
	greedy := sample.CgroupNeighbour{Path: "/kubepods.slice/kubepods-besteffort.slice", Pressure: sample.CgroupPressure{MemorySome: ratio(0.3), IOSome: ratio(0.05)}}
	for _, tc := range []struct {
		name    string
		in      StorageInput
		want    string
		summary string
	}{
		{name: "both stall on I/O", in: StorageInput{GPUs: []GPUStorage{gpu(sample.CgroupPressure{IOSome: ratio(0.35)})}, Neighbours: []sample.CgroupNeighbour{backup, greedy}},
			want: "noisy_neighbour:warning", summary: "stall on I/O 35% of the time, and so do groups beside them: /kubepods.slice/kubepods-burstable.slice/pod-backup (60%)"},
		{name: "both stall on memory", in: StorageInput{GPUs: []GPUStorage{gpu(sample.CgroupPressure{MemorySome: ratio(0.12), IOSome: ratio(0.01)})}, Neighbours: []sample.CgroupNeighbour{backup, greedy}},
			want: "noisy_neighbour:warning", summary: "stall on memory 12% of the time"},
		{name: "the neighbour stalls, the GPU's group does not", in: StorageInput{GPUs: []GPUStorage{gpu(sample.CgroupPressure{IOSome: ratio(0.02), MemorySome: ratio(0)})}, Neighbours: []sample.CgroupNeighbour{backup, greedy}}},
		{name: "the GPU's group stalls alone", in: StorageInput{GPUs: []GPUStorage{gpu(sample.CgroupPressure{IOSome: ratio(0.5)})}, Neighbours: []sample.CgroupNeighbour{greedy}}},
		{name: "pressure unknown", in: StorageInput{GPUs: []GPUStorage{gpu(sample.CgroupPressure{})}, Neighbours: []sample.CgroupNeighbour{backup}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := tc.in
			in.NodeRefaultsPerSecond = math.NaN()
			var got []Finding
			for _, f := range Audit(AuditInput{Storage: &in}) {
				if f.Check == "noisy_neighbour" {
					got = append(got, f)
				}
			}
			if checks(got) != tc.want {
				t.Fatalf("findings %q; want %q", checks(got), tc.want)
			}
			if tc.want != "" && (!strings.Contains(got[0].Summary, tc.summary) || got[0].Fix == "" || got[0].GPU == nil || got[0].Device != "") {
				t.Errorf("finding %+v lacks %q", got[0], tc.summary)
			}
		})
	}
}

// A storage-bound GPU reading from one NVMe drive while sibling NVMe drives
// idle reads an unstriped dataset; a striped array, busy siblings or a GPU
// that does not wait on storage are no finding.
func TestAuditDatasetSingleDisk(t *testing.T) {
	reading := func(name string, bps float64) sample.Disk {
		return sample.Disk{Name: name, Queue: &sample.DiskQueue{}, Rates: &sample.DiskRates{ReadBytesPerSecond: bps}}
	}
	gpu := func(disk string, bps float64) GPUStorage {
		g := storageGPU(localScratch)
		g.Disk, g.Rates = disk, &sample.DiskRates{ReadBytesPerSecond: bps, AverageReadBytes: 1 << 20, ReadsPerSecond: bps / (1 << 20)}
		return g
	}
	bound := map[int]bool{0: true}
	for _, tc := range []struct {
		name, want, summary string
		in                  StorageInput
	}{
		{name: "one drive busy, three idle", in: StorageInput{GPUs: []GPUStorage{gpu("nvme0n1", 3e9)}, StorageBound: bound,
			NodeDisks: []sample.Disk{reading("nvme0n1", 3e9), reading("nvme1n1", 0), reading("nvme2n1", 1e6), reading("nvme3n1", 0), reading("sda", 0)}},
			want: "dataset_single_disk:info", summary: "reads from nvme0n1 alone (3000 MB/s) while 3 other NVMe drive(s) of the node idle (nvme1n1, nvme2n1, nvme3n1)"},
		{name: "a striped array", in: StorageInput{GPUs: []GPUStorage{gpu("md0", 12e9)}, StorageBound: bound,
			NodeDisks: []sample.Disk{reading("md0", 12e9), reading("nvme0n1", 3e9), reading("nvme1n1", 3e9)}}},
		{name: "siblings busy", in: StorageInput{GPUs: []GPUStorage{gpu("nvme0n1", 3e9)}, StorageBound: bound,
			NodeDisks: []sample.Disk{reading("nvme0n1", 3e9), reading("nvme1n1", 2.9e9)}}},
		{name: "not waiting on storage", in: StorageInput{GPUs: []GPUStorage{gpu("nvme0n1", 3e9)},
			NodeDisks: []sample.Disk{reading("nvme0n1", 3e9), reading("nvme1n1", 0)}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := tc.in
			in.NodeRefaultsPerSecond = math.NaN()
			var got []Finding
			for _, f := range Audit(AuditInput{Storage: &in}) {
				if f.Check == "dataset_single_disk" {
					got = append(got, f)
				}
			}
			if checks(got) != tc.want {
				t.Fatalf("findings %q; want %q", checks(got), tc.want)
			}
			if tc.want != "" && !strings.Contains(got[0].Summary, tc.summary) {
				t.Errorf("summary %q lacks %q", got[0].Summary, tc.summary)
			}
		})
	}
}
