package collectors

import (
	"context"
	"fmt"
	"io/fs"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"go.uber.org/zap"

	"github.com/gpudiag/gpudiag/engine"
)

// Host faults: /proc and /sys entries vanish, get cut short or change type
// between (and during) reads, as they do when processes exit, devices are
// unplugged or a file is read while the kernel rewrites it. The host
// collectors must never panic, must return either a sound sample or an
// error naming the path, must never export a counter that goes backwards,
// and must succeed again once the tree is whole.

// hostFault breaks one part of a fixture tree. Restoring copies the broken
// paths back from the pristine fixture.
type hostFault struct {
	name  string
	paths []string // relative to the tree root; what break touches
	// breakIt damages the tree at root.
	breakIt func(root string) error
}

// removeFault makes paths vanish: a process exiting, a device unplugged.
// RemoveAll deletes a directory's entries one by one, so a concurrent reader
// also sees half-removed directories.
func removeFault(name string, paths ...string) hostFault {
	return hostFault{name: name, paths: paths, breakIt: func(root string) error {
		for _, p := range paths {
			if err := os.RemoveAll(filepath.Join(root, p)); err != nil {
				return err
			}
		}
		return nil
	}}
}

// halfLineFault cuts a file in the middle of its line'th line (from 1).
func halfLineFault(name, path string, line int) hostFault {
	return hostFault{name: name, paths: []string{path}, breakIt: func(root string) error {
		full := filepath.Join(root, path)
		b, err := os.ReadFile(full)
		if err != nil {
			return err
		}
		lines := strings.SplitAfter(string(b), "\n")
		if line > len(lines) {
			return fmt.Errorf("%s has %d lines, fewer than %d", path, len(lines), line)
		}
		keep := strings.Join(lines[:line-1], "")
		keep += lines[line-1][:len(lines[line-1])/2]
		return os.WriteFile(full, []byte(keep), 0o644)
	}}
}

// dirFault replaces a file by a directory: reads fail with EISDIR. It stands
// in for an unreadable file where permissions cannot deny (tests run as
// root here, and CAP_DAC_OVERRIDE ignores mode 000).
func dirFault(name, path string) hostFault {
	return hostFault{name: name, paths: []string{path}, breakIt: func(root string) error {
		full := filepath.Join(root, path)
		if err := os.Remove(full); err != nil {
			return err
		}
		return os.Mkdir(full, 0o755)
	}}
}

// modeFault makes a file unreadable by mode 000; it only denies non-root.
func modeFault(name, path string) hostFault {
	return hostFault{name: name, paths: []string{path}, breakIt: func(root string) error {
		return os.Chmod(filepath.Join(root, path), 0)
	}}
}

const ibDevicePath = "sys/devices/pci0000:15/0000:15:01.0/0000:16:00.0/0000:17:02.0/0000:1a:00.0/infiniband/mlx5_0"

func hostFaults() []hostFault {
	faults := []hostFault{
		removeFault("GPU process 4242 exits", "proc/4242"),
		removeFault("GPU process 4343 exits", "proc/4343"),
		removeFault("DataLoader worker 4344 exits", "proc/4344"),
		removeFault("NCCL rank 5151 exits", "proc/5151"),
		removeFault("NCCL rank 5252 and its worker exit", "proc/5252", "proc/5253"),
		removeFault("thread 4361 exits", "proc/4343/task/4361"),
		removeFault("socket descriptor closed", "proc/4343/fd/6"),
		removeFault("PSI io vanishes", "proc/pressure/io"),
		removeFault("InfiniBand device mlx5_0 unplugged", "sys/class/infiniband/mlx5_0", ibDevicePath),
		removeFault("NIC ens9c0np0 unplugged", "sys/class/net/ens9c0np0"),
		removeFault("NUMA node 1 offline", "sys/devices/system/node/node1"),
		halfLineFault("diskstats cut mid-line", "proc/diskstats", 2),
		halfLineFault("stat cut mid-line", "proc/stat", 3),
		halfLineFault("meminfo cut mid-line", "proc/meminfo", 2),
		halfLineFault("PSI cpu cut mid-line", "proc/pressure/cpu", 2),
		halfLineFault("numa_maps cut mid-line", "proc/4343/numa_maps", 1),
		halfLineFault("NUMA node 1 vmstat cut mid-line", "sys/devices/system/node/node1/vmstat", 12),
		dirFault("PSI memory unreadable", "proc/pressure/memory"),
		dirFault("process status unreadable", "proc/4242/status"),
		dirFault("vmstat unreadable", "proc/vmstat"),
		dirFault("diskstats unreadable", "proc/diskstats"),
	}
	if os.Geteuid() != 0 {
		faults = append(faults,
			modeFault("process stat mode 000", "proc/4343/stat"),
			modeFault("PSI irq mode 000", "proc/pressure/irq"))
	}
	return faults
}

