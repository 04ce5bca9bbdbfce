package collectors

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/gpudiag/gpudiag/engine"
	"github.com/gpudiag/gpudiag/internal/hosttest"
	"github.com/gpudiag/gpudiag/sample"
)

// Huge, garbled, duplicated and non-regular files in the trees the host
// collectors read (--path.procfs and --path.sysfs pointing at a copy of
// the fixture, as a container's bind mounts or an operator's test tree
// could be): every collector returns, never blocked on a FIFO, with an
// error naming the file or a bounded sample, never a series per
// duplicate, and its memory stays bounded whatever the file's size.
//
// What bounds a read here is bytes, not time: the samples run without a
// deadline, so a 100 MB file read on a loaded machine (or under -race) is
// waited for and judged by what it returned and what it cost, never by
// how long it took. The deadline's own effect on the one reader that
// heeds it mid-file is TestTuningStopsAtTheSampleDeadline's.

// hugeFileBytes is the size of the oversized files: 100 MB, as in the
// report (a 100 MB diskstats took 7.6 GB of RSS).
const hugeFileBytes = 100 << 20

// hugeFileMemCeiling bounds what a sample over a hugeFileBytes file may
// take: the peak of heap in use above what it was before, and, for files
// read whole, all bytes allocated during the sample. No whole-file read
// is bounded above 4 MiB (diskstats); streamed files allocate as they go,
// and only their peak is bounded. docs/security.md states the same
// ceiling.
const hugeFileMemCeiling = 64 << 20

// writeRepeated fills path with line repeated up to size bytes.
func writeRepeated(t *testing.T, path, line string, size int) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	w := bufio.NewWriterSize(f, 1<<20)
	for n := 0; n < size; n += len(line) {
		if _, err := w.WriteString(line); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

// memUse is what a call cost in memory.
type memUse struct {
	totalAlloc, peakInuse uint64
}

func (m memUse) String() string {
	return fmt.Sprintf("allocated %.1f MiB, peak heap in use +%.1f MiB", float64(m.totalAlloc)/(1<<20), float64(m.peakInuse)/(1<<20))
}

// measure runs f and reports the bytes it allocated and the peak of heap
// in use above the level before, sampled every millisecond.
func measure(f func()) memUse {
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	peak := before.HeapInuse
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		var m runtime.MemStats
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				runtime.ReadMemStats(&m)
				peak = max(peak, m.HeapInuse)
			}
		}
	}()
	f()
	close(stop)
	wg.Wait()
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	peak = max(peak, after.HeapInuse)
	return memUse{totalAlloc: after.TotalAlloc - before.TotalAlloc, peakInuse: peak - before.HeapInuse}
}

// hostFileCase damages one file of a fixture copy and says what the
// collector reading it must answer.
type hostFileCase struct {
	name      string
	collector string
	path      string // relative to the tree root
	damage    func(t *testing.T, full string)
	// wantErr is in the sample's error; empty: the sample must succeed,
	// and wantInSample, when set, be in its JSON.
	wantErr, wantInSample string
	// streamed files are parsed as they are read: their allocations
	// grow with the bytes read, their memory does not.
	streamed bool
	// create: the fixture lacks the file, which damage creates, with
	// the files in also.
	create bool
	also   []string
	// check, when set, judges the successful sample further.
	check func(t *testing.T, raw []byte)
}

// huge makes a hugeFileBytes file whose first 8 MiB, more than any
// whole-file bound, repeat line; the rest is a hole of NUL bytes, which
// no reader gets to and which costs no disk.
func huge(line string) func(*testing.T, string) {
	return func(t *testing.T, full string) {
		writeRepeated(t, full, line, 8<<20)
		if err := os.Truncate(full, hugeFileBytes); err != nil {
			t.Fatal(err)
		}
	}
}

// hugeLines makes a hugeFileBytes file of line repeated, for the files
// parsed as a stream, which are read past 8 MiB.
func hugeLines(line string) func(*testing.T, string) {
	return func(t *testing.T, full string) { writeRepeated(t, full, line, hugeFileBytes) }
}

func content(text string) func(*testing.T, string) {
	return func(t *testing.T, full string) { hosttest.WriteFile(t, full, text) }
}

func appendLine(line string) func(*testing.T, string) {
	return func(t *testing.T, full string) {
		b, err := os.ReadFile(full)
		if err != nil {
			t.Fatal(err)
		}
		hosttest.WriteFile(t, full, string(b)+line)
	}
}

func fifo(t *testing.T, full string) {
	if err := os.Remove(full); err != nil {
		t.Fatal(err)
	}
	mkfifoUnblocked(t, full)
}

