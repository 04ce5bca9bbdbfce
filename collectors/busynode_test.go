package collectors

// The daemon's cost on a busy 8-GPU node, reproduced without a GPU: a
// process tree shaped like torchrun's (8 ranks, each with DataLoader
// workers, every process holding tens of OS threads and a few TCP
// connections, every rank mapping libnccl) runs beside the daemon's
// collectors, built as cmd/exporter builds them, with the GPU backend
// replaced by fake GPUs that list the ranks as their processes. The
// per-process collectors (gpuprocess, ncclproc, tcp) then do the work they
// do on a real node.
//
// Opt-in, it runs for minutes:
//
//	GPUDIAG_BUSY_NODE_SECONDS=600 go test -count=1 -timeout 30m -run '^TestBusyNodeCost$' -v ./collectors
//
// GPUDIAG_BUSY_NODE_WORKERS sets the workers per rank (default 8);
// GPUDIAG_BUSY_NODE_OUT names a file for the results as JSON.
// scripts/bench/busynode.sh runs it at two revisions side by side.
//
// As a memory soak (scripts/soak/busynode_soak.sh):
// GPUDIAG_BUSY_NODE_SPEED (default 1) divides every clock of the daemon by
// that factor (48: a day of sampling in 30 minutes; what is not divided is
// listed where the collectors are built); GPUDIAG_BUSY_NODE_CHURN (wall
// seconds, default 0: off) replaces every rank's workers by new processes
// that often, as DataLoader workers restart each epoch; and
// GPUDIAG_BUSY_NODE_SERIES names a CSV (mode 0600) that gets a row of
// memory, goroutines, descriptors and window size every 10 s.
//
// This file uses only APIs that exist at main of 2026-11-25, so the script
// can copy it into older worktrees.

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/gpudiag/gpudiag/analyzers"
	"github.com/gpudiag/gpudiag/diagnose"
	"github.com/gpudiag/gpudiag/engine"
	"github.com/gpudiag/gpudiag/gpu"
	"github.com/gpudiag/gpudiag/gpu/nvmlgpu"
	"github.com/gpudiag/gpudiag/gpu/nvmlgpu/nvmlfake"
	"github.com/gpudiag/gpudiag/sample"
	"github.com/gpudiag/gpudiag/server"
)

const (
	busyNodeSecondsEnv = "GPUDIAG_BUSY_NODE_SECONDS"
	busyNodeWorkersEnv = "GPUDIAG_BUSY_NODE_WORKERS"
	busyNodeOutEnv     = "GPUDIAG_BUSY_NODE_OUT"
	busyNodeSpeedEnv   = "GPUDIAG_BUSY_NODE_SPEED"
	busyNodeChurnEnv   = "GPUDIAG_BUSY_NODE_CHURN"
	busyNodeSeriesEnv  = "GPUDIAG_BUSY_NODE_SERIES"

	// The children are this test binary re-executed with a role.
	busyNodeRoleEnv = "GPUDIAG_BUSY_NODE_ROLE" // hub, rank or worker
	busyNodeAddrEnv = "GPUDIAG_BUSY_NODE_ADDR" // the hub's listener
	busyNodeLibEnv  = "GPUDIAG_BUSY_NODE_LIB"  // the libnccl file a rank maps

	busyNodeRanks = 8
	// busyNodeThreads is the OS threads each rank and worker holds: PyTorch
	// processes run tens (OpenMP, CUDA, NCCL, pin-memory, gloo threads).
	busyNodeThreads = 40
	// busyNodeConns is the loopback TCP connections of each rank and worker
	// (NCCL's bootstrap and proxy sockets, the store, gloo).
	busyNodeConns = 4
	// busyNodeLib is the name the ranks' mapped file has: ncclproc tells
	// an NCCL process by a mapped libnccl* and reads the version from it.
	busyNodeLib = "libnccl.so.2.21.5"
	// busyNodeScrapeEvery is Prometheus's usual scrape interval.
	busyNodeScrapeEvery = 15 * time.Second
)

// A child of the benchmark runs its role and never returns to the tests.
func init() {
	if role := os.Getenv(busyNodeRoleEnv); role != "" {
		os.Exit(busyNodeChild(role))
	}
}

