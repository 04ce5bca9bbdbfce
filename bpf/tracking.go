package bpf

import (
	"errors"
	"fmt"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/rlimit"
)

// MaxTrackedProcesses is the capacity of the tracked-process table
// (MAX_TRACKED_PROCESSES in tracking.h).
const MaxTrackedProcesses = 8192

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

// loadSharing loads spec with the tracker's maps in place of its own
// copies of them, so that the object sees the processes the tracker tracks,
// and assigns the collection's maps to maps (a bpf2go maps struct).
func (t *Tracker) loadSharing(spec *ebpf.CollectionSpec, maps any) (*ebpf.Collection, error) {
	coll, err := ebpf.NewCollectionWithOptions(spec, ebpf.CollectionOptions{
		MapReplacements: map[string]*ebpf.Map{
			"tracked_processes": t.objs.TrackedProcesses,
			"tracked_hint_user": t.objs.TrackedHintUser,
			"tracked_hint_fork": t.objs.TrackedHintFork,
		},
	})
	if err != nil {
		return nil, err
	}
	if err := coll.Assign(maps); err != nil {
		coll.Close()
		return nil, err
	}
	return coll, nil
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
	err := entries(t.objs.TrackedProcesses, "tracked processes", func(tgid uint32, v trackingTrackedProcess) {
		out[tgid] = v.Root
	})
	if err != nil {
		return nil, err
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

// RunsSkipped counts the runs of these programs the kernel skipped because
// the same program was already running on the CPU: events never seen.
func (t *Tracker) RunsSkipped() (uint64, error) { return runsSkipped(t.progs) }

// ProgramIDs are the kernel's IDs of the programs this loaded: what tells
// them from the same programs loaded by another process.
func (t *Tracker) ProgramIDs() ([]ebpf.ProgramID, error) { return programIDs(t.progs) }

// Close detaches the programs and frees the table.
func (t *Tracker) Close() error {
	return errors.Join(closeLinks(t.links), t.objs.Close())
}
