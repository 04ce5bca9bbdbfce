package collectors

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/gpudiag/gpudiag/sample"
)

// TestDatasetCollectorLiveMounts runs against the real kernel: an ext4
// filesystem image loop-mounted noatime and an overlay mount, a process
// whose child holds a file of each open, and the collector, told the
// parent is a GPU's process, must map each open file to its mount's type
// and the loop device. It needs root, mkfs.ext4 and loop devices, and
// skips without them. NFS is not tried: a loopback server needs the
// kernel's nfsd and nfs client, which not every test host has (checked
// through /proc/filesystems below).
func TestDatasetCollectorLiveMounts(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount")
	}
	for _, tool := range []string{"mkfs.ext4", "mount", "umount"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not installed", tool)
		}
	}
	if _, err := os.Stat("/dev/loop-control"); err != nil {
		t.Skip("no loop devices")
	}
	dir := t.TempDir()
	run := func(name string, args ...string) error {
		out, err := exec.Command(name, args...).CombinedOutput()
		if err != nil {
			t.Logf("%s %s: %v: %s", name, strings.Join(args, " "), err, out)
		}
		return err
	}
	img, mnt := filepath.Join(dir, "ext4.img"), filepath.Join(dir, "data")
	if err := os.WriteFile(img, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(img, 16<<20); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := run("mkfs.ext4", "-q", "-F", img); err != nil {
		t.Skip("mkfs.ext4 failed")
	}
	if err := run("mount", "-o", "loop,noatime", img, mnt); err != nil {
		t.Skip("cannot loop-mount here (no CAP_SYS_ADMIN or no free loop device)")
	}
	t.Cleanup(func() { _ = run("umount", "-l", mnt) })
	shard := filepath.Join(mnt, "train-0001.tar")
	if err := os.WriteFile(shard, make([]byte, 1<<20), 0o644); err != nil {
		t.Fatal(err)
	}

	// An overlay, as a container's root is: a lower layer holding the
	// file, an upper layer and the merged view the process reads.
	lower, upper, work, merged := filepath.Join(dir, "lower"), filepath.Join(dir, "upper"), filepath.Join(dir, "work"), filepath.Join(dir, "merged")
	for _, d := range []string{lower, upper, work, merged} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(lower, "labels.json"), []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}
	overlay := run("mount", "-t", "overlay", "overlay", "-o", "lowerdir="+lower+",upperdir="+upper+",workdir="+work, merged) == nil
	if overlay {
		t.Cleanup(func() { _ = run("umount", "-l", merged) })
	}
	script := "exec 3<" + shard + "; sleep 60"
	if overlay {
		script = "exec 3<" + shard + " 4<" + filepath.Join(merged, "labels.json") + "; sleep 60"
	}
	// The GPU's process (sh) holds nothing; its child, a DataLoader
	// worker stand-in, holds the files.
	parent := exec.Command("sh", "-c", "("+script+") & wait")
	parent.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := parent.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = syscall.Kill(-parent.Process.Pid, syscall.SIGKILL)
		_ = parent.Wait()
	})

	shared := &Shared{}
	shared.SetGPUs([]GPURef{{Index: 0, PIDs: []uint32{uint32(parent.Process.Pid)}}})
	c, err := newDatasetCollector(Config{ProcPath: "/proc", SysPath: "/sys", Logger: zap.NewNop(), Shared: shared})
	if err != nil {
		t.Fatal(err)
	}
	want := 1
	if overlay {
		want = 2
	}
	var s *sample.Datasets
	// The child opens its files when a loaded machine lets it, and a scan
	// past its 2 s budget leaves some unread: sampled until they show,
	// only a child that never opens them meets the guard.
	for guard := hangGuard(t); ; {
		s = sampleAs[sample.Datasets](t, c)
		if len(s.GPUs) == 1 && len(s.GPUs[0].Mounts) >= want {
			break
		}
		select {
		case <-guard:
			t.Fatalf("the child's files never showed: %+v", s)
		case <-time.After(50 * time.Millisecond):
		}
	}
	t.Logf("GPU 0 reads from %+v, cgroup %+v", s.GPUs[0].Mounts, s.GPUs[0].Cgroup)
	byMount := map[string]sample.DatasetMount{}
	for _, m := range s.GPUs[0].Mounts {
		byMount[m.MountPoint] = m
	}
	m, ok := byMount[mnt]
	if !ok || m.FSType != "ext4" || m.Files != 1 || !m.HasOption("noatime") || !strings.HasPrefix(m.Disk, "loop") {
		t.Errorf("mount of %s: %+v (found %v); want ext4, one file, noatime, on a loop disk", mnt, m, ok)
	}
	if overlay {
		if m, ok := byMount[merged]; !ok || m.FSType != "overlay" || m.Files != 1 {
			t.Errorf("mount of %s: %+v (found %v); want overlay with one file", merged, m, ok)
		}
	} else {
		t.Log("overlay mount refused here; only ext4 checked")
	}
	if raw, err := os.ReadFile("/proc/filesystems"); err == nil && !strings.Contains(string(raw), "nfs") {
		t.Log("this kernel has no NFS client: the NFS path is covered by the fixture test only")
	}
}
