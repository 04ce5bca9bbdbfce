package hostfs

import (
	"fmt"
	"testing"

	"github.com/gpudiag/gpudiag/internal/hosttest"
	"github.com/gpudiag/gpudiag/sample"
)

// FuzzParseMeminfo: any input gives the seven fields or an error naming
// the file, never a panic (procfs's parser indexed the second field of
// every line unchecked); what was read renders as a meminfo that reads the
// same.
func FuzzParseMeminfo(f *testing.F) {
	f.Add(hosttest.Seed(f, "proc/meminfo"))
	f.Add([]byte("MemTotal:\n"))
	f.Add([]byte("MemTotal: 1 kB extra\n"))
	f.Add([]byte("MemTotal: 18446744073709551615 kB\n"))
	f.Add([]byte("MemTotal: 1 MB\n"))
	f.Add([]byte("HugePages_Total:       0\nMemTotal: 1 kB\nMemAvailable: 2 kB\nCached: 3 kB\nDirty: 4 kB\nWriteback: 5 kB\nSwapTotal: 0 kB\nSwapFree: 0 kB\nMemTotal: 7 kB\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		var m sample.HostMemory
		var err error
		hosttest.WithinHangLimit(t, func() { m, err = ParseMeminfo("meminfo", data) })
		if err != nil {
			hosttest.CheckError(t, err, "meminfo: ")
			return
		}
		text := fmt.Sprintf("MemTotal: %d\nMemAvailable: %d\nCached: %d\nDirty: %d\nWriteback: %d\nSwapTotal: %d\nSwapFree: %d\n",
			m.TotalBytes, m.AvailableBytes, m.CachedBytes, m.DirtyBytes, m.WritebackBytes, m.SwapTotalBytes, m.SwapFreeBytes)
		if again, err := ParseMeminfo("meminfo", []byte(text)); err != nil || again != m {
			t.Fatalf("%+v rendered reads back as %+v, %v", m, again, err)
		}
	})
}
