package hostfs

import (
	"fmt"
	"strings"

	"github.com/gpudiag/gpudiag/hostfile"
)

// procSwapsBytes bounds /proc/swaps, read by procfs after hostfile.Check.
const procSwapsBytes = 1 << 20

// SwapTotals sums the active swap areas of /proc/swaps.
type SwapTotals struct {
	Devices              int
	SizeBytes, UsedBytes uint64
	// ZramDevices are the areas on a compressed RAM disk (/dev/zram*):
	// not a disk, and set up by a service rather than fstab.
	ZramDevices int
}

// SwapTotals reads /proc/swaps through procfs, which opens the file
// itself, blocking, and reads at most 1 MiB: hostfile.Check vets it first.
// The error wraps fs.ErrNotExist for a kernel built without swap.
func (f FS) SwapTotals() (SwapTotals, error) {
	path := f.ProcPath("swaps")
	if err := hostfile.Check(path, procSwapsBytes); err != nil {
		return SwapTotals{}, fmt.Errorf("%s: %w", path, err)
	}
	swaps, err := f.pfs.Swaps()
	if err != nil {
		return SwapTotals{}, fmt.Errorf("%s: %w", path, err)
	}
	out := SwapTotals{Devices: len(swaps)}
	for _, s := range swaps {
		out.SizeBytes += uint64(s.Size) * 1024 // /proc/swaps is in KiB
		out.UsedBytes += uint64(s.Used) * 1024
		if strings.HasPrefix(s.Filename, "/dev/zram") {
			out.ZramDevices++
		}
	}
	return out, nil
}
