package hosttest

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// PrivateDevShm starts a process in a mount namespace of its own with an
// 8 MiB tmpfs on its /dev/shm, 2 MiB of it used, and returns its PID (the
// shell unshare forks, now sleeping). It skips the test where that cannot be
// done (not root, no unshare(1), no mount namespaces) and kills the process
// when the test ends.
func PrivateDevShm(t testing.TB) int {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount a tmpfs in a private mount namespace")
	}
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		t.Skip("no unshare(1)")
	}
	ready := filepath.Join(t.TempDir(), "ready")
	cmd := exec.Command(unshare, "--mount", "--propagation", "private", "--fork", "sh", "-c",
		"mount -t tmpfs -o size=8m tmpfs /dev/shm && dd if=/dev/zero of=/dev/shm/fill bs=1M count=2 2>/dev/null && touch "+ready+" && exec sleep 60")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Skip("cannot start unshare:", err)
	}
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		_ = cmd.Wait()
	})
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if _, err := os.Stat(ready); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Skip("the child did not mount its tmpfs (no mount namespaces here?)")
		}
	}
	// unshare --fork: the shell (now sleep) is unshare's child.
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(cmd.Process.Pid), "task", strconv.Itoa(cmd.Process.Pid), "children"))
	if err != nil || len(strings.Fields(string(b))) == 0 {
		t.Fatalf("unshare's child: %q, %v", b, err)
	}
	child, err := strconv.Atoi(strings.Fields(string(b))[0])
	if err != nil {
		t.Fatal(err)
	}
	return child
}
