//go:build linux

package hostfile

import (
	"bytes"
	"errors"
	"io"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"testing/iotest"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/gpudiag/gpudiag/internal/hosttest"
)

func mkfifo(t *testing.T, path string) {
	t.Helper()
	if err := syscall.Mkfifo(path, 0o644); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
}

// Every kind of non-regular file is refused at once, by every opener, with
// an error saying what it is.
func TestNotRegularRefused(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	mkfifo(t, fifo)
	sock := filepath.Join(dir, "sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	cases := []struct{ name, path, kind string }{
		{"FIFO", fifo, "a FIFO"},
		{"socket", sock, "a socket"},
		{"character device", "/dev/null", "a character device"},
		{"directory", dir, "a directory"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			openers := map[string]func() error{
				"Open":      func() error { f, err := Open(c.path); closeIf(f); return err },
				"Read":      func() error { _, err := Read(c.path, 1<<20); return err },
				"Untrusted": func() error { f, err := Untrusted(c.path); closeIf(f); return err },
				"OpenTyped": func() error { f, err := OpenTyped(c.path); closeIf(f); return err },
				"OpenHeld": func() error {
					h, err := OpenHeld(c.path)
					if err == nil {
						h.Close()
					}
					return err
				},
				"OpenInRoot": func() error {
					f, err := OpenInRoot(filepath.Dir(c.path), filepath.Base(c.path))
					closeIf(f)
					return err
				},
				"Check": func() error { return Check(c.path, 1<<20) },
			}
			for name, open := range openers {
				var err error
				hosttest.Within(t, 5*time.Second, name+" of a "+c.name, func() { err = open() })
				if c.name == "socket" && errors.Is(err, syscall.ENXIO) {
					continue // open(2) of a socket fails by itself
				}
				if !errors.Is(err, ErrNotRegular) || !strings.Contains(err.Error(), c.kind) || !strings.Contains(err.Error(), c.path) {
					t.Errorf("%s: %v; want ErrNotRegular naming %s and %s", name, err, c.path, c.kind)
				}
			}
		})
	}
}

func closeIf(f *os.File) {
	if f != nil {
		f.Close()
	}
}

// A file of exactly the bound is read; one byte more is an error, never
// a silently cut file.
func TestReadBound(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "f")
	for _, size := range []int{0, 1, 511, 512, 513, 4096, 10000} {
		data := bytes.Repeat([]byte{'x'}, size)
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
		got, err := Read(path, int64(size))
		if err != nil || !bytes.Equal(got, data) {
			t.Errorf("size %d at bound %d: %d bytes, %v", size, size, len(got), err)
		}
		if size == 0 {
			continue
		}
		_, err = Read(path, int64(size-1))
		var le *LimitError
		if !errors.Is(err, ErrTooLarge) || !errors.As(err, &le) || le.Path != path || le.Limit != int64(size-1) {
			t.Errorf("size %d at bound %d: %v; want a LimitError", size, size-1, err)
		}
	}
	// One byte at a time, as some drivers answer.
	got, err := ReadAll(iotest.OneByteReader(strings.NewReader("abcdef")), "x", 6)
	if err != nil || string(got) != "abcdef" {
		t.Errorf("one byte at a time: %q, %v", got, err)
	}
	if _, err := ReadAll(iotest.OneByteReader(strings.NewReader("abcdefg")), "x", 6); !errors.Is(err, ErrTooLarge) {
		t.Errorf("one byte at a time, over the bound: %v", err)
	}
}

// The streaming bound passes exactly limit bytes and then fails.
func TestLimit(t *testing.T) {
	for _, n := range []int{0, 5, 6, 7, 100} {
		in := strings.Repeat("y", n)
		got, err := io.ReadAll(Limit(strings.NewReader(in), "p", 6))
		switch {
		case n <= 6 && (err != nil || string(got) != in):
			t.Errorf("%d bytes: %q, %v; want all of it", n, got, err)
		case n > 6 && (!errors.Is(err, ErrTooLarge) || len(got) > 6):
			t.Errorf("%d bytes: %d read, %v; want at most 6 and ErrTooLarge", n, len(got), err)
		}
		got, err = io.ReadAll(Limit(iotest.OneByteReader(strings.NewReader(in)), "p", 6))
		if (n <= 6) != (err == nil) || len(got) > 6 {
			t.Errorf("%d bytes one at a time: %d read, %v", n, len(got), err)
		}
	}
}

