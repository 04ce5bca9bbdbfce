package collectors

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/gpudiag/gpudiag/analyzers"
	"github.com/gpudiag/gpudiag/engine"
	"github.com/gpudiag/gpudiag/internal/hosttest"
	"github.com/gpudiag/gpudiag/nccl"
	"github.com/gpudiag/gpudiag/sample"
)

// The real NCCL 2.28.9 logs of a 2×H200 NVLink VM (see nccl/testdata).
const ncclFixtureDir = "../nccl/testdata"

var ncclFixtures = []string{"nccl_default.log", "nccl_p2pdisabled.log", "nccl_socket.log"}

// ncclFixtureGPUs reads the bus IDs the fixture's init lines name, rank 0
// first, and returns them as this node's GPUs 4 and 5: indexes NCCL's own
// device numbers (0 and 1) cannot produce, so a match proves the bus-ID path.
func ncclFixtureGPUs(t *testing.T, name string) []GPURef {
	t.Helper()
	f, err := os.Open(filepath.Join(ncclFixtureDir, name))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	l := nccl.NewLog()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		l.Feed(sc.Bytes())
	}
	byRank := map[int]string{}
	for _, s := range l.Summaries() {
		for _, c := range s.Comms {
			byRank[c.Rank] = c.PCIBusID
		}
	}
	if len(byRank) != 2 || byRank[0] == "" || byRank[1] == "" {
		t.Fatalf("fixture %s names bus IDs %v; want ranks 0 and 1", name, byRank)
	}
	return []GPURef{{Index: 4, PCIBusID: byRank[0], PIDs: []uint32{4242}}, {Index: 5, PCIBusID: byRank[1]}}
}

type ncclHarness struct {
	c      *ncclCollector
	e      *engine.Engine
	shared *Shared
	now    time.Time
	last   *sample.NCCL
}

func newNCCLHarness(t *testing.T, o ncclOptions, gpus []GPURef) *ncclHarness {
	t.Helper()
	h := &ncclHarness{shared: &Shared{}, now: time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)}
	h.shared.SetGPUs(gpus)
	o.now = func() time.Time { return h.now }
	if o.hostname == "" {
		o.hostname = "gpudiag-test-node.example.com"
	}
	c, err := newNCCLCollector(Config{Shared: h.shared}, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	h.c = c
	h.e = engine.New(engine.Options{Interval: testEngineInterval,
		OnSample: func(_ string, _ time.Time, s any) { h.last = s.(*sample.NCCL) }})
	h.e.Add(asEngine(c), 0)
	return h
}

func (h *ncclHarness) sample(t *testing.T) *sample.NCCL {
	t.Helper()
	h.last = nil
	h.e.SampleOnce(context.Background())
	if h.last == nil {
		t.Fatalf("no sample: %+v", h.e.Statuses())
	}
	return h.last
}

// copyFixture copies a fixture into dir with the given mtime.
func copyFixture(t *testing.T, name, dst string, mtime time.Time) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(ncclFixtureDir, name))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(dst, mtime, mtime); err != nil {
		t.Fatal(err)
	}
}

