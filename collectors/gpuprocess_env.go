package collectors

// What is read of a process's environment: OMP_NUM_THREADS, and nothing
// else leaves the wiped buffer.

import (
	"strconv"
	"strings"

	"go.uber.org/zap"

	"github.com/gpudiag/gpudiag/hostfs"
	"github.com/gpudiag/gpudiag/nccl"
)

// gpuProcessEnvironBytes bounds the read of one environment, and
// gpuProcessEnvironChunk the buffer it is scanned through.
const (
	gpuProcessEnvironBytes = 1 << 20
	gpuProcessEnvironChunk = 64 << 10
)

// ompNumThreads reads OMP_NUM_THREADS from the process's environment,
// once per process: the only variable kept (it is on nccl's allow-list of
// values); nothing else leaves the wiped buffer.
func (c *gpuProcessCollector) ompNumThreads(id hostfs.ProcID) int {
	if n, ok := c.ompNumThreadsSeen[id]; ok {
		return n
	}
	if c.environBuf == nil {
		c.environBuf = make([]byte, gpuProcessEnvironChunk)
	}
	n := 0
	_, err := c.host.Environ(id.PID)(c.environBuf, gpuProcessEnvironBytes, func(name []byte) bool {
		return string(name) == "OMP_NUM_THREADS" && nccl.EnvPolicy(name) == nccl.EnvValue
	}, func(_, value []byte) {
		if n != 0 {
			return // the first one is what getenv returns
		}
		// "8" or a nested list "8,4": the outer level is what runs.
		first, _, _ := strings.Cut(string(value), ",")
		if v, err := strconv.Atoi(strings.TrimSpace(first)); err == nil && v > 0 {
			n = min(v, 1<<16)
		}
	})
	if err != nil && !hostfs.Vanished(err) {
		c.log.Debug("environ unreadable", zap.Int("pid", id.PID), zap.Error(err))
	}
	c.ompNumThreadsSeen[id] = n
	return n
}