// Check passes a regular file within its bound and names what it refuses.
func TestCheck(t *testing.T) {
	path := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(path, []byte("12345"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := Check(path, 5); err != nil {
		t.Errorf("5 bytes at bound 5: %v", err)
	}
	if err := Check(path, 4); !errors.Is(err, ErrTooLarge) {
		t.Errorf("5 bytes at bound 4: %v", err)
	}
	if err := Check(path+".absent", 4); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("absent: %v", err)
	}
}

// A process's root is a directory its user controls: symlinks there, an
// absolute one or one climbing with "..", resolve inside it, never to the
// daemon's files. Checked with openat2 and with the fallback walk, which
// refuses symlinks altogether.
func TestOpenInRootStaysInside(t *testing.T) {
	for _, fallback := range []bool{false, true} {
		name := "openat2"
		if fallback {
			name = "walk"
		}
		t.Run(name, func(t *testing.T) {
			if fallback {
				prev := noOpenat2.Load()
				noOpenat2.Store(true)
				t.Cleanup(func() { noOpenat2.Store(prev) })
			}
			top := t.TempDir()
			secret := filepath.Join(top, "secret")
			if err := os.WriteFile(secret, []byte("host secret\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			root := filepath.Join(top, "root")
			if err := os.MkdirAll(filepath.Join(root, "etc"), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(root, "etc", "hostname"), []byte("pod-7\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			for link, target := range map[string]string{"up": "../../secret", "abs": secret, "dotdot": "../secret"} {
				if err := os.Symlink(target, filepath.Join(root, "etc", link)); err != nil {
					t.Fatal(err)
				}
			}
			b, err := ReadInRoot(root, "/etc/hostname", 64)
			if err != nil || string(b) != "pod-7\n" {
				t.Fatalf("plain file: %q, %v", b, err)
			}
			for _, n := range []string{"/etc/up", "/etc/abs", "/etc/dotdot", "/../secret", "../../secret"} {
				b, err := ReadInRoot(root, n, 64)
				if bytes.Contains(b, []byte("host secret")) {
					t.Errorf("%s: read the file outside the root", n)
				}
				if err == nil {
					t.Errorf("%s: %q; want an error (nothing there inside the root)", n, b)
				}
			}
			d, err := OpenDirInRoot(root, "/etc/../etc")
			if err != nil {
				t.Fatal(err)
			}
			names, err := d.Readdirnames(-1)
			d.Close()
			if err != nil || len(names) != 4 {
				t.Errorf("listing etc: %q, %v", names, err)
			}
			fifo := filepath.Join(root, "etc", "fifo")
			mkfifo(t, fifo)
			hosttest.Within(t, 5*time.Second, "OpenDirInRoot of a FIFO", func() { _, err = OpenDirInRoot(root, "/etc/fifo") })
			if err == nil {
				t.Error("OpenDirInRoot opened a FIFO")
			}
			hosttest.Within(t, 5*time.Second, "OpenDir of a FIFO", func() { _, err = OpenDir(fifo) })
			if err == nil {
				t.Error("OpenDir opened a FIFO")
			}
		})
	}
}

// Open of a FIFO with a writer still refuses it: the type is what counts.
func TestOpenFIFOWithWriter(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "fifo")
	mkfifo(t, fifo)
	r, err := os.OpenFile(fifo, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	w, err := os.OpenFile(fifo, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if _, err := w.Write([]byte("data\n")); err != nil {
		t.Fatal(err)
	}
	hosttest.Within(t, 5*time.Second, "Read of a FIFO with data", func() { _, err = Read(fifo, 64) })
	if !errors.Is(err, ErrNotRegular) {
		t.Errorf("%v; want ErrNotRegular", err)
	}
}

// A user names a path; /proc magic links in it are not followed (they
// reach the daemon's own descriptors, or other processes' roots). An
// operator's glob may go through them.
func TestMagicLinks(t *testing.T) {
	path := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(path, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	magic := "/proc/self/fd/" + strconv.Itoa(int(f.Fd()))
	if g, err := Untrusted(magic); err == nil {
		g.Close()
		t.Errorf("Untrusted followed %s", magic)
	}
	g, err := OpenTyped(magic)
	if err != nil {
		t.Fatalf("OpenTyped %s: %v", magic, err)
	}
	g.Close()
}

func TestDirReadlink(t *testing.T) {
	dir := t.TempDir()
	long := "/" + strings.Repeat("d", 3000) // symlinks stop short of 4 KiB on x86
	for name, target := range map[string]string{"3": "/data/shard", "4": long} {
		if err := os.Symlink(target, filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	d, err := OpenDirFd(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	var buf []byte
	for name, want := range map[string]string{"3": "/data/shard", "4": long} {
		if buf, err = d.Readlink([]byte(name), buf); err != nil || string(buf) != want {
			t.Errorf("Readlink(%s): %.40q, %v; want %.40q", name, buf, err, want)
		}
	}
	if _, err := d.Readlink([]byte("5"), buf); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a missing link: %v; want not exist", err)
	}
}

// A kernel file held is read again from its start, whole, each time: what
// it holds now, through a buffer that grows, up to the bound.
func TestHeldReadsAfresh(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var old [16]byte
	if err := unix.Prctl(unix.PR_GET_NAME, uintptr(unsafe.Pointer(&old[0])), 0, 0, 0); err != nil {
		t.Skip(err)
	}
	defer unix.Prctl(unix.PR_SET_NAME, uintptr(unsafe.Pointer(&old[0])), 0, 0, 0)
	comm, err := OpenHeld("/proc/thread-self/comm")
	if err != nil {
		t.Skip(err)
	}
	defer comm.Close()
	if !comm.Kept() {
		t.Fatal("a procfs file is not held")
	}
	var buf []byte
	for _, name := range []string{"held-one", "held-two"} {
		b := append([]byte(name), 0)
		if err := unix.Prctl(unix.PR_SET_NAME, uintptr(unsafe.Pointer(&b[0])), 0, 0, 0); err != nil {
			t.Fatal(err)
		}
		if buf, err = comm.ReadInto(64, buf); err != nil || string(buf) != name+"\n" {
			t.Fatalf("read %q (%v); want %q", buf, err, name)
		}
	}
	if allocs := testing.AllocsPerRun(10, func() { buf, _ = comm.ReadInto(64, buf) }); allocs != 0 {
		t.Errorf("%.0f allocations per read once the buffer fits", allocs)
	}

	// status is longer than the first buffer: read whole, or not at all.
	status, err := OpenHeld("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	defer status.Close()
	b, err := status.ReadInto(1<<20, nil)
	if err != nil || !bytes.HasPrefix(b, []byte("Name:")) || !bytes.Contains(b, []byte("nonvoluntary_ctxt_switches")) {
		t.Errorf("status, %d bytes: %v", len(b), err)
	}
	if _, err := status.ReadInto(100, nil); !errors.Is(err, ErrTooLarge) {
		t.Errorf("status under a bound of 100 bytes: %v; want ErrTooLarge", err)
	}

	// A file of many records comes a page per read: all of it is read.
	// An idle process's smaps is tens of KB and stays as it is.
	child := exec.Command("sleep", "600")
	if err := child.Start(); err != nil {
		t.Skip(err)
	}
	defer func() { _ = child.Process.Kill(); _ = child.Wait() }()
	path := "/proc/" + strconv.Itoa(child.Process.Pid) + "/smaps"
	smaps, err := OpenHeld(path)
	if err != nil {
		t.Fatal(err)
	}
	defer smaps.Close()
	// Until sleep has exec'd and mapped its libraries, its smaps grows.
	// It is done once it sleeps: state S, the one wait sleep makes being
	// its nanosleep (the loader's waits are on the disk, state D). Two
	// equal reads 20 ms apart judged it done when a loaded machine had
	// not yet run its loader, and the smaps read later had grown.
	statPath := "/proc/" + strconv.Itoa(child.Process.Pid) + "/stat"
	var guard <-chan time.Time // only a sleep that never sleeps meets it
	if d, ok := t.Deadline(); ok {
		left := time.Until(d)
		guard = time.After(left - min(left/10, 30*time.Second))
	}
	for {
		stat, err := os.ReadFile(statPath)
		if err != nil {
			t.Fatal(err)
		}
		// "pid (comm) state ...": comm may hold anything but the last ')'.
		if i := bytes.LastIndexByte(stat, ')'); i >= 0 && bytes.HasPrefix(stat[i+1:], []byte(" S")) {
			break
		}
		select {
		case <-guard:
			t.Fatalf("sleep %d never went to sleep: %s", child.Process.Pid, stat)
		case <-time.After(20 * time.Millisecond):
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(want) <= 4096 {
		t.Skipf("smaps of %d bytes: not more than a page", len(want))
	}
	for range 2 {
		if got, err := smaps.ReadInto(1<<20, buf); err != nil || !bytes.Equal(got, want) {
			t.Errorf("smaps held: %d bytes (%v); %d read by path", len(got), err, len(want))
		}
	}
}

// Elsewhere than on a kernel file system a file may be replaced under its
// name (a fixture tree): it is not held, and each read opens the path.
func TestHeldOpensOtherFilesEachTime(t *testing.T) {
	path := filepath.Join(t.TempDir(), "counter")
	if err := os.WriteFile(path, []byte("first"), 0o600); err != nil {
		t.Fatal(err)
	}
	h, err := OpenHeld(path)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	if h.Kept() {
		t.Error("a regular file system's file is held")
	}
	next := path + ".new"
	if err := os.WriteFile(next, []byte("second"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(next, path); err != nil {
		t.Fatal(err)
	}
	if b, err := h.ReadInto(1<<10, nil); err != nil || string(b) != "second" {
		t.Errorf("after a replacement: %q, %v", b, err)
	}
}