// ncclExpected renders the exposition one fixture should produce on GPUs 4
// and 5: the same transports, fallbacks and overrides for both ranks.
func ncclExpected(bytes, lines int, transports, fallbacks []string, env [][2]string) string {
	var b strings.Builder
	gpus := []string{"4", "5"}
	w := func(format string, a ...any) { fmt.Fprintf(&b, format+"\n", a...) }
	w("# HELP gpudiag_nccl_communicator_inits_total %s", helpOf(ncclCommInitsDesc))
	w("# TYPE gpudiag_nccl_communicator_inits_total counter")
	for _, g := range gpus {
		w(`gpudiag_nccl_communicator_inits_total{gpu=%q} 1`, g)
	}
	if len(env) > 0 {
		w("# HELP gpudiag_nccl_env_override_info %s", helpOf(ncclEnvDesc))
		w("# TYPE gpudiag_nccl_env_override_info gauge")
		for _, g := range gpus {
			for _, e := range env {
				w(`gpudiag_nccl_env_override_info{gpu=%q,value=%q,variable=%q} 1`, g, e[1], e[0])
			}
		}
	}
	w("# HELP gpudiag_nccl_fallback %s", helpOf(ncclFallbackDesc))
	w("# TYPE gpudiag_nccl_fallback gauge")
	kinds := append([]string(nil), nccl.FallbackKinds...)
	sort.Strings(kinds)
	on := map[string]bool{}
	for _, f := range fallbacks {
		on[f] = true
	}
	for _, g := range gpus {
		for _, k := range kinds {
			w(`gpudiag_nccl_fallback{gpu=%q,kind=%q} %d`, g, k, map[bool]int{false: 0, true: 1}[on[k]])
		}
	}
	w("# HELP gpudiag_nccl_log_bytes_total %s", helpOf(ncclBytesDesc))
	w("# TYPE gpudiag_nccl_log_bytes_total counter")
	w("gpudiag_nccl_log_bytes_total %d", bytes)
	w("# HELP gpudiag_nccl_log_files %s", helpOf(ncclFilesDesc))
	w("# TYPE gpudiag_nccl_log_files gauge")
	w("gpudiag_nccl_log_files 1")
	w("# HELP gpudiag_nccl_log_lines_total %s", helpOf(ncclLinesDesc))
	w("# TYPE gpudiag_nccl_log_lines_total counter")
	w("gpudiag_nccl_log_lines_total %d", lines)
	w("# HELP gpudiag_nccl_transport_info %s", helpOf(ncclTransportDesc))
	w("# TYPE gpudiag_nccl_transport_info gauge")
	for _, g := range gpus {
		for _, tr := range transports {
			w(`gpudiag_nccl_transport_info{gpu=%q,transport=%q} 1`, g, tr)
		}
	}
	w("# HELP gpudiag_nccl_version_info %s", helpOf(ncclVersionDesc))
	w("# TYPE gpudiag_nccl_version_info gauge")
	w(`gpudiag_nccl_version_info{version="2.28.9+cuda13.0"} 1`)
	w("# HELP gpudiag_nccl_warnings_total %s", helpOf(ncclWarningsDesc))
	w("# TYPE gpudiag_nccl_warnings_total counter")
	for _, g := range gpus {
		w(`gpudiag_nccl_warnings_total{gpu=%q} 0`, g)
	}
	return b.String()
}

func TestNCCLFixtureMetrics(t *testing.T) {
	for _, tc := range []struct {
		fixture    string
		lines      int
		transports []string
		fallbacks  []string
		env        [][2]string
	}{
		{"nccl_default.log", 528, []string{"P2P"}, nil,
			[][2]string{{"NCCL_NVLS_ENABLE", "0"}}},
		{"nccl_p2pdisabled.log", 189, []string{"SHM"}, []string{"p2p_disabled"},
			[][2]string{{"NCCL_NVLS_ENABLE", "0"}, {"NCCL_P2P_DISABLE", "1"}}},
		// Both GPUs are this node's, so NET between them is also net_within_node.
		{"nccl_socket.log", 166, []string{"NET/Socket"},
			[]string{"p2p_disabled", "shm_disabled", "socket_instead_of_ib", "net_within_node"},
			[][2]string{{"NCCL_NVLS_ENABLE", "0"}, {"NCCL_P2P_DISABLE", "1"}, {"NCCL_SHM_DISABLE", "1"}}},
	} {
		t.Run(tc.fixture, func(t *testing.T) {
			dir := t.TempDir()
			h := newNCCLHarness(t, ncclOptions{globs: []string{filepath.Join(dir, "*.log")}}, ncclFixtureGPUs(t, tc.fixture))
			path := filepath.Join(dir, tc.fixture)
			copyFixture(t, tc.fixture, path, h.now.Add(-time.Minute))
			fi, _ := os.Stat(path)
			h.sample(t)
			want := ncclExpected(int(fi.Size()), tc.lines, tc.transports, tc.fallbacks, tc.env)
			if err := testutil.GatherAndCompare(h.e, strings.NewReader(want), ncclMetricNames...); err != nil {
				t.Fatal(err)
			}
		})
	}
}

var ncclMetricNames = []string{
	"gpudiag_nccl_communicator_inits_total", "gpudiag_nccl_env_override_info", "gpudiag_nccl_fallback",
	"gpudiag_nccl_log_bytes_total", "gpudiag_nccl_log_files", "gpudiag_nccl_log_lines_total",
	"gpudiag_nccl_transport_info", "gpudiag_nccl_version_info", "gpudiag_nccl_warnings_total",
}

