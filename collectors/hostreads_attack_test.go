package collectors

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/gpudiag/gpudiag/engine"
	"github.com/gpudiag/gpudiag/sample"
)

// Attacks on the daemon through the files it opens on a user's behalf:
// files under /proc/<pid>/root, and the NCCL_DEBUG_FILE a process names.
// Each test spawns the attacker as a real process, as any local user
// could: in its own user, mount and UTS namespaces (unshare -Urmu needs no
// privilege where unprivileged user namespaces are allowed; the tests skip
// where they are not).

// attackHelperEnv carries the attacker's setup (JSON) to the helper.
const attackHelperEnv = "GPUDIAG_HOSTREADS_ATTACKER"

// attackSetup is what the attacker process does before it waits.
type attackSetup struct {
	// Lib is mapped: a file named libnccl.so.2 makes the process one the
	// ncclproc collector reports.
	Lib string
	// HostnameFIFO is bind-mounted over the process's /etc/hostname.
	HostnameFIFO string
	// Chroot becomes the process's root directory.
	Chroot string
}

// TestHostReadsAttackHelper is not a test: it is the attacker process the
// tests below run inside new namespaces.
func TestHostReadsAttackHelper(t *testing.T) {
	raw := os.Getenv(attackHelperEnv)
	if raw == "" {
		t.Skip("attacker process for the host-read attack tests")
	}
	fail := func(what string, err error) {
		fmt.Printf("error: %s: %v\n", what, err)
		os.Exit(1)
	}
	var s attackSetup
	if err := json.Unmarshal([]byte(raw), &s); err != nil {
		fail("setup", err)
	}
	f, err := os.Open(s.Lib)
	if err != nil {
		fail("open lib", err)
	}
	m, err := syscall.Mmap(int(f.Fd()), 0, 4096, syscall.PROT_READ, syscall.MAP_SHARED)
	if err != nil {
		fail("mmap", err)
	}
	defer syscall.Munmap(m) //nolint:errcheck
	if err := syscall.Mount("", "/", "", syscall.MS_REC|syscall.MS_PRIVATE, ""); err != nil {
		fail("make mounts private", err)
	}
	if s.HostnameFIFO != "" {
		if err := syscall.Mount(s.HostnameFIFO, "/etc/hostname", "", syscall.MS_BIND, ""); err != nil {
			fail("bind-mount the FIFO over /etc/hostname", err)
		}
	}
	if s.Chroot != "" {
		if err := syscall.Chroot(s.Chroot); err != nil {
			fail("chroot", err)
		}
		if err := os.Chdir("/"); err != nil {
			fail("chdir", err)
		}
	}
	fmt.Println("ready")
	_, _ = io.Copy(io.Discard, os.Stdin) // until the test closes stdin
	os.Exit(0)
}

// startAttacker runs the helper in new user (mapped to the test's own
// user), mount and UTS namespaces with env added, and returns its PID once
// it is set up. It skips the test where such namespaces cannot be made.
func startAttacker(t *testing.T, setup attackSetup, env ...string) int {
	t.Helper()
	if _, err := os.Stat("/proc/self/ns/mnt"); err != nil {
		t.Skip("no /proc with namespaces")
	}
	raw, err := json.Marshal(setup)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestHostReadsAttackHelper$")
	cmd.Env = append([]string{attackHelperEnv + "=" + string(raw)}, env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags:  syscall.CLONE_NEWUSER | syscall.CLONE_NEWNS | syscall.CLONE_NEWUTS,
		UidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getuid(), Size: 1}},
		GidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getgid(), Size: 1}},
	}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Skipf("cannot create user and mount namespaces here (unshare -Urmu): %v", err)
	}
	t.Cleanup(func() {
		_ = stdin.Close()
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	line, err := bufio.NewReader(stdout).ReadString('\n')
	switch {
	case err != nil:
		t.Fatalf("attacker: %q, %v", line, err)
	case strings.Contains(line, "operation not permitted") || strings.Contains(line, "permission denied"):
		t.Skipf("attacker process not permitted to set up: %s", line)
	case line != "ready\n":
		t.Fatalf("attacker: %s", line)
	}
	return cmd.Process.Pid
}

// attackDir is a directory the attacker (the test's own user) can use.
func attackDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "libnccl.so.2"), make([]byte, 4096), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// mkfifoUnblocked makes a FIFO and, at the end of the test, opens it for
// writing once: a reader still blocked in its open (the code under test,
// when it is broken) then returns, so that the test binary can exit.
func mkfifoUnblocked(t *testing.T, path string) {
	t.Helper()
	if err := syscall.Mkfifo(path, 0o666); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
	t.Cleanup(func() {
		if fd, err := syscall.Open(path, syscall.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
			syscall.Close(fd)
		}
	})
}

