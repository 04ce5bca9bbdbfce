package hostfs

import (
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/gpudiag/gpudiag/internal/hosttest"
)

func FuzzParseChildren(f *testing.F) {
	f.Add(hosttest.Seed(f, "proc/4343/task/4343/children"))
	f.Add([]byte("4344 4345 \n"))
	f.Add([]byte("0"))
	f.Fuzz(func(t *testing.T, data []byte) {
		var pids []int
		var err error
		hosttest.WithinHangLimit(t, func() { pids, err = ParseChildren("children", data) })
		if err != nil {
			hosttest.CheckError(t, err, "children: ")
			return
		}
		if len(pids) > (len(data)+1)/2 {
			t.Fatalf("%d PIDs from %d bytes", len(pids), len(data))
		}
		var rendered []string
		for _, p := range pids {
			if p <= 0 {
				t.Fatalf("PID %d", p)
			}
			rendered = append(rendered, strconv.Itoa(p))
		}
		if again, err := ParseChildren("children", []byte(strings.Join(rendered, " ")+" ")); err != nil || !slices.Equal(again, pids) {
			t.Fatalf("%v renders and reads back as %v, %v", pids, again, err)
		}
	})
}
