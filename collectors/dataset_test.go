package collectors

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"go.uber.org/zap"

	"github.com/gpudiag/gpudiag/hostfs"
	"github.com/gpudiag/gpudiag/internal/hosttest"
	"github.com/gpudiag/gpudiag/sample"
)

// datasetHost builds a host tree in which GPU 0's process 100 reads a
// dataset over NFS and its DataLoader worker 101 a cache file on a local
// NVMe partition and a file of the container's overlay root.
func datasetHost(t *testing.T, nfsReads, nfsRTTms, refaults uint64) (proc, sys string) {
	t.Helper()
	root := t.TempDir()
	proc, sys = filepath.Join(root, "proc"), filepath.Join(root, "sys")
	w := func(rel, text string) { hosttest.WriteFile(t, filepath.Join(root, rel), text) }
	ln := func(target, rel string) {
		p := filepath.Join(root, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(target, p); err != nil {
			t.Fatal(err)
		}
	}
	w("proc/100/task/100/children", "101 ")
	w("proc/101/task/101/children", "")
	w("proc/100/mountinfo", `20 1 0:50 / / rw,relatime - overlay overlay rw,lowerdir=/l,upperdir=/u,workdir=/w
30 20 0:60 / /data rw,relatime - nfs4 filer01:/export/imagenet rw,vers=4.2,rsize=1048576
31 20 259:1 / /scratch rw,noatime - ext4 /dev/nvme0n1p1 rw
32 20 0:70 / /dev/shm rw,nosuid - tmpfs shm rw
`)
	ln("/dev/null", "proc/100/fd/0")
	ln("socket:[77]", "proc/100/fd/1")
	ln("/data/imagenet/train-0001.tar", "proc/100/fd/3")
	w("proc/100/fdinfo/3", "pos:\t0\nflags:\t0100000\nmnt_id:\t30\n")
	ln("/data/imagenet/train-0002.tar", "proc/101/fd/3")
	ln("/scratch/cache.bin", "proc/101/fd/4")
	ln("/workspace/labels.json", "proc/101/fd/5")
	// The job's log, on the same NFS mount, open for appending
	// (O_WRONLY|O_CREAT|O_APPEND|O_LARGEFILE): written, not read as data.
	ln("/data/logs/train.log", "proc/101/fd/6")
	w("proc/101/fdinfo/6", "pos:\t0\nflags:\t0102101\nmnt_id:\t30\n")
	w("proc/100/cgroup", "0::/kubepods.slice/pod1\n")
	w("proc/100/mountstats", "device overlay mounted on / with fstype overlay\n"+
		"device filer01:/export/imagenet mounted on /data with fstype nfs4 statvers=1.1\n"+
		"\topts:\trw,vers=4.2,rsize=1048576\n\tper-op statistics\n"+
		"\t        READ: "+itoa(nfsReads)+" "+itoa(nfsReads)+" 0 0 "+itoa(nfsReads<<20)+" 0 "+itoa(nfsRTTms)+" "+itoa(nfsRTTms+nfsReads)+" 0\n")
	w("sys/fs/cgroup/kubepods.slice/pod1/memory.max", "17179869184\n")
	w("sys/fs/cgroup/kubepods.slice/pod1/memory.current", "17179000000\n")
	w("sys/fs/cgroup/kubepods.slice/pod1/memory.stat", "file 15000000000\nworkingset_refault_file "+itoa(refaults)+"\n")
	w("sys/devices/pci0000:00/0000:00:01.0/nvme/nvme0/nvme0n1/nvme0n1p1/partition", "1\n")
	ln("../../devices/pci0000:00/0000:00:01.0/nvme/nvme0/nvme0n1/nvme0n1p1", "sys/dev/block/259:1")
	raw, err := os.ReadFile(filepath.Join(fixtureProc, "driver/nvidia-fs/stats"))
	if err != nil {
		t.Fatal(err)
	}
	w("proc/driver/nvidia-fs/stats", string(raw))
	return proc, sys
}

func itoa(n uint64) string { return strconv.FormatUint(n, 10) }

// datasetMetrics renders c's metrics of s as name{labels} value lines,
// labels sorted.
func datasetMetrics(t *testing.T, c *datasetCollector, s *sample.Datasets) string {
	t.Helper()
	var lines []string
	c.Metrics(s, func(m prometheus.Metric) {
		var d dto.Metric
		if err := m.Write(&d); err != nil {
			t.Fatal(err)
		}
		var labels []string
		for _, l := range d.GetLabel() {
			labels = append(labels, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
		}
		v := d.GetGauge().GetValue() + d.GetCounter().GetValue()
		name := strings.TrimSuffix(strings.SplitN(m.Desc().String(), `"`, 3)[1], `"`)
		lines = append(lines, fmt.Sprintf("%s{%s} %g", name, strings.Join(labels, ","), v))
	})
	return strings.Join(lines, "\n")
}

// newDatasetTestCollector reads the host at proc and sys for the GPUs refs.
func newDatasetTestCollector(t *testing.T, proc, sys string, refs ...GPURef) *datasetCollector {
	t.Helper()
	shared := &Shared{}
	shared.SetGPUs(refs)
	c, err := newDatasetCollector(Config{ProcPath: proc, SysPath: sys, Logger: zap.NewNop(), Shared: shared})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestDatasetCollector(t *testing.T) {
	proc, sys := datasetHost(t, 1000, 5000, 100)
	c := newDatasetTestCollector(t, proc, sys, GPURef{Index: 0, PIDs: []uint32{100}}, GPURef{Index: 1})
	t0 := time.Unix(1_700_000_000, 0)
	c.now = func() time.Time { return t0 }
	s := sampleAs[sample.Datasets](t, c)
	if len(s.GPUs) != 1 || s.GPUs[0].GPU != 0 {
		t.Fatalf("GPUs %+v; want GPU 0 alone (GPU 1 runs nothing)", s.GPUs)
	}
	want := []sample.DatasetMount{
		{MountPoint: "/data", FSType: "nfs4", Source: "filer01:/export/imagenet", Options: []string{"relatime", "rw"}, Files: 3, WrittenFiles: 1},
		{MountPoint: "/", FSType: "overlay", Source: "overlay", Options: []string{"relatime", "rw"}, Files: 1},
		{MountPoint: "/scratch", FSType: "ext4", Source: "/dev/nvme0n1p1", Options: []string{"noatime", "rw"}, Disk: "nvme0n1", Files: 1},
	}
	if got := s.GPUs[0].Mounts; !reflect.DeepEqual(got, want) {
		t.Errorf("mounts\n got %+v\nwant %+v", got, want)
	}
	if cg := s.GPUs[0].Cgroup; cg == nil || cg.LimitBytes != 16<<30 || cg.RefaultsFile != 100 || cg.RefaultsPerSecond != nil {
		t.Errorf("cgroup %+v; want the 16 GiB limit, 100 refaults, no rate yet", cg)
	}
	if len(s.NFS) != 1 || s.NFS[0].MountPoint != "/data" || s.NFS[0].RSize != 1<<20 || s.NFS[0].Rates != nil {
		t.Errorf("NFS %+v; want /data with rsize 1 MiB and no rate yet", s.NFS)
	}
	if s.GDS == nil || s.GDS.ReadErrors != 2 || s.GDS.Reads != 120431 {
		t.Errorf("GDS %+v", s.GDS)
	}

	// 15 s later: 3000 more READs that took 60 ms each, 4500 refaults.
	proc2, sys2 := datasetHost(t, 4000, 5000+3000*60, 4600)
	var err error
	if c.host, err = hostfs.NewFS(proc2, sys2); err != nil {
		t.Fatal(err)
	}
	c.now = func() time.Time { return t0.Add(15 * time.Second) }
	s = sampleAs[sample.Datasets](t, c)
	if r := s.NFS[0].Rates; r == nil || r.OpsPerSecond != 200 || r.RTTSeconds != 0.06 || r.ExecuteSeconds != 0.061 {
		t.Errorf("NFS rates %+v; want 200 READ/s at 60 ms RTT, 61 ms execute", r)
	}
	if r := s.GPUs[0].Cgroup.RefaultsPerSecond; r == nil || *r != 300 {
		t.Errorf("refaults per second %v; want 300", r)
	}
	text := datasetMetrics(t, c, s)
	for _, m := range []string{
		`gpudiag_gpu_dataset_mount_info{atime="relatime",fs_type="nfs4",gpu="0",mount_point="/data",network="true",source="filer01:/export/imagenet"} 1`,
		`gpudiag_gpu_dataset_open_files{gpu="0",mount_point="/data"} 3`,
		`gpudiag_nfs_read_rtt_seconds_total{mount_point="/data",server="filer01:/export/imagenet"} 185`,
		`gpudiag_gpu_cgroup_page_cache_refaults_total{gpu="0"} 4600`,
		`gpudiag_gds_errors_total{kind="read"} 2`,
	} {
		if !strings.Contains(text, m) {
			t.Errorf("metrics lack %s", m)
		}
	}
}

// TestDatasetCollectorBounds: a process holding more descriptors than the
// bound is scanned up to it and the GPU marked truncated.
func TestDatasetCollectorBounds(t *testing.T) {
	proc, sys := datasetHost(t, 1, 1, 1)
	for i := 0; i < datasetMaxFDs+10; i++ {
		if err := os.Symlink("/data/imagenet/f", filepath.Join(proc, "100", "fd", strconv.Itoa(100+i))); err != nil {
			t.Fatal(err)
		}
	}
	c := newDatasetTestCollector(t, proc, sys, GPURef{Index: 0, PIDs: []uint32{100}})
	s := sampleAs[sample.Datasets](t, c)
	if !s.GPUs[0].Truncated {
		t.Error("not marked truncated past the descriptor bound")
	}
	files := 0
	for _, m := range s.GPUs[0].Mounts {
		files += m.Files
	}
	if files > datasetMaxFDs {
		t.Errorf("%d files counted; bound %d", files, datasetMaxFDs)
	}
}

// A fresh tree from the gpuprocess collector (Shared.ProcessTrees) stands
// for the walk of /proc: the processes it lists are read, whatever the
// children files say; a stale one, or none for the GPU's process, and the
// collector walks on its own.
func TestDatasetTakesPublishedTrees(t *testing.T) {
	proc, sys := datasetHost(t, 1, 1, 1)
	// Process 102, not a child of 100 in /proc, holds a file on /scratch.
	hosttest.WriteFile(t, filepath.Join(proc, "102/task/102/children"), "")
	if err := os.MkdirAll(filepath.Join(proc, "102/fd"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/scratch/other.bin", filepath.Join(proc, "102/fd/3")); err != nil {
		t.Fatal(err)
	}
	c := newDatasetTestCollector(t, proc, sys, GPURef{Index: 0, PIDs: []uint32{100}})
	shared := c.shared
	t0 := time.Unix(1_700_000_000, 0)
	files := func(when string, at time.Time) map[string]int {
		t.Helper()
		c.now = func() time.Time { return at }
		s := sampleAs[sample.Datasets](t, c)
		out := map[string]int{}
		for _, g := range s.GPUs {
			for _, m := range g.Mounts {
				out[m.MountPoint] = m.Files
			}
		}
		return out
	}
	walked := map[string]int{"/data": 3, "/": 1, "/scratch": 1}
	if got := files("nothing published", t0); !reflect.DeepEqual(got, walked) {
		t.Errorf("nothing published: files by mount %v; want the walk's %v", got, walked)
	}
	shared.SetProcessTrees(&ProcessTrees{At: t0, Interval: 5 * time.Second, Under: map[int][]int{100: {100, 102}}})
	if got, want := files("fresh tree", t0.Add(10*time.Second)), map[string]int{"/data": 1, "/scratch": 1}; !reflect.DeepEqual(got, want) {
		t.Errorf("a fresh published tree {100, 102}: files by mount %v; want %v", got, want)
	}
	if got := files("stale tree", t0.Add(11*time.Second)); !reflect.DeepEqual(got, walked) {
		t.Errorf("a tree older than two intervals: files by mount %v; want the walk's %v", got, walked)
	}
	shared.SetProcessTrees(&ProcessTrees{At: t0.Add(20 * time.Second), Interval: 5 * time.Second, Under: map[int][]int{7: {7}}})
	if got := files("no tree for 100", t0.Add(21*time.Second)); !reflect.DeepEqual(got, walked) {
		t.Errorf("no published tree for process 100: files by mount %v; want the walk's %v", got, walked)
	}
}

// The GPU's cgroup's own memory and I/O pressure is read, and so is that of
// the groups beside it (the grandparent's other children) that feel any;
// the group holding the GPU's processes and quiet groups are left out.
func TestDatasetCgroupNeighbours(t *testing.T) {
	proc, sys := datasetHost(t, 1000, 5000, 100)
	w := func(rel, text string) { hosttest.WriteFile(t, filepath.Join(sys, "fs/cgroup", rel), text) }
	psi := func(some string) string {
		return "some avg10=" + some + " avg60=1.00 avg300=1.00 total=1000\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=10\n"
	}
	w("kubepods.slice/pod1/io.pressure", psi("25.00"))
	w("kubepods.slice/pod1/memory.pressure", psi("0.00"))
	w("system.slice/io.pressure", psi("40.00"))
	w("user.slice/io.pressure", psi("0.00"))
	w("user.slice/memory.pressure", psi("0.00"))
	c := newDatasetTestCollector(t, proc, sys, GPURef{Index: 0, PIDs: []uint32{100}})
	s := sampleAs[sample.Datasets](t, c)
	cg := s.GPUs[0].Cgroup
	if cg == nil || cg.Pressure.IOSome == nil || *cg.Pressure.IOSome != 0.25 || cg.Pressure.MemorySome == nil || *cg.Pressure.MemorySome != 0 {
		t.Fatalf("the GPU cgroup's pressure %+v; want io 0.25, memory 0", cg)
	}
	io := 0.4
	want := []sample.CgroupNeighbour{{Path: "/system.slice", Pressure: sample.CgroupPressure{IOSome: &io}}}
	if !reflect.DeepEqual(s.Neighbours, want) {
		t.Fatalf("neighbours %+v; want /system.slice alone at io 0.4", s.Neighbours)
	}
}