// helpOf reads a descriptor's help text back, so the expected exposition
// does not repeat it.
func helpOf(d fmt.Stringer) string {
	s := d.String()
	i := strings.Index(s, `help: "`) + len(`help: "`)
	return s[i:strings.Index(s, `", constLabels`)]
}

// The sample names each process, the path it took and the one it should
// have: what /diagnose and the analyzers report.
func TestNCCLSampleNamesProcessAndPaths(t *testing.T) {
	dir := t.TempDir()
	h := newNCCLHarness(t, ncclOptions{globs: []string{filepath.Join(dir, "*.log")}}, ncclFixtureGPUs(t, "nccl_socket.log"))
	copyFixture(t, "nccl_socket.log", filepath.Join(dir, "job.log"), h.now.Add(-time.Minute))
	s := h.sample(t)

	if len(s.GPUs) != 2 || s.GPUs[0] != (sample.NCCLGPU{GPU: 4, PCIBusID: "0000:00:06.0", Matched: true, File: 0, Process: 0}) ||
		s.GPUs[1] != (sample.NCCLGPU{GPU: 5, PCIBusID: "0000:00:07.0", Matched: true, File: 0, Process: 1}) {
		t.Fatalf("gpus %+v", s.GPUs)
	}
	p := s.Process(s.GPUs[0])
	if p.Host != "vm" || p.PID != 908 || !p.Current || !p.Ended || !p.NVLinkInTopology {
		t.Fatalf("process %+v", p)
	}
	want := []sample.NCCLFallback{
		{Kind: "p2p_disabled", Taken: "NET/Socket", Expected: "P2P over NVLink", Evidence: "NCCL_P2P_DISABLE=1 set by environment"},
		{Kind: "shm_disabled", Taken: "NET/Socket", Expected: "P2P over NVLink", Evidence: "NCCL_SHM_DISABLE=1 set by environment"},
		{Kind: "socket_instead_of_ib", Taken: "NET/Socket", Expected: "NET/IB+GDRDMA",
			Evidence: "4 connections via NET/Socket/0; NET/IB : No device found; socket interfaces eth0:192.0.2.2"},
		{Kind: "net_within_node", Taken: "NET/Socket", Expected: "P2P over NVLink",
			Evidence: "ranks 0 and 1 of comm 0x76e3b669f8a410c run on this node yet connect via NET/Socket/0 (4 connections between ranks on this node)"},
	}
	if !reflect.DeepEqual(p.Fallbacks, want) {
		t.Fatalf("fallbacks\n got %+v\nwant %+v", p.Fallbacks, want)
	}
	wantComm := []sample.NCCLComm{{CommID: "0x76e3b669f8a410c", Rank: 0, NRanks: 2, CudaDev: 0, NVMLDev: 0,
		PCIBusID: "0000:00:06.0", NNodes: 2, LocalRanks: 1, Complete: true, Ended: true}}
	if !reflect.DeepEqual(p.Comms, wantComm) {
		t.Fatalf("comms %+v", p.Comms)
	}
	if s.SizeBytes() < 1000 {
		t.Fatalf("size estimate %d is too low for two processes", s.SizeBytes())
	}
}

