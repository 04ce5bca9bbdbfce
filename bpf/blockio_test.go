package bpf

import (
	"os"
	"slices"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gpudiag/gpudiag/bpf/bpftest"
)

func loadTrackedBlockIO(t *testing.T, opts blockIOOptions) *BlockIO {
	t.Helper()
	bpftest.Require(t)
	tracker, err := LoadTracker()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tracker.Close() })
	b, err := loadBlockIOPrograms(tracker, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	self := uint32(os.Getpid())
	if err := tracker.Track(self, self); err != nil {
		t.Fatal(err)
	}
	return b
}

func diskLatency(t *testing.T, b *BlockIO, dev uint32, op Op) DiskLatency {
	t.Helper()
	all, err := b.DiskLatencies()
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range all {
		if d.Dev == dev && d.Op == op {
			return d
		}
	}
	return DiskLatency{Dev: dev, Op: op}
}

// monotonicNs reads the clock the programs stamp with (bpf_ktime_get_ns).
func monotonicNs(t *testing.T) uint64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		t.Fatal(err)
	}
	return uint64(ts.Nano())
}

func (d DiskLatency) count() (n uint64) {
	for _, c := range d.Slots {
		n += c
	}
	return n
}

func processIO(t *testing.T, b *BlockIO, dev uint32, op Op) ProcessIO {
	t.Helper()
	all, err := b.ProcessIO()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range all {
		if p.TGID == uint32(os.Getpid()) && p.Dev == dev && p.Op == op {
			return p
		}
	}
	return ProcessIO{}
}

