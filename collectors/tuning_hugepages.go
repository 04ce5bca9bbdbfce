package collectors

import (
	"strconv"

	"github.com/gpudiag/gpudiag/sample"
)

var (
	hostHugepagesDesc     = tuningDesc("hugepages", "Explicit hugepages configured per page size (nr_hugepages).", "page_size")
	hostHugepagesFreeDesc = tuningDesc("hugepages_free", "Explicit hugepages free per page size.", "page_size")
)

func (c *tuningCollector) readHugepages(t *sample.HostTuning) error {
	pools, err := c.host.Hugepages()
	if err != nil {
		return err
	}
	for _, p := range pools {
		t.Hugepages = append(t.Hugepages, sample.HugepagePool{PageBytes: p.PageBytes, Total: p.Total, Free: p.Free})
	}
	return nil
}

func hugepageMetrics(t *sample.HostTuning, gauge tuningGauge) {
	for _, p := range t.Hugepages {
		size := strconv.FormatUint(p.PageBytes, 10)
		gauge(hostHugepagesDesc, float64(p.Total), size)
		gauge(hostHugepagesFreeDesc, float64(p.Free), size)
	}
}
