package hostfs

import (
	"bytes"
	"os"
	"strings"
	"testing"

	"github.com/gpudiag/gpudiag/internal/hosttest"
)

func TestParseCapEff(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     uint64
		wantErr  string
	}{
		{"root", "Name:\tpython3\nCapInh:\t0000000000000000\nCapEff:\t000001ffffffffff\n", 0x1ffffffffff, ""},
		{"docker default", "CapEff:\t00000000a80425fb\n", 0xa80425fb, ""},
		{"with IPC_LOCK", "CapEff:\t00000000a80465fb\n", 0xa80465fb, ""},
		{"no line", "Name:\tx\n", 0, "no CapEff line"},
		{"garbage", "CapEff:\tzz\n", 0, "not a hexadecimal mask"},
	} {
		got, err := ParseCapEff(strings.NewReader(tc.in), "status")
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !strings.HasPrefix(err.Error(), "status: ") {
				t.Errorf("%s: error %v; want %q", tc.name, err, tc.wantErr)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%s: got %x, %v; want %x", tc.name, got, err, tc.want)
		}
	}
	if 0xa80425fb&(1<<CapIPCLock) != 0 || 0xa80465fb&(1<<CapIPCLock) == 0 {
		t.Error("CAP_IPC_LOCK is not bit 14")
	}
	if os.Geteuid() == 0 {
		f, err := NewFS("/proc", "/sys")
		if err != nil {
			t.Fatal(err)
		}
		if caps, err := f.CapEff(os.Getpid()); err != nil || caps&(1<<CapIPCLock) == 0 {
			t.Errorf("root's own CapEff %x, %v; want CAP_IPC_LOCK", caps, err)
		}
	}
}

func FuzzParseCapEff(f *testing.F) {
	f.Add(hosttest.Seed(f, "proc/4343/status"))
	f.Add([]byte("CapEff:\t00000000a80425fb\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		var err error
		hosttest.WithinHangLimit(t, func() { _, err = ParseCapEff(bytes.NewReader(data), "status") })
		if err != nil {
			hosttest.CheckError(t, err, "status: ")
		}
	})
}
