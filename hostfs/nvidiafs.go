package hostfs

import (
	"bufio"
	"bytes"
	"fmt"
	"strconv"
	"strings"
)

// NvidiaFSStatsPath is the GPUDirect Storage driver's statistics under /proc.
const NvidiaFSStatsPath = "driver/nvidia-fs/stats"

// procNvidiaFSBytes bounds the stats file: a header, a dozen counter lines
// and two lines per GPU.
const procNvidiaFSBytes = 64 << 10

// NvidiaFSStats are the GPUDirect Storage driver's counters since it
// loaded.
type NvidiaFSStats struct {
	Reads         uint64
	ReadsOK       uint64
	ReadErrors    uint64
	ReadMiB       uint64
	Writes        uint64
	WriteErrors   uint64
	WriteMiB      uint64
	IOStateErrors uint64
	// MapErrors are the Error line's counters summed (cpu-gpu-pages,
	// sg-ext, dma-map, dma-ref): failures to map GPU memory for DMA.
	MapErrors uint64
}

// NvidiaFSStats reads /proc/driver/nvidia-fs/stats; the error satisfies
// Vanished-style fs.ErrNotExist when the driver is not loaded.
func (f FS) NvidiaFSStats() (*NvidiaFSStats, error) {
	return readParsed(f, f.ProcPath(NvidiaFSStatsPath), procNvidiaFSBytes, ParseNvidiaFSStats)
}

// ParseNvidiaFSStats reads the counters of the nvidia-fs stats file (NVFS
// statistics ver 4, GDS troubleshooting guide, "Displaying GDS NVIDIA FS
// Driver Statistics"): the "Reads : n= ok= err= readMiB= io_state_err="
// and "Writes : n= ok= err= writeMiB= io_state_err=" lines, and the
// "Error : cpu-gpu-pages= sg-ext= dma-map= dma-ref=" line. The bandwidth
// and latency lines, which are averages, are not read. A file without a
// Reads counter line is not the stats file.
func ParseNvidiaFSStats(path string, b []byte) (*NvidiaFSStats, error) {
	out := &NvidiaFSStats{}
	reads := false
	s := bufio.NewScanner(bytes.NewReader(b))
	for line := 1; s.Scan(); line++ {
		name, rest, ok := strings.Cut(s.Text(), ":")
		if !ok {
			continue
		}
		name = strings.TrimSpace(name)
		if name != "Reads" && name != "Writes" && name != "Error" {
			continue
		}
		kv := map[string]uint64{}
		for _, field := range strings.Fields(rest) {
			k, v, ok := strings.Cut(field, "=")
			if !ok {
				continue
			}
			n, err := strconv.ParseUint(v, 10, 64)
			if err != nil {
				if strings.Contains(k, "(") {
					continue // Bandwidth(MiB/s)=1.5, Avg-Latency(usec)=…: averages, not counters
				}
				return nil, fmt.Errorf("%s: line %d: %s=%s is not a counter", path, line, Quote(k), Quote(v))
			}
			kv[k] = n
		}
		switch name {
		case "Reads":
			if n, ok := kv["n"]; ok {
				reads = true
				out.Reads, out.ReadsOK, out.ReadErrors, out.ReadMiB = n, kv["ok"], kv["err"], kv["readMiB"]
				out.IOStateErrors += kv["io_state_err"]
			}
		case "Writes":
			if n, ok := kv["n"]; ok {
				out.Writes, out.WriteErrors, out.WriteMiB = n, kv["err"], kv["writeMiB"]
				out.IOStateErrors += kv["io_state_err"]
			}
		case "Error":
			for _, k := range []string{"cpu-gpu-pages", "sg-ext", "dma-map", "dma-ref"} {
				out.MapErrors += kv[k]
			}
		}
	}
	if !reads {
		return nil, fmt.Errorf("%s: no \"Reads : n=…\" line", path)
	}
	return out, nil
}
