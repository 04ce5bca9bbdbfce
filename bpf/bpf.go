// Package bpf holds gpudiag's eBPF programs, their C sources beside the Go
// bindings bpf2go generated from them, and loads them into the kernel.
//
// Three objects share one table of tracked processes (the GPU processes and
// their descendants):
//   - tracking (tracking.bpf.c) adds a tracked process's children as they
//     fork and drops processes as they exit;
//   - block I/O (blockio.bpf.c) times every block request per disk and
//     operation, and counts the tracked processes' requests;
//   - TCP (tcp.bpf.c) counts the TCP payload the tracked processes send and
//     receive.
//
// Each program's Go side stands in a file named after it, beside its C
// source and bpf2go output (tracking.go, blockio.go, tcp.go); this file
// holds what they share: kernel BTF probes, attaching, run-time statistics
// and lost-event counts.
//
// Block I/O and TCP load independently, so that a kernel lacking one hook
// still gets the other. Everything needs kernel BTF (CO-RE and BTF-typed
// hooks) and Linux 5.12 or later (the block I/O owner slots are claimed by
// compare-and-swap), and CAP_BPF with CAP_PERFMON, or root.
package bpf

import (
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"
)

// errorHint makes the usual load failures say what to do about them.
func errorHint(what string, err error) error {
	switch {
	case errors.Is(err, os.ErrPermission):
		return fmt.Errorf("%s: %w (needs CAP_BPF and CAP_PERFMON, or CAP_SYS_ADMIN on kernels before 5.8)", what, err)
	case errors.Is(err, ebpf.ErrNotSupported):
		return fmt.Errorf("%s: %w (the kernel lacks a BPF feature this needs: Linux 5.12 or later with BTF)", what, err)
	}
	return fmt.Errorf("%s: %w", what, err)
}

// kernelBTF is the running kernel's type information, without which no
// program here can load.
func kernelBTF() (*btf.Spec, error) {
	spec, err := btf.LoadKernelSpec()
	if err != nil {
		return nil, fmt.Errorf("kernel BTF not found (needs CONFIG_DEBUG_INFO_BTF, /sys/kernel/btf/vmlinux): %w", err)
	}
	return spec, nil
}

// hasTracepoint reports whether the kernel has the BTF-typed tracepoint.
func hasTracepoint(spec *btf.Spec, name string) bool {
	_, err := spec.AnyTypeByName("btf_trace_" + name)
	return err == nil
}

// funcParams returns how many parameters the kernel function takes, or -1
// when the kernel has no single traceable function of that name.
func funcParams(spec *btf.Spec, name string) int {
	var fn *btf.Func
	if err := spec.TypeByName(name, &fn); err != nil {
		return -1
	}
	proto, ok := fn.Type.(*btf.FuncProto)
	if !ok {
		return -1
	}
	return len(proto.Params)
}

// tracepointParams returns how many arguments the BTF-typed tracepoint passes
// (its typedef's leading void * excluded), or -1 when unknown.
func tracepointParams(spec *btf.Spec, name string) int {
	var td *btf.Typedef
	if err := spec.TypeByName("btf_trace_"+name, &td); err != nil {
		return -1
	}
	ptr, ok := td.Type.(*btf.Pointer)
	if !ok {
		return -1
	}
	proto, ok := ptr.Target.(*btf.FuncProto)
	if !ok {
		return -1
	}
	return len(proto.Params) - 1
}

// program is a loaded program and its name in the C source (the kernel
// keeps only 15 characters of it).
type program struct {
	name string
	prog *ebpf.Program
}

// attachAll attaches BTF-typed programs (tp_btf, fentry, fexit) in order,
// detaching those already attached when one fails.
func attachAll(progs ...program) ([]link.Link, error) {
	var links []link.Link
	for _, p := range progs {
		l, err := link.AttachTracing(link.TracingOptions{Program: p.prog})
		if err != nil {
			closeLinks(links)
			return nil, fmt.Errorf("attach %s: %w", p.name, err)
		}
		links = append(links, l)
	}
	return links, nil
}

