package hostfs

import (
	"slices"
	"strings"
	"testing"

	"github.com/gpudiag/gpudiag/internal/hosttest"
)

func TestParseCmdline(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want KernelCmdline
	}{
		{string(readSeed(t, "proc/cmdline")), KernelCmdline{Isolcpus: "managed_irq,domain,120-127", NohzFull: "120-127"}},
		{"ro intel_idle.max_cstate=1 processor.max_cstate=1 isolcpus=2-3 isolcpus=4-5\n",
			KernelCmdline{Isolcpus: "4-5", IntelIdleMaxCstate: "1", ProcessorMaxCstate: "1"}},
		{`dyndbg="file a.c +p" isolcpus nohz_full="1-3"`, KernelCmdline{NohzFull: "1-3"}},
		{"", KernelCmdline{}},
	} {
		if got := ParseCmdline(tc.in); got != tc.want {
			t.Errorf("%q: got %+v; want %+v", tc.in, got, tc.want)
		}
	}
	for in, want := range map[string][]int{"managed_irq,domain,2-3": {2, 3}, "nohz,5": {5}, "": nil} {
		if got, err := IsolcpusList(in); err != nil || !slices.Equal(got, want) {
			t.Errorf("isolcpus %q: %v, %v; want %v", in, got, err, want)
		}
	}
	if _, err := IsolcpusList("domain,x"); err == nil {
		t.Error("isolcpus domain,x: no error")
	}
}

func TestCmdlineAbsent(t *testing.T) {
	host, err := NewFS(t.TempDir(), "")
	if err != nil {
		t.Fatal(err)
	}
	if c, err := host.Cmdline(); err != nil || c != (KernelCmdline{}) {
		t.Fatalf("got %+v, %v", c, err)
	}
}

func readSeed(t *testing.T, rel string) []byte {
	t.Helper()
	host, err := NewFS("testdata/host/proc", "")
	if err != nil {
		t.Fatal(err)
	}
	b, err := ReadAttr(host.ProcPath(strings.TrimPrefix(rel, "proc/")))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// FuzzParseCmdline: any command line parses without a panic, and each
// value kept is one the line holds.
func FuzzParseCmdline(f *testing.F) {
	f.Add(hosttest.Seed(f, "proc/cmdline"))
	f.Add([]byte(`a="b c isolcpus=1" isolcpus="2"`))
	f.Add([]byte("isolcpus= nohz_full"))
	f.Fuzz(func(t *testing.T, data []byte) {
		var c KernelCmdline
		hosttest.WithinHangLimit(t, func() { c = ParseCmdline(string(data)) })
		for _, v := range []string{c.Isolcpus, c.NohzFull, c.IntelIdleMaxCstate, c.ProcessorMaxCstate} {
			if !strings.Contains(string(data), v) {
				t.Fatalf("value %q is not in the line", v)
			}
		}
	})
}
