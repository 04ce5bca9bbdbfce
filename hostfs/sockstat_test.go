package hostfs

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpudiag/gpudiag/internal/hosttest"
)

func TestTCPSockets(t *testing.T) {
	const sockstat = "sockets: used 1200\nTCP: inuse 40 orphan 0 tw 25 alloc 50 mem 3\nUDP: inuse 5 mem 1\n"
	const sockstat6 = "TCP6: inuse 7\nUDP6: inuse 2\n"
	for _, tc := range []struct {
		name    string
		files   map[string]string
		want    int
		wantErr string
	}{
		{"both families and TIME_WAIT", map[string]string{"sockstat": sockstat, "sockstat6": sockstat6}, 40 + 25 + 7, ""},
		{"IPv6 disabled", map[string]string{"sockstat": sockstat}, 40 + 25, ""},
		{"no sockstat", map[string]string{"sockstat6": sockstat6}, 0, "sockstat"},
		{"no TCP line", map[string]string{"sockstat": "UDP: inuse 5 mem 1\n"}, 0, "sockstat: no TCP line"},
	} {
		proc := t.TempDir()
		for name, text := range tc.files {
			hosttest.WriteFile(t, filepath.Join(proc, "net", name), text)
		}
		host, err := NewFS(proc, t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		got, err := host.TCPSockets()
		switch {
		case tc.wantErr == "" && (err != nil || got != tc.want):
			t.Errorf("%s: got %d, %v; want %d", tc.name, got, err, tc.want)
		case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
			t.Errorf("%s: error %v; want one naming %q", tc.name, err, tc.wantErr)
		}
	}
}