// tcpLine is a /proc/net/tcp socket on local port 40001, in the
// fixture's ephemeral range.
const tcpLine = "   1: 0500000A:9C41 0900000A:C822 01 00000000:00000000 02:000A7B2F 00000000     0        0 881023 4 0000000000000000 20 4 31 10 -1\n"

const (
	ibPort1   = "sys/class/infiniband/mlx5_0/ports/1/"
	eth0      = "sys/class/net/eth0/"
	nvmeQueue = "sys/devices/pci0000:3b/0000:3b:01.0/0000:3c:00.0/nvme/nvme0/nvme0n1/queue/"
)

func hostFileCases() []hostFileCase {
	diskLine := " 259 0 nvme0n1 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17\n"
	var manyDisks strings.Builder
	for i := 0; i < 20000; i++ {
		fmt.Fprintf(&manyDisks, " 259 %d nvme%dn1 1 2 3 4 5 6 7 8 9 10 11\n", i, i)
	}
	return []hostFileCase{
		{name: "diskstats 100 MB of one device", collector: "diskstats", path: "proc/diskstats", damage: huge(diskLine), wantErr: "larger than 4 MiB"},
		{name: "diskstats device listed twice", collector: "diskstats", path: "proc/diskstats", damage: appendLine(diskLine), wantErr: "nvme0n1\" listed again"},
		{name: "diskstats 20,000 devices", collector: "diskstats", path: "proc/diskstats", damage: content(manyDisks.String()), wantErr: "more than 16384 devices"},
		{name: "diskstats FIFO", collector: "diskstats", path: "proc/diskstats", damage: fifo, wantErr: "a FIFO"},
		{name: "block queue attribute 100 MB", collector: "diskstats", path: nvmeQueue + "read_ahead_kb", damage: huge("128\n"), wantErr: "larger than 64 KiB"},
		{name: "meminfo 100 MB", collector: "cpu", path: "proc/meminfo", damage: huge("MemFree:        1234 kB\n"), wantErr: "larger than 64 KiB"},
		{name: "meminfo line without a value", collector: "cpu", path: "proc/meminfo", damage: content("MemTotal:\n"), wantErr: "line 1: want"},
		{name: "meminfo FIFO", collector: "cpu", path: "proc/meminfo", damage: fifo, wantErr: "a FIFO"},
		{name: "vmstat 100 MB", collector: "cpu", path: "proc/vmstat", damage: huge("pgmajfault 1\n"), wantErr: "larger than 64 KiB"},
		{name: "stat 100 MB", collector: "cpu", path: "proc/stat", damage: huge("cpu0 1 2 3 4 5 6 7 8 0 0\n"), wantErr: "larger than 1 MiB"},
		{name: "stat FIFO", collector: "cpu", path: "proc/stat", damage: fifo, wantErr: "a FIFO"},
		{name: "PSI 100 MB", collector: "pressure", path: "proc/pressure/io", damage: huge("some avg10=0.00 avg60=0.00 avg300=0.00 total=1\n"), wantErr: "larger than 4 KiB"},
		{name: "PSI FIFO", collector: "pressure", path: "proc/pressure/cpu", damage: fifo, wantErr: "a FIFO"},
		{name: "net counter 100 MB", collector: "netdev", path: eth0 + "statistics/rx_bytes", damage: huge("1234567\n"), wantErr: "larger than 64 KiB"},
		{name: "net counter FIFO", collector: "netdev", path: eth0 + "statistics/rx_bytes", damage: fifo, wantErr: "a FIFO"},
		{name: "net operstate FIFO", collector: "netdev", path: eth0 + "operstate", damage: fifo, wantErr: "a FIFO"},
		{name: "InfiniBand rate 100 MB", collector: "infiniband", path: ibPort1 + "rate", damage: huge("400 Gb/sec (4X NDR)\n"), wantErr: "larger than 64 KiB"},
		{name: "InfiniBand state FIFO", collector: "infiniband", path: ibPort1 + "state", damage: fifo, wantErr: "a FIFO"},
		{name: "NUMA cpulist 100 MB", collector: "numa", path: "sys/devices/system/node/node0/cpulist", damage: huge("0-63,"), wantErr: "larger than 64 KiB"},
		{name: "NUMA node vmstat FIFO", collector: "numa", path: "sys/devices/system/node/node1/vmstat", damage: fifo, wantErr: "a FIFO"},
		{name: "net/tcp 100 MB", collector: "tuning", path: "proc/net/tcp", damage: hugeLines(tcpLine), streamed: true,
			// Streamed whole: every socket of the table counted (the
			// line repeated holds port 40001, in the fixture's range),
			// its memory that of the one distinct port.
			check: func(t *testing.T, raw []byte) {
				var tu sample.HostTuning
				if err := json.Unmarshal(raw, &tu); err != nil {
					t.Fatal(err)
				}
				if lines := (hugeFileBytes + len(tcpLine) - 1) / len(tcpLine); tu.EphemeralPortSockets < lines-1 {
					t.Errorf("%d ephemeral-port sockets counted; the 100 MB table holds %d: not read whole", tu.EphemeralPortSockets, lines-1)
				}
			}},
		{name: "swappiness FIFO", collector: "tuning", path: "proc/sys/vm/swappiness", damage: fifo, wantErr: "a FIFO"},
		{name: "GPU process maps 100 MB", collector: "ncclproc", path: "proc/4242/maps",
			damage: func(t *testing.T, full string) {
				hugeLines("7f55d0000000-7f55d4600000 r--p 00000000 08:01 1234 /usr/lib/x86_64-linux-gnu/libc.so.6\n")(t, full)
				// Without an environ the process reads as vanished.
				hosttest.WriteFile(t, filepath.Join(filepath.Dir(full), "environ"), "")
			}, wantInSample: "larger than 32 MiB", streamed: true, create: true, also: []string{"proc/4242/environ"}},
		{name: "NCCL process environ 100 MB", collector: "ncclproc", path: "proc/5151/environ", damage: hugeLines("PADDING=xxxxxxxxxxxxxxxx\x00"), wantInSample: `"env_truncated":true`, streamed: true},
		{name: "NCCL process hostname FIFO", collector: "ncclproc", path: "proc/5151/root/etc/hostname", damage: fifo, wantInSample: "a FIFO"},
		{name: "GPU process numa_maps 100 MB", collector: "gpuprocess", path: "proc/4343/numa_maps",
			damage: hugeLines("7f0000000000 default file=/usr/lib/libc.so anon=1 dirty=1 N0=1 kernelpagesize_kB=4\n"), wantInSample: "larger than 64 MiB", streamed: true},
		{name: "GPU process status 100 MB", collector: "gpuprocess", path: "proc/4242/status", damage: huge("Cpus_allowed_list:\t0-63\n"), wantInSample: "larger than 1 MiB", streamed: true},
		{name: "GPU process children FIFO", collector: "gpuprocess", path: "proc/4242/task/4242/children", damage: fifo},
	}
}

