package hostfs

import (
	"bytes"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/gpudiag/gpudiag/internal/hosttest"
)

func TestParseAllowedLists(t *testing.T) {
	cpus, mems, allowed, err := ParseAllowedLists(strings.NewReader(
		"Name:\tpython3\nCpus_allowed:\tff\nCpus_allowed_list:\t0-3,6\nMems_allowed:\t00000001\nMems_allowed_list:\t0\n"), "status")
	if err != nil || cpus != "0-3,6" || mems != "0" || !reflect.DeepEqual(allowed, []int{0, 1, 2, 3, 6}) {
		t.Errorf("got %q %q %v %v", cpus, mems, allowed, err)
	}
	_, _, _, err = ParseAllowedLists(strings.NewReader("Cpus_allowed_list:\t0-3,x\n"), "/proc/1/status")
	if err == nil || !strings.Contains(err.Error(), "/proc/1/status: Cpus_allowed_list") {
		t.Errorf("error %v; want one naming the file and field", err)
	}
}

func FuzzParseAllowedLists(f *testing.F) {
	f.Add(hosttest.Seed(f, "proc/4242/status"))
	f.Add(hosttest.Seed(f, "proc/4343/status"))
	f.Add([]byte("Cpus_allowed_list:\t0-3\nMems_allowed_list:\t\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		var cpus, mems string
		var allowed []int
		var err error
		hosttest.WithinHangLimit(t, func() { cpus, mems, allowed, err = ParseAllowedLists(bytes.NewReader(data), "status") })
		if err != nil {
			hosttest.CheckError(t, err, "status: ")
			return
		}
		if !bytes.Contains(data, []byte(cpus)) || !bytes.Contains(data, []byte(mems)) {
			t.Fatalf("lists %q, %q are not in the file", cpus, mems)
		}
		checkList(t, "Cpus_allowed_list", allowed)
		if want, err := ParseCPUList(cpus); err != nil || !slices.Equal(allowed, want) {
			t.Fatalf("allowed %v for list %q", allowed, cpus)
		}
	})
}
