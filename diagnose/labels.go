package diagnose

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// signalLabels name the analyzers' evidence signals for a reader of the
// text and the page; JSON keeps the signals' machine names.
var signalLabels = map[string]string{
	"sm_active":                           "SM activity",
	"tensor_active":                       "tensor pipes activity",
	"dram_active":                         "memory bandwidth (DRAM activity)",
	"nvml_utilization":                    "NVML utilization (a kernel ran)",
	"gpu_up":                              "GPU readable",
	"link_bytes_per_second":               "GPU link traffic, busiest link",
	"nvlink_bytes_per_second":             "NVLink traffic",
	"nvlinks_up":                          "NVLinks up",
	"pcie_rx_bytes_per_second":            "PCIe, received by the GPU",
	"pcie_tx_bytes_per_second":            "PCIe, sent by the GPU",
	"pcie_min_direction_bytes_per_second": "PCIe, slower direction",
	"pcie_max_direction_bytes_per_second": "PCIe, faster direction",
	"pcie_direction_symmetry":             "PCIe, slower over faster direction",
	"pcie_rx_tx_ratio":                    "PCIe, received over sent",
	"process_cpu_cores":                   "CPU cores the GPU's processes use",
	"process_cpu_quota_cores":             "CPU quota of the GPU's processes, cores",
	"process_cpu_throttled_periods":       "CPU quota periods throttled",
	"process_disk_bytes_per_second":       "disk I/O of the GPU's processes",
	"process_disk_requests_in_flight":     "disk requests in flight for the GPU's processes",
	"process_read_bytes_per_second":       "reads of the GPU's processes",
	"process_tcp_bytes_per_second":        "TCP traffic of the GPU's processes",
	"process_threads_in_io_wait":          "threads of the GPU's processes waiting on I/O",
	"psi_cpu_some":                        "CPU pressure (PSI some)",
	"psi_io_some":                         "I/O pressure (PSI some)",
	"rdma_ports":                          "RDMA ports",
	"rdma_port_bytes_per_second":          "RDMA port traffic",
	"rdma_line_rate_ratio":                "RDMA traffic over line rate",
	"gpudirect_rdma":                      "GPUDirect RDMA loaded",
	"disk_read_bytes_per_second":          "disk reads",
	"disk_write_bytes_per_second":         "disk writes",
	"stalled_seconds":                     "stalled for",
	"world_size":                          "ranks in the job",
	"compute_processes":                   "compute processes",
}

// signalLabel is a signal's label for a reader; a signal without one reads
// with spaces for underscores.
func signalLabel(signal string) string {
	if l, ok := signalLabels[signal]; ok {
		return l
	}
	return strings.ReplaceAll(signal, "_", " ")
}

// formatValue writes an evidence value or threshold in its unit for a
// reader: bytes and rates scaled, "n/a" when unmeasured.
func formatValue(x float64, unit string) string {
	switch {
	case math.IsNaN(x):
		return "n/a"
	case unit == "B/s":
		switch a := math.Abs(x); {
		case a >= 1e9:
			return fmt.Sprintf("%.2f GB/s", x/1e9)
		case a >= 1e6:
			return fmt.Sprintf("%.1f MB/s", x/1e6)
		case a >= 1e3:
			return fmt.Sprintf("%.1f kB/s", x/1e3)
		}
		return fmt.Sprintf("%.0f B/s", x)
	case unit == "B":
		switch a := math.Abs(x); {
		case a >= 1<<30:
			return fmt.Sprintf("%.1f GiB", x/(1<<30))
		case a >= 1<<20:
			return fmt.Sprintf("%.1f MiB", x/(1<<20))
		case a >= 1<<10:
			return fmt.Sprintf("%.1f KiB", x/(1<<10))
		}
		return fmt.Sprintf("%.0f B", x)
	case unit == "percent":
		return strconv.FormatFloat(x, 'f', -1, 64) + "%"
	case unit == "us":
		return strconv.FormatFloat(x, 'f', -1, 64) + " µs"
	case unit == "1/s":
		return strconv.FormatFloat(x, 'f', -1, 64) + "/s"
	case unit == "ratio":
		return strconv.FormatFloat(x, 'f', 3, 64)
	case unit == "":
		return strconv.FormatFloat(x, 'f', -1, 64)
	}
	return strconv.FormatFloat(x, 'f', -1, 64) + " " + unit
}
