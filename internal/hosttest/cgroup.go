package hosttest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// ThrottledCgroup makes a cgroup limited to 0.1 CPU and moves a
// spinning shell into it: on cgroup v2 (/sys/fs/cgroup/cgroup.controllers)
// cpu.max "10000 100000", on a v1 or hybrid host the cpu hierarchy's
// cpu.cfs_quota_us 10000 per cpu.cfs_period_us 100000, with the largest
// weight (cpu.weight, cpu.shares) so that the quota, not the machine's
// load, is what holds it back. Cleanup kills the
// shell and removes the cgroup. It skips the test where that cannot be
// done (not root, no cpu controller delegated); version says which was made,
// cgPath is the cgroup's path as /proc/<pid>/cgroup names it.
func ThrottledCgroup(t *testing.T) (pid int, cgPath string, version int) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to create a cgroup")
	}
	const root = "/sys/fs/cgroup"
	cgPath = fmt.Sprintf("/gpudiag-test-%d-%d", os.Getpid(), time.Now().UnixNano())
	var dir string
	var limit map[string]string
	if b, err := os.ReadFile(filepath.Join(root, "cgroup.controllers")); err == nil {
		if !strings.Contains(" "+strings.TrimSpace(string(b))+" ", " cpu ") {
			t.Skipf("cgroup v2 at %s without the cpu controller (%q)", root, strings.TrimSpace(string(b)))
		}
		// The test changes nothing it did not make: the cpu controller
		// must already be enabled for the root's children.
		sub, _ := os.ReadFile(filepath.Join(root, "cgroup.subtree_control"))
		if !strings.Contains(" "+strings.TrimSpace(string(sub))+" ", " cpu ") {
			t.Skipf("cgroup v2 at %s does not delegate the cpu controller to its children (cgroup.subtree_control %q)", root, strings.TrimSpace(string(sub)))
		}
		dir, version, limit = filepath.Join(root, cgPath), 2, map[string]string{"cpu.max": "10000 100000", "cpu.weight": "10000"}
	} else if _, err := os.Stat(filepath.Join(root, "cpu", "cpu.cfs_quota_us")); err == nil {
		dir, version = filepath.Join(root, "cpu", cgPath), 1
		limit = map[string]string{"cpu.cfs_period_us": "100000", "cpu.cfs_quota_us": "10000", "cpu.shares": "262144"}
	} else {
		t.Skipf("neither cgroup v2 nor a v1 cpu hierarchy under %s", root)
	}
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Skipf("cannot create a cgroup: %v", err)
	}
	cmd := exec.Command("/bin/sh", "-c", "while :; do :; done")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	t.Cleanup(func() {
		if cmd.Process != nil {
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			_ = cmd.Wait()
		}
		// The cgroup can be removed once its last process is reaped.
		for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			err := os.Remove(dir)
			if err == nil || os.IsNotExist(err) {
				return
			}
			if time.Now().After(deadline) {
				t.Errorf("cgroup %s left behind: %v", dir, err)
				return
			}
		}
	})
	// The weight is the largest the kernel takes: the shell gets its
	// 10 ms of each period however many tasks compete for the CPUs, and
	// so is throttled in every period. With the default weight, a loaded
	// machine's run queue gave it less than its quota in some periods,
	// and how often it was throttled measured the load.
	for _, name := range []string{"cpu.max", "cpu.cfs_period_us", "cpu.cfs_quota_us", "cpu.weight", "cpu.shares"} {
		if v, ok := limit[name]; ok {
			if err := os.WriteFile(filepath.Join(dir, name), []byte(v), 0); err != nil {
				t.Skipf("cannot set %s: %v", name, err)
			}
		}
	}
	if err := cmd.Start(); err != nil {
		t.Skip("cannot start a shell:", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(cmd.Process.Pid)), 0); err != nil {
		t.Fatalf("moving the shell into %s: %v", dir, err)
	}
	return cmd.Process.Pid, cgPath, version
}
