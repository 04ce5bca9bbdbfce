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
// Block I/O and TCP load independently, so that a kernel lacking one hook
// still gets the other. Everything needs kernel BTF (CO-RE and BTF-typed
// hooks) and Linux 5.12 or later (the block I/O owner slots are claimed by
// compare-and-swap), and CAP_BPF with CAP_PERFMON, or root.
package bpf

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/rlimit"
	"golang.org/x/sys/unix"
)

// MaxTrackedProcesses is the capacity of the tracked-process table
// (MAX_TRACKED_PROCESSES in tracking.h).
const MaxTrackedProcesses = 8192

// LatencySlots is the number of exp2 latency buckets per disk and operation:
// slot 0 counts requests under 1 µs, slot k (1 ≤ k < LatencySlots-1) those in
// [2^(k-1), 2^k) µs, the last one the rest.
const LatencySlots = len(blockIODiskLatency{}.Slots)

// Op is a block request's operation, as the block I/O programs group them.
type Op uint32

// The values of enum disk_op in blockio.bpf.c.
const (
	OpRead Op = iota
	OpWrite
	OpFlush
	OpDiscard // discard, secure erase and write zeroes
	OpOther   // zone management and driver-private requests
)

func (o Op) String() string {
	switch o {
	case OpRead:
		return "read"
	case OpWrite:
		return "write"
	case OpFlush:
		return "flush"
	case OpDiscard:
		return "discard"
	default:
		return "other"
	}
}

// Scope says where a TCP connection's traffic goes.
type Scope uint32