// Three jobs ran one after the other on the same two GPUs; their logs are
// all still there. Each GPU shows the latest job only.
func TestNCCLNewestJobWinsPerGPU(t *testing.T) {
	dir := t.TempDir()
	h := newNCCLHarness(t, ncclOptions{globs: []string{filepath.Join(dir, "*.log")}}, ncclFixtureGPUs(t, "nccl_default.log"))
	copyFixture(t, "nccl_socket.log", filepath.Join(dir, "a.log"), h.now.Add(-3*time.Minute))
	copyFixture(t, "nccl_default.log", filepath.Join(dir, "b.log"), h.now.Add(-1*time.Minute))
	copyFixture(t, "nccl_p2pdisabled.log", filepath.Join(dir, "c.log"), h.now.Add(-2*time.Minute))
	s := h.sample(t)
	if len(s.Files) != 3 || len(s.GPUs) != 2 {
		t.Fatalf("%d files, gpus %+v", len(s.Files), s.GPUs)
	}
	for _, g := range s.GPUs {
		if s.Files[g.File].Path != filepath.Join(dir, "b.log") {
			t.Fatalf("gpu %d shows %s; want the newest log b.log", g.GPU, s.Files[g.File].Path)
		}
	}
	want := `
# HELP gpudiag_nccl_transport_info ` + helpOf(ncclTransportDesc) + `
# TYPE gpudiag_nccl_transport_info gauge
gpudiag_nccl_transport_info{gpu="4",transport="P2P"} 1
gpudiag_nccl_transport_info{gpu="5",transport="P2P"} 1
# HELP gpudiag_nccl_log_files ` + helpOf(ncclFilesDesc) + `
# TYPE gpudiag_nccl_log_files gauge
gpudiag_nccl_log_files 3
`
	if err := testutil.GatherAndCompare(h.e, strings.NewReader(want), "gpudiag_nccl_transport_info", "gpudiag_nccl_log_files"); err != nil {
		t.Fatal(err)
	}
}

// A finished job (Destroy COMPLETE) stays visible for the retention, then
// its GPUs' series go; a vanished log is forgotten a retention later.
func TestNCCLRetention(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "job.log")
	h := newNCCLHarness(t, ncclOptions{globs: []string{filepath.Join(dir, "*.log")}, retention: 10 * time.Minute},
		ncclFixtureGPUs(t, "nccl_socket.log"))
	copyFixture(t, "nccl_socket.log", path, h.now.Add(-time.Minute))
	count := func() int {
		n, err := testutil.GatherAndCount(h.e, "gpudiag_nccl_fallback")
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	h.sample(t)
	if n := count(); n != 2*len(nccl.FallbackKinds) {
		t.Fatalf("%d fallback series just after the job; want %d", n, 2*len(nccl.FallbackKinds))
	}
	// The job ended when its log was last written, a minute before the
	// first sample: the retention runs from there.
	h.now = h.now.Add(8*time.Minute + 59*time.Second)
	h.sample(t)
	if count() == 0 {
		t.Fatal("series gone before the retention")
	}
	h.now = h.now.Add(2 * time.Second)
	s := h.sample(t)
	if count() != 0 || len(s.GPUs) != 0 || len(s.Files) != 1 || s.Files[0].Processes[0].Current {
		t.Fatalf("after the retention: %d series, sample %+v", count(), s.GPUs)
	}

	// An old finished log found at start-up is not taken for a fresh job.
	h2 := newNCCLHarness(t, ncclOptions{globs: []string{filepath.Join(dir, "*.log")}, retention: 10 * time.Minute},
		ncclFixtureGPUs(t, "nccl_socket.log"))
	h2.now = h.now.Add(time.Hour)
	if s := h2.sample(t); len(s.GPUs) != 0 {
		t.Fatalf("hour-old finished log exported: %+v", s.GPUs)
	}

	// A vanished log: kept for the retention, then forgotten.
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	h.sample(t)
	if s := h.sample(t); len(s.Files) != 1 || s.Files[0].Exists {
		t.Fatalf("vanished log right away: %+v", s.Files)
	}
	h.now = h.now.Add(11 * time.Minute)
	if s := h.sample(t); len(s.Files) != 0 {
		t.Fatalf("vanished log kept past the retention: %+v", s.Files)
	}
}

// A log rewritten by the next job (rotation) starts the state over: the old
// job's P2P is not mixed with the new job's sockets.
func TestNCCLRotationStartsOver(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "rank.log")
	h := newNCCLHarness(t, ncclOptions{globs: []string{path}}, ncclFixtureGPUs(t, "nccl_default.log"))
	copyFixture(t, "nccl_default.log", path, h.now.Add(-time.Minute))
	h.sample(t)
	if err := os.Rename(path, path+".1"); err != nil {
		t.Fatal(err)
	}
	copyFixture(t, "nccl_socket.log", path, h.now)
	s := h.sample(t)
	p := s.Process(s.GPUs[0])
	if !reflect.DeepEqual(p.Transports, []sample.NCCLTransport{{Transport: "NET/Socket", Connections: 4}}) || p.Lines != 84 {
		t.Fatalf("after rotation: transports %+v, %d lines", p.Transports, p.Lines)
	}
}

