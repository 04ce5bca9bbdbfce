package hostfs

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/procfs"

	"github.com/gpudiag/gpudiag/internal/hosttest"
)

const taskStatLine = "4343 (python) S 4300 4343 4343 0 -1 4194560 100 0 0 0 1234 567 -1 8 20 0 42 0 12345 1000000 100 18446744073709551615 1 1 140722115694960 0 0 0 0 0 0 0 0 0 17 3 0 0 77 0 0\n"

func TestParseTaskStat(t *testing.T) {
	full := TaskStat{PID: 4343, State: 'S', PPID: 4300, UTime: 1234, STime: 567, CUTime: -1, CSTime: 8,
		NumThreads: 42, Starttime: 12345, VSize: 1000000, RSSPages: 100, StartStack: 140722115694960, DelayAcctBlkIOTicks: 77}
	for _, tc := range []struct {
		name, data string
		want       TaskStat
		err        bool
	}{
		{"full", taskStatLine, full, false},
		{"comm with spaces and parentheses", strings.Replace(taskStatLine, "(python)", "(a) b (c))", 1), full, false},
		{"comm empty", strings.Replace(taskStatLine, "(python)", "()", 1), full, false},
		{"D state", strings.Replace(taskStatLine, ") S ", ") D ", 1), func() TaskStat { s := full; s.State = 'D'; return s }(), false},
		{"ends before delayacct", strings.Join(strings.Fields(taskStatLine)[:25], " ") + "\n",
			func() TaskStat { s := full; s.StartStack, s.DelayAcctBlkIOTicks = 0, 0; return s }(), false},
		{"no newline", strings.TrimSuffix(taskStatLine, "\n"), full, false},
		{"empty", "", TaskStat{}, true},
		{"no comm", "4343 S 1 2 3", TaskStat{}, true},
		{"too short", "4343 (python) S 4300 4343\n", TaskStat{}, true},
		{"two-letter state", strings.Replace(taskStatLine, ") S ", ") SS ", 1), TaskStat{}, true},
		{"bad utime", strings.Replace(taskStatLine, " 1234 ", " 12x4 ", 1), TaskStat{}, true},
		{"negative utime", strings.Replace(taskStatLine, " 1234 ", " -1234 ", 1), TaskStat{}, true},
		{"utime overflows", strings.Replace(taskStatLine, " 1234 ", " 18446744073709551616 ", 1), TaskStat{}, true},
		{"bad pid", "x (python)" + taskStatLine[len("4343 (python)"):], TaskStat{}, true},
	} {
		got, err := ParseTaskStat("stat", []byte(tc.data))
		switch {
		case tc.err && err == nil:
			t.Errorf("%s: parsed as %+v; want an error", tc.name, got)
		case !tc.err && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case !tc.err && got != tc.want:
			t.Errorf("%s: %+v; want %+v", tc.name, got, tc.want)
		case tc.err:
			hosttest.CheckError(t, err, "stat: ")
		}
	}
}