// The values of enum tcp_scope in tcp.bpf.c.
const (
	// ScopeLoopback: both ends are loopback addresses, or both have the same
	// address, so the traffic never leaves the host.
	ScopeLoopback Scope = iota
	ScopeNetwork
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

// Tracker owns the table of tracked processes and the programs that follow
// their forks and exits.
type Tracker struct {
	objs  trackingObjects
	links []link.Link
	progs []program
	hint  [hintWords]uint64 // what tracked_hint_user holds; only Tracker writes it
}

// LoadTracker loads and attaches the tracking programs.
func LoadTracker() (*Tracker, error) {
	kernel, err := kernelBTF()
	if err != nil {
		return nil, err
	}
	for _, tp := range []string{"sched_process_fork", "sched_process_exit"} {
		if !hasTracepoint(kernel, tp) {
			return nil, fmt.Errorf("kernel has no BTF-typed tracepoint %s (Linux 5.5 or later needed)", tp)
		}
	}
	// Kernels before 5.11 charge BPF memory to RLIMIT_MEMLOCK; later ones
	// to the cgroup, and this is a no-op there.
	if err := rlimit.RemoveMemlock(); err != nil {
		return nil, errorHint("raise RLIMIT_MEMLOCK for BPF maps", err)
	}
	t := &Tracker{}
	if err := loadTrackingObjects(&t.objs, nil); err != nil {
		return nil, errorHint("load process tracking programs", err)
	}
	t.progs = []program{{"track_fork", t.objs.TrackFork}, {"track_exit", t.objs.TrackExit}}
	if t.links, err = attachAll(t.progs...); err != nil {
		t.objs.Close()
		return nil, errorHint("process tracking", err)
	}
	return t, nil
}

// sharedMaps are the tracker's maps the other objects use as their own.
func (t *Tracker) sharedMaps() map[string]*ebpf.Map {
	return map[string]*ebpf.Map{
		"tracked_processes": t.objs.TrackedProcesses,
		"tracked_hint_user": t.objs.TrackedHintUser,
		"tracked_hint_fork": t.objs.TrackedHintFork,
	}
}

// hintWords is TRACKED_HINT_WORDS in tracking.h.
const hintWords = 1024

// hintBit is hint_bit in tracking.h.
func hintBit(tgid uint32) uint32 { return (tgid * 2654435761) >> 16 }

// Track adds the process, or changes the GPU process it is counted under.
func (t *Tracker) Track(tgid, root uint32) error {
	if err := t.objs.TrackedProcesses.Update(tgid, trackingTrackedProcess{Root: root}, ebpf.UpdateAny); err != nil {
		return err
	}
	return t.setHint(tgid)
}

// TrackIfAbsent adds the process unless the table already has it, as a
// process forked since may have been added by the kernel with its real root.
func (t *Tracker) TrackIfAbsent(tgid, root uint32) error {
	err := t.objs.TrackedProcesses.Update(tgid, trackingTrackedProcess{Root: root}, ebpf.UpdateNoExist)
	if errors.Is(err, ebpf.ErrKeyExist) {
		return nil
	}
	if err != nil {
		return err
	}
	return t.setHint(tgid)
}

// setHint sets the process's bit in the user hint, after its table entry:
// a set bit must always find the entry.
func (t *Tracker) setHint(tgid uint32) error {
	bit := hintBit(tgid)
	word, mask := bit>>6, uint64(1)<<(bit&63)
	if t.hint[word]&mask != 0 {
		return nil
	}
	t.hint[word] |= mask
	if err := t.objs.TrackedHintUser.Update(word, t.hint[word], ebpf.UpdateAny); err != nil {
		return fmt.Errorf("set tracked-process hint: %w", err)
	}
	return nil
}

// RebuildHints drops the stale bits of processes no longer tracked, which
// otherwise only cost their namesakes a table lookup. The kernel's fork
// bits are cleared too, once every tracked process has its bit in the user
// hint: a child forked in the instant between the clearing and the table's
// second reading is missed for that instant only.
func (t *Tracker) RebuildHints() error {
	tracked, err := t.Processes()
	if err != nil {
		return err
	}
	for tgid := range tracked {
		if err := t.setHint(tgid); err != nil {
			return err
		}
	}
	zeros := make([]uint64, hintWords)
	keys := make([]uint32, hintWords)
	for i := range keys {
		keys[i] = uint32(i)
	}
	if _, err := t.objs.TrackedHintFork.BatchUpdate(keys, zeros, nil); err != nil {
		return fmt.Errorf("clear fork hints: %w", err)
	}
	if tracked, err = t.Processes(); err != nil {
		return err
	}
	var fresh [hintWords]uint64
	for tgid := range tracked {
		bit := hintBit(tgid)
		fresh[bit>>6] |= 1 << (bit & 63)
	}
	for w := range fresh {
		if fresh[w] == t.hint[w] {
			continue
		}
		if err := t.objs.TrackedHintUser.Update(uint32(w), fresh[w], ebpf.UpdateAny); err != nil {
			return fmt.Errorf("rebuild tracked-process hint: %w", err)
		}
		t.hint[w] = fresh[w]
	}
	return nil
}

// Untrack removes the process; removing one that is not there is no error.
func (t *Tracker) Untrack(tgid uint32) error {
	err := t.objs.TrackedProcesses.Delete(tgid)
	if errors.Is(err, ebpf.ErrKeyNotExist) {
		return nil
	}
	return err
}

// Processes returns the tracked processes: tgid → tgid of the GPU process
// each is counted under.
func (t *Tracker) Processes() (map[uint32]uint32, error) {
	out := map[uint32]uint32{}
	var tgid uint32
	var v trackingTrackedProcess
	it := t.objs.TrackedProcesses.Iterate()
	for it.Next(&tgid, &v) {
		out[tgid] = v.Root
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("read tracked processes: %w", err)
	}
	return out, nil
}

// ForksUntracked is how many children of tracked processes could not be
// tracked because the table was full.
func (t *Tracker) ForksUntracked() (uint64, error) {
	n, err := sumLost(t.objs.LostEvents, 1)
	if err != nil {
		return 0, err
	}
	return n[0], nil
}

// ProgramStats reports the tracking programs' runs and run time.
func (t *Tracker) ProgramStats() ([]ProgramStats, error) { return programStats(t.progs) }

// ProgramIDs are the kernel's IDs of the programs this loaded: what tells
// them from the same programs loaded by another process.
func (t *Tracker) ProgramIDs() ([]ebpf.ProgramID, error) { return programIDs(t.progs) }

// Close detaches the programs and frees the table.
func (t *Tracker) Close() error {
	return errors.Join(closeLinks(t.links), t.objs.Close())
}

// OwnerHook names where block I/O attributes a request to a process.
type OwnerHook string

const (
	// OwnerAtIOStart: the block_io_start tracepoint (Linux 6.5+), fired as
	// the request is built from the submitting process's bio.
	OwnerAtIOStart OwnerHook = "block_io_start"
	// OwnerAtAccountStart: fentry on blk_account_io_start, the same point on
	// older kernels.
	OwnerAtAccountStart OwnerHook = "blk_account_io_start"
	// OwnerAtIssue: the block_rq_issue tracepoint, whose context is the
	// submitter only when the request is issued directly; requests issued
	// later from a kworker go unattributed.
	OwnerAtIssue OwnerHook = "block_rq_issue"
)

// BlockIO owns the block request programs and their tables.
type BlockIO struct {
	coll      *ebpf.Collection
	maps      blockIOMaps
	links     []link.Link
	progs     []program
	ownerHook OwnerHook
	// issueTimed: block_rq_issue is attached, to time the requests of
	// disks the kernel does not stamp at issue (or to take owners there).
	issueTimed bool
}

// DiskLatency is the latency histogram of one disk and operation, summed over
// CPUs, since the programs were loaded.
type DiskLatency struct {
	// Dev is the whole disk's device number in the kernel's encoding.
	Dev   uint32
	Op    Op
	Slots [LatencySlots]uint64
	SumNs uint64
}

// Major and Minor are the disk's device numbers, as in /sys/dev/block.
func (d DiskLatency) Major() uint32 { return d.Dev >> 20 }
func (d DiskLatency) Minor() uint32 { return d.Dev & (1<<20 - 1) }

// ProcessIOKey identifies one process's requests to one disk and operation.
type ProcessIOKey struct {
	TGID uint32
	Dev  uint32
	Op   Op
}

// ProcessIO is a tracked process's completed block requests to one disk and
// operation, since it was tracked. Wait runs from the request's creation
// (issue, under OwnerAtIssue) to its completion and is summed over requests,
// so concurrent requests each count.
type ProcessIO struct {
	ProcessIOKey
	Root     uint32
	Requests uint64
	Bytes    uint64
	WaitNs   uint64
}

// BlockIOLost counts what block I/O could not record, since loading.
type BlockIOLost struct {
	// RequestsUnmatched: completions whose issue was not seen (in flight
	// when the programs attached, or the request table was full).
	RequestsUnmatched uint64
	DiskTableFull     uint64
	ProcessTableFull  uint64
	RequestTableFull  uint64
}

// LoadBlockIO loads and attaches the block I/O programs, counting the
// tracker's processes.
func LoadBlockIO(t *Tracker) (*BlockIO, error) {
	return loadBlockIOPrograms(t, blockIOOptions{})
}

// blockIOOptions are settings tests change.
type blockIOOptions struct {
	// ignoreKernelStamps takes every request for one the kernel did not
	// stamp at issue, so that tests run the path of such disks anywhere.
	ignoreKernelStamps bool
}

func loadBlockIOPrograms(t *Tracker, opts blockIOOptions) (*BlockIO, error) {
	kernel, err := kernelBTF()
	if err != nil {
		return nil, err
	}
	for tp, args := range map[string]int{"block_rq_issue": 1, "block_rq_complete": 3} {
		if n := tracepointParams(kernel, tp); n != args {
			return nil, fmt.Errorf("kernel's %s tracepoint takes %d arguments, not %d (Linux 5.11 or later needed)", tp, n, args)
		}
	}
	var hooks []OwnerHook
	if hasTracepoint(kernel, "block_io_start") {
		hooks = append(hooks, OwnerAtIOStart)
	}
	if funcParams(kernel, "blk_account_io_start") == 1 {
		hooks = append(hooks, OwnerAtAccountStart)
	}
	hooks = append(hooks, OwnerAtIssue)
	var errs []error
	for _, hook := range hooks {
		b, err := loadBlockIOWithOwner(t, kernel, hook, opts)
		if err == nil {
			return b, nil
		}
		errs = append(errs, fmt.Errorf("owner at %s: %w", hook, err))
	}
	return nil, errorHint("load block I/O programs", errors.Join(errs...))
}

func loadBlockIOWithOwner(t *Tracker, kernel *btf.Spec, hook OwnerHook, opts blockIOOptions) (*BlockIO, error) {
	spec, err := loadBlockIO()
	if err != nil {
		return nil, err
	}
	ownerProgs := []string{string(OwnerAtIOStart), string(OwnerAtAccountStart)}
	for _, name := range ownerProgs {
		if name != string(hook) {
			delete(spec.Programs, name)
		}
	}
	// Owners recorded at creation are dropped when their request is merged
	// away, where the kernel says so, rather than checked for on every
	// request created.
	forgetOnMerge := hook != OwnerAtIssue && tracepointParams(kernel, "block_rq_merge") == 1
	if !forgetOnMerge {
		delete(spec.Programs, "block_rq_merge")
	}
	for name, v := range map[string]bool{
		"owner_at_issue":        hook == OwnerAtIssue,
		"forget_on_merge":       forgetOnMerge,
		"kernel_stamps_ignored": opts.ignoreKernelStamps,
	} {
		if err := spec.Variables[name].Set(boolByte(v)); err != nil {
			return nil, err
		}
	}
	coll, err := ebpf.NewCollectionWithOptions(spec, ebpf.CollectionOptions{
		MapReplacements: t.sharedMaps(),
	})
	if err != nil {
		return nil, err
	}
	b := &BlockIO{coll: coll, ownerHook: hook}
	if err := coll.Assign(&b.maps); err != nil {
		coll.Close()
		return nil, err
	}
	// The owner is recorded before requests are timed, so that no request
	// issued in between is taken for one without an owner. block_rq_issue
	// waits for a disk without the kernel's issue stamp (TimeUnstampedDisks),
	// unless owners are taken there.
	var names []string
	if forgetOnMerge {
		names = append(names, "block_rq_merge")
	}
	if hook == OwnerAtIssue {
		names = append(names, "block_rq_issue")
		b.issueTimed = true
	} else {
		names = append(names, string(hook))
	}
	for _, name := range append(names, "block_rq_complete") {
		b.progs = append(b.progs, program{name, coll.Programs[name]})
	}
	if b.links, err = attachAll(b.progs...); err != nil {
		coll.Close()
		return nil, err
	}
	return b, nil
}

// TimeUnstampedDisks attaches block_rq_issue once some disk has completed a
// request without the kernel's issue stamp, so that its requests are timed
// from the next one issued; the requests it completed before count as
// unmatched. It returns the device numbers of all such disks found so far.
func (b *BlockIO) TimeUnstampedDisks() ([]uint32, error) {
	var st blockIOBlockioState
	if err := b.maps.BlockioStates.Lookup(uint32(0), &st); err != nil {
		return nil, fmt.Errorf("read block I/O state: %w", err)
	}
	if st.UnstampedDisks == 0 {
		return nil, nil
	}
	if !b.issueTimed {
		issue := program{"block_rq_issue", b.coll.Programs["block_rq_issue"]}
		links, err := attachAll(issue)
		if err != nil {
			return nil, err
		}
		b.links = append(b.links, links...)
		b.progs = append(b.progs, issue)
		b.issueTimed = true
	}
	return b.UnstampedDisks()
}

// UnstampedDisks returns the device numbers of the disks found to complete
// requests without the kernel's issue stamp.
func (b *BlockIO) UnstampedDisks() ([]uint32, error) {
	var out []uint32
	var slot uint32
	var dev uint64
	it := b.maps.UnstampedDisks.Iterate()
	for it.Next(&slot, &dev) {
		if dev != 0 {
			out = append(out, uint32(dev))
		}
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("read unstamped disks: %w", err)
	}
	slices.Sort(out)
	return out, nil
}

func boolByte(b bool) uint8 {
	if b {
		return 1
	}
	return 0
}

// OwnerHook says where requests are attributed to processes.
func (b *BlockIO) OwnerHook() OwnerHook { return b.ownerHook }

// ProgramStats reports the block I/O programs' runs and run time.
func (b *BlockIO) ProgramStats() ([]ProgramStats, error) { return programStats(b.progs) }

// ProgramIDs are the kernel's IDs of the programs this loaded (block_rq_issue
// too while it waits unattached for a disk without the issue stamp): what
// tells them from the same programs loaded by another process.
func (b *BlockIO) ProgramIDs() ([]ebpf.ProgramID, error) {
	var progs []program
	for name, p := range b.coll.Programs {
		progs = append(progs, program{name, p})
	}
	return programIDs(progs)
}

// DiskLatencies returns every disk and operation's histogram. Each CPU
// keeps its histograms in its own copy of an array, wherever it placed
// them, so they are added up by the key each slot holds; only the slots
// some CPU uses are read.
func (b *BlockIO) DiskLatencies() ([]DiskLatency, error) {
	var used []uint64
	for w := range diskLatencySlots / 64 {
		var bits uint64
		if err := b.maps.DiskLatencyUsed.Lookup(uint32(w), &bits); err != nil {
			return nil, fmt.Errorf("read disk latency slots in use: %w", err)
		}
		used = append(used, bits)
	}
	byKey := map[blockIODiskKey]*DiskLatency{}
	var out []DiskLatency
	var perCPU []blockIODiskLatency
	for i := range diskLatencySlots {
		if used[i/64]&(1<<(i%64)) == 0 {
			continue
		}
		if err := b.maps.DiskLatencies.Lookup(uint32(i), &perCPU); err != nil {
			return nil, fmt.Errorf("read disk latencies: %w", err)
		}
		for _, c := range perCPU {
			if c.Key.Dev == 0 {
				continue
			}
			d := byKey[c.Key]
			if d == nil {
				d = &DiskLatency{Dev: c.Key.Dev, Op: Op(c.Key.Op)}
				byKey[c.Key] = d
			}
			for j, n := range c.Slots {
				d.Slots[j] += n
			}
			d.SumNs += c.SumNs
		}
	}
	for _, d := range byKey {
		out = append(out, *d)
	}
	slices.SortFunc(out, func(a, b DiskLatency) int {
		return cmp.Or(cmp.Compare(a.Dev, b.Dev), cmp.Compare(a.Op, b.Op))
	})
	return out, nil
}

// diskLatencySlots is DISK_LATENCY_SLOTS in blockio.bpf.c.
const diskLatencySlots = 128

// ProcessIO returns the tracked processes' block I/O.
func (b *BlockIO) ProcessIO() ([]ProcessIO, error) {
	var out []ProcessIO
	var k blockIOProcessIoKey
	var v blockIOProcessIo
	seen := map[blockIOProcessIoKey]bool{}
	it := b.maps.ProcessIoTotals.Iterate()
	for it.Next(&k, &v) {
		if seen[k] {
			continue
		}
		seen[k] = true
		out = append(out, ProcessIO{
			ProcessIOKey: ProcessIOKey{TGID: k.Tgid, Dev: k.Dev, Op: Op(k.Op)},
			Root:         v.Root, Requests: v.Requests, Bytes: v.Bytes, WaitNs: v.WaitNs,
		})
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("read process block I/O: %w", err)
	}
	return out, nil
}

// ForgetProcessIO removes entries of processes that exited, once counted.
func (b *BlockIO) ForgetProcessIO(keys []ProcessIOKey) error {
	var errs []error
	for _, k := range keys {
		err := b.maps.ProcessIoTotals.Delete(blockIOProcessIoKey{Tgid: k.TGID, Dev: k.Dev, Op: uint32(k.Op)})
		if err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Lost returns what block I/O could not record.
func (b *BlockIO) Lost() (BlockIOLost, error) {
	n, err := sumLost(b.maps.LostEvents, 4)
	if err != nil {
		return BlockIOLost{}, err
	}
	return BlockIOLost{RequestsUnmatched: n[0], DiskTableFull: n[1], ProcessTableFull: n[2], RequestTableFull: n[3]}, nil
}

// Close detaches the programs and frees the tables.
func (b *BlockIO) Close() error {
	err := closeLinks(b.links)
	b.coll.Close()
	return err
}

// TCP owns the TCP programs and their table.
type TCP struct {
	coll  *ebpf.Collection
	maps  tcpMaps
	links []link.Link
	progs []program
	hook  TCPHook
}

// TCPHook names where TCP traffic is counted.
type TCPHook string

const (
	// TCPAtSocketCalls: the sock_send_length and sock_recv_length
	// tracepoints (Linux 6.3+), after every socket send and receive call.
	TCPAtSocketCalls TCPHook = "sock_send_length/sock_recv_length"
	// TCPAtTCPCalls: fexit on tcp_sendmsg and tcp_recvmsg (Linux 5.5+,
	// where the kernel allows BPF trampolines).
	TCPAtTCPCalls TCPHook = "tcp_sendmsg/tcp_recvmsg"
)

// TCPKey identifies one process's traffic in one scope.
type TCPKey struct {
	TGID  uint32
	Scope Scope
}

// TCPTraffic is the TCP payload a tracked process passed through send and
// receive calls in one scope, since it was tracked.
type TCPTraffic struct {
	TCPKey
	Root     uint32
	Sent     uint64
	Received uint64
}

// LoadTCP loads and attaches the TCP programs, counting the tracker's
// processes.
func LoadTCP(t *Tracker) (*TCP, error) {
	kernel, err := kernelBTF()
	if err != nil {
		return nil, err
	}
	type candidate struct {
		hook  TCPHook
		progs []string
	}
	var candidates []candidate
	var errs []error
	if hasTracepoint(kernel, "sock_send_length") && hasTracepoint(kernel, "sock_recv_length") {
		candidates = append(candidates, candidate{TCPAtSocketCalls, []string{"sock_send_length", "sock_recv_length"}})
	}
	// tcp_recvmsg with six parameters is a kernel before 5.19, which may
	// lack bpf_get_func_ret; with fewer, a later one, which has it.
	switch n := funcParams(kernel, "tcp_recvmsg"); {
	case funcParams(kernel, "tcp_sendmsg") != 3:
		errs = append(errs, errors.New("kernel's tcp_sendmsg is not traceable as tcp_sendmsg(sk, msg, size)"))
	case n == 6:
		candidates = append(candidates, candidate{TCPAtTCPCalls, []string{"tcp_sendmsg_exit", "tcp_recvmsg_exit_nonblock"}})
	case n == 4 || n == 5:
		candidates = append(candidates, candidate{TCPAtTCPCalls, []string{"tcp_sendmsg_exit", "tcp_recvmsg_exit"}})
	default:
		errs = append(errs, fmt.Errorf("kernel's tcp_recvmsg is not traceable (%d parameters)", n))
	}
	for _, cand := range candidates {
		c, err := loadTCPWith(t, cand.hook, cand.progs)
		if err == nil {
			return c, nil
		}
		errs = append(errs, fmt.Errorf("at %s: %w", cand.hook, err))
	}
	return nil, errorHint("load TCP programs", errors.Join(errs...))
}

func loadTCPWith(t *Tracker, hook TCPHook, progs []string) (*TCP, error) {
	spec, err := loadTcp()
	if err != nil {
		return nil, err
	}
	for name := range spec.Programs {
		if !slices.Contains(progs, name) {
			delete(spec.Programs, name)
		}
	}
	coll, err := ebpf.NewCollectionWithOptions(spec, ebpf.CollectionOptions{
		MapReplacements: t.sharedMaps(),
	})
	if err != nil {
		return nil, err
	}
	c := &TCP{coll: coll, hook: hook}
	if err := coll.Assign(&c.maps); err != nil {
		coll.Close()
		return nil, err
	}
	for _, name := range progs {
		c.progs = append(c.progs, program{name, coll.Programs[name]})
	}
	if c.links, err = attachAll(c.progs...); err != nil {
		coll.Close()
		return nil, err
	}
	return c, nil
}

// Hook says where TCP traffic is counted.
func (c *TCP) Hook() TCPHook { return c.hook }

// ProgramStats reports the TCP programs' runs and run time.
func (c *TCP) ProgramStats() ([]ProgramStats, error) { return programStats(c.progs) }

// ProgramIDs are the kernel's IDs of the programs this loaded: what tells
// them from the same programs loaded by another process.
func (c *TCP) ProgramIDs() ([]ebpf.ProgramID, error) { return programIDs(c.progs) }

// Traffic returns the tracked processes' TCP traffic, one entry per process
// and scope it used.
func (c *TCP) Traffic() ([]TCPTraffic, error) {
	var out []TCPTraffic
	var tgid uint32
	var v tcpTcpTrafficBytes
	seen := map[uint32]bool{}
	it := c.maps.TcpTraffic.Iterate()
	for it.Next(&tgid, &v) {
		if seen[tgid] {
			continue
		}
		seen[tgid] = true
		for _, scope := range []Scope{ScopeLoopback, ScopeNetwork} {
			if v.Sent[scope] == 0 && v.Received[scope] == 0 {
				continue
			}
			out = append(out, TCPTraffic{TCPKey: TCPKey{TGID: tgid, Scope: scope}, Root: v.Root, Sent: v.Sent[scope], Received: v.Received[scope]})
		}
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("read TCP traffic: %w", err)
	}
	return out, nil
}

// ForgetTraffic removes the traffic of processes that exited, once counted:
// both scopes of each process named.
func (c *TCP) ForgetTraffic(keys []TCPKey) error {
	var errs []error
	done := map[uint32]bool{}
	for _, k := range keys {
		if done[k.TGID] {
			continue
		}
		done[k.TGID] = true
		err := c.maps.TcpTraffic.Delete(k.TGID)
		if err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// TableFull is how many counts were lost because the TCP table was full.
func (c *TCP) TableFull() (uint64, error) {
	n, err := sumLost(c.maps.LostEvents, 1)
	if err != nil {
		return 0, err
	}
	return n[0], nil
}

// Close detaches the programs and frees the table.
func (c *TCP) Close() error {
	err := closeLinks(c.links)
	c.coll.Close()
	return err
}
