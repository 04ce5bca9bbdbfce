package collectors

import (
	"errors"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/gpudiag/gpudiag/engine"
)

// Every collector registered with an interval of its own samples on it:
// the dataset collector once ignored its --collector.dataset.interval and
// scanned every process's descriptors every second.
func TestCollectorsKeepTheirOwnInterval(t *testing.T) {
	for name, r := range registry {
		if r.interval == nil {
			continue
		}
		const want = 7 * time.Second
		c, err := r.newFunc(Config{ProcPath: "/proc", SysPath: "/sys", Logger: zap.NewNop(), Interval: time.Second, OwnInterval: want})
		if errors.Is(err, ErrUnavailable) {
			continue
		}
		if err != nil {
			t.Logf("%s: %v (not checked)", name, err)
			continue
		}
		iv, ok := c.(engine.Intervaler)
		if !ok || iv.Interval() != want {
			t.Errorf("%s: registered with an interval of its own, samples every %v; want %v", name, iv, want)
		}
		if cl, ok := c.(interface{ Close() error }); ok {
			cl.Close()
		}
	}
}
