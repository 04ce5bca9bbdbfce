package bpf

import (
	"cmp"
	"errors"
	"fmt"
	"slices"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"
	"github.com/cilium/ebpf/link"
)

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
	b := &BlockIO{ownerHook: hook}
	if b.coll, err = t.loadSharing(spec, &b.maps); err != nil {
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
		b.progs = append(b.progs, program{name, b.coll.Programs[name]})
	}
	if b.links, err = attachAll(b.progs...); err != nil {
		b.coll.Close()
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
	err := entries(b.maps.UnstampedDisks, "unstamped disks", func(_ uint32, dev uint64) {
		if dev != 0 {
			out = append(out, uint32(dev))
		}
	})
	if err != nil {
		return nil, err
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

// RunsSkipped counts the runs of these programs the kernel skipped because
// the same program was already running on the CPU: events never seen.
func (b *BlockIO) RunsSkipped() (uint64, error) { return runsSkipped(b.progs) }

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
	err := entries(b.maps.ProcessIoTotals, "process block I/O", func(k blockIOProcessIoKey, v blockIOProcessIo) {
		out = append(out, ProcessIO{
			ProcessIOKey: ProcessIOKey{TGID: k.Tgid, Dev: k.Dev, Op: Op(k.Op)},
			Root:         v.Root, Requests: v.Requests, Bytes: v.Bytes, WaitNs: v.WaitNs,
		})
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// ForgetProcessIO removes entries of processes that exited, once counted.
func (b *BlockIO) ForgetProcessIO(keys []ProcessIOKey) error {
	mapKeys := make([]blockIOProcessIoKey, len(keys))
	for i, k := range keys {
		mapKeys[i] = blockIOProcessIoKey{Tgid: k.TGID, Dev: k.Dev, Op: uint32(k.Op)}
	}
	return deleteKeys(b.maps.ProcessIoTotals, mapKeys)
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