// Logs named through Shared (the process discovery's NCCL_DEBUG_FILE
// paths) are followed without any glob; with no source at all the
// collector reads nothing.
func TestNCCLSharedLogFilesAndNoSource(t *testing.T) {
	dir := t.TempDir()
	h := newNCCLHarness(t, ncclOptions{}, ncclFixtureGPUs(t, "nccl_p2pdisabled.log"))
	s := h.sample(t)
	if len(s.Files) != 0 || s.BytesTotal != 0 {
		t.Fatalf("no source, yet %+v", s)
	}
	want := `
# HELP gpudiag_nccl_log_files ` + helpOf(ncclFilesDesc) + `
# TYPE gpudiag_nccl_log_files gauge
gpudiag_nccl_log_files 0
`
	if err := testutil.GatherAndCompare(h.e, strings.NewReader(want), "gpudiag_nccl_log_files", "gpudiag_nccl_fallback"); err != nil {
		t.Fatal(err)
	}

	path := filepath.Join(dir, nccl.ExpandDebugFile("nccl.%h.%p.log", "vm.cluster.local", 748))
	copyFixture(t, "nccl_p2pdisabled.log", path, h.now)
	h.shared.SetNCCLLogFiles([]NCCLLogFile{{Path: path}, {Path: "/nonexistent/nccl.log"}})
	if got := ncclLogPaths(h.shared); !reflect.DeepEqual(got, []string{path, "/nonexistent/nccl.log"}) {
		t.Fatalf("published %v", got)
	}
	s = h.sample(t)
	if len(s.GPUs) != 2 || s.Files[s.GPUs[0].File].Path != filepath.Join(dir, "nccl.vm.748.log") {
		t.Fatalf("files %+v gpus %+v", s.Files, s.GPUs)
	}
	if n, _ := testutil.GatherAndCount(h.e, "gpudiag_nccl_fallback"); n != 2*len(nccl.FallbackKinds) {
		t.Fatalf("%d fallback series", n)
	}
}

// Without this node's GPU list (no NVML) the GPU is NCCL's nvmlDev; with a
// list that lacks the log's bus IDs the log is another node's and names no
// GPU here.
func TestNCCLGPUAttribution(t *testing.T) {
	dir := t.TempDir()
	copyFixture(t, "nccl_default.log", filepath.Join(dir, "a.log"), time.Now())
	glob := []string{filepath.Join(dir, "*.log")}

	h := newNCCLHarness(t, ncclOptions{globs: glob}, nil)
	s := h.sample(t)
	if len(s.GPUs) != 2 || s.GPUs[0] != (sample.NCCLGPU{GPU: 0, PCIBusID: "0000:00:06.0", File: 0, Process: 0}) ||
		s.GPUs[1] != (sample.NCCLGPU{GPU: 1, PCIBusID: "0000:00:07.0", File: 0, Process: 1}) {
		t.Fatalf("without GPU list: %+v", s.GPUs)
	}

	other := newNCCLHarness(t, ncclOptions{globs: glob}, []GPURef{{Index: 0, PCIBusID: "0000:18:00.0"}})
	if s := other.sample(t); len(s.GPUs) != 0 || len(s.Files[0].Processes) != 2 {
		t.Fatalf("another node's log attributed: %+v", s.GPUs)
	}
}

// A log larger than the per-sample budget is caught up over samples.
func TestNCCLReadBudget(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "big.log")
	copyFixture(t, "nccl_default.log", path, time.Now())
	fi, _ := os.Stat(path)
	h := newNCCLHarness(t, ncclOptions{globs: []string{path}, maxReadBytes: 16 << 10}, ncclFixtureGPUs(t, "nccl_default.log"))
	var s *sample.NCCL
	for i := 0; i < 3; i++ {
		s = h.sample(t)
		if want := min(uint64(16<<10)*uint64(i+1), uint64(fi.Size())); s.BytesTotal != want {
			t.Fatalf("sample %d read %d bytes in all; want %d", i, s.BytesTotal, want)
		}
	}
	if s.LinesTotal != 528 {
		t.Fatalf("%d lines after catching up; want 528", s.LinesTotal)
	}
}

