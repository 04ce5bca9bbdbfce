package hostfs

import (
	"bytes"
	"context"
	"path/filepath"
	"testing"

	"github.com/gpudiag/gpudiag/internal/hosttest"
)

// FuzzTCPLocalPorts: any /proc/net/tcp content gives ports or an error
// naming the file, at most one port per line after the header.
func FuzzTCPLocalPorts(f *testing.F) {
	f.Add(hosttest.Seed(f, "proc/net/tcp"))
	f.Add(hosttest.Seed(f, "proc/net/tcp6"))
	f.Add([]byte("header\n   0: 00000000:0016\n"))
	f.Add([]byte("header\n   0: 00000000:10000 00000000:0000 0A\n"))
	f.Add([]byte("header\n   0: :0016 00000000:0000 0A\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		proc := t.TempDir()
		path := filepath.Join(proc, "net/tcp")
		hosttest.WriteFile(t, path, string(data))
		host, err := NewFS(proc, "")
		if err != nil {
			t.Fatal(err)
		}
		ports := 0
		hosttest.WithinHangLimit(t, func() { err = host.TCPLocalPorts(context.Background(), "tcp", func(uint64) { ports++ }) })
		if err != nil {
			hosttest.CheckError(t, err, path+": ")
			return
		}
		if lines := bytes.Count(data, []byte("\n")) + 1; ports > lines-1 {
			t.Fatalf("%d ports from %d lines", ports, lines)
		}
	})
}