// faultTree is a writable copy of the host fixture that faults break and
// restore.
type faultTree struct {
	root, pristine string
}

func newFaultTree(t *testing.T) *faultTree {
	t.Helper()
	root := t.TempDir()
	if err := copyTree(fixtureRoot, root); err != nil {
		t.Fatal(err)
	}
	return &faultTree{root: root, pristine: fixtureRoot}
}

// restore puts the fault's paths back as they were in the fixture.
func (tr *faultTree) restore(f hostFault) error {
	for _, p := range f.paths {
		dst := filepath.Join(tr.root, p)
		_ = os.Chmod(dst, 0o644) // undo a modeFault before removing
		if err := os.RemoveAll(dst); err != nil {
			return err
		}
		if err := copyTree(filepath.Join(tr.pristine, p), dst); err != nil {
			return err
		}
	}
	return nil
}

// copyTree copies src (a file, a symlink or a directory) to dst, keeping
// symlinks as symlinks: the fixture's are relative, so they stay inside the
// copy.
func copyTree(src, dst string) error {
	return filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, path)
		to := filepath.Join(dst, rel)
		switch {
		case d.Type()&fs.ModeSymlink != 0:
			target, err := os.Readlink(path)
			if err != nil {
				return err
			}
			return os.Symlink(target, to)
		case d.IsDir():
			return os.MkdirAll(to, 0o755)
		default:
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			return os.WriteFile(to, b, 0o644)
		}
	})
}

// faultCollector is one host collector under test with what its samples
// exported so far, to catch a counter going backwards.
type faultCollector struct {
	c        engine.Collector
	counters map[string]float64 // series → highest value exported
	lastErr  error
}

// hostCollectorsOn builds the host collectors that read /proc and /sys over
// root, as the daemon would with --path.procfs and --path.sysfs pointing
// there; GPU 0 runs PID 4242 and GPU 4 PID 4343.
func hostCollectorsOn(t *testing.T, root string) []*faultCollector {
	t.Helper()
	proc, sys := filepath.Join(root, "proc"), filepath.Join(root, "sys")
	shared := &Shared{}
	shared.SetGPUs(numaFixtureGPURefs())
	cfg := Config{ProcPath: proc, SysPath: sys, Logger: zap.NewNop(), Shared: shared}
	dump := &tcpFakeDump{sockets: fixtureTCPSockets(0)}
	diskFilter, err := newDiskFilter("", defaultDiskExclude, false)
	if err != nil {
		t.Fatal(err)
	}
	builders := []func() (engine.Collector, error){
		func() (engine.Collector, error) { return asEngineErr(newNUMACollector(cfg)) },
		func() (engine.Collector, error) { return asEngineErr(newGPUProcessCollector(cfg, gpuProcessDefaults)) },
		func() (engine.Collector, error) { return asEngineErr(newDiskstatsCollector(cfg, diskFilter)) },
		func() (engine.Collector, error) { return asEngineErr(newPressureCollector(cfg)) },
		func() (engine.Collector, error) { return asEngineErr(newCPUCollector(cfg)) },
		func() (engine.Collector, error) { return asEngineErr(newInfiniBandCollector(cfg)) },
		func() (engine.Collector, error) {
			return asEngineErr(newNetdevCollector(cfg, "", netdevDefaultExclude))
		},
		func() (engine.Collector, error) { return asEngineErr(newTuningCollector(cfg)) },
		func() (engine.Collector, error) { return asEngineErr(newNCCLProcCollector(cfg, ncclProcDefaults)) },
		func() (engine.Collector, error) { return asEngineErr(newTCPCollector(cfg, dump, 64)) },
	}
	var out []*faultCollector
	for _, b := range builders {
		c, err := b()
		if err != nil {
			t.Fatal(err)
		}
		if cl, ok := c.(interface{ Close() error }); ok {
			t.Cleanup(func() { cl.Close() })
		}
		out = append(out, &faultCollector{c: c, counters: map[string]float64{}})
	}
	return out
}