func TestNCCLBadGlob(t *testing.T) {
	if _, err := newNCCLCollector(Config{}, ncclOptions{globs: []string{"/var/log/[nccl"}}); err == nil {
		t.Fatal("malformed glob accepted")
	}
}

// promtool's linter must have nothing to say about the collector's output,
// with every fixture's series present at once.
func TestNCCLPromtool(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Skip("promtool not installed")
	}
	dir := t.TempDir()
	h := newNCCLHarness(t, ncclOptions{globs: []string{filepath.Join(dir, "*", "*.log")}}, nil)
	for i, name := range ncclFixtures {
		sub := filepath.Join(dir, fmt.Sprint(i))
		os.Mkdir(sub, 0o755)
		copyFixture(t, name, filepath.Join(sub, name), h.now)
	}
	h.sample(t)
	mfs, err := h.e.Gather()
	if err != nil {
		t.Fatal(err)
	}
	text := exposition(t, mfs)
	cmd := exec.Command(promtool, "check", "metrics")
	cmd.Stdin = bytes.NewReader(text)
	out, err := cmd.CombinedOutput()
	if err != nil || len(out) > 0 {
		t.Fatalf("promtool check metrics: %v\n%s\n%s", err, out, text)
	}
	if !bytes.Contains(text, []byte("gpudiag_nccl_fallback{")) {
		t.Fatal("exposition lacks NCCL series; the check proved nothing")
	}
}

// One file with the ranks of two nodes whose GPUs sit at the same bus IDs
// (srun gathering every rank's output). When the log names this node, only
// its lines count; when it does not (containers with their own host names),
// the bus IDs decide and the two ranks are taken for one node's.
func TestNCCLMultiNodeLog(t *testing.T) {
	dir := t.TempDir()
	b, err := os.ReadFile(filepath.Join(ncclFixtureDir, "nccl_socket.log"))
	if err != nil {
		t.Fatal(err)
	}
	b = bytes.ReplaceAll(b, []byte("vm:909:"), []byte("vm2:909:"))
	path := filepath.Join(dir, "job.log")
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	gpus := ncclFixtureGPUs(t, "nccl_socket.log")

	h := newNCCLHarness(t, ncclOptions{globs: []string{path}, hostname: "vm.cluster.local"}, gpus)
	s := h.sample(t)
	if len(s.GPUs) != 1 || s.GPUs[0].GPU != 4 || s.Process(s.GPUs[0]).Host != "vm" {
		t.Fatalf("gpus %+v; want GPU 4 only, from host vm", s.GPUs)
	}
	for _, fb := range s.Process(s.GPUs[0]).Fallbacks {
		if fb.Kind == nccl.FallbackNetWithinNode {
			t.Fatalf("rank 1 runs on vm2, yet %+v", fb)
		}
	}

	h = newNCCLHarness(t, ncclOptions{globs: []string{path}, hostname: "pod-7f9c"}, gpus)
	s = h.sample(t)
	if len(s.GPUs) != 2 {
		t.Fatalf("gpus %+v; want both, by bus ID", s.GPUs)
	}
	for _, g := range s.GPUs {
		if got := s.Process(g).Fallbacks; got[len(got)-1].Kind != nccl.FallbackNetWithinNode {
			t.Fatalf("gpu %d fallbacks %+v; want net_within_node last", g.GPU, got)
		}
	}
}