func skippedRuns(t *testing.T, b *BlockIO) uint64 {
	t.Helper()
	n, err := b.RunsSkipped()
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func (b *BlockIO) state(t *testing.T) blockIOBlockioState {
	t.Helper()
	var st blockIOBlockioState
	if err := b.maps.BlockioStates.Lookup(uint32(0), &st); err != nil {
		t.Fatal(err)
	}
	return st
}

func (b *BlockIO) attached() []string {
	var names []string
	for _, p := range b.progs {
		names = append(names, p.name)
	}
	return names
}

// The requests of a disk the kernel stamps at issue are timed and charged
// to their process by the owner and completion programs alone: nothing is
// left in the request table, and block_rq_issue stays detached unless some
// disk of this machine lacks the stamp.
func TestBlockIOStampedDisk(t *testing.T) {
	b := loadTrackedBlockIO(t, blockIOOptions{})
	if b.OwnerHook() == OwnerAtIssue {
		t.Skip("this kernel attributes requests at issue: block_rq_issue is attached from the start")
	}
	dir, disk := bpftest.DiskDir(t)
	const size, chunk = 1 << 20, 64 << 10
	before := diskLatency(t, b, disk.Dev, OpRead)
	skippedBefore := skippedRuns(t, b)
	bpftest.DirectIO(t, dir, size, chunk)
	after := diskLatency(t, b, disk.Dev, OpRead)
	skipped := int(skippedRuns(t, b) - skippedBefore)
	if got := after.count() - before.count(); got+uint64(skipped) < size/chunk {
		t.Errorf("%s reads: %d timed (%d program runs skipped by the kernel), want at least the %d direct reads", disk.Name, got, skipped, size/chunk)
	}
	if after.SumNs <= before.SumNs {
		t.Errorf("%s reads: latency sum %d → %d", disk.Name, before.SumNs, after.SumNs)
	}
	io := processIO(t, b, disk.Dev, OpRead)
	if io.Bytes+uint64(skipped*chunk) < size || int(io.Requests)+skipped < size/chunk || io.WaitNs == 0 {
		t.Errorf("%s reads charged to this process: %+v, want at least %d bytes in %d requests", disk.Name, io, size, size/chunk)
	}

	unstamped, err := b.UnstampedDisks()
	if err != nil {
		t.Fatal(err)
	}
	if slices.Contains(unstamped, disk.Dev) {
		t.Skipf("%s completes requests without the kernel's issue stamp here", disk.Name)
	}
	if _, err := b.TimeUnstampedDisks(); err != nil {
		t.Fatal(err)
	}
	if issue := slices.Contains(b.attached(), "block_rq_issue"); issue != (len(unstamped) > 0) {
		t.Errorf("block_rq_issue attached %v with unstamped disks %v", issue, unstamped)
	}
	st := b.state(t)
	if int(st.UnstampedDisks) != len(unstamped) {
		t.Errorf("state counts %d unstamped disks, the table lists %v", st.UnstampedDisks, unstamped)
	}
	if st.SpilledOwners != 0 {
		t.Errorf("%d owners spilled into the request table once every request completed", st.SpilledOwners)
	}
}

// A disk whose requests complete without the kernel's stamp is listed at its
// first completion; block_rq_issue, attached then, times its requests in the
// request table, and every entry leaves the table at completion.
func TestBlockIOUnstampedDisk(t *testing.T) {
	b := loadTrackedBlockIO(t, blockIOOptions{ignoreKernelStamps: true})
	if b.OwnerHook() == OwnerAtIssue {
		t.Skip("this kernel attributes requests at issue: block_rq_issue is attached from the start")
	}
	dir, disk := bpftest.DiskDir(t)
	const size, chunk = 1 << 20, 4 << 10

	// Before block_rq_issue is attached, requests are charged to their
	// process but not timed.
	bpftest.DirectIO(t, dir, chunk, chunk)
	if got := diskLatency(t, b, disk.Dev, OpRead).count(); got != 0 {
		t.Errorf("%s: %d reads timed before any issue was seen", disk.Name, got)
	}
	lost, err := b.Lost()
	if err != nil {
		t.Fatal(err)
	}
	if lost.RequestsUnmatched == 0 {
		t.Error("completions without an issue time were not counted as unmatched")
	}
	devs, err := b.TimeUnstampedDisks()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(devs, disk.Dev) || !slices.Contains(b.attached(), "block_rq_issue") {
		t.Fatalf("after %s completed unstamped requests: unstamped disks %v, programs %v", disk.Name, devs, b.attached())
	}
	if again, err := b.TimeUnstampedDisks(); err != nil || !slices.Equal(again, devs) || len(b.attached()) != len(slices.Compact(b.attached())) {
		t.Errorf("second call: %v, %v, programs %v; want the same disks and block_rq_issue attached once", again, err, b.attached())
	}

	before := diskLatency(t, b, disk.Dev, OpRead)
	skippedBefore := skippedRuns(t, b)
	start := monotonicNs(t)
	bpftest.DirectIO(t, dir, size, chunk)
	end := monotonicNs(t)
	after := diskLatency(t, b, disk.Dev, OpRead)
	// A completion interrupting the completion program on its CPU is
	// skipped by the kernel (and counted): its read goes untimed and its
	// entry stays. Other processes' requests on the disk make that rare,
	// not impossible, so each skipped run excuses one of each.
	skipped := int(skippedRuns(t, b) - skippedBefore)
	if got := after.count() - before.count(); got+uint64(skipped) < size/chunk {
		t.Errorf("%s reads: %d timed at issue (%d program runs skipped by the kernel), want at least the %d direct reads", disk.Name, got, skipped, size/chunk)
	}
	if io := processIO(t, b, disk.Dev, OpRead); io.Bytes+uint64(skipped*chunk) < size {
		t.Errorf("%s reads charged to this process: %+v", disk.Name, io)
	}
	// Each of the 512 requests had an entry, removed at its completion:
	// none issued while they ran may be left half a second later (a
	// request pointer is reused, so leaked entries would be overwritten
	// and fewer than the requests, but never none).
	time.Sleep(500 * time.Millisecond)
	var key uint64
	var v blockIORequestStart
	left := 0
	for it := b.maps.RequestStarts.Iterate(); it.Next(&key, &v); {
		if v.IssueNs >= start && v.IssueNs <= end {
			left++
		}
	}
	if left > skipped {
		t.Errorf("%d entries of requests issued during the reads are left in the request table (%d program runs skipped by the kernel)", left, skipped)
	}
	if lost, err := b.Lost(); err != nil || lost.RequestTableFull != 0 {
		t.Errorf("lost %+v, %v", lost, err)
	}
}
