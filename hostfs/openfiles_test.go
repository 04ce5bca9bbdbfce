package hostfs

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpudiag/gpudiag/hostfile"
	"github.com/gpudiag/gpudiag/internal/hosttest"
)

func TestOpenFiles(t *testing.T) {
	proc := t.TempDir()
	fd := filepath.Join(proc, "77", "fd")
	for n, target := range map[string]string{"0": "/dev/null", "1": "pipe:[1]", "3": "/data/train/shard-0001.tar",
		"4": "socket:[9]", "5": "/memfd:x (deleted)", "6": "/scratch/old (deleted)", "7": "/data/train/shard-0002.tar"} {
		symlink(t, target, filepath.Join(fd, n))
	}
	hosttest.WriteFile(t, filepath.Join(proc, "77", "fdinfo", "3"), "pos:\t0\nflags:\t0100000\nmnt_id:\t412\nino:\t99\n")
	f, err := NewFS(proc, "")
	if err != nil {
		t.Fatal(err)
	}
	got, truncated, err := f.OpenFiles(77, 100, farFuture)
	want := []OpenFile{{Path: "/data/train/shard-0001.tar", MountID: 412, HasMountID: true}, {Path: "/data/train/shard-0002.tar"}}
	if err != nil || truncated || !equalOpenFiles(got, want) {
		t.Fatalf("got %+v, %v, %v; want %+v", got, truncated, err, want)
	}
	if got, truncated, _ := f.OpenFiles(77, 2, farFuture); !truncated || len(got) > 2 {
		t.Errorf("bounded to 2 descriptors: %+v, truncated %v", got, truncated)
	}
	if got, _, err := f.OpenFiles(78, 10, farFuture); got != nil || err != nil {
		t.Errorf("an exited process: %+v, %v", got, err)
	}
}

var farFuture = time.Now().Add(time.Hour)

func symlink(t *testing.T, target, path string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, path); err != nil {
		t.Fatal(err)
	}
}

// equalOpenFiles compares in path order: a directory lists in its own.
func equalOpenFiles(got, want []OpenFile) bool {
	slices.SortFunc(got, func(a, b OpenFile) int { return strings.Compare(a.Path, b.Path) })
	return slices.Equal(got, want)
}

func TestParseFDInfoMountID(t *testing.T) {
	for _, tc := range []struct {
		text string
		id   int
		ok   bool
	}{
		{"pos:\t0\nflags:\t0100000\nmnt_id:\t412\nino:\t99\n", 412, true},
		{"pos:\t0\nflags:\t02\n", 0, false}, // before 3.15
		{"mnt_id:\tx\n", 0, false},
		{"mnt_id:\t-1\n", 0, false},
	} {
		if id, ok := ParseFDInfoMountID([]byte(tc.text)); id != tc.id || ok != tc.ok {
			t.Errorf("%q: %d, %v; want %d, %v", tc.text, id, ok, tc.id, tc.ok)
		}
	}
}

func TestParseFDInfoWritten(t *testing.T) {
	for _, tc := range []struct {
		text    string
		written bool
	}{
		{"pos:\t0\nflags:\t0100000\nmnt_id:\t412\n", false}, // O_RDONLY|O_LARGEFILE
		{"pos:\t0\nflags:\t0102101\nmnt_id:\t412\n", true},  // O_WRONLY|O_CREAT|O_APPEND|O_LARGEFILE: a log
		{"pos:\t0\nflags:\t02100002\n", true},               // O_RDWR|O_CLOEXEC|O_LARGEFILE
		{"pos:\t0\nflags:\tx\n", false},
		{"pos:\t0\n", false},
	} {
		if got := ParseFDInfoWritten([]byte(tc.text)); got != tc.written {
			t.Errorf("%q: written %v; want %v", tc.text, got, tc.written)
		}
	}
}

func FuzzParseFDInfoMountID(f *testing.F) {
	f.Add([]byte("pos:\t0\nflags:\t0100000\nmnt_id:\t412\nino:\t99\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		var id int
		var ok bool
		hosttest.WithinHangLimit(t, func() { id, ok = ParseFDInfoMountID(data) })
		if ok && id < 0 {
			t.Fatalf("negative mount ID %d accepted", id)
		}
		if !ok && id != 0 {
			t.Fatalf("mount ID %d returned with ok false", id)
		}
	})
}

// The real /proc: a file this test holds open is listed with the mount it
// was opened through, and a closed one is not.
func TestOpenFilesLive(t *testing.T) {
	path := filepath.Join(t.TempDir(), "shard-0001.tar")
	hosttest.WriteFile(t, path, "data")
	held, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	f, err := NewFS("/proc", "/sys")
	if err != nil {
		t.Fatal(err)
	}
	find := func() *OpenFile {
		files, truncated, err := f.OpenFiles(os.Getpid(), 1<<16, farFuture)
		if err != nil || truncated {
			t.Fatalf("OpenFiles(self): %v, truncated %v", err, truncated)
		}
		for i := range files {
			if files[i].Path == path {
				return &files[i]
			}
		}
		return nil
	}
	of := find()
	if of == nil || !of.HasMountID || of.MountID <= 0 {
		t.Fatalf("the held file %s: %+v; want it listed with its mount ID", path, of)
	}
	held.Close()
	if of := find(); of != nil {
		t.Errorf("the closed file is still listed: %+v", of)
	}
}