// Ranks placed from the log alone: without commId (NCCL before 2.18) the
// communicator is named by its size and order, so two ranks of this node
// connected over sockets are still a within-node fallback; two hosts that
// share a name but bootstrapped on different addresses are two hosts.
func TestNCCLNetWithinNodeFromTheLog(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(ncclFixtureDir, "nccl_socket.log"))
	if err != nil {
		t.Fatal(err)
	}
	gpus := ncclFixtureGPUs(t, "nccl_socket.log")
	within := func(log []byte, hostname string) map[int]bool {
		path := filepath.Join(t.TempDir(), "job.log")
		if err := os.WriteFile(path, log, 0o644); err != nil {
			t.Fatal(err)
		}
		s := newNCCLHarness(t, ncclOptions{globs: []string{path}, hostname: hostname}, gpus).sample(t)
		out := map[int]bool{}
		for _, g := range s.GPUs {
			for _, fb := range s.Process(g).Fallbacks {
				out[g.GPU] = out[g.GPU] || fb.Kind == nccl.FallbackNetWithinNode
			}
		}
		return out
	}
	noCommID := bytes.ReplaceAll(b, []byte(" commId 0x76e3b669f8a410c"), nil)
	if got := within(noCommID, "pod-7f9c"); !got[4] || !got[5] {
		t.Fatalf("without commId: net_within_node on GPUs %v; want 4 and 5", got)
	}
	// Both processes are "vm", the node's own name, but pid 909 bootstrapped
	// on another address: another node of the same name.
	var twoHosts [][]byte
	for _, line := range bytes.SplitAfter(b, []byte("\n")) {
		if bytes.HasPrefix(line, []byte("vm:909:")) {
			line = bytes.ReplaceAll(line, []byte("eth0:192.0.2.2"), []byte("eth0:192.0.2.3"))
		}
		twoHosts = append(twoHosts, line)
	}
	if got := within(bytes.Join(twoHosts, nil), "vm.cluster.local"); got[4] || got[5] {
		t.Fatalf("two hosts named vm: net_within_node on GPUs %v", got)
	}
}

// Logs that come and go faster than the retention (a job per minute) keep
// at most twice max-files followers.
func TestNCCLFollowersStayBounded(t *testing.T) {
	dir := t.TempDir()
	h := newNCCLHarness(t, ncclOptions{globs: []string{filepath.Join(dir, "*.log")}, maxFiles: 2}, nil)
	for i := 0; i < 10; i++ {
		path := filepath.Join(dir, fmt.Sprintf("job%d.log", i))
		copyFixture(t, "nccl_p2pdisabled.log", path, h.now)
		h.sample(t)
		os.Remove(path)
		h.now = h.now.Add(time.Second)
	}
	if n := len(h.c.followers); n != 4 {
		t.Fatalf("%d followers; want 2×max-files = 4", n)
	}
}

// ncclLogPaths are the paths of the published NCCL logs.
func ncclLogPaths(s *Shared) []string {
	var out []string
	for _, l := range s.NCCLLogFiles() {
		out = append(out, l.Path)
	}
	return out
}