// The parser gives procfs's values for every stat file of this machine's
// own threads and of its processes: each file is read once and handed to
// both, through a copy of it under a directory procfs reads.
func TestParseTaskStatMatchesProcfs(t *testing.T) {
	paths, _ := filepath.Glob("/proc/self/task/*/stat")
	more, _ := filepath.Glob("/proc/[0-9]*/stat")
	paths = append(paths, more...)
	if len(paths) == 0 {
		t.Skip("no /proc")
	}
	root := t.TempDir()
	pfs, err := procfs.NewFS(root)
	if err != nil {
		t.Fatal(err)
	}
	compared := 0
	for i, path := range paths {
		data, err := os.ReadFile(path)
		if err != nil {
			continue // exited
		}
		dir := filepath.Join(root, strconv.Itoa(i+1))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "stat"), data, 0o644); err != nil {
			t.Fatal(err)
		}
		p, err := pfs.Proc(i + 1)
		if err != nil {
			t.Fatal(err)
		}
		want, err := p.Stat()
		if err != nil {
			t.Fatalf("procfs on %s: %v", path, err)
		}
		got, err := ParseTaskStat(path, data)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if strconv.Itoa(got.PID) != strings.Fields(string(data))[0] || string(got.State) != want.State || got.PPID != want.PPID ||
			got.UTime != uint64(want.UTime) || got.STime != uint64(want.STime) || got.CUTime != int64(want.CUTime) ||
			got.CSTime != int64(want.CSTime) || got.NumThreads != want.NumThreads || got.Starttime != want.Starttime ||
			got.DelayAcctBlkIOTicks != want.DelayAcctBlkIOTicks || got.VSize != uint64(want.VSize) || got.StartStack != uint64(want.StartStack) {
			t.Errorf("%s: %+v; procfs %+v", path, got, want)
		}
		compared++
	}
	if compared == 0 {
		t.Skip("no stat file readable")
	}
	t.Logf("%d stat files compared", compared)
}

// The reader reads this process's own threads and reuses its buffer.
func TestTaskStatReader(t *testing.T) {
	fs, err := NewFS("/proc", "/sys")
	if err != nil {
		t.Skip(err)
	}
	r := fs.NewTaskStatReader()
	pid := os.Getpid()
	st, err := r.Thread(pid, pid)
	if err != nil {
		t.Fatal(err)
	}
	if st.PID != pid || st.PPID != os.Getppid() || st.State == 0 {
		t.Errorf("main thread: %+v", st)
	}
	if st, err = r.Process(pid); err != nil || st.PID != pid || st.NumThreads < 1 {
		t.Errorf("process: %+v, %v", st, err)
	}
	allocs := testing.AllocsPerRun(20, func() { _, _ = r.Thread(pid, pid) })
	if allocs > 4 {
		t.Errorf("%.0f allocations per read", allocs)
	}
	if _, err := r.Thread(pid, 1<<30); !Vanished(err) {
		t.Errorf("absent thread: %v; want it vanished", err)
	}
}