// busyNodeChild is a process of the tree. fd 3 is a pipe to the test, where
// every process writes "<role> <pid> <ppid>" once it is set up; the hub also
// gets the test's listener as fd 4.
func busyNodeChild(role string) int {
	ready := os.NewFile(3, "ready")
	fail := func(err error) int {
		fmt.Fprintf(os.Stderr, "busynode %s %d: %v\n", role, os.Getpid(), err)
		return 2
	}
	if role == "hub" {
		ln, err := net.FileListener(os.NewFile(4, "listener"))
		if err != nil {
			return fail(err)
		}
		fmt.Fprintf(ready, "hub %d %d\n", os.Getpid(), os.Getppid())
		for {
			c, err := ln.Accept()
			if err != nil {
				return fail(err)
			}
			go func() {
				io.Copy(c, c) // echo
				// Close when the peer went (a churned worker), so
				// the hub does not pile up CLOSE_WAIT sockets that
				// the tcp collector would list.
				c.Close()
			}()
		}
	}

	// Threads: each goroutine locked to its OS thread and blocked keeps
	// that thread, as a blocked native thread of a training process would.
	// The Go runtime's own threads count towards the total.
	block := make(chan struct{})
	for range busyNodeThreads - 6 {
		go func() {
			runtime.LockOSThread()
			<-block
		}()
	}

	if role == "rank" {
		f, err := os.Open(os.Getenv(busyNodeLibEnv))
		if err != nil {
			return fail(err)
		}
		if _, err := syscall.Mmap(int(f.Fd()), 0, 64<<10, syscall.PROT_READ, syscall.MAP_PRIVATE); err != nil {
			return fail(err)
		}
		f.Close()
		n, _ := strconv.Atoi(os.Getenv(busyNodeWorkersEnv))
		self, err := os.Executable()
		if err != nil {
			return fail(err)
		}
		spawn := func() ([]*exec.Cmd, error) {
			var workers []*exec.Cmd
			for range n {
				w := exec.Command(self)
				w.Env = append(os.Environ(), busyNodeRoleEnv+"=worker")
				w.Stderr = os.Stderr
				w.ExtraFiles = []*os.File{ready}
				w.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
				if err := w.Start(); err != nil {
					return workers, err
				}
				workers = append(workers, w)
			}
			return workers, nil
		}
		workers, err := spawn()
		if err != nil {
			return fail(err)
		}
		// SIGUSR1 is a new epoch: the workers exit and new ones (new
		// PIDs, same shape) start, as DataLoader workers do without
		// persistent_workers. They are reaped before the new ones
		// start, so no zombie child is left for the collectors to see.
		epoch := make(chan os.Signal, 1)
		signal.Notify(epoch, syscall.SIGUSR1)
		go func() {
			for range epoch {
				for _, w := range workers {
					w.Process.Kill()
					w.Wait()
				}
				if workers, err = spawn(); err != nil {
					os.Exit(fail(err))
				}
			}
		}()
	}

	var conns []net.Conn
	for range busyNodeConns {
		c, err := net.Dial("tcp", os.Getenv(busyNodeAddrEnv))
		if err != nil {
			return fail(err)
		}
		conns = append(conns, c)
	}
	fmt.Fprintf(ready, "%s %d %d\n", role, os.Getpid(), os.Getppid())

	// Alive: every second a little CPU and a little traffic on each
	// connection, so CPU times, I/O counters and TCP byte counts move.
	buf := make([]byte, 256)
	x := uint64(1)
	for range time.Tick(time.Second) {
		for start := time.Now(); time.Since(start) < 200*time.Microsecond; {
			x = x*6364136223846793005 + 1442695040888963407
		}
		buf[0] = byte(x)
		for _, c := range conns {
			if _, err := c.Write(buf); err != nil {
				return fail(err)
			}
			if _, err := io.ReadFull(c, buf); err != nil {
				return fail(err)
			}
		}
	}
	return 0 // not reached: the tree is killed
}

// busyNodeTree is the running process tree.
type busyNodeTree struct {
	ranks   []int // by local rank
	procs   int   // ranks and workers
	threads int   // their OS threads, when all were up
	conns   int   // their TCP connections

	lines <-chan string // the ready lines of processes that came up later

	mu      sync.Mutex
	workers map[int][]int // by rank PID: the current epoch's
	churns  int           // epochs started after the first
}

// workersOf returns a copy of the rank's current workers.
func (tr *busyNodeTree) workersOf(rank int) []int {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return slices.Clone(tr.workers[rank])
}

// churn starts a new epoch: every rank's workers exit and new ones start.
// It returns once every new worker is up, with the tree's workers replaced.
func (tr *busyNodeTree) churn(workers int) error {
	for _, r := range tr.ranks {
		if err := syscall.Kill(r, syscall.SIGUSR1); err != nil {
			return fmt.Errorf("rank %d: %w", r, err)
		}
	}
	fresh := map[int][]int{}
	deadline := time.After(2 * time.Minute)
	for got := 0; got < len(tr.ranks)*workers; got++ {
		var line string
		select {
		case l, ok := <-tr.lines:
			if !ok {
				return fmt.Errorf("the process tree failed after %d new workers came up", got)
			}
			line = l
		case <-deadline:
			return fmt.Errorf("only %d of %d new workers came up in 2 minutes", got, len(tr.ranks)*workers)
		}
		var role string
		var pid, ppid int
		if _, err := fmt.Sscan(line, &role, &pid, &ppid); err != nil || role != "worker" {
			return fmt.Errorf("ready line %q after a churn", line)
		}
		fresh[ppid] = append(fresh[ppid], pid)
	}
	tr.mu.Lock()
	defer tr.mu.Unlock()
	for _, r := range tr.ranks {
		if len(fresh[r]) != workers {
			return fmt.Errorf("rank %d: %d new workers, want %d", r, len(fresh[r]), workers)
		}
		tr.workers[r] = fresh[r]
	}
	tr.churns++
	return nil
}

