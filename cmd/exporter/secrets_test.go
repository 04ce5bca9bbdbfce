package main

import (
	"bufio"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

const secretHelperEnv = "GPUDIAG_SECRET_HELPER_LIB"

// TestSecretHelperProcess is not a test: run with secretHelperEnv set, it
// maps the named file (a stand-in libnccl) and waits for stdin to close, as
// an NCCL job holding its library would.
func TestSecretHelperProcess(t *testing.T) {
	lib := os.Getenv(secretHelperEnv)
	if lib == "" {
		return
	}
	f, err := os.Open(lib)
	if err != nil {
		fmt.Println(err)
		os.Exit(1)
	}
	m, err := syscall.Mmap(int(f.Fd()), 0, 4096, syscall.PROT_READ, syscall.MAP_SHARED)
	if err != nil {
		fmt.Println(err)
		os.Exit(1)
	}
	fmt.Println("mapped")
	_, _ = io.Copy(io.Discard, os.Stdin)
	_ = syscall.Munmap(m)
	os.Exit(0)
}

// A secret in the environment of an NCCL process on this host, or echoed by
// an NCCL log, reaches no output of the daemon: /metrics, /diagnose in every
// format, the recorded trace (which is its owner's only), the logs. The
// process's allow-listed NCCL settings do reach them, and an unknown NCCL_*
// variable keeps its name only, which shows the process and the log were
// read.
//
// The daemon reads the whole host, which other processes share (another run
// of this test, NCCL jobs): everything searched for is this run's own. The
// job's library version is unique to this test process, so the wait is for
// this job and not another's; the secret and the names of the variables
// that hold it are random, so another process's settings cannot be taken
// for a leak.
func TestPlantedSecretReachesNoOutput(t *testing.T) {
	token := make([]byte, 12)
	if _, err := rand.Read(token); err != nil {
		t.Fatal(err)
	}
	secret := "hunter2-" + hex.EncodeToString(token)
	tokenVar, passwordVar := "HF_TOKEN_"+hex.EncodeToString(token[:4]), "DB_PASSWORD_"+hex.EncodeToString(token[4:8])
	version := fmt.Sprintf("2.98.%d", os.Getpid())
	lib := filepath.Join(t.TempDir(), "libnccl.so."+version)
	if err := os.WriteFile(lib, make([]byte, 4096), 0o644); err != nil {
		t.Fatal(err)
	}
	job := exec.Command(os.Args[0], "-test.run=^TestSecretHelperProcess$")
	ncclVar, logVar := "NCCL_X_"+strings.ToUpper(hex.EncodeToString(token[8:10])), "NCCL_Y_"+strings.ToUpper(hex.EncodeToString(token[10:12]))
	job.Env = []string{secretHelperEnv + "=" + lib, "HF_TOKEN=" + secret, tokenVar + "=" + secret, passwordVar + "=" + secret,
		ncclVar + "=" + secret, "NCCL_P2P_DISABLE=1", "NCCL_SOCKET_IFNAME=eth0", "NCCL_DEBUG=INFO"}
	// NCCL prints every NCCL_* variable it was given, and whatever else a
	// plugin or a launcher adds, into its log.
	ncclLog := filepath.Join(t.TempDir(), "nccl.node1.4242.log")
	if err := os.WriteFile(ncclLog, []byte(strings.Join([]string{
		"node1:4242:4242 [0] NCCL INFO NCCL_P2P_LEVEL set by environment to NVL",
		"node1:4242:4242 [0] NCCL INFO " + logVar + " set by environment to " + secret,
		"node1:4242:4242 [0] NCCL INFO AWS_SECRET_ACCESS_KEY set by environment to " + secret,
		"node1:4242:4242 [0] NCCL WARN NET/Plugin: could not authenticate with " + passwordVar + "=" + secret,
		"node1:4242:4242 [0] NCCL WARN NET/Plugin: token " + secret + " refused",
		""}, "\n")), 0o644); err != nil {
		t.Fatal(err)
	}
	stdin, err := job.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := job.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := job.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = stdin.Close(); _ = job.Wait() })
	if line, err := bufio.NewReader(stdout).ReadString('\n'); err != nil || line != "mapped\n" {
		t.Fatalf("helper process: %q, %v", line, err)
	}

	trace := filepath.Join(t.TempDir(), "trace.gdrec")
	td := startDaemon(t, nil, "--path.procfs=/proc", "--path.sysfs=/sys", "--record="+trace, "--log.level=debug",
		"--collector.ncclproc.interval=500ms", "--collector.nccl.log-glob="+ncclLog)
	td.waitFor(t, "this test's NCCL job in /metrics", func(m metrics) bool {
		_, ok := m.value("gpudiag_nccl_library_info", "version", version)
		return ok
	})
	outputs := map[string]string{}
	for _, path := range []string{"/metrics", "/diagnose?format=json", "/diagnose?format=text", "/diagnose?format=html", "/"} {
		resp, err := http.Get(td.base + path)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		outputs[path] = string(b)
	}
	td.stop()
	var frames strings.Builder
	for _, f := range readTrace(t, trace) {
		frames.Write(f.Sample)
		frames.WriteByte('\n')
	}
	outputs["recorded trace"] = frames.String()
	outputs["logs"] = td.logs.String()

	for _, want := range []string{lib, `"NCCL_SOCKET_IFNAME"`, `"` + ncclVar + `"`, `"NCCL_P2P_LEVEL"`, `"` + logVar + `"`, "could not authenticate"} {
		if !strings.Contains(outputs["recorded trace"], want) {
			t.Fatalf("the recorded trace lacks %s: the process or its log was not read, the test proves nothing", want)
		}
	}
	if st, err := os.Stat(trace); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("recorded trace: %v, %v; want mode 0600", st.Mode(), err)
	}
	for what, text := range outputs {
		for _, s := range []string{secret, tokenVar, passwordVar, "AWS_SECRET_ACCESS_KEY"} {
			if strings.Contains(text, s) {
				t.Errorf("%q leaked into %s", s, what)
			}
		}
	}
}