// The command name is the text between the first '(' and the last ')',
// whatever it holds, from the stat file read last.
func TestTaskStatReaderComm(t *testing.T) {
	proc := t.TempDir()
	for pid, comm := range map[string]string{"7": "pt_main_thread", "8": "a) (b c)"} {
		if err := os.MkdirAll(filepath.Join(proc, pid), 0o755); err != nil {
			t.Fatal(err)
		}
		line := pid + " (" + comm + ") S 1 0 0 0 -1 0 0 0 0 0 3 4 0 0 20 0 2 0 99 0 0"
		if err := os.WriteFile(filepath.Join(proc, pid, "stat"), []byte(line), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	fs, err := NewFS(proc, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	r := fs.NewTaskStatReader()
	if r.Comm() != "" {
		t.Errorf("before any read: %q", r.Comm())
	}
	for pid, want := range map[int]string{7: "pt_main_thread", 8: "a) (b c)"} {
		st, err := r.Process(pid)
		if err != nil || st.PPID != 1 || st.UTime != 3 || st.Starttime != 99 {
			t.Fatalf("pid %d: %+v, %v", pid, st, err)
		}
		if got := r.Comm(); got != want {
			t.Errorf("pid %d: comm %q; want %q", pid, got, want)
		}
	}
}

func FuzzParseTaskStat(f *testing.F) {
	f.Add([]byte(taskStatLine))
	f.Add([]byte("1 ((a)) R 0 0 0 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 1 0 0"))
	f.Add([]byte("1 () Z"))
	f.Fuzz(func(t *testing.T, data []byte) {
		var st TaskStat
		var err error
		hosttest.WithinHangLimit(t, func() { st, err = ParseTaskStat("stat", data) })
		if err != nil {
			hosttest.CheckError(t, err, "stat: ")
			if !errors.Is(err, errTaskStatShort) && !errors.Is(err, strconv.ErrSyntax) {
				t.Fatalf("error %v wraps neither cause", err)
			}
			return
		}
		if st.PID < 0 || st.State == ' ' || st.State == '\n' {
			t.Fatalf("parsed %+v", st)
		}
	})
}

// A process's task directory held open: every thread of this process is
// listed and read, with no allocation per thread on procfs.
func TestTasks(t *testing.T) {
	fs, err := NewFS("/proc", "/sys")
	if err != nil {
		t.Skip(err)
	}
	r := fs.NewTaskStatReader()
	pid := os.Getpid()
	tasks, err := r.OpenTasks(pid)
	if err != nil {
		t.Fatal(err)
	}
	defer tasks.Close()
	ids, err := tasks.IDs(nil)
	if err != nil || !slices.Contains(ids, pid) {
		t.Fatalf("threads %v, %v; want %d among them", ids, err, pid)
	}
	for _, tid := range ids {
		st, err := tasks.Stat(tid)
		if err != nil && !Vanished(err) {
			t.Errorf("thread %d: %v", tid, err)
		}
		if err == nil && (st.PID != tid || st.PPID != os.Getppid()) {
			t.Errorf("thread %d: %+v", tid, st)
		}
	}
	if allocs := testing.AllocsPerRun(20, func() { _, _ = tasks.Stat(pid) }); allocs > 0 {
		t.Errorf("%.0f allocations per thread read", allocs)
	}
	if _, err := tasks.Stat(1 << 30); !Vanished(err) {
		t.Errorf("absent thread: %v; want it vanished", err)
	}
}

// EachProcess walks the fixture's processes in PID order, leaving out those
// without a stat file, and stops when its context is done.
func TestEachProcess(t *testing.T) {
	host, err := NewFS("testdata/host/proc", "")
	if err != nil {
		t.Fatal(err)
	}
	r := host.NewTaskStatReader()
	var got []string
	err = r.EachProcess(context.Background(), func(st TaskStat) {
		got = append(got, fmt.Sprintf("%d<%d", st.PID, st.PPID))
	}, func(pid int, err error) { t.Errorf("process %d: %v", pid, err) })
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"4242<4200", "4343<4300", "4344<4343", "5151<5100", "5252<5200", "5253<5252"}
	if !slices.Equal(got, want) {
		t.Errorf("processes %v; want %v", got, want)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := r.EachProcess(ctx, func(TaskStat) { t.Error("called after the context ended") }, nil); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled walk: %v", err)
	}
}

// EachComm gives every process's name, without its newline, and says
// which processes it could not read.
func TestEachComm(t *testing.T) {
	proc := t.TempDir()
	for pid, comm := range map[string]string{"7": "nvidia-persiste\n", "9": "a b (c)\n", "12": "no newline"} {
		if err := os.MkdirAll(filepath.Join(proc, pid), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(proc, pid, "comm"), []byte(comm), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	// A process without a comm file (exited between the listing and the
	// read) is left out; one with a comm past the bound is reported.
	if err := os.MkdirAll(filepath.Join(proc, "8"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(proc, "10"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(proc, "10", "comm"), []byte(strings.Repeat("x", commBytes+1)), 0o600); err != nil {
		t.Fatal(err)
	}
	host, err := NewFS(proc, "")
	if err != nil {
		t.Fatal(err)
	}
	r := host.NewTaskStatReader()
	var got []string
	var bad []int
	err = r.EachComm(context.Background(), func(pid int, comm []byte) {
		got = append(got, fmt.Sprintf("%d=%s", pid, comm))
	}, func(pid int, err error) { bad = append(bad, pid) })
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"7=nvidia-persiste", "9=a b (c)", "12=no newline"}; !slices.Equal(got, want) {
		t.Errorf("names %q; want %q", got, want)
	}
	if !slices.Equal(bad, []int{10}) {
		t.Errorf("reported unreadable: %v; want [10]", bad)
	}
}