// A reader kept across processes gives what a fresh one gives, and reuses
// its buffers: reading a process again allocates less than a fresh read.
func TestOpenFileReaderReused(t *testing.T) {
	f, err := NewFS("/proc", "/sys")
	if err != nil {
		t.Fatal(err)
	}
	r := f.NewOpenFileReader()
	self := os.Getpid()
	for range 2 {
		got, _, err := r.OpenFiles(self, 1<<16, farFuture)
		want, _, _ := f.OpenFiles(self, 1<<16, farFuture)
		if err != nil || !equalOpenFiles(got, want) {
			t.Fatalf("reused reader: %+v, %v; a fresh one: %+v", got, err, want)
		}
	}
	if got, _, err := r.OpenFiles(1<<30, 10, farFuture); got != nil || err != nil {
		t.Errorf("a process that does not exist: %+v, %v", got, err)
	}
	reused := testing.AllocsPerRun(20, func() { _, _, _ = r.OpenFiles(self, 1<<16, farFuture) })
	fresh := testing.AllocsPerRun(20, func() { _, _, _ = f.OpenFiles(self, 1<<16, farFuture) })
	if reused >= fresh {
		t.Errorf("allocations per read: %.0f reused, %.0f fresh; want fewer reused", reused, fresh)
	}
}

// With KeepListings, a process whose descriptor count stands is answered
// from its last listing until the listing is older than the age; a file
// opened moves the count and is listed at once; a process that exits is
// dropped, and EndScan closes what a scan no longer reads. The process is
// a shell this test starts and drives through its stdin, so that nothing
// else opens or closes its descriptors.
func TestOpenFileReaderKeepsListingWhileCountStands(t *testing.T) {
	dir := t.TempDir()
	a, b, c := filepath.Join(dir, "shard-a.tar"), filepath.Join(dir, "shard-b.tar"), filepath.Join(dir, "shard-c.tar")
	for _, p := range []string{a, b, c} {
		hosttest.WriteFile(t, p, "data")
	}
	// fd 7 holds a, then b in a's place (the count stands), then fd 8
	// opens c (the count moves).
	sh := exec.Command("sh", "-c", `exec 7<"$1"; echo ready; read x; exec 7<&-; exec 7<"$2"; echo swapped; read x; exec 8<"$3"; echo opened; read x`,
		"sh", a, b, c)
	stdin, err := sh.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := sh.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := sh.Start(); err != nil {
		t.Skipf("no shell: %v", err)
	}
	defer sh.Process.Kill()
	lines := bufio.NewScanner(stdout)
	step := func(say, want string) {
		t.Helper()
		if say != "" {
			io.WriteString(stdin, say+"\n")
		}
		if !lines.Scan() || lines.Text() != want {
			t.Fatalf("the shell said %q; want %q", lines.Text(), want)
		}
	}
	step("", "ready")

	f, err := NewFS("/proc", "/sys")
	if err != nil {
		t.Fatal(err)
	}
	fdDir, err := hostfile.OpenDirFd(fmt.Sprintf("/proc/%d/fd", sh.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	_, known, _ := fdDir.DescriptorCount()
	fdDir.Close()
	if !known {
		t.Skip("this kernel does not report a descriptor count (Linux 6.2+)")
	}
	r := f.NewOpenFileReader()
	clock := time.Unix(1e9, 0)
	r.now = func() time.Time { return clock }
	r.KeepListings(time.Minute)
	defer r.Close()
	paths := func() []string {
		t.Helper()
		files, _, err := r.OpenFiles(sh.Process.Pid, 1<<16, farFuture)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, f := range files {
			out = append(out, f.Path)
		}
		slices.Sort(out)
		return out
	}
	expect := func(what string, listings int, want ...string) {
		t.Helper()
		if got := paths(); !slices.Equal(got, want) || r.listings != listings {
			t.Errorf("%s: %q after %d listings; want %q after %d", what, got, r.listings, want, listings)
		}
	}
	expect("first read", 1, a)
	expect("count unchanged", 1, a)
	step("go", "swapped")
	expect("b opened in a's place: the listing stands", 1, a)
	clock = clock.Add(time.Minute)
	expect("the listing's age reached", 2, b)
	step("go", "opened")
	expect("c opened: the count moved", 3, b, c)
	if r.Held() != 1 {
		t.Errorf("%d directories held; want 1", r.Held())
	}
	r.EndScan()
	r.EndScan()
	if r.Held() != 0 {
		t.Errorf("%d directories held after a scan that did not read the process; want 0", r.Held())
	}
	expect("read again after it was let go", 4, b, c)
	io.WriteString(stdin, "go\n") // the shell exits
	sh.Wait()
	if files, _, err := r.OpenFiles(sh.Process.Pid, 1<<16, farFuture); files != nil || err != nil {
		t.Errorf("an exited process: %+v, %v; want none", files, err)
	}
	if r.Held() != 0 {
		t.Errorf("%d directories held after the process exited; want 0", r.Held())
	}
}
