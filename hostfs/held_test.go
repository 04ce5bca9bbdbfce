package hostfs

import (
	"errors"
	"io/fs"
	"os/exec"
	"strconv"
	"testing"
	"time"
)

// A holding FS reads the kernel's files through descriptors it keeps, and
// lets go of one whose file is gone.
func TestHoldingKeepsKernelFiles(t *testing.T) {
	host, err := NewFS("/proc", "/sys")
	if err != nil {
		t.Skip(err)
	}
	host = host.Holding()
	defer host.CloseHeld()
	for range 3 {
		if _, err := host.Meminfo(); err != nil {
			t.Fatal(err)
		}
	}
	if n := host.HeldFiles(); n != 1 {
		t.Fatalf("%d files held after three reads of meminfo; want 1", n)
	}

	child := exec.Command("sleep", "600")
	if err := child.Start(); err != nil {
		t.Skip(err)
	}
	defer func() { _ = child.Process.Kill(); _ = child.Wait() }()
	stat := host.ProcPath(strconv.Itoa(child.Process.Pid), "stat")
	if _, err := host.readWhole(stat, taskStatBytes); err != nil {
		t.Fatal(err)
	}
	if n := host.HeldFiles(); n != 2 {
		t.Fatalf("%d files held; want 2", n)
	}
	_ = child.Process.Kill()
	_ = child.Wait()
	if _, err := host.readWhole(stat, taskStatBytes); !Vanished(err) {
		t.Errorf("the stat of a reaped process: %v; want it vanished", err)
	}
	if n := host.HeldFiles(); n != 1 {
		t.Errorf("%d files held after the process went; want 1", n)
	}
	host.CloseHeld()
	if n := host.HeldFiles(); n != 0 {
		t.Errorf("%d files held after CloseHeld", n)
	}
	if _, err := host.Meminfo(); err != nil || host.HeldFiles() != 1 {
		t.Errorf("a read after CloseHeld: %v, %d held", err, host.HeldFiles())
	}

	// A file unread for longer than heldIdle is closed at the next sweep.
	host.held.files[host.ProcPath("meminfo")].at = time.Now().Add(-heldIdle - time.Second)
	host.held.reads = heldSweepReads - 1
	if _, err := host.VMStat(); err != nil {
		t.Fatal(err)
	}
	if _, idle := host.held.files[host.ProcPath("meminfo")]; idle || host.HeldFiles() != 1 {
		t.Errorf("after a sweep: meminfo held %v, %d held; want only vmstat", idle, host.HeldFiles())
	}
}

// An interface removed and made again under its name reads as the new one:
// sysfs answers ENODEV through the old descriptor, and the path is opened
// again. Needs CAP_NET_ADMIN and ip(8); makes a veth pair.
func TestHoldingFollowsAnInterfaceMadeAgain(t *testing.T) {
	const name, peer = "gpudiagheld0", "gpudiagheld1"
	ip := func(args ...string) error { return exec.Command("ip", append([]string{"link"}, args...)...).Run() }
	if err := ip("add", name, "type", "veth", "peer", "name", peer); err != nil {
		t.Skipf("cannot make a veth pair: %v", err)
	}
	if err := ip("set", name, "up"); err != nil {
		t.Fatal(err)
	}
	defer ip("del", name) //nolint:errcheck // gone already when the test passes
	host, err := NewFS("/proc", "/sys")
	if err != nil {
		t.Fatal(err)
	}
	host = host.Holding()
	defer host.CloseHeld()
	if _, err := host.NetInterfaceState(name); err != nil {
		t.Fatal(err)
	}
	held := host.HeldFiles()
	if held == 0 {
		t.Fatal("no file held")
	}
	if err := ip("del", name); err != nil {
		t.Fatal(err)
	}
	if _, err := host.NetInterfaceState(name); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a removed interface: %v; want ErrNotExist", err)
	}
	if err := ip("add", name, "type", "veth", "peer", "name", peer); err != nil {
		t.Fatal(err)
	}
	if err := ip("set", name, "up"); err != nil {
		t.Fatal(err)
	}
	st, err := host.NetInterfaceState(name)
	if err != nil || st.OperState == "" {
		t.Errorf("the interface made again: %+v, %v", st, err)
	}
	if n := host.HeldFiles(); n != held {
		t.Errorf("%d files held; want %d, as before", n, held)
	}
}
