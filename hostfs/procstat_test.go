package hostfs

import (
	"math"
	"os"
	"strings"
	"testing"

	"github.com/prometheus/procfs"
)

const procStatFixture = `cpu  10 1 20 300 4 5 6 7 0 0
cpu0 6 1 12 150 3 4 5 6 0 0
cpu2 4 0 8 150 1 1 1 1 0 0
intr 123 0 0 9 9 9
ctxt 4567
btime 1700000000
processes 999
procs_running 3
procs_blocked 1
softirq 77 1 2 3
`

func TestParseProcStat(t *testing.T) {
	st, err := ParseProcStat("stat", []byte(procStatFixture))
	if err != nil {
		t.Fatal(err)
	}
	want := ProcStat{
		CPUs: []CPUTicks{{ID: 0, Ticks: [CPUModes]uint64{6, 1, 12, 150, 3, 4, 5, 6}},
			{ID: 2, Ticks: [CPUModes]uint64{4, 0, 8, 150, 1, 1, 1, 1}}},
		ContextSwitches: 4567, ProcsRunning: 3, ProcsBlocked: 1, SoftIRQTotal: 77,
	}
	if len(st.CPUs) != 2 || st.CPUs[0] != want.CPUs[0] || st.CPUs[1] != want.CPUs[1] ||
		st.ContextSwitches != want.ContextSwitches || st.ProcsRunning != 3 || st.ProcsBlocked != 1 || st.SoftIRQTotal != 77 {
		t.Fatalf("%+v; want %+v", st, want)
	}
	old := strings.Replace(procStatFixture, "cpu0 6 1 12 150 3 4 5 6 0 0", "cpu0 6 1 12 150", 1)
	if st, err := ParseProcStat("stat", []byte(old)); err != nil || st.CPUs[0].Ticks != [CPUModes]uint64{6, 1, 12, 150} {
		t.Errorf("a kernel with four times: %+v, %v", st.CPUs, err)
	}
	for name, data := range map[string]string{
		"cut before softirq":  procStatFixture[:strings.Index(procStatFixture, "softirq")],
		"no cpu lines":        "ctxt 1\nsoftirq 1 2\n",
		"three times":         strings.Replace(procStatFixture, "cpu2 4 0 8 150 1 1 1 1 0 0", "cpu2 4 0 8", 1),
		"bad time":            strings.Replace(procStatFixture, "cpu2 4 0", "cpu2 4 x", 1),
		"bad CPU number":      strings.Replace(procStatFixture, "cpu2 ", "cpuX ", 1),
		"bad ctxt":            strings.Replace(procStatFixture, "ctxt 4567", "ctxt -1", 1),
		"softirq without sum": strings.Replace(procStatFixture, "softirq 77 1 2 3", "softirq", 1),
		"empty":               "",
	} {
		if st, err := ParseProcStat("stat", []byte(data)); err == nil {
			t.Errorf("%s: parsed as %+v; want an error", name, st)
		}
	}
}

// On this machine's /proc/stat and the reference host's, the parser and
// procfs agree.
func TestParseProcStatAgreesWithProcfs(t *testing.T) {
	for _, root := range []string{"/proc", "testdata/host/proc"} {
		b, err := os.ReadFile(root + "/stat")
		if err != nil {
			t.Fatal(err)
		}
		pfs, err := procfs.NewFS(root)
		if err != nil {
			t.Fatal(err)
		}
		want, err := pfs.Stat()
		if err != nil {
			t.Fatal(err)
		}
		got, err := ParseProcStat(root+"/stat", b)
		if err != nil {
			t.Fatal(err)
		}
		// /proc moves between the two reads: compare what cannot.
		if root == "/proc" {
			if len(got.CPUs) != len(want.CPU) {
				t.Errorf("%s: %d CPUs; procfs %d", root, len(got.CPUs), len(want.CPU))
			}
			continue
		}
		if len(got.CPUs) != len(want.CPU) || got.ContextSwitches != want.ContextSwitches ||
			got.ProcsRunning != want.ProcessesRunning || got.ProcsBlocked != want.ProcessesBlocked || got.SoftIRQTotal != want.SoftIRQTotal {
			t.Errorf("%s: %+v; procfs %+v", root, got, want)
		}
		for _, c := range got.CPUs {
			p := want.CPU[int64(c.ID)]
			secs := []float64{p.User, p.Nice, p.System, p.Idle, p.Iowait, p.IRQ, p.SoftIRQ, p.Steal}
			for m, s := range secs {
				if uint64(math.Round(s*UserHZ)) != c.Ticks[m] {
					t.Errorf("%s: cpu%d mode %d: %d ticks; procfs %v s", root, c.ID, m, c.Ticks[m], s)
				}
			}
		}
	}
}

func FuzzParseProcStat(f *testing.F) {
	f.Add([]byte(procStatFixture))
	f.Add([]byte("cpu0 1 2 3 4\nsoftirq 1\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		st, err := ParseProcStat("stat", b)
		if err == nil && (len(st.CPUs) == 0) {
			t.Fatalf("no CPUs and no error: %+v", st)
		}
	})
}