// startBusyNode starts the hub, the ranks and their workers, and waits until
// every process is set up. The tree is one process group, killed at cleanup;
// every child also dies with its parent (Pdeathsig).
func startBusyNode(t *testing.T, workers int) *busyNodeTree {
	dir := t.TempDir()
	lib := filepath.Join(dir, busyNodeLib)
	if err := os.WriteFile(lib, make([]byte, 64<<10), 0o644); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	lnFile, err := ln.(*net.TCPListener).File()
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	defer lnFile.Close()
	readR, readW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	// The pipe stays open for the workers of later epochs (churn).
	stop := make(chan struct{})
	t.Cleanup(func() {
		close(stop)
		readR.Close()
	})
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}

	var cmds []*exec.Cmd
	pgid := 0
	t.Cleanup(func() {
		if pgid != 0 {
			syscall.Kill(-pgid, syscall.SIGKILL)
		}
		for _, c := range cmds {
			c.Process.Kill()
			c.Wait()
		}
	})
	start := func(role string, env []string, extra ...*os.File) *exec.Cmd {
		c := exec.Command(self)
		c.Env = append(append(os.Environ(), busyNodeRoleEnv+"="+role, busyNodeAddrEnv+"="+addr), env...)
		c.Stderr = os.Stderr
		c.ExtraFiles = append([]*os.File{readW}, extra...)
		c.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true, Pgid: pgid}
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		cmds = append(cmds, c)
		return c
	}
	hub := start("hub", nil, lnFile)
	pgid = hub.Process.Pid
	for i := range busyNodeRanks {
		// What torchrun sets, so ncclproc's allow-listed environment is
		// a rank's.
		start("rank", []string{busyNodeLibEnv + "=" + lib, busyNodeWorkersEnv + "=" + strconv.Itoa(workers),
			"RANK=" + strconv.Itoa(i), "LOCAL_RANK=" + strconv.Itoa(i), "WORLD_SIZE=8", "LOCAL_WORLD_SIZE=8",
			"MASTER_ADDR=127.0.0.1", "MASTER_PORT=29500", "OMP_NUM_THREADS=1"})
	}
	readW.Close()

	tree := &busyNodeTree{workers: map[int][]int{}}
	byPID := map[int]int{}
	for i, c := range cmds[1:] {
		byPID[c.Process.Pid] = i
	}
	tree.ranks = make([]int, busyNodeRanks)
	want := 1 + busyNodeRanks*(1+workers)
	lines := make(chan string)
	tree.lines = lines
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(readR)
		for sc.Scan() {
			select {
			case lines <- sc.Text():
			case <-stop:
				return
			}
		}
	}()
	deadline := time.After(2 * time.Minute)
	for got := 0; got < want; got++ {
		var line string
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("the process tree failed after %d of %d processes came up", got, want)
			}
			line = l
		case <-deadline:
			t.Fatalf("only %d of %d processes came up in 2 minutes", got, want)
		}
		var role string
		var pid, ppid int
		if _, err := fmt.Sscan(line, &role, &pid, &ppid); err != nil {
			t.Fatalf("ready line %q: %v", line, err)
		}
		switch role {
		case "rank":
			tree.ranks[byPID[pid]] = pid
		case "worker":
			tree.workers[ppid] = append(tree.workers[ppid], pid)
		}
	}
	for _, r := range tree.ranks {
		tree.procs += 1 + len(tree.workers[r])
		tree.threads += procThreads(r)
		for _, w := range tree.workers[r] {
			tree.threads += procThreads(w)
		}
	}
	tree.conns = tree.procs * busyNodeConns
	return tree
}

// procThreads is /proc/<pid>/status's Threads, 0 when unreadable.
func procThreads(pid int) int {
	n, _ := procStatusKB(fmt.Sprintf("/proc/%d/status", pid), "Threads:")
	return n
}

// procStatusKB reads one numeric field of a /proc status file.
func procStatusKB(path, field string) (int, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, field); ok {
			f := strings.Fields(rest)
			if len(f) > 0 {
				return strconv.Atoi(f[0])
			}
		}
	}
	return 0, fmt.Errorf("%s: no %s", path, field)
}

// timedCollector wraps a collector as the engine runs it and adds up the
// time of its Sample and Metrics calls: wall time, and the CPU time of the
// OS thread that ran them (the goroutine is locked to its thread for the
// call; work the collector hands to other goroutines, and the garbage
// collector's background work, are not counted).
type timedCollector struct {
	engine.Collector
	// speed divides the collector's own interval (time compression,
	// GPUDIAG_BUSY_NODE_SPEED); 0 or 1 passes it through.
	speed               float64
	mu                  sync.Mutex
	calls               int
	sampleWall, metWall time.Duration
	sampleCPU, metCPU   time.Duration
}

func threadCPU() time.Duration {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts); err != nil {
		return 0
	}
	return time.Duration(ts.Nano())
}

func (c *timedCollector) Sample(ctx context.Context) (any, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	t0, c0 := time.Now(), threadCPU()
	s, err := c.Collector.Sample(ctx)
	c1, t1 := threadCPU(), time.Now()
	c.mu.Lock()
	c.calls++
	c.sampleWall += t1.Sub(t0)
	c.sampleCPU += c1 - c0
	c.mu.Unlock()
	return s, err
}

func (c *timedCollector) Metrics(s any, emit func(prometheus.Metric)) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	t0, c0 := time.Now(), threadCPU()
	c.Collector.Metrics(s, emit)
	c1, t1 := threadCPU(), time.Now()
	c.mu.Lock()
	c.metWall += t1.Sub(t0)
	c.metCPU += c1 - c0
	c.mu.Unlock()
}

// Interval and Close pass the collector's own clock (compressed by speed)
// and release through, as the engine and the daemon look for them.
func (c *timedCollector) Interval() time.Duration {
	if iv, ok := c.Collector.(engine.Intervaler); ok {
		if c.speed > 1 {
			return time.Duration(float64(iv.Interval()) / c.speed)
		}
		return iv.Interval()
	}
	return 0
}

func (c *timedCollector) Close() error {
	if cl, ok := c.Collector.(io.Closer); ok {
		return cl.Close()
	}
	return nil
}

