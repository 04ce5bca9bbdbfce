package hostfs

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
)

func TestParseProcessIO(t *testing.T) {
	fixture, err := os.ReadFile("testdata/host/proc/4242/io")
	if err != nil {
		t.Fatal(err)
	}
	got, err := ParseProcessIO("io", fixture)
	if want := (ProcessIO{RChar: 912345678901, SyscR: 48211, ReadBytes: 53687091200}); err != nil || got != want {
		t.Errorf("fixture: %+v, %v; want %+v", got, err, want)
	}
	for name, text := range map[string]string{
		"no read_bytes (no task I/O accounting)": "rchar: 1\nsyscr: 2\n",
		"a word for a number":                    "rchar: 1\nsyscr: many\nread_bytes: 3\n",
		"an overflowing number":                  "rchar: 99999999999999999999999\nsyscr: 2\nread_bytes: 3\n",
		"empty":                                  "",
	} {
		if got, err := ParseProcessIO("io", []byte(text)); err == nil {
			t.Errorf("%s: %+v; want an error", name, got)
		}
	}
	// Lines it does not use, in any order, and no final newline.
	got, err = ParseProcessIO("io", []byte("read_bytes: 3\nwchar: 9\nsyscr: 2\nrchar: 1"))
	if want := (ProcessIO{RChar: 1, SyscR: 2, ReadBytes: 3}); err != nil || got != want {
		t.Errorf("reordered: %+v, %v; want %+v", got, err, want)
	}
}

func FuzzParseProcessIO(f *testing.F) {
	if b, err := os.ReadFile("testdata/host/proc/4242/io"); err == nil {
		f.Add(b)
	}
	f.Add([]byte("rchar: 1\nsyscr:\nread_bytes: 3"))
	f.Fuzz(func(t *testing.T, b []byte) {
		io, err := ParseProcessIO("io", b)
		if err != nil && io != (ProcessIO{}) {
			t.Errorf("an error with values: %+v", io)
		}
	})
}

// Held files read the process's counters afresh, and once the process is
// reaped they say it vanished instead of reading another process that got
// its PID.
func TestProcessFilesLive(t *testing.T) {
	host, err := NewFS("/proc", "/sys")
	if err != nil {
		t.Skip(err)
	}
	child := exec.Command("sleep", "60")
	if err := child.Start(); err != nil {
		t.Skip(err)
	}
	pid := child.Process.Pid
	files, err := host.OpenProcessFiles(pid)
	if err != nil {
		child.Process.Kill()
		t.Fatal(err)
	}
	defer files.Close()
	st, err := files.Stat()
	if err != nil || st.PID != pid || st.PPID != os.Getpid() {
		t.Fatalf("stat: %+v, %v", st, err)
	}
	if comm := files.Comm(); comm != "sleep" {
		t.Errorf("comm %q", comm)
	}
	if _, err := files.IO(); err != nil {
		t.Errorf("io: %v", err)
	}

	child.Process.Kill()
	child.Wait() // reaped
	if _, err := files.Stat(); !Vanished(err) {
		t.Errorf("stat of a reaped process: %v; want it vanished", err)
	}
	if _, err := files.IO(); !Vanished(err) {
		t.Errorf("io of a reaped process: %v; want it vanished", err)
	}

	// The daemon's own io counts the reads it makes between two readings.
	self, err := host.OpenProcessFiles(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	defer self.Close()
	before, err := self.IO()
	if err != nil {
		t.Skip(err) // no task I/O accounting in this kernel
	}
	for range 10 {
		if _, err := os.ReadFile("testdata/host/proc/4242/io"); err != nil {
			t.Fatal(err)
		}
	}
	after, err := self.IO()
	if err != nil || after.SyscR < before.SyscR+10 || after.RChar <= before.RChar {
		t.Errorf("io before %+v, after ten reads %+v (%v)", before, after, err)
	}
}

// A fixture tree's files (not the kernel's: read by path each time) read
// as /proc's; a FIFO in a stat file's place is refused without waiting for
// a writer.
func TestProcessFilesFixture(t *testing.T) {
	host, err := NewFS("testdata/host/proc", "testdata/host/sys")
	if err != nil {
		t.Fatal(err)
	}
	files, err := host.OpenProcessFiles(4242)
	if err != nil {
		t.Fatal(err)
	}
	defer files.Close()
	if st, err := files.Stat(); err != nil || st.PID != 4242 {
		t.Errorf("stat: %+v, %v", st, err)
	}
	if io, err := files.IO(); err != nil || io.ReadBytes != 53687091200 {
		t.Errorf("io: %+v, %v", io, err)
	}

	proc := t.TempDir()
	if err := os.MkdirAll(filepath.Join(proc, "9"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(proc, "9", "stat"), 0o644); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
	fifoHost, err := NewFS(proc, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fifoHost.OpenProcessFiles(9); err == nil || errors.Is(err, os.ErrNotExist) {
		t.Errorf("a FIFO for stat: %v; want it refused", err)
	}
	// No io file: the stat file is still held, and IO says why.
	if err := os.MkdirAll(filepath.Join(proc, "10"), 0o755); err != nil {
		t.Fatal(err)
	}
	stat, err := os.ReadFile("testdata/host/proc/4242/stat")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(proc, "10", "stat"), stat, 0o600); err != nil {
		t.Fatal(err)
	}
	noIO, err := fifoHost.OpenProcessFiles(10)
	if err != nil {
		t.Fatal(err)
	}
	defer noIO.Close()
	if _, err := noIO.Stat(); err != nil {
		t.Errorf("stat without io: %v", err)
	}
	if _, err := noIO.IO(); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("io absent: %v; want ErrNotExist", err)
	}
}
