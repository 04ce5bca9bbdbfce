package diagnose

import (
	"strings"
	"testing"
	"time"

	"github.com/gpudiag/gpudiag/analyzers"
	"github.com/gpudiag/gpudiag/engine"
	"github.com/gpudiag/gpudiag/sample"
)

// A job on GPU 5 streams a dataset from a local NVMe (eBPF sees its
// processes wait on nvme0n1) whose read-ahead is the kernel's 128 KiB,
// through a container whose memory limit evicts the page cache, on a node
// where GPUDirect Storage is loaded and unused; GPU 6 reads over NFS,
// slowly, and is idle.
func TestStorageEvidence(t *testing.T) {
	w := engine.NewWindow(time.Hour, 64<<20)
	addStarvedGPUs(w, 0, 30, 5)
	for i := 0; i <= 30; i++ {
		n := float64(i)
		put(w, sample.EBPFKey, at(i), &sample.EBPF{IntervalSeconds: 1, BlockIO: sample.EBPFFeature{Loaded: true},
			GPUs: []sample.EBPFGPU{{Index: 5, BlockIO: []sample.EBPFBlockIO{
				{Device: "nvme0n1", Op: "read", BytesTotal: uint64(n * 800e6), WaitSecondsTotal: n * 2.5}}}}})
		put(w, sample.CPUKey, at(i), &sample.CPU{IntervalSeconds: 1, Interval: &sample.CPUInterval{PageCacheRefaultsPerSecond: 40000}})
		put(w, sample.DiskstatsKey, at(i), &sample.Disks{IntervalSeconds: 1, Devices: []sample.Disk{
			{Name: "nvme0n1", Queue: &sample.DiskQueue{Scheduler: "none", ReadAheadBytes: 128 << 10, NRRequests: 1023},
				Rates: &sample.DiskRates{ReadBytesPerSecond: 800e6, AverageReadBytes: 512 << 10, AverageQueueDepth: 4}}}})
	}
	refaults := 50000.0
	for _, i := range []int{0, 15, 30} {
		ds := &sample.Datasets{IntervalSeconds: 15,
			GPUs: []sample.DatasetGPU{
				{GPU: 5, Mounts: []sample.DatasetMount{{MountPoint: "/scratch", FSType: "xfs", Source: "/dev/nvme0n1", Options: []string{"noatime", "rw"}, Disk: "nvme0n1", Files: 64}},
					Cgroup: &sample.CgroupMemory{Path: "/pod", LimitBytes: 32 << 30, CurrentBytes: 31 << 30, RefaultsPerSecond: &refaults}},
				{GPU: 6, Mounts: []sample.DatasetMount{{MountPoint: "/data", FSType: "nfs4", Source: "filer:/x", Options: []string{"relatime", "rw"}, Files: 8}}},
			},
			NFS: []sample.NFSMount{{MountPoint: "/data", Server: "filer:/x", RSize: 1 << 20,
				Rates: &sample.NFSReadRates{OpsPerSecond: 200, BytesPerSecond: 200e6, RTTSeconds: 0.04, ExecuteSeconds: 0.05}}},
			GDS: &sample.GDSStats{Reads: 10, ReadErrors: uint64(i / 15)},
		}
		put(w, sample.DatasetKey, at(i), ds)
	}
	in := FromWindow(w, at(30), 10*time.Second)
	s := in.Audit.Storage
	if s == nil || len(s.GPUs) != 2 || s.GPUs[0].Disk != "nvme0n1" || s.GPUs[0].Queue == nil || !near(s.NodeRefaultsPerSecond, 40000) {
		t.Fatalf("storage input %+v", s)
	}
	if s.GDS == nil || s.GDS.ReadsIncrease != 0 || s.GDS.ErrorsIncrease != 2 {
		t.Errorf("GDS window %+v; want no reads and 2 errors over the window", s.GDS)
	}
	if s.GPUs[1].Disk != "" {
		t.Errorf("GPU 6 reads over NFS and waits on no disk; got %q", s.GPUs[1].Disk)
	}
	d := analyzers.Analyze(in, nil, analyzers.DefaultThresholds)
	v := d.GPUs[0]
	if v.SubKind != analyzers.SubStorageRead || !strings.Contains(v.Summary, "data on /scratch (xfs, /dev/nvme0n1); nvme0n1: read_ahead_kb 128, scheduler none, nr_requests 1023") {
		t.Errorf("GPU 5 verdict %s/%s %q; want storage_read naming the data path", v.Class, v.SubKind, v.Summary)
	}
	got := map[string]int{}
	for _, f := range d.Findings {
		got[f.Check]++
	}
	for check, n := range map[string]int{"block_queue_settings": 1, "page_cache_thrash": 2, "gds_available_unused": 1, "gds_errors": 1, "dataset_on_network_fs": 1} {
		if got[check] != n {
			t.Errorf("%s fired %d time(s); want %d (findings %v)", check, got[check], n, got)
		}
	}
	// GPU 6 is not storage-bound: its slow NFS is worth knowing, not a bound.
	if got["nfs_slow_reads"] != 0 {
		t.Errorf("nfs_slow_reads fired for a GPU that does not wait on storage")
	}
}

// Without a dataset reading the Input is left alone: no storage checks,
// no summary note.
func TestStorageEvidenceWithoutDataset(t *testing.T) {
	w := engine.NewWindow(time.Hour, 64<<20)
	addStarvedGPUs(w, 0, 10, 5)
	in := FromWindow(w, at(10), 10*time.Second)
	if in.Audit.Storage != nil || in.GPUs[0].StorageNote != "" {
		t.Errorf("storage input %+v, note %q; want none", in.Audit.Storage, in.GPUs[0].StorageNote)
	}
}