// sampleChecked takes one sample and checks it: an error must name a path
// under root; a sample must hold only finite, non-negative numbers (ratios at
// most 1) and export no counter below what it exported before.
func (fc *faultCollector) sampleChecked(root string) (ok bool, problem error) {
	s, err := fc.c.Sample(context.Background())
	if err != nil {
		fc.lastErr = err
		if !strings.Contains(err.Error(), root) {
			return false, fmt.Errorf("error does not name the path: %v", err)
		}
		return false, nil
	}
	if err := checkNumbers(reflect.ValueOf(s), fc.c.Name()); err != nil {
		return false, err
	}
	var ms []prometheus.Metric
	fc.c.Metrics(s, func(m prometheus.Metric) { ms = append(ms, m) })
	for _, m := range ms {
		var d dto.Metric
		if err := m.Write(&d); err != nil {
			return false, err
		}
		if d.Counter == nil {
			continue
		}
		key := m.Desc().String() + labelString(d.GetLabel())
		v := d.Counter.GetValue()
		if prev, seen := fc.counters[key]; seen && v < prev {
			return false, fmt.Errorf("counter went backwards from %v to %v: %s", prev, v, key)
		}
		fc.counters[key] = v
	}
	return true, nil
}

func labelString(ls []*dto.LabelPair) string {
	var b strings.Builder
	for _, l := range ls {
		fmt.Fprintf(&b, " %s=%q", l.GetName(), l.GetValue())
	}
	return b.String()
}

// checkNumbers walks a sample: every float is finite and non-negative, and
// a field named …Ratio is at most 1.
func checkNumbers(v reflect.Value, path string) error {
	switch v.Kind() {
	case reflect.Pointer, reflect.Interface:
		if v.IsNil() {
			return nil
		}
		return checkNumbers(v.Elem(), path)
	case reflect.Struct:
		for i := 0; i < v.NumField(); i++ {
			f := v.Type().Field(i)
			if !f.IsExported() {
				continue
			}
			if err := checkNumbers(v.Field(i), path+"."+f.Name); err != nil {
				return err
			}
		}
	case reflect.Slice, reflect.Array:
		for i := 0; i < v.Len(); i++ {
			if err := checkNumbers(v.Index(i), fmt.Sprintf("%s[%d]", path, i)); err != nil {
				return err
			}
		}
	case reflect.Map:
		for it := v.MapRange(); it.Next(); {
			if err := checkNumbers(it.Value(), fmt.Sprintf("%s[%v]", path, it.Key())); err != nil {
				return err
			}
		}
	case reflect.Float32, reflect.Float64:
		x := v.Float()
		if math.IsNaN(x) || math.IsInf(x, 0) || x < 0 {
			return fmt.Errorf("%s = %v", path, x)
		}
		if strings.HasSuffix(path, "Ratio") && x > 1 {
			return fmt.Errorf("%s = %v, above 1", path, x)
		}
	}
	return nil
}

// Each fault alone: while it holds, every collector gives a sound sample or
// an error naming the path; once restored, every collector succeeds again.
func TestHostCollectorsSurviveEachFault(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Log("running as root: mode 000 does not deny root, so unreadable files are directories instead")
	}
	tree := newFaultTree(t)
	cs := hostCollectorsOn(t, tree.root)
	for _, fc := range cs {
		if ok, problem := fc.sampleChecked(tree.root); !ok {
			t.Fatalf("%s fails on the intact fixture: %v", fc.c.Name(), problem)
		}
	}
	for _, f := range hostFaults() {
		if err := f.breakIt(tree.root); err != nil {
			t.Fatalf("%s: %v", f.name, err)
		}
		var failed []string
		for _, fc := range cs {
			ok, problem := fc.sampleChecked(tree.root)
			if problem != nil {
				t.Errorf("%s, %s: %v", f.name, fc.c.Name(), problem)
			}
			if !ok {
				failed = append(failed, fc.c.Name())
			}
		}
		t.Logf("%s: failing collectors %v", f.name, failed)
		if err := tree.restore(f); err != nil {
			t.Fatal(err)
		}
		for _, fc := range cs {
			if ok, problem := fc.sampleChecked(tree.root); !ok {
				t.Errorf("%s restored, %s still fails: %v", f.name, fc.c.Name(), problem)
			}
		}
	}
}

