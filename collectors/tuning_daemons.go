package collectors

import (
	"context"
	"fmt"

	"go.uber.org/zap"

	"github.com/gpudiag/gpudiag/sample"
)

// tuningDaemons are the support daemons whose presence the audit checks:
// irqbalance (moves device interrupts, can undo manual affinity),
// nvidia-persistenced (keeps GPUs initialised between jobs), the fabric
// manager (required on NVSwitch hosts) and the DCGM host engine.
var tuningDaemons = []string{"irqbalance", "nvidia-persistenced", "nv-fabricmanager", "nv-hostengine"}

// tuningCommLen is the kernel's TASK_COMM_LEN less the NUL: /proc/<pid>/comm
// holds at most this many bytes of the program name.
const tuningCommLen = 15

var hostProcessDesc = tuningDesc("process_running", "1 when a process of this support daemon runs on the host, else 0.", "process")

// scanDaemons looks for the support daemons by /proc/<pid>/comm. comm is the
// program name cut to 15 bytes, so nvidia-persistenced shows as
// "nvidia-persiste". The names of a scan of every process published within
// the collector's interval (the ncclproc collector's, every 15 s) serve
// instead of reading every process's comm again.
func (c *tuningCollector) scanDaemons(ctx context.Context, t *sample.HostTuning) error {
	want := make(map[string]string, len(tuningDaemons))
	t.Processes = make(map[string]bool, len(tuningDaemons))
	for _, d := range tuningDaemons {
		want[d[:min(len(d), tuningCommLen)]] = d
		t.Processes[d] = false
	}
	if p := c.shared.ProcessScan(); p != nil && p.Comms != nil && c.now().Sub(p.At) < c.interval {
		for comm, d := range want {
			t.Processes[d] = p.Comms[comm]
		}
		return nil
	}
	err := c.comms.EachComm(ctx, func(_ int, comm []byte) {
		if d, ok := want[string(comm)]; ok {
			t.Processes[d] = true
		}
	}, func(pid int, err error) {
		c.log.Debug("process name unreadable", zap.Int("pid", pid), zap.Error(err))
	})
	switch {
	case ctx.Err() != nil:
		return ctx.Err()
	case err != nil:
		return fmt.Errorf("listing %s: %w", c.host.ProcPath(), err)
	}
	return nil
}

func daemonMetrics(t *sample.HostTuning, gauge tuningGauge) {
	for _, d := range tuningDaemons {
		if running, ok := t.Processes[d]; ok {
			gauge(hostProcessDesc, boolFloat(running), d)
		}
	}
}