// ProgramStats is what the kernel measured of one program since it was
// loaded: counted only while run-time statistics are on (EnableRunStats,
// or the kernel.bpf_stats_enabled sysctl), which costs two clock reads per
// run.
type ProgramStats struct {
	Name    string
	Runs    uint64
	Runtime time.Duration
}

// EnableRunStats turns the kernel's BPF run-time statistics on until the
// returned closer is closed (Linux 5.8+).
func EnableRunStats() (io.Closer, error) {
	c, err := ebpf.EnableStats(uint32(unix.BPF_STATS_RUN_TIME))
	if err != nil {
		return nil, errorHint("enable BPF run-time statistics", err)
	}
	return c, nil
}

func programStats(progs []program) ([]ProgramStats, error) {
	out := make([]ProgramStats, 0, len(progs))
	for _, p := range progs {
		st, err := p.prog.Stats()
		if err != nil {
			return nil, fmt.Errorf("read run-time statistics of %s: %w", p.name, err)
		}
		out = append(out, ProgramStats{Name: p.name, Runs: st.RunCount, Runtime: st.Runtime})
	}
	return out, nil
}

// runsSkipped counts the runs the kernel skipped of the programs since they
// were loaded: a tracing program does not run on a CPU where it is already
// running, so a completion whose interrupt lands while the same program
// handles another request on that CPU is never seen (Linux 5.12+ counts
// these; older kernels report 0). Counted whether run-time statistics are
// on or not.
func runsSkipped(progs []program) (uint64, error) {
	var n uint64
	for _, p := range progs {
		st, err := p.prog.Stats()
		if err != nil {
			return 0, fmt.Errorf("read the skipped runs of %s: %w", p.name, err)
		}
		n += st.RecursionMisses
	}
	return n, nil
}

// programIDs are the kernel's IDs of the loaded programs.
func programIDs(progs []program) ([]ebpf.ProgramID, error) {
	out := make([]ebpf.ProgramID, 0, len(progs))
	for _, p := range progs {
		info, err := p.prog.Info()
		if err != nil {
			return nil, fmt.Errorf("read the ID of %s: %w", p.name, err)
		}
		id, ok := info.ID()
		if !ok {
			return nil, fmt.Errorf("the kernel gives no ID for %s", p.name)
		}
		out = append(out, id)
	}
	return out, nil
}

func closeLinks(links []link.Link) error {
	var errs []error
	for _, l := range links {
		errs = append(errs, l.Close())
	}
	return errors.Join(errs...)
}

// sumLost adds up a lost_events map over its CPUs.
func sumLost(m *ebpf.Map, reasons int) ([]uint64, error) {
	out := make([]uint64, reasons)
	for i := range reasons {
		var perCPU []uint64
		if err := m.Lookup(uint32(i), &perCPU); err != nil {
			return nil, fmt.Errorf("read lost events: %w", err)
		}
		for _, n := range perCPU {
			out[i] += n
		}
	}
	return out, nil
}

// entries calls each with every entry of m once. A hash map that changes
// while it is walked can yield a key twice (the walk restarts from a
// bucket); the first reading counts.
func entries[K comparable, V any](m *ebpf.Map, what string, each func(K, V)) error {
	var k K
	var v V
	seen := map[K]bool{}
	it := m.Iterate()
	for it.Next(&k, &v) {
		if seen[k] {
			continue
		}
		seen[k] = true
		each(k, v)
	}
	if err := it.Err(); err != nil {
		return fmt.Errorf("read %s: %w", what, err)
	}
	return nil
}

// deleteKeys removes keys' entries from m; an entry already gone is no error.
func deleteKeys[K any](m *ebpf.Map, keys []K) error {
	var errs []error
	for _, k := range keys {
		if err := m.Delete(k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
