package hostfs

import (
	"strings"

	"github.com/gpudiag/gpudiag/hostfile"
)

// gpuInformationBytes bounds the driver's
// /proc/driver/nvidia/gpus/<bus>/information (about 1 KiB).
const gpuInformationBytes = 64 << 10

// NVIDIAGPUUUID reads a GPU's UUID from the driver's
// /proc/driver/nvidia/gpus/<bus>/information ("GPU UUID: GPU-…"); empty
// when the file names none.
func (f FS) NVIDIAGPUUUID(busID string) (string, error) {
	path := f.ProcPath("driver", "nvidia", "gpus", busID, "information")
	b, err := hostfile.Read(path, gpuInformationBytes)
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "GPU UUID" {
			return strings.TrimSpace(v), nil
		}
	}
	return "", nil
}