// attackRig runs the ncclproc and nccl collectors as the daemon does: one
// engine, a sample deadline, the paths ncclproc publishes followed by nccl.
type attackRig struct {
	e        *engine.Engine
	ncclproc *sample.NCCLHostProcesses
	nccl     *sample.NCCL
}

func newAttackRig(t *testing.T, refs []GPURef) *attackRig {
	t.Helper()
	r := &attackRig{}
	// The samples' deadline is the test's own time: a read blocked on a
	// FIFO never returns, so it is told from a slow scan of a loaded
	// host's /proc without a clock (a 1 s deadline, the interval's, made
	// such a scan fail the test and left the attacker unread).
	wait := untilHang(t)
	r.e = engine.New(engine.Options{Interval: wait, Timeout: wait, Logger: zap.NewNop(),
		OnSample: func(name string, _ time.Time, s any) {
			switch v := s.(type) {
			case *sample.NCCLHostProcesses:
				r.ncclproc = v
			case *sample.NCCL:
				r.nccl = v
			}
		}})
	shared := &Shared{}
	shared.SetGPUs(refs)
	cfg := Config{ProcPath: "/proc", Logger: zap.NewNop(), Shared: shared}
	np, err := newNCCLProcCollector(cfg, ncclProcOptions{maxScan: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	nc, err := newNCCLCollector(cfg, ncclOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	r.e.Add(asEngine(np), wait)
	r.e.Add(asEngine(nc), wait)
	return r
}

// sampleHealthy samples both collectors; each must return and succeed,
// now and on the next sample (a sample still blocked would make the next
// one fail as "previous sample still running").
func (r *attackRig) sampleHealthy(t *testing.T) {
	t.Helper()
	for round := 1; round <= 2; round++ {
		r.ncclproc, r.nccl = nil, nil
		start := time.Now()
		r.e.SampleOnce(context.Background())
		for _, st := range r.e.Statuses() {
			if !st.Success {
				t.Fatalf("round %d: collector %s unhealthy after %v: %s", round, st.Name, time.Since(start).Round(time.Millisecond), st.LastError)
			}
		}
		if r.ncclproc == nil || r.nccl == nil {
			t.Fatalf("round %d: no sample", round)
		}
	}
}

func (r *attackRig) process(t *testing.T, pid int) *sample.NCCLHostProcess {
	t.Helper()
	for i := range r.ncclproc.Processes {
		if r.ncclproc.Processes[i].PID == pid {
			return &r.ncclproc.Processes[i]
		}
	}
	t.Fatalf("attacker %d not among the processes found: %+v", pid, r.ncclproc.Processes)
	return nil
}

// A process in its own mount namespace bind-mounts a FIFO over its
// /etc/hostname. The ncclproc collector reads that file for the host name
// of every process with its own UTS namespace; a blocking open would wait
// for a writer forever, past the attacker's exit, while /healthz said ok.
// The samples must complete, the collector stay healthy, and the process
// be reported with the FIFO named.
func TestNCCLProcAttackHostnameFIFO(t *testing.T) {
	if _, err := os.Stat("/etc/hostname"); err != nil {
		t.Skip("no /etc/hostname to mount over")
	}
	dir := attackDir(t)
	fifo := filepath.Join(dir, "hostname")
	mkfifoUnblocked(t, fifo)
	pid := startAttacker(t, attackSetup{Lib: filepath.Join(dir, "libnccl.so.2"), HostnameFIFO: fifo},
		"NCCL_DEBUG=INFO", "NCCL_DEBUG_FILE="+filepath.Join(dir, "nccl.%h.log"))
	r := newAttackRig(t, nil)
	r.sampleHealthy(t)
	p := r.process(t, pid)
	if p.Hostname != "" || !strings.Contains(strings.Join(p.Errors, "\n"), "FIFO") {
		t.Errorf("host name %q, errors %q; want none and the FIFO named", p.Hostname, p.Errors)
	}
}

// The same with the NCCL_DEBUG_FILE the process names: a FIFO there is
// not followed, and the nccl collector stays healthy. The tailer already
// opened logs without waiting (this test passed before hostfile): it
// keeps the log path's open, now the opener's, from regressing.
func TestNCCLProcAttackDebugFileFIFO(t *testing.T) {
	dir := attackDir(t)
	fifo := filepath.Join(dir, "nccl.log")
	mkfifoUnblocked(t, fifo)
	pid := startAttacker(t, attackSetup{Lib: filepath.Join(dir, "libnccl.so.2")}, "NCCL_DEBUG=INFO", "NCCL_DEBUG_FILE="+fifo)
	r := newAttackRig(t, nil)
	r.sampleHealthy(t)
	p := r.process(t, pid)
	if !strings.HasSuffix(p.DebugFile, fifo) {
		t.Fatalf("debug file %q; want the FIFO %s reached through the process's root", p.DebugFile, fifo)
	}
	var file *sample.NCCLFile
	for i := range r.nccl.Files {
		if r.nccl.Files[i].Path == p.DebugFile {
			file = &r.nccl.Files[i]
		}
	}
	if file == nil || !strings.Contains(file.Error, "FIFO") || file.Exists {
		t.Errorf("followed file %+v; want %s reported as a FIFO and not read", file, p.DebugFile)
	}
}

// secretFile writes a root-only file holding an NCCL log line whose host
// field is a fresh secret, and returns the secret.
func secretFile(t *testing.T, path string) string {
	t.Helper()
	token := make([]byte, 8)
	if _, err := rand.Read(token); err != nil {
		t.Fatal(err)
	}
	secret := "secret" + hex.EncodeToString(token)
	text := secret + ":4242:4243 [0] NCCL INFO NCCL version 2.21.5+cuda12.4\n"
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return secret
}

// A process whose root is a directory it controls (a container, here a
// chroot) makes its /etc/hostname and its NCCL_DEBUG_FILE absolute
// symlinks to host files. Walked through /proc/<pid>/root, an absolute
// symlink resolves against the daemon's root: the daemon would read the
// host's files as root and report their content (the host name is
// exported, NCCL log hosts are). Resolved inside the process's root, the
// links lead nowhere.
func TestNCCLProcAttackSymlinkEscape(t *testing.T) {
	dir := attackDir(t)
	logSecret := secretFile(t, filepath.Join(dir, "host-only.log"))
	// A host file whose first line passes for a host name.
	nameSecret := "name" + logSecret
	if err := os.WriteFile(filepath.Join(dir, "host-only.name"), []byte(nameSecret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	root := filepath.Join(dir, "root")
	if err := os.MkdirAll(filepath.Join(root, "etc"), 0o755); err != nil {
		t.Fatal(err)
	}
	for link, target := range map[string]string{"etc/hostname": filepath.Join(dir, "host-only.name"), "nccl.log": filepath.Join(dir, "host-only.log")} {
		if err := os.Symlink(target, filepath.Join(root, link)); err != nil {
			t.Fatal(err)
		}
	}
	pid := startAttacker(t, attackSetup{Lib: filepath.Join(dir, "libnccl.so.2"), Chroot: root}, "NCCL_DEBUG=INFO", "NCCL_DEBUG_FILE=/nccl.log")
	r := newAttackRig(t, nil)
	r.sampleHealthy(t)
	p := r.process(t, pid)
	if p.DebugFile != filepath.Join("/proc", strconv.Itoa(pid), "root", "nccl.log") {
		t.Errorf("debug file %q; want it reached through the process's root", p.DebugFile)
	}
	for what, s := range map[string]any{"ncclproc sample": r.ncclproc, "nccl sample": r.nccl} {
		raw, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(raw), logSecret) {
			t.Errorf("the host's file leaked into the %s through a symlink in the process's root:\n%s", what, raw)
		}
	}
}

// NCCL_DEBUG_FILE is the process's to name, and the daemon reads as root:
// a user naming a root-only file would have the daemon parse it and
// export what looks like NCCL lines. A log named by a process is followed
// only when the process's user owns it, as NCCL's own log would be.
func TestNCCLLogNamedByProcessMustBeItsUsers(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to run a process as another user")
	}
	const nobody = 65534
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	secret := secretFile(t, filepath.Join(dir, "root-only.log"))
	own := filepath.Join(dir, "own.log")
	if err := os.WriteFile(own, []byte("ownhost:77:78 [0] NCCL INFO NCCL version 2.21.5+cuda12.4\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(own, nobody, nobody); err != nil {
		t.Fatal(err)
	}
	var pids []uint32
	for _, log := range []string{"root-only.log", "own.log"} {
		cmd := exec.Command("sleep", "60")
		cmd.Env = []string{"NCCL_DEBUG=INFO", "NCCL_DEBUG_FILE=" + filepath.Join(dir, log)}
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody}}
		if err := cmd.Start(); err != nil {
			t.Skipf("cannot run sleep as nobody: %v", err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		pids = append(pids, uint32(cmd.Process.Pid))
	}
	r := newAttackRig(t, []GPURef{{Index: 0, PIDs: pids}})
	r.sampleHealthy(t)
	files := map[string]sample.NCCLFile{}
	for _, f := range r.nccl.Files {
		files[filepath.Base(f.Path)] = f
	}
	raw, _ := json.Marshal(r.nccl)
	if strings.Contains(string(raw), secret) {
		t.Errorf("a root-only file named by a process of another user was read:\n%s", raw)
	}
	if f := files["root-only.log"]; !strings.Contains(f.Error, "owned by uid 0") {
		t.Errorf("root-only.log: %+v; want it refused as owned by uid 0", f)
	}
	if f := files["own.log"]; f.Error != "" || len(f.Processes) != 1 || f.Processes[0].Host != "ownhost" {
		t.Errorf("own.log: %+v; want the process's own log followed", f)
	}
}
