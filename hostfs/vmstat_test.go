package hostfs

import (
	"bytes"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/gpudiag/gpudiag/internal/hosttest"
)

func TestParseVMStat(t *testing.T) {
	const common = "nr_free_pages 123\npswpin 10\npswpout 20\npgmajfault 30\n"
	for _, tc := range []struct {
		name, text string
		want       VMStat
		errHas     string
	}{
		{name: "5.9+", text: common + "workingset_refault_anon 7\nworkingset_refault_file 40\noom_kill 2\n",
			want: VMStat{SwapInPages: 10, SwapOutPages: 20, MajorFaults: 30, PageCacheRefaults: 40, HasOOMKills: true, OOMKills: 2}},
		{name: "before 5.9", text: common + "workingset_refault 41\noom_kill 0\n",
			want: VMStat{SwapInPages: 10, SwapOutPages: 20, MajorFaults: 30, PageCacheRefaults: 41, HasOOMKills: true}},
		{name: "before 4.13", text: common + "workingset_refault 41\n",
			want: VMStat{SwapInPages: 10, SwapOutPages: 20, MajorFaults: 30, PageCacheRefaults: 41}},
		{name: "truncated", text: "nr_free_pages 123\npswpin 10\npswp", errHas: "line 3"},
		// A counter the file lacks is unmeasured, the others read.
		{name: "no pgmajfault", text: "pswpin 10\npswpout 20\nworkingset_refault_file 1\n",
			want: VMStat{SwapInPages: 10, SwapOutPages: 20, PageCacheRefaults: 1, Unmeasured: []string{"pgmajfault"}}},
		{name: "before 3.15, no refaults", text: common,
			want: VMStat{SwapInPages: 10, SwapOutPages: 20, MajorFaults: 30, Unmeasured: []string{"workingset_refault"}}},
		{name: "none", text: "nr_free_pages 123\n",
			want: VMStat{Unmeasured: []string{"pswpin", "pswpout", "pgmajfault", "workingset_refault"}}},
		{name: "not a number", text: common + "workingset_refault_file -1\n", errHas: "workingset_refault_file"},
	} {
		got, err := ParseVMStat("/proc/vmstat", strings.NewReader(tc.text))
		if tc.errHas != "" {
			if err == nil || !strings.Contains(err.Error(), tc.errHas) || !strings.Contains(err.Error(), "/proc/vmstat") {
				t.Errorf("%s: error %v; want one naming the file and %q", tc.name, err, tc.errHas)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: got %+v, %v; want %+v", tc.name, got, err, tc.want)
		}
	}
}

// vmstatLast is the value of the last "name value" line for name, its
// fields parted by spaces and tabs as the kernel writes them; a carriage
// return ends a line only before its newline, as the parser's scanner
// reads lines, and is part of a field anywhere else.
func vmstatLast(data []byte, name string) (uint64, bool) {
	var v uint64
	found := false
	for line := range bytes.SplitSeq(data, []byte("\n")) {
		line = bytes.TrimSuffix(line, []byte("\r"))
		f := bytes.FieldsFunc(line, func(r rune) bool { return r == ' ' || r == '\t' })
		if len(f) == 2 && string(f[0]) == name {
			v, _ = strconv.ParseUint(string(f[1]), 10, 64)
			found = true
		}
	}
	return v, found
}

func FuzzParseVMStat(f *testing.F) {
	f.Add(hosttest.Seed(f, "proc/vmstat"))
	f.Add([]byte("pswpin 1\npswpout 2\npgmajfault 3\nworkingset_refault 4\n"))
	f.Add([]byte("pswpin 1\npswpout 2\npgmajfault 3\nworkingset_refault_file 4\nworkingset_refault 5\noom_kill 6\npswpin 7\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		var vm VMStat
		var err error
		hosttest.WithinHangLimit(t, func() { vm, err = ParseVMStat("vmstat", bytes.NewReader(data)) })
		if err != nil {
			hosttest.CheckError(t, err, "vmstat: ")
			return
		}
		refault, hasRefault := vmstatLast(data, "workingset_refault_file")
		if !hasRefault {
			refault, hasRefault = vmstatLast(data, "workingset_refault")
		}
		oom, hasOOM := vmstatLast(data, "oom_kill")
		swapIn, hasSwapIn := vmstatLast(data, "pswpin")
		swapOut, hasSwapOut := vmstatLast(data, "pswpout")
		majfault, hasMajfault := vmstatLast(data, "pgmajfault")
		want := VMStat{SwapInPages: swapIn, SwapOutPages: swapOut, MajorFaults: majfault,
			PageCacheRefaults: refault, OOMKills: oom, HasOOMKills: hasOOM}
		for _, c := range []struct {
			name string
			seen bool
		}{{VMSwapIn, hasSwapIn}, {VMSwapOut, hasSwapOut}, {VMMajorFaults, hasMajfault}, {VMPageCacheRefaults, hasRefault}} {
			if !c.seen {
				want.Unmeasured = append(want.Unmeasured, c.name)
			}
		}
		if !reflect.DeepEqual(vm, want) {
			t.Fatalf("read %+v; the file's last lines say %+v", vm, want)
		}
		// What was read renders as a vmstat file that reads the same.
		var b bytes.Buffer
		for _, c := range []struct {
			name  string
			value uint64
		}{{"pswpin", vm.SwapInPages}, {"pswpout", vm.SwapOutPages}, {"pgmajfault", vm.MajorFaults}, {"workingset_refault_file", vm.PageCacheRefaults}} {
			if !slices.Contains(vm.Unmeasured, strings.TrimSuffix(c.name, "_file")) {
				fmt.Fprintf(&b, "%s %d\n", c.name, c.value)
			}
		}
		if vm.HasOOMKills {
			fmt.Fprintf(&b, "oom_kill %d\n", vm.OOMKills)
		}
		if again, err := ParseVMStat("vmstat", &b); err != nil || !reflect.DeepEqual(again, vm) {
			t.Fatalf("%+v rendered reads back as %+v, %v", vm, again, err)
		}
	})
}

// A /proc without vmstat (procfs's fixture tree, a container's partial
// /proc) leaves every counter unmeasured rather than failing.
func TestVMStatFileMissing(t *testing.T) {
	f, err := NewFS(t.TempDir(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	vm, err := f.VMStat()
	want := []string{VMSwapIn, VMSwapOut, VMMajorFaults, VMPageCacheRefaults}
	if err != nil || !slices.Equal(vm.Unmeasured, want) || vm.HasOOMKills {
		t.Fatalf("got %+v, %v", vm, err)
	}
}