// hostCollectorOn builds the named host collector as hostCollectorsOn
// builds them all.
func hostCollectorOn(t *testing.T, root, name string) engine.Collector {
	t.Helper()
	cfg := Config{ProcPath: filepath.Join(root, "proc"), SysPath: filepath.Join(root, "sys"), Logger: zap.NewNop(), Shared: &Shared{}}
	cfg.Shared.SetGPUs(numaFixtureGPURefs())
	var c engine.Collector
	var err error
	switch name {
	case "numa":
		c, err = asEngineErr(newNUMACollector(cfg))
	case "gpuprocess":
		c, err = asEngineErr(newGPUProcessCollector(cfg, gpuProcessDefaults))
	case "diskstats":
		var filter diskFilter
		if filter, err = newDiskFilter("", defaultDiskExclude, false); err == nil {
			c, err = asEngineErr(newDiskstatsCollector(cfg, filter))
		}
	case "pressure":
		c, err = asEngineErr(newPressureCollector(cfg))
	case "cpu":
		c, err = asEngineErr(newCPUCollector(cfg))
	case "infiniband":
		c, err = asEngineErr(newInfiniBandCollector(cfg))
	case "netdev":
		c, err = asEngineErr(newNetdevCollector(cfg, "", netdevDefaultExclude))
	case "tuning":
		c, err = asEngineErr(newTuningCollector(cfg))
	case "ncclproc":
		c, err = asEngineErr(newNCCLProcCollector(cfg, ncclProcDefaults))
	default:
		t.Fatalf("no collector %s", name)
	}
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// restoreFixture puts paths back as the fixture has them, removing what
// the fixture lacks.
func restoreFixture(t *testing.T, tree *faultTree, paths ...string) {
	t.Helper()
	for _, p := range paths {
		if err := os.RemoveAll(filepath.Join(tree.root, p)); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Lstat(filepath.Join(tree.pristine, p)); err != nil {
			continue
		}
		if err := copyTree(filepath.Join(tree.pristine, p), filepath.Join(tree.root, p)); err != nil {
			t.Fatal(err)
		}
	}
}

func TestHostCollectorsOnHugeAndOddFiles(t *testing.T) {
	// One copy of the fixture, each case's damage undone after it.
	tree := newFaultTree(t)
	for _, tc := range hostFileCases() {
		t.Run(tc.name, func(t *testing.T) {
			full := filepath.Join(tree.root, tc.path)
			if _, err := os.Stat(full); err != nil && !tc.create {
				t.Fatalf("fixture lacks %s: %v", tc.path, err)
			}
			// Registered first, run last: after a FIFO's writer was
			// opened to release a reader stuck on it.
			t.Cleanup(func() { restoreFixture(t, tree, append([]string{tc.path}, tc.also...)...) })
			tc.damage(t, full)
			c := hostCollectorOn(t, tree.root, tc.collector)
			var s any
			var err error
			done := make(chan struct{})
			// No deadline: the reads are bounded by bytes, and a
			// deadline short enough to matter made this test judge the
			// machine's load (a 100 MB numa_maps under -race beside CPU
			// hogs outlasted 5 s). Only a sample that never returns, as
			// one blocked on a FIFO's open does, fails here.
			hung := hangGuard(t)
			use := measure(func() {
				go func() {
					defer close(done)
					s, err = c.Sample(context.Background())
				}()
				select {
				case <-done:
				case <-hung:
				}
			})
			select {
			case <-done:
			default:
				t.Fatalf("%s: sample never returned (blocked on %s?)", tc.collector, tc.path)
			}
			t.Logf("%s: %v", tc.collector, use)
			if use.peakInuse > hugeFileMemCeiling || !tc.streamed && use.totalAlloc > hugeFileMemCeiling {
				t.Errorf("%s: %v; the ceiling is %d MiB", tc.collector, use, hugeFileMemCeiling>>20)
			}
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !strings.Contains(err.Error(), tree.root) {
					t.Fatalf("error %v; want one naming the file under %s and %q", err, tree.root, tc.wantErr)
				}
				if strings.Contains(err.Error(), "runtime error") || strings.Contains(err.Error(), "panic") {
					t.Errorf("error %v; want a clean one", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("sample failed: %v; want a bounded sample", err)
			}
			raw, jerr := json.Marshal(s)
			if jerr != nil {
				t.Fatal(jerr)
			}
			if tc.wantInSample != "" && !strings.Contains(string(raw), tc.wantInSample) {
				t.Errorf("sample lacks %q:\n%.2000s", tc.wantInSample, raw)
			}
			if len(raw) > 1<<20 {
				t.Errorf("sample of %d bytes: not bounded", len(raw))
			}
			if tc.check != nil {
				tc.check(t, raw)
			}
		})
	}
}

// expiringContext is a context whose deadline passes, deterministically,
// on the after+1st call of Err: a test drives a reader's deadline by the
// checks it makes, not by a clock the machine's load would move.
type expiringContext struct {
	context.Context
	after   int32
	checks  atomic.Int32
	expire  sync.Once
	expired chan struct{}
}

func newExpiringContext(after int32) *expiringContext {
	return &expiringContext{Context: context.Background(), after: after, expired: make(chan struct{})}
}

func (c *expiringContext) Err() error {
	if c.checks.Add(1) <= c.after {
		return nil
	}
	c.expire.Do(func() { close(c.expired) })
	return context.DeadlineExceeded
}

func (c *expiringContext) Done() <-chan struct{} { return c.expired }

// A sample's deadline passing while the tuning collector streams a 100 MB
// /proc/net/tcp (1.7 million sockets' worth of table is legal) stops the
// read where it is: the sample fails with an error naming the table and
// the deadline, instead of reading on past it. The deadline passes at the
// reader's second check (after 8192 lines), not on a clock: the read has
// begun, and what is judged is that it stops and says so.
func TestTuningStopsAtTheSampleDeadline(t *testing.T) {
	tree := newFaultTree(t)
	table := filepath.Join(tree.root, "proc/net/tcp")
	hugeLines(tcpLine)(t, table)
	c := hostCollectorOn(t, tree.root, "tuning")
	ctx := newExpiringContext(1)
	_, err := c.Sample(ctx)
	if err == nil || !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), table) || !strings.Contains(err.Error(), "deadline") {
		t.Fatalf("error %v; want the sample deadline named, with %s", err, table)
	}
	// Stopped where the deadline found it, not at the table's end.
	lines := (hugeFileBytes + len(tcpLine) - 1) / len(tcpLine)
	m := regexp.MustCompile(`at line (\d+)`).FindStringSubmatch(err.Error())
	if m == nil {
		t.Fatalf("error %v; want the line the read stopped at", err)
	}
	if at, _ := strconv.Atoi(m[1]); at >= lines {
		t.Errorf("read stopped at line %d of %d: past its deadline", at, lines)
	}
}