// busyNodeResult is what the benchmark reports, also as JSON.
type busyNodeResult struct {
	Seconds        float64 `json:"seconds"`
	Ranks          int     `json:"ranks"`
	WorkersPerRank int     `json:"workers_per_rank"`
	Processes      int     `json:"processes"`
	Threads        int     `json:"threads"`
	Connections    int     `json:"tcp_connections"`
	GOMAXPROCS     int     `json:"gomaxprocs"`
	LoadAvgStart   string  `json:"loadavg_start"`
	LoadAvgEnd     string  `json:"loadavg_end"`
	// Speed is the time compression; ChurnSeconds the wall time between
	// epochs of workers (0: none).
	Speed        float64 `json:"speed,omitempty"`
	ChurnSeconds float64 `json:"churn_seconds,omitempty"`

	// CPUSeconds is the test process's user+system time over the run
	// (getrusage RUSAGE_SELF; the tree's processes are not in it).
	CPUSeconds        float64 `json:"cpu_seconds"`
	CPUPercentOfCore  float64 `json:"cpu_percent_of_core"`
	UserPercentOfCore float64 `json:"user_percent_of_core"`
	SysPercentOfCore  float64 `json:"sys_percent_of_core"`
	AllocsPerSecond   float64 `json:"allocs_per_second"`
	AllocBytesPerSec  float64 `json:"alloc_bytes_per_second"`
	GCsPerMinute      float64 `json:"gcs_per_minute"`
	RSSStartKB        int     `json:"rss_start_kb"`
	RSS1MinKB         int     `json:"rss_1min_kb,omitempty"`
	RSSEndKB          int     `json:"rss_end_kb"`
	HeapInUseEndKB    uint64  `json:"heap_inuse_end_kb"`

	Collectors []busyNodeCollector `json:"collectors"`
}

type busyNodeCollector struct {
	Name     string  `json:"name"`
	Interval float64 `json:"interval_seconds"`
	Calls    int     `json:"calls"`
	Failures uint64  `json:"failures"`
	// Per second of the run, as a percentage of one core: wall time of
	// Sample, thread CPU time of Sample, and both for Metrics.
	SampleWallPct float64 `json:"sample_wall_percent"`
	SampleCPUPct  float64 `json:"sample_cpu_percent"`
	MetricsCPUPct float64 `json:"metrics_cpu_percent"`
	// MsPerCall is Sample's wall time per call.
	MsPerCall float64 `json:"sample_wall_ms_per_call"`
}

