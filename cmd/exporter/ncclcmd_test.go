package main

import (
	"bytes"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/gpudiag/gpudiag/nccl"
	"github.com/gpudiag/gpudiag/safetext"
)

// `gpudiag nccl` on saved logs: what it reads, what it prints and how it
// exits. The reader's accuracy is nccl's corpus test.

const ncclCorpus = "../../testdata/nccl/corpus"

func runNCCLCmd(t *testing.T, stdin string, args ...string) (int, string, error) {
	t.Helper()
	if stdin != "" {
		old := ncclStdin
		ncclStdin = strings.NewReader(stdin)
		t.Cleanup(func() { ncclStdin = old })
	}
	var out bytes.Buffer
	code, err := run(t.Context(), append([]string{"nccl"}, args...), &out, io.Discard, nil)
	return code, out.String(), err
}

// horovod over two AWS nodes: ranks of one host talk over TCP sockets.
func TestNCCLCommandText(t *testing.T) {
	code, out, err := runNCCLCmd(t, "", filepath.Join(ncclCorpus, "horovod3658.log"))
	if err != nil || code != exitBottleneck {
		t.Fatalf("exit %d, %v", code, err)
	}
	for _, want := range []string{
		"12 lines, 12 from NCCL, 4 processes on 2 hosts",
		"Network:         Socket",
		"Transports:      within nodes NET; between nodes NET",
		"GPUDirect RDMA:  not used",
		"Fallbacks:       socket_instead_of_ib, net_within_node",
		"[warning] net_within_node in 3 processes (e.g. ip-172-31-0-63:2121)",
		"evidence: ranks 1 and 2 run on this node yet connect via NET/Socket/0",
		"fix: ranks of one node talk over the network",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

// The JSON has the keys the issue names, with their types, one object per
// log, standard input read for "-".
func TestNCCLCommandJSON(t *testing.T) {
	log, err := os.ReadFile(filepath.Join(ncclCorpus, "tests373.log"))
	if err != nil {
		t.Fatal(err)
	}
	code, out, err := runNCCLCmd(t, string(log), "--format=json", "-", filepath.Join(ncclCorpus, "nccl1189.log"))
	if err != nil || code != exitBottleneck {
		t.Fatalf("exit %d, %v", code, err)
	}
	var doc struct {
		Logs []map[string]json.RawMessage `json:"logs"`
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil || len(doc.Logs) != 2 {
		t.Fatalf("%v: %s", err, out)
	}
	first := doc.Logs[0]
	want := map[string]any{
		"file": "(standard input)", "versions": []any{}, "network": "IB", "transports": []any{"NET"}, "gdr": "not_used",
		"nics": []any{"mlx5_2:1", "mlx5_3:1", "mlx5_0:1", "mlx5_1:1"}, "fallbacks": []any{"p2p_disabled", "ib_without_gdr"},
	}
	for k, v := range want {
		var got any
		if err := json.Unmarshal(first[k], &got); err != nil {
			t.Fatalf("key %q: %v", k, err)
		}
		if b1, b2 := mustJSON(t, got), mustJSON(t, v); b1 != b2 {
			t.Errorf("%s = %s; want %s", k, b1, b2)
		}
	}
	var comms []nccl.CommReport
	if err := json.Unmarshal(doc.Logs[1]["communicators"], &comms); err != nil || len(comms) != 1 ||
		comms[0].ID != "0xf021d9037f9243d8" || comms[0].NRanks != 4 || comms[0].RanksSeen != 4 || comms[0].Hosts != 2 {
		t.Errorf("communicators %+v (%v)", comms, err)
	}
}

func mustJSON(t *testing.T, v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// Exit codes as diagnose's: a healthy run 0, NCCL's warnings 2, no NCCL
// line 5, a file that cannot be read 1 (whatever the others say).
func TestNCCLCommandExitCodes(t *testing.T) {
	dir := t.TempDir()
	warn := filepath.Join(dir, "warn.log")
	if err := os.WriteFile(warn, []byte("h:1:1 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM\n"+
		"h:1:1 [0] transport/net_ib.cc:1 NCCL WARN NET/IB : Got completion with error 12\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		stdin string
		args  []string
		code  int
	}{
		{"healthy", "", []string{"../../nccl/testdata/nccl_default.log"}, exitOK},
		{"warnings", "", []string{warn}, exitFindings},
		{"no NCCL line", "RESULT iters=72 busbw=3.0\n", []string{"-"}, exitNoGPU},
		{"a missing file among good ones", "", []string{"../../nccl/testdata/nccl_default.log", filepath.Join(dir, "missing.log")}, exitError},
		{"a FIFO is refused, not waited on", "", []string{fifo}, exitError},
		{"no file", "", nil, exitError},
	} {
		code, out, err := runNCCLCmd(t, tc.stdin, tc.args...)
		if code != tc.code {
			t.Errorf("%s: exit %d (%v); want %d\n%s", tc.name, code, err, tc.code, out)
		}
	}
}

// Bounded in size and time: a log over --max-bytes is read in part and
// says so; a standard input that never ends fails with the deadline named.
func TestNCCLCommandBounds(t *testing.T) {
	code, out, err := runNCCLCmd(t, "", "--max-bytes=1KiB", "../../nccl/testdata/nccl_default.log")
	if err != nil || code != exitOK || !strings.Contains(out, "read the first 1 KiB only (--max-bytes)") {
		t.Fatalf("exit %d, %v:\n%s", code, err, out)
	}
	r, w := io.Pipe()
	defer w.Close()
	old := ncclStdin
	ncclStdin = r
	defer func() { ncclStdin = old }()
	code, err = run(t.Context(), []string{"nccl", "--timeout=50ms", "-"}, io.Discard, io.Discard, nil)
	if code != exitError || err == nil || !strings.Contains(err.Error(), "no diagnosis within --timeout 50ms") {
		t.Fatalf("exit %d, %v", code, err)
	}
	for _, bad := range []string{"--timeout=0s", "--max-bytes=0"} {
		if code, err := run(t.Context(), []string{"nccl", bad, "-"}, io.Discard, io.Discard, nil); code != exitError || err == nil {
			t.Errorf("%s: exit %d, %v", bad, code, err)
		}
	}
}

// Text a log carries (host names, warnings, variable values) cannot drive
// the terminal: escaped in text, \u-escaped in JSON.
func TestNCCLCommandOutputIsTerminalSafe(t *testing.T) {
	log := "h\u009b2J:1:1 [0] NCCL INFO NCCL_SOCKET_IFNAME set by environment to eth0\u202e\n" +
		"node:2:2 [0] transport.cc:1 NCCL WARN boom \x1b]0;owned\x07 \u2028fake\n"
	for _, format := range []string{"text", "json"} {
		_, out, err := runNCCLCmd(t, log, "--format="+format, "-")
		if err != nil {
			t.Fatal(err)
		}
		if flat := strings.ReplaceAll(out, "\n", ""); safetext.Terminal(flat) != flat {
			t.Errorf("%s output carries terminal controls: %q", format, out)
		}
		if format == "json" {
			var doc map[string]any
			if err := json.Unmarshal([]byte(out), &doc); err != nil {
				t.Errorf("json: %v", err)
			}
		}
	}
}

// The README shows `gpudiag nccl` on the recorded socket run: the block is
// what the command prints today.
func TestNCCLCommandREADMEExample(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	const marker = "<!-- gpudiag-nccl-example: TestNCCLCommandREADMEExample checks this block -->\n```\n"
	i := strings.Index(string(readme), marker)
	if i < 0 {
		t.Fatal("README.md has no gpudiag nccl example")
	}
	block := string(readme)[i+len(marker):]
	block = block[:strings.Index(block, "```\n")]
	cmd, want, _ := strings.Cut(block, "\n")
	args := strings.Fields(strings.TrimPrefix(cmd, "$ .dist/gpudiag "))
	t.Chdir("../..")
	var out bytes.Buffer
	if _, err := run(t.Context(), args, &out, io.Discard, nil); err != nil {
		t.Fatal(err)
	}
	if out.String() != want {
		t.Errorf("README's example is stale; the command prints:\n%s", out.String())
	}
}
