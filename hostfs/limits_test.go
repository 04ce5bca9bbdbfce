package hostfs

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpudiag/gpudiag/internal/hosttest"
)

const limitsHead = "Limit                     Soft Limit           Hard Limit           Units     \n" +
	"Max cpu time              unlimited            unlimited            seconds   \n"

func TestParseMaxLockedMemory(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     Memlock
		wantErr  string
	}{
		{"docker default", limitsHead + "Max locked memory         65536                65536                bytes     \n", Memlock{Bytes: 65536}, ""},
		{"systemd default", limitsHead + "Max locked memory         8388608              8388608              bytes     \n", Memlock{Bytes: 8 << 20}, ""},
		{"unlimited", limitsHead + "Max locked memory         unlimited            unlimited            bytes     \n", Memlock{Unlimited: true}, ""},
		{"no line", limitsHead, Memlock{}, "no \"Max locked memory\" line"},
		{"garbage", "Max locked memory         lots  lots  bytes\n", Memlock{}, "neither unlimited nor a number"},
		{"wrong unit", "Max locked memory         10  10  pages\n", Memlock{}, "not bytes"},
	} {
		got, err := ParseMaxLockedMemory(strings.NewReader(tc.in), "limits")
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !strings.HasPrefix(err.Error(), "limits: ") {
				t.Errorf("%s: error %v; want %q", tc.name, err, tc.wantErr)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%s: got %+v, %v; want %+v", tc.name, got, err, tc.want)
		}
	}
	proc := t.TempDir()
	hosttest.WriteFile(t, filepath.Join(proc, "9/limits"), limitsHead+"Max locked memory         65536                65536                bytes     \n")
	f, err := NewFS(proc, "")
	if err != nil {
		t.Fatal(err)
	}
	if m, err := f.MaxLockedMemory(9); err != nil || m.Bytes != 65536 {
		t.Errorf("FS: got %+v, %v", m, err)
	}
}

func FuzzParseMaxLockedMemory(f *testing.F) {
	f.Add(hosttest.Seed(f, "proc/4343/limits"))
	f.Add([]byte(limitsHead + "Max locked memory         65536                65536                bytes     \n"))
	f.Add([]byte("Max locked memory         unlimited            unlimited            bytes     \n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		var m Memlock
		var err error
		hosttest.WithinHangLimit(t, func() { m, err = ParseMaxLockedMemory(bytes.NewReader(data), "limits") })
		if err != nil {
			hosttest.CheckError(t, err, "limits: ")
			return
		}
		if m.Unlimited && m.Bytes != 0 {
			t.Fatalf("unlimited with %d bytes", m.Bytes)
		}
	})
}
