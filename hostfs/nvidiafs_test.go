package hostfs

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/gpudiag/gpudiag/internal/hosttest"
)

func TestParseNvidiaFSStats(t *testing.T) {
	raw, err := os.ReadFile("testdata/host/proc/" + NvidiaFSStatsPath)
	if err != nil {
		t.Fatal(err)
	}
	fixture := string(raw)
	for _, tc := range []struct {
		name, text string
		want       NvidiaFSStats
		errHas     string
	}{
		{name: "fixture (NVFS stats ver 4.0)", text: fixture,
			want: NvidiaFSStats{Reads: 120431, ReadsOK: 120429, ReadErrors: 2, ReadMiB: 481724,
				Writes: 12, WriteMiB: 48, IOStateErrors: 1, MapErrors: 3}},
		{name: "idle driver", text: "Reads : n=0 ok=0 err=0 readMiB=0 io_state_err=0\nReads : Bandwidth(MiB/s)=0 Avg-Latency(usec)=0\n",
			want: NvidiaFSStats{}},
		{name: "not the stats file", text: "GDS Version: 1.0\n", errHas: "no \"Reads"},
		{name: "bad counter", text: "Reads : n=x ok=0\n", errHas: "line 1"},
	} {
		got, err := ParseNvidiaFSStats("stats", []byte(tc.text))
		if tc.errHas != "" {
			if err == nil || !strings.Contains(err.Error(), tc.errHas) {
				t.Errorf("%s: error %v; want one with %q", tc.name, err, tc.errHas)
			}
			continue
		}
		if err != nil || *got != tc.want {
			t.Errorf("%s: got %+v, %v; want %+v", tc.name, got, err, tc.want)
		}
	}
}

func FuzzParseNvidiaFSStats(f *testing.F) {
	f.Add(hosttest.Seed(f, "proc/"+NvidiaFSStatsPath))
	f.Add([]byte("Reads : n=1 ok=1 err=0 readMiB=4 io_state_err=0\nError : dma-map=18446744073709551615 sg-ext=1\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		var got *NvidiaFSStats
		var err error
		hosttest.WithinHangLimit(t, func() { got, err = ParseNvidiaFSStats("stats", data) })
		if err != nil {
			hosttest.CheckError(t, err, "stats: ")
			return
		}
		// What was read renders as a stats file that reads the same
		// (map errors summed into one counter).
		text := fmt.Sprintf("Reads : n=%d ok=%d err=%d readMiB=%d io_state_err=%d\nWrites : n=%d ok=0 err=%d writeMiB=%d io_state_err=0\nError : dma-map=%d\n",
			got.Reads, got.ReadsOK, got.ReadErrors, got.ReadMiB, got.IOStateErrors, got.Writes, got.WriteErrors, got.WriteMiB, got.MapErrors)
		again, err := ParseNvidiaFSStats("stats", []byte(text))
		if err != nil || *again != *got {
			t.Fatalf("%+v rendered reads back as %+v, %v", got, again, err)
		}
	})
}