func TestBusyNodeCost(t *testing.T) {
	secs, _ := strconv.ParseFloat(os.Getenv(busyNodeSecondsEnv), 64)
	if secs <= 0 {
		t.Skip("set " + busyNodeSecondsEnv + " to run the busy-node benchmark for that many seconds")
	}
	workers := 8
	if w := os.Getenv(busyNodeWorkersEnv); w != "" {
		var err error
		if workers, err = strconv.Atoi(w); err != nil || workers < 0 {
			t.Fatalf("%s=%q", busyNodeWorkersEnv, w)
		}
	}
	run := time.Duration(secs * float64(time.Second))
	speed := 1.0
	if v := os.Getenv(busyNodeSpeedEnv); v != "" {
		var err error
		if speed, err = strconv.ParseFloat(v, 64); err != nil || speed < 1 {
			t.Fatalf("%s=%q: want a number >= 1", busyNodeSpeedEnv, v)
		}
	}
	var churnEvery time.Duration
	if v := os.Getenv(busyNodeChurnEnv); v != "" {
		c, err := strconv.ParseFloat(v, 64)
		if err != nil || c < 0 {
			t.Fatalf("%s=%q: want seconds >= 0", busyNodeChurnEnv, v)
		}
		churnEvery = time.Duration(c * float64(time.Second))
	}
	// compress divides a duration of the daemon's clock by speed.
	compress := func(d time.Duration) time.Duration { return time.Duration(float64(d) / speed) }

	tree := startBusyNode(t, workers)
	// The daemon's Go scheduler as it runs by default: one P
	// (--runtime.gomaxprocs=1), unless GOMAXPROCS in the environment sets
	// another, which the daemon also obeys. The tree's processes keep the
	// machine's.
	if os.Getenv("GOMAXPROCS") == "" {
		defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	}
	t.Logf("process tree up: %d ranks, %d workers each, %d processes, %d threads, %d TCP connections",
		len(tree.ranks), workers, tree.procs, tree.threads, tree.conns)

	// The daemon's stack, as cmd/exporter's newDaemon builds it with its
	// default flags: every default-on collector over the host's /proc and
	// /sys, the 10-minute, 16 MiB window, the analyzers' runner on every
	// sample, and the /metrics handler (scraped every 15 s with gzip). The
	// GPUs are fake: 8 H100s of an HGX board, GPU i running rank i.
	gpus := nvmlfake.HGX()
	for i, g := range gpus {
		g.PIDs = []uint32{uint32(tree.ranks[i])}
		g.Util = nvml.Utilization{Gpu: 95, Memory: 30}
		g.GPM[nvml.GPM_METRIC_SM_UTIL] = 80
		g.GPM[nvml.GPM_METRIC_ANY_TENSOR_UTIL] = 60
		g.GPM[nvml.GPM_METRIC_DRAM_BW_UTIL] = 20
	}
	//
	// Time compression (GPUDIAG_BUSY_NODE_SPEED): the daemon's clocks run
	// speed times faster, so the daemon takes a day's samples in a day /
	// speed. Divided by speed: the sample interval (Config.Interval, hence
	// gpuprocess's fast pace for a new job and tcp's kernel-freshness
	// span), every collector's own interval (timedCollector.Interval), the
	// engine's interval (and so, in effect, the sample timeout of every
	// collector on the daemon's interval: see engine.New below), gpuprocess's --collector.gpuprocess.numa-maps-interval,
	// NVML's slow-field interval, the window's span, the analyzers' span
	// (SpanSeconds, so an analysis reads as many samples as at speed 1)
	// and the scrape period.
	//
	// Not divided, because they are constants inside the packages (no
	// hook, and this test changes no non-test code):
	//   - gpuprocess: threadCensusInterval (30 s: a descendant's threads
	//     are counted every 30 s of wall time, i.e. every speed*30 s of
	//     compressed time, so thread censuses run speed times less often
	//     than in a real day; a new PID is counted at once while the host's
	//     I/O stalls, and presumed not waiting while it is quiet),
	//     newJobFastSpan (10 s of fast pacing after a new GPU process;
	//     moot here: timedCollector passes no Pacer or Prompter through,
	//     as before, and the GPU processes, the ranks, never change) and
	//     cgroupNSRetry (1 min);
	//   - ncclproc: nothing time-based besides its interval (its per-PID
	//     maps cache is keyed on PID and start time, not on age);
	//   - dataset: datasetScanBudget (2 s of wall time per scan) and
	//     datasetListingMaxAge (a process's listing of data files stands
	//     for a minute of wall time while its descriptor count does, so
	//     at speed it stands over speed times more scans);
	//   - numa: hostfs.LocalityRefresh (the nodes' layout every 30 s of
	//     wall time);
	//   - tcp: the 5 s timeout of its sock_diag setup;
	//   - podresources: the 2 s kubelet call timeout (no kubelet here:
	//     the collector is unavailable) and kubelet, tuning: only their
	//     intervals, which are divided;
	//   - nvmlgpu: closeWait (2 s, at shutdown);
	//   - analyzers: NCCLStartupGrace (60 s) and every threshold that is
	//     a rate or a duration measured on sample timestamps: rates stay
	//     per real second, since /proc's counters move in real time;
	//   - the process tree: its ranks and workers burn CPU and exchange
	//     bytes every real second, so per compressed second the counters
	//     move speed times slower; the churn period is wall seconds;
	//   - the RSS taken after one minute, and the series' 10 s period,
	//     are wall time.
	defer func(v time.Duration) { gpuProcessFlags.numaMapsInterval = v }(gpuProcessFlags.numaMapsInterval)
	gpuProcessFlags.numaMapsInterval = compress(gpuProcessFlags.numaMapsInterval)
	built, err := Build(Config{ProcPath: "/proc", SysPath: "/sys", Logger: zap.NewNop(), Interval: compress(time.Second),
		GPU: gpu.Options{
			OpenDCGM: func() (gpu.Backend, error) { return nil, errors.New("DCGM: not installed") },
			OpenNVML: func() (gpu.Backend, error) {
				return nvmlgpu.Open(nvmlfake.New(gpus...), nvmlgpu.Options{SlowInterval: compress(nvmlgpu.DefaultSlowInterval)})
			},
		}})
	if err != nil {
		t.Fatal(err)
	}
	timed := make([]*timedCollector, len(built))
	byName := map[string]*timedCollector{}
	for i, c := range built {
		timed[i] = &timedCollector{Collector: c, speed: speed}
		byName[c.Name()] = timed[i]
	}
	defer func() {
		for _, c := range timed {
			c.Close()
		}
	}()
	window := engine.NewWindow(compress(10*time.Minute), 16<<20)
	thresholds := analyzers.DefaultThresholds
	thresholds.SpanSeconds = 10 / speed
	runner := diagnose.NewRunner(window, thresholds)
	var diagMu sync.Mutex
	var diagWall, diagCPU time.Duration
	var diagCalls int
	onSample := func(c string, at time.Time, s any) {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		t0, c0 := time.Now(), threadCPU()
		runner.OnSample(c, at, s)
		c1, t1 := threadCPU(), time.Now()
		diagMu.Lock()
		diagWall += t1.Sub(t0)
		diagCPU += c1 - c0
		diagCalls++
		diagMu.Unlock()
	}
	// The sample timeout is the daemon's (its default is --sample.interval,
	// 1 s), not divided: the engine caps it at each collector's divided
	// interval anyway, and a divided one (21 ms at 48x) would fail
	// gpuprocess's and tuning's reads, which take 20-30 ms on a loaded
	// 2-core machine, though their divided intervals leave them time.
	eng := engine.New(engine.Options{Interval: compress(time.Second), Timeout: time.Second, Window: window, OnSample: onSample})
	runner.ReportCollectors(eng.Statuses)
	for _, c := range timed {
		eng.Add(c, 0)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(runner.Metrics())
	handler, err := server.New(server.Options{TelemetryPath: "/metrics", Gatherer: server.Merge(eng, reg),
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	var scrapes int
	var scrapeWall, scrapeCPU time.Duration
	scrape := func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		t0, c0 := time.Now(), threadCPU()
		req := httptest.NewRequest("GET", "/metrics", nil)
		req.Header.Set("Accept-Encoding", "gzip")
		w := httptest.NewRecorder()
		handler.ServeHTTP(w, req)
		c1, t1 := threadCPU(), time.Now()
		if w.Code != http.StatusOK {
			t.Errorf("/metrics answered %d", w.Code)
		}
		scrapes++
		scrapeWall += t1.Sub(t0)
		scrapeCPU += c1 - c0
	}

	res := busyNodeResult{Ranks: len(tree.ranks), WorkersPerRank: workers, Processes: tree.procs,
		Threads: tree.threads, Connections: tree.conns, GOMAXPROCS: runtime.GOMAXPROCS(0), LoadAvgStart: loadAvg(),
		Speed: speed, ChurnSeconds: churnEvery.Seconds()}
	runtime.GC()
	res.RSSStartKB, _ = procStatusKB("/proc/self/status", "VmRSS:")
	var ms0, ms1 runtime.MemStats
	runtime.ReadMemStats(&ms0)
	var ru0, ru1 syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru0)
	start := time.Now()

	ctx, cancel := context.WithTimeout(context.Background(), run)
	defer cancel()
	done := make(chan struct{})
	go func() {
		defer close(done)
		eng.Run(ctx)
	}()

	// Churn (GPUDIAG_BUSY_NODE_CHURN): every churnEvery of wall time a new
	// epoch replaces every rank's workers. None starts in the run's last
	// churnQuiet, so that gpuprocess and tcp sample the last epoch's
	// workers, settled, before the end, and busyNodeCheck can compare
	// their latest samples with the tree.
	churnQuiet := 10*time.Second + 3*compress(5*time.Second)
	churnErr := make(chan error, 1)
	if churnEvery > 0 {
		go func() {
			churnErr <- func() error {
				tk := time.NewTicker(churnEvery)
				defer tk.Stop()
				for {
					select {
					case <-ctx.Done():
						return nil
					case <-tk.C:
					}
					if time.Until(start.Add(run)) < churnQuiet {
						return nil
					}
					if err := tree.churn(workers); err != nil {
						return err
					}
				}
			}()
		}()
	} else {
		churnErr <- nil
	}

	// The series (GPUDIAG_BUSY_NODE_SERIES): a CSV row every 10 s of wall
	// time. Worker PIDs are also tallied without a series, when churning,
	// to check that gpuprocess saw the new epochs' workers.
	var series *os.File
	if path := os.Getenv(busyNodeSeriesEnv); path != "" {
		if series, err = os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600); err != nil {
			t.Fatal(err)
		}
		defer series.Close()
		if err := series.Chmod(0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := fmt.Fprintln(series, busyNodeSeriesHeader); err != nil {
			t.Fatal(err)
		}
	}
	seenWorkers := map[int]bool{}
	row := func() {
		var lastWorkers int
		if gp, ok := engine.Latest(window, sample.GPUProcessKey); ok {
			for _, g := range gp.Sample.GPUs {
				for _, p := range g.Processes {
					if !p.OnGPU {
						lastWorkers++
						seenWorkers[p.PID] = true
					}
				}
			}
		}
		if series == nil {
			return
		}
		wall := time.Since(start).Seconds()
		status, _ := os.ReadFile("/proc/self/status")
		field := func(name string) int {
			for line := range strings.SplitSeq(string(status), "\n") {
				if rest, ok := strings.CutPrefix(line, name); ok {
					if f := strings.Fields(rest); len(f) > 0 {
						n, _ := strconv.Atoi(f[0])
						return n
					}
				}
			}
			return -1
		}
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		fds := -1
		if ents, err := os.ReadDir("/proc/self/fd"); err == nil {
			fds = len(ents)
		}
		var winBytes, winSamples int
		for _, st := range window.Stats() {
			winBytes += st.Bytes
			winSamples += st.Samples
		}
		calls := func(name string) int {
			c := byName[name]
			if c == nil {
				return 0
			}
			c.mu.Lock()
			defer c.mu.Unlock()
			return c.calls
		}
		tree.mu.Lock()
		churns := tree.churns
		tree.mu.Unlock()
		if _, err := fmt.Fprintf(series, "%.1f,%.4f,%d,%d,%d,%d,%d,%d,%d,%d,%d,%d,%d,%d,%d,%d\n",
			wall, wall*speed/3600, field("VmRSS:"), field("RssAnon:"), field("RssFile:"), ms.HeapInuse, ms.HeapAlloc,
			runtime.NumGoroutine(), fds, winBytes, winSamples, lastWorkers, len(seenWorkers),
			calls("gpu"), calls("gpuprocess"), churns); err != nil {
			t.Errorf("series: %v", err)
		}
	}
	var seriesTick <-chan time.Time
	if series != nil || churnEvery > 0 {
		tk := time.NewTicker(10 * time.Second)
		defer tk.Stop()
		seriesTick = tk.C
		row()
	}

	scrapeTick := time.NewTicker(compress(busyNodeScrapeEvery))
	defer scrapeTick.Stop()
	minute := time.After(time.Minute)
loop:
	for {
		select {
		case <-done:
			break loop
		case <-scrapeTick.C:
			scrape()
		case <-seriesTick:
			row()
		case <-minute:
			res.RSS1MinKB, _ = procStatusKB("/proc/self/status", "VmRSS:")
		}
	}
	if seriesTick != nil {
		row()
	}
	if err := <-churnErr; err != nil {
		t.Errorf("churn: %v", err)
	}

	wall := time.Since(start)
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru1)
	runtime.ReadMemStats(&ms1)
	res.RSSEndKB, _ = procStatusKB("/proc/self/status", "VmRSS:")
	res.LoadAvgEnd = loadAvg()
	ws := wall.Seconds()
	user := time.Duration(syscall.TimevalToNsec(ru1.Utime) - syscall.TimevalToNsec(ru0.Utime))
	sys := time.Duration(syscall.TimevalToNsec(ru1.Stime) - syscall.TimevalToNsec(ru0.Stime))
	res.Seconds = ws
	res.CPUSeconds = (user + sys).Seconds()
	res.CPUPercentOfCore = 100 * res.CPUSeconds / ws
	res.UserPercentOfCore = 100 * user.Seconds() / ws
	res.SysPercentOfCore = 100 * sys.Seconds() / ws
	res.AllocsPerSecond = float64(ms1.Mallocs-ms0.Mallocs) / ws
	res.AllocBytesPerSec = float64(ms1.TotalAlloc-ms0.TotalAlloc) / ws
	res.GCsPerMinute = float64(ms1.NumGC-ms0.NumGC) / ws * 60
	res.HeapInUseEndKB = ms1.HeapInuse >> 10

	statuses := map[string]engine.Status{}
	for _, st := range eng.Statuses() {
		statuses[st.Name] = st
	}
	pct := func(d time.Duration) float64 { return 100 * d.Seconds() / ws }
	perCall := func(d time.Duration, n int) float64 {
		if n == 0 {
			return 0
		}
		return d.Seconds() * 1000 / float64(n)
	}
	for _, c := range timed {
		c.mu.Lock()
		st := statuses[c.Name()]
		bc := busyNodeCollector{Name: c.Name(), Interval: st.Interval.Seconds(), Calls: c.calls, Failures: st.Failures,
			SampleWallPct: pct(c.sampleWall), SampleCPUPct: pct(c.sampleCPU), MetricsCPUPct: pct(c.metCPU),
			MsPerCall: perCall(c.sampleWall, c.calls)}
		c.mu.Unlock()
		res.Collectors = append(res.Collectors, bc)
		// A sample that timed out on a loaded machine is reported, not
		// fatal; a collector that never succeeded measures nothing.
		switch {
		case st.LastSuccess.IsZero():
			t.Errorf("collector %s never succeeded: %s", st.Name, st.LastError)
		case st.Failures > 0:
			t.Logf("collector %s: %d samples failed, the last: %s", st.Name, st.Failures, st.LastError)
		}
	}
	diagMu.Lock()
	res.Collectors = append(res.Collectors,
		busyNodeCollector{Name: "(analyzers)", Calls: diagCalls, SampleWallPct: pct(diagWall), SampleCPUPct: pct(diagCPU),
			MsPerCall: perCall(diagWall, diagCalls)},
		busyNodeCollector{Name: "(scrape, gzip)", Interval: compress(busyNodeScrapeEvery).Seconds(), Calls: scrapes,
			SampleWallPct: pct(scrapeWall), SampleCPUPct: pct(scrapeCPU), MsPerCall: perCall(scrapeWall, scrapes)})
	diagMu.Unlock()
	sort.SliceStable(res.Collectors, func(i, j int) bool {
		return res.Collectors[i].SampleCPUPct+res.Collectors[i].MetricsCPUPct >
			res.Collectors[j].SampleCPUPct+res.Collectors[j].MetricsCPUPct
	})
	// What no wrapper saw: the engine turning metrics into families, the
	// window, the garbage collector's background work, the runtime.
	rest := res.CPUPercentOfCore
	for _, c := range res.Collectors {
		rest -= c.SampleCPUPct + c.MetricsCPUPct
	}
	res.Collectors = append(res.Collectors, busyNodeCollector{Name: "(rest)", SampleCPUPct: rest})
	busyNodeLog(t, &res)
	if out := os.Getenv(busyNodeOutEnv); out != "" {
		b, err := json.MarshalIndent(&res, "", "  ")
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(out, append(b, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
	}

	// The benchmark measures real work only if the collectors found the
	// tree: the GPUs' processes and their workers, the NCCL ranks, the
	// sockets.
	busyNodeCheck(t, window, tree, workers)
	if churnEvery > 0 {
		// Every epoch's workers should have been listed by gpuprocess
		// at least once (the tally reads its latest sample every 10 s).
		tree.mu.Lock()
		churns := tree.churns
		tree.mu.Unlock()
		t.Logf("churn: %d epochs after the first, %d distinct worker PIDs seen by gpuprocess (%d per epoch)",
			churns, len(seenWorkers), busyNodeRanks*workers)
		if churns > 0 && len(seenWorkers) <= busyNodeRanks*workers {
			t.Errorf("churn: gpuprocess saw %d distinct worker PIDs over %d epochs; the new epochs' workers were never seen",
				len(seenWorkers), churns+1)
		}
	}
}

// busyNodeSeriesHeader names the columns of GPUDIAG_BUSY_NODE_SERIES:
// wall seconds since the start, the sampling hours they stand for
// (wall × speed), /proc/self/status's VmRSS, RssAnon and RssFile (KiB), the
// Go heap in use and allocated (bytes), goroutines, open descriptors, the
// window's bytes and samples (all collectors), the worker PIDs (the GPU
// processes' descendants) in gpuprocess's latest sample, the distinct ones
// seen so far, the gpu and gpuprocess collectors' Sample calls so far (how
// much sampling actually happened: a loaded machine falls behind the
// compressed clock) and the epochs churned.
const busyNodeSeriesHeader = "wall_seconds,equiv_hours,vmrss_kib,rssanon_kib,rssfile_kib,heap_inuse_bytes,heap_alloc_bytes," +
	"goroutines,fds,window_bytes,window_samples,gpuprocess_worker_pids,worker_pids_seen,gpu_samples,gpuprocess_samples,churns"

func loadAvg() string {
	b, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return ""
	}
	return strings.Join(f[:3], " ")
}

func busyNodeLog(t *testing.T, r *busyNodeResult) {
	var b strings.Builder
	fmt.Fprintf(&b, "busy node: %d ranks × %d workers = %d processes, %d threads, %d TCP connections; %.0f s, GOMAXPROCS %d, load %s → %s\n",
		r.Ranks, r.WorkersPerRank, r.Processes, r.Threads, r.Connections, r.Seconds, r.GOMAXPROCS, r.LoadAvgStart, r.LoadAvgEnd)
	if r.Speed > 1 || r.ChurnSeconds > 0 {
		fmt.Fprintf(&b, "time compression %gx (%.2f sampling hours); workers churned every %g s\n",
			r.Speed, r.Seconds*r.Speed/3600, r.ChurnSeconds)
	}
	fmt.Fprintf(&b, "CPU: %.3f s = %.3f%% of one core (user %.3f%%, system %.3f%%)\n",
		r.CPUSeconds, r.CPUPercentOfCore, r.UserPercentOfCore, r.SysPercentOfCore)
	fmt.Fprintf(&b, "allocation: %.0f allocs/s, %.1f KiB/s, %.1f GCs/min; heap in use at end %d KiB\n",
		r.AllocsPerSecond, r.AllocBytesPerSec/1024, r.GCsPerMinute, r.HeapInUseEndKB)
	oneMin := "-"
	if r.RSS1MinKB > 0 {
		oneMin = strconv.Itoa(r.RSS1MinKB)
	}
	fmt.Fprintf(&b, "RSS: start %d KiB, 1 min %s KiB, end %d KiB\n", r.RSSStartKB, oneMin, r.RSSEndKB)
	fmt.Fprintf(&b, "%-16s %8s %6s %5s %12s %12s %13s %10s\n",
		"collector", "interval", "calls", "fail", "sample wall%", "sample CPU%", "metrics CPU%", "ms/call")
	for _, c := range r.Collectors {
		fmt.Fprintf(&b, "%-16s %7.3gs %6d %5d %12.4f %12.4f %13.4f %10.2f\n",
			c.Name, c.Interval, c.Calls, c.Failures, c.SampleWallPct, c.SampleCPUPct, c.MetricsCPUPct, c.MsPerCall)
	}
	t.Log("\n" + b.String())
}

// busyNodeCheck asserts that the per-process collectors saw the tree.
func busyNodeCheck(t *testing.T, w *engine.Window, tree *busyNodeTree, workers int) {
	gp, ok := engine.Latest(w, sample.GPUProcessKey)
	if !ok {
		t.Fatal("no gpuprocess sample")
	}
	if len(gp.Sample.GPUs) != busyNodeRanks {
		t.Errorf("gpuprocess: %d GPUs, want %d", len(gp.Sample.GPUs), busyNodeRanks)
	}
	for _, g := range gp.Sample.GPUs {
		if g.GPU < 0 || g.GPU >= busyNodeRanks {
			t.Errorf("gpuprocess: GPU %d", g.GPU)
			continue
		}
		rank := tree.ranks[g.GPU]
		var onGPU, children []int
		for _, p := range g.Processes {
			switch {
			case p.OnGPU:
				onGPU = append(onGPU, p.PID)
			case p.PPID == rank && p.Depth == 1:
				children = append(children, p.PID)
			}
		}
		want := tree.workersOf(rank)
		slices.Sort(want)
		slices.Sort(children)
		if !slices.Equal(onGPU, []int{rank}) || !slices.Equal(children, want) {
			t.Errorf("gpuprocess GPU %d: on GPU %v, children %v; want rank %d with workers %v", g.GPU, onGPU, children, rank, want)
		}
		if g.Unread != 0 || len(g.Errors) > 0 {
			t.Errorf("gpuprocess GPU %d: %d unread, errors %v", g.GPU, g.Unread, g.Errors)
		}
		if g.Threads < (1+workers)*busyNodeThreads*3/4 {
			t.Errorf("gpuprocess GPU %d: %d threads read, want about %d", g.GPU, g.Threads, (1+workers)*busyNodeThreads)
		}
	}

	np, ok := engine.Latest(w, sample.NCCLProcKey)
	if !ok {
		t.Fatal("no ncclproc sample")
	}
	var nccl []int
	for _, p := range np.Sample.Processes {
		if p.MapsNCCL() {
			nccl = append(nccl, p.PID)
			if v := p.Libraries[0].Version; v != "2.21.5" {
				t.Errorf("ncclproc: PID %d maps libnccl version %q", p.PID, v)
			}
		}
	}
	want := slices.Clone(tree.ranks)
	slices.Sort(want)
	if !slices.Equal(nccl, want) {
		t.Errorf("ncclproc: processes mapping libnccl %v, want the ranks %v", nccl, want)
	}

	tc, ok := engine.Latest(w, sample.TCPKey)
	if !ok {
		t.Fatal("no tcp sample")
	}
	// A dump lists the namespace, lookups the GPU processes' (the ranks')
	// known sockets: at least those either way. The ranks' connections
	// last the whole run, so once read they are looked up.
	if tc.Sample.SocketsListed < busyNodeRanks*busyNodeConns {
		t.Errorf("tcp: %d sockets listed, want at least the ranks' %d", tc.Sample.SocketsListed, busyNodeRanks*busyNodeConns)
	}
	if !tc.Sample.LookedUp {
		t.Error("tcp: the ranks' known sockets were dumped again, not looked up")
	}
	var conns int
	var bytes uint64
	for _, g := range tc.Sample.GPUs {
		conns += g.Loopback.Connections
		bytes += g.Loopback.TransmitBytesTotal
	}
	if conns < busyNodeRanks*busyNodeConns {
		t.Errorf("tcp: %d loopback connections on the GPUs, want at least %d", conns, busyNodeRanks*busyNodeConns)
	}
	if bytes == 0 && tc.Sample.IntervalSeconds > 0 {
		t.Error("tcp: no loopback bytes counted on the GPUs")
	}
	t.Logf("seen: gpuprocess %d GPUs; ncclproc %d processes mapping libnccl (%d listed, %d maps read last scan); tcp %d sockets listed, %d loopback connections and %d bytes sent on the GPUs",
		len(gp.Sample.GPUs), len(nccl), len(np.Sample.Processes), np.Sample.MapsRead, tc.Sample.SocketsListed, conns, bytes)
}