// Faults that come and go while the collectors read: files vanish mid-walk,
// several at once. No panic, no unsound sample, no counter backwards, and
// every collector succeeds once the tree is whole.
func TestHostCollectorsUnderConcurrentFaults(t *testing.T) {
	tree := newFaultTree(t)
	cs := hostCollectorsOn(t, tree.root)
	const rounds = 60

	stop := make(chan struct{})
	var wg sync.WaitGroup
	problems := make(chan error, 100)
	outcomes := make([][2]int, len(cs)) // [ok, failed] per collector
	// sampled counts each collector's samples for the churn, which goes
	// on past its rounds until every collector has read the changing
	// tree: on a loaded machine a slow collector may not finish a sample
	// within the rounds, and "never sampled" would judge the machine.
	sampled := make([]atomic.Int32, len(cs))
	for i, fc := range cs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			pause := rand.New(rand.NewPCG(uint64(i), 3))
			for {
				select {
				case <-stop:
					return
				default:
				}
				ok, problem := fc.sampleChecked(tree.root)
				if problem != nil {
					select {
					case problems <- fmt.Errorf("%s: %w", fc.c.Name(), problem):
					default:
					}
				}
				if ok {
					outcomes[i][0]++
				} else {
					outcomes[i][1]++
				}
				sampled[i].Add(1)
				// Leave the CPUs to the others now and then, so every
				// collector reads while the tree changes.
				time.Sleep(time.Duration(pause.IntN(2000)) * time.Microsecond)
			}
		}()
	}
	err := churn(tree, hostFaults(), rounds, func() bool {
		for i := range sampled {
			if sampled[i].Load() == 0 {
				return true
			}
		}
		return false
	})
	close(stop)
	wg.Wait()
	if err != nil {
		t.Fatal(err)
	}
	close(problems)
	for p := range problems {
		t.Error(p)
	}
	for i, fc := range cs {
		t.Logf("%s: %d samples ok, %d failed under churn (last error: %v)", fc.c.Name(), outcomes[i][0], outcomes[i][1], fc.lastErr)
		if outcomes[i][0]+outcomes[i][1] == 0 {
			t.Errorf("%s never sampled while the tree changed", fc.c.Name())
		}
		if ok, problem := fc.sampleChecked(tree.root); !ok {
			t.Errorf("tree restored, %s still fails: %v", fc.c.Name(), problem)
		}
	}
}

// churn breaks one to three faults at a time and restores them, rounds
// times and then while more says so; it leaves the tree whole.
func churn(tree *faultTree, faults []hostFault, rounds int, more func() bool) error {
	rng := rand.New(rand.NewPCG(1, 2))
	for round := 0; round < rounds || more(); round++ {
		var broken []hostFault
		for range 1 + rng.IntN(3) {
			f := faults[rng.IntN(len(faults))]
			if overlaps(f, broken) {
				continue
			}
			if err := f.breakIt(tree.root); err != nil {
				return fmt.Errorf("%s: %w", f.name, err)
			}
			broken = append(broken, f)
		}
		time.Sleep(time.Duration(rng.IntN(1000)) * time.Microsecond)
		for _, f := range broken {
			if err := tree.restore(f); err != nil {
				return fmt.Errorf("restoring %s: %w", f.name, err)
			}
		}
	}
	return nil
}

// overlaps reports whether f touches a path inside, or holding, one that a
// broken fault already touched: they could not be restored independently.
func overlaps(f hostFault, broken []hostFault) bool {
	for _, b := range broken {
		for _, p := range f.paths {
			for _, q := range b.paths {
				if p == q || strings.HasPrefix(p, q+"/") || strings.HasPrefix(q, p+"/") {
					return true
				}
			}
		}
	}
	return false
}
