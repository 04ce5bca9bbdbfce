package collectors

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpudiag/gpudiag/engine"
)

// The metrics of both NCCL collectors (nccl, from the debug logs;
// ncclproc, from /proc) share the gpudiag_nccl_ prefix and its label rules.

// ncclLabelValueBytes bounds an override's value as a label.
const ncclLabelValueBytes = 64

func ncclDesc(name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc(engine.Namespace+"_nccl_"+name, help, labels, nil)
}

// ncclTruncateLabel cuts a value on a rune boundary (values are valid UTF-8
// already: the parser made them so).
func ncclTruncateLabel(v string) string {
	if len(v) <= ncclLabelValueBytes {
		return v
	}
	n := ncclLabelValueBytes
	for n > 0 && v[n]&0xc0 == 0x80 {
		n--
	}
	return v[:n]
}
