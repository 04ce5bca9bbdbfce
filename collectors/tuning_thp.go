package collectors

import (
	"github.com/gpudiag/gpudiag/sample"
)

var hostTHPDesc = tuningDesc("transparent_hugepage_info",
	"Active transparent hugepage modes: enabled (always, madvise, never) and defrag.", "enabled", "defrag")

func (c *tuningCollector) readTHP(t *sample.HostTuning) error {
	var err error
	t.TransparentHugepage, t.TransparentHugepageDefrag, err = c.host.TransparentHugepage()
	return err
}

func thpMetrics(t *sample.HostTuning, gauge tuningGauge) {
	if t.TransparentHugepage != "" || t.TransparentHugepageDefrag != "" {
		gauge(hostTHPDesc, 1, t.TransparentHugepage, t.TransparentHugepageDefrag)
	}
}