// Past --collector.nccl.max-files the most recently modified logs are
// followed and only they: the log_files gauge never exceeds the limit,
// the sample counts the logs skipped, a log that lost its place keeps its
// state but is no longer read, and the operator is warned once, not every
// sample, while the count stays the same.
func TestNCCLMaxFilesHonest(t *testing.T) {
	dir := t.TempDir()
	h := newNCCLHarness(t, ncclOptions{globs: []string{filepath.Join(dir, "*.log")}, maxFiles: 2}, nil)
	core, logs := observer.New(zapcore.DebugLevel)
	h.c.log = zap.New(core)
	for i, age := range []time.Duration{3, 2, 1} {
		copyFixture(t, "nccl_p2pdisabled.log", filepath.Join(dir, fmt.Sprintf("job%d.log", i)), h.now.Add(-age*time.Minute))
	}
	gauge := func() float64 {
		t.Helper()
		mfs, err := h.e.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() == "gpudiag_nccl_log_files" {
				return mf.GetMetric()[0].GetGauge().GetValue()
			}
		}
		t.Fatal("no gpudiag_nccl_log_files")
		return 0
	}
	warnings := func() int {
		return logs.FilterLevelExact(zapcore.WarnLevel).FilterMessageSnippet("max-files").Len()
	}
	s := h.sample(t)
	if g := gauge(); g != 2 || s.SkippedFiles != 1 || len(s.Files) != 2 {
		t.Fatalf("gauge %v, skipped %d, files %d; want 2, 1 and the two newest", g, s.SkippedFiles, len(s.Files))
	}
	if warnings() != 1 {
		t.Fatalf("%d warnings; want one:\n%v", warnings(), logs.All())
	}
	h.sample(t)
	if warnings() != 1 {
		t.Fatalf("the same count warned again: %d warnings", warnings())
	}

	// A fourth, newer log takes job1's place: job1 is retained, not read.
	before := s.LinesTotal
	copyFixture(t, "nccl_p2pdisabled.log", filepath.Join(dir, "job3.log"), h.now)
	s = h.sample(t)
	if g := gauge(); g != 2 || s.SkippedFiles != 2 {
		t.Fatalf("gauge %v, skipped %d; want 2 and 2", g, s.SkippedFiles)
	}
	retained := 0
	for _, f := range s.Files {
		if f.Retained {
			retained++
			if filepath.Base(f.Path) != "job1.log" || !f.Exists {
				t.Errorf("retained %+v; want job1.log, still there", f)
			}
		}
	}
	if retained != 1 {
		t.Fatalf("%d files retained; want job1.log", retained)
	}
	read := s.LinesTotal - before
	f, err := os.OpenFile(filepath.Join(dir, "job1.log"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString("host:1:1 [0] NCCL INFO NCCL version 2.18.3+cuda12.2\n"); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if err := os.Chtimes(filepath.Join(dir, "job1.log"), h.now.Add(-time.Hour), h.now.Add(-time.Hour)); err != nil {
		t.Fatal(err)
	}
	s2 := h.sample(t)
	if s2.LinesTotal != s.LinesTotal {
		t.Fatalf("read %d lines from logs no longer followed (%d for the new log)", s2.LinesTotal-s.LinesTotal, read)
	}
}

// A log glob lists at most its bound of a directory's entries per sample
// (users may fill the directory), and otherwise matches as filepath.Glob.
func TestNCCLBoundedGlob(t *testing.T) {
	dir := t.TempDir()
	for i := 0; i < 10; i++ {
		hosttest.WriteFile(t, filepath.Join(dir, "sub", fmt.Sprintf("job%d.log", i)), "")
	}
	hosttest.WriteFile(t, filepath.Join(dir, "sub", "other.txt"), "")
	fifo := filepath.Join(dir, "fifo.d")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, pattern := range []string{
		filepath.Join(dir, "sub", "*.log"), filepath.Join(dir, "s*", "job[0-3].log"),
		filepath.Join(dir, "sub", "job1.log"), filepath.Join(dir, "*.d", "*.log"),
	} {
		want, _ := filepath.Glob(pattern)
		got, truncated := boundedGlob(pattern, 100)
		if !reflect.DeepEqual(got, want) || truncated {
			t.Errorf("%s: %q (truncated %v); want %q", pattern, got, truncated, want)
		}
	}
	got, truncated := boundedGlob(filepath.Join(dir, "sub", "*"), 4)
	if len(got) > 4 || !truncated {
		t.Errorf("bound 4 of 11 entries: %q, truncated %v", got, truncated)
	}
}

// A rank that creates and destroys a communicator every 10 s after its
// start-up, as the log shows it: the window's readings fire
// nccl_communicator_churn for it, and only for it.
func TestNCCLCommunicatorChurnFromLog(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "job.log")
	h := newNCCLHarness(t, ncclOptions{globs: []string{filepath.Join(dir, "*.log")}}, ncclFixtureGPUs(t, "nccl_default.log"))
	copyFixture(t, "nccl_default.log", path, h.now.Add(-time.Minute))
	var history []sample.Timed[*sample.NCCL]
	read := func() {
		history = append(history, sample.Timed[*sample.NCCL]{Time: h.now, Sample: h.sample(t)})
	}
	read()
	h.now = h.now.Add(time.Minute)
	read()
	for i := range 6 {
		f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		ptr := fmt.Sprintf("0x5%07d", i)
		fmt.Fprintf(f, "vm:586:586 [0] NCCL INFO ncclCommInitRankConfig comm %s rank 0 nranks 2 cudaDev 0 nvmlDev 0 busId 60 commId 0x9%07d - Init COMPLETE\n", ptr, i)
		fmt.Fprintf(f, "vm:586:586 [0] NCCL INFO comm %s rank 0 nranks 2 cudaDev 0 busId 60 - Destroy COMPLETE\n", ptr)
		f.Close()
		h.now = h.now.Add(10 * time.Second)
		read()
	}
	var got []string
	for _, f := range analyzers.Audit(analyzers.AuditInput{NCCLHistory: history}) {
		if f.Check == "nccl_communicator_churn" {
			got = append(got, f.Summary)
		}
	}
	if len(got) != 1 || !strings.Contains(got[0], "process vm:586 (log ") || !strings.Contains(got[0], "created 6 NCCL communicators") {
		t.Fatalf("churn findings %q; want one for vm:586", got)
	}
}
