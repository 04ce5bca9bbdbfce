package analyzers

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
)

// seedCondition is one condition the seed chapters teach a GPU-node
// diagnostician to detect (../shared/research: seeds-000-003.md "S0",
// seed-001.md "S1", seeds-002-004.md "S2"). The seeds' 116 rows describe 76
// conditions once rows about the same condition are joined (the issue that
// asked for this table counted 53 in a coarser grouping); the rows not
// counted (advice, inventory, things outside one node) are in
// seedRowsNotConditions.
//
// A condition is diagnosed when a finding check or a verdict sub-kind
// (class/sub_kind) names it, a test fires it, and a runbook page explains
// it; TestSeedConditionCoverage checks each claim against the repository
// and docs/diagnosis.md's coverage table is generated from this list, so
// neither can drift. TestSeedConditionTestsFire proves that each claimed
// test fires the condition: with its rules switched off, the test fails;
// so a claimed test is one of this package's.
type seedCondition struct {
	ID, Title string
	Seeds     string
	Source    string
	Metrics   []string
	Checks    []string // finding checks, or class/sub_kind
	Tests     []string // Go test functions that fire a check
	Runbooks  []string // pages under docs/runbooks
	// NotWhy says why a condition is not diagnosed; empty when it is.
	NotWhy string
	// Partly says what of a diagnosed condition its rules do not cover;
	// empty when they cover it whole.
	Partly string
}

var seedConditions = []seedCondition{
	// Host memory and kernel.
	{ID: "H01", Title: "Swap configured or in use on a GPU node", Seeds: "S0 #1, #3", Source: "/proc/swaps, vm.swappiness, /proc/vmstat pswpout",
		Metrics: []string{"gpudiag_host_swap_devices"}, Checks: []string{"swap_active"}, Tests: []string{"TestAuditHost", "TestAuditSwap"},
		Runbooks: []string{"findings/swap_active.md"}},
	{ID: "H02", Title: "Host OOM kill", Seeds: "S0 #2", Source: "/proc/vmstat oom_kill",
		Metrics: []string{"gpudiag_memory_oom_kills_total"}, Checks: []string{"oom_kill"}, Tests: []string{"TestAuditHost"},
		Runbooks: []string{"findings/oom_kill.md"}},
	{ID: "H03", Title: "Transparent huge pages off on a training node", Seeds: "S0 #4, #5", Source: "/sys/kernel/mm/transparent_hugepage, /proc/meminfo HugePages_*",
		Checks: []string{"thp_disabled"}, Tests: []string{"TestAuditHostTuning"}, Runbooks: []string{"findings/thp_disabled.md"}},
	{ID: "H04", Title: "Checkpoint bursts stall training: dirty page limits low", Seeds: "S0 #6, S1 #27", Source: "vm.dirty_ratio, vm.dirty_background_ratio, dirty_bytes",
		Checks: []string{"vm_dirty_low"}, Tests: []string{"TestAuditHostTuning"}, Runbooks: []string{"findings/vm_dirty_low.md"}},
	{ID: "H05", Title: "Page-cache thrash: the dataset does not fit the cache", Seeds: "S1 #13", Source: "/proc/vmstat and cgroup memory.stat workingset_refault_file",
		Checks: []string{"page_cache_thrash"}, Tests: []string{"TestAuditStorage"}, Runbooks: []string{"findings/page_cache_thrash.md"}},

	// CPU, NUMA, interrupts.
	{ID: "N01", Title: "GPU process runs on CPUs of another NUMA node than its GPU", Seeds: "S0 #7, #40", Source: "/proc/<pid>/status Cpus_allowed_list, the GPU's local_cpulist",
		Metrics: []string{"gpudiag_gpu_process_cpus_off_node_ratio"}, Checks: []string{"gpu_process_remote_cpus"}, Tests: []string{"TestGPUProcessRemotePlacement"},
		Runbooks: []string{"findings/gpu_process_remote_cpus.md"}},
	{ID: "N02", Title: "GPU process memory on the remote NUMA node", Seeds: "S0 #8, #41", Source: "/proc/<pid>/numa_maps, node numastat",
		Metrics: []string{"gpudiag_gpu_process_remote_memory_ratio"}, Checks: []string{"gpu_process_remote_memory"}, Tests: []string{"TestGPUProcessRemotePlacement"},
		Runbooks: []string{"findings/gpu_process_remote_memory.md"}},
	{ID: "N03", Title: "Process not pinned / automatic NUMA balancing migrates it", Seeds: "S0 #10", Source: "Cpus_allowed_list, kernel.numa_balancing",
		Metrics: []string{"gpudiag_host_numa_balancing"}, Checks: []string{"gpu_process_not_pinned", "numa_balancing"}, Tests: []string{"TestGPUProcessNotPinned", "TestAuditHostTuning"},
		Runbooks: []string{"findings/gpu_process_not_pinned.md", "findings/numa_balancing.md"}},
	{ID: "N04", Title: "A job's GPUs span the inter-socket link (SYS)", Seeds: "S0 #11, S1 #34", Source: "NVML topology, the job's GPUs",
		Metrics: []string{"gpudiag_gpu_peer_link_info"}, Checks: []string{"job_spans_numa_nodes"}, Tests: []string{"TestJobSpanningNUMANodes", "TestJobSpanningNUMANodesEvenSplit"},
		Runbooks: []string{"findings/job_spans_numa_nodes.md"}},
	{ID: "N05", Title: "GPU or NIC interrupts handled on the remote NUMA node", Seeds: "S0 #12", Source: "/sys/bus/pci/devices/<bdf>/msi_irqs, /proc/irq/<n>/effective_affinity_list",
		Checks: []string{"irq_affinity_remote"}, Tests: []string{"TestAuditHostTuning"}, Runbooks: []string{"findings/irq_affinity_remote.md"}},
	{ID: "N06", Title: "CPU frequency governor is not performance", Seeds: "S0 #13", Source: "/sys/devices/system/cpu/cpu*/cpufreq/scaling_governor",
		Metrics: []string{"gpudiag_host_cpu_scaling_governor_cpus"}, Checks: []string{"cpu_governor"}, Tests: []string{"TestAuditHost", "TestAuditCPUGovernor"},
		Runbooks: []string{"findings/cpu_governor.md"}},
	{ID: "N07", Title: "Deep C-states enabled", Seeds: "S0 #14", Source: "cpuidle states",
		Checks: []string{"cpu_deep_cstates"}, Tests: []string{"TestAuditHostTuning"}, Runbooks: []string{"findings/cpu_deep_cstates.md"}},
	{ID: "N10", Title: "No CPU isolation or real-time priority for the feeder", Seeds: "S0 #15", Source: "/proc/cmdline isolcpus, nohz_full, /sys/devices/system/cpu/isolated",
		Checks: []string{"isolated_cpus"}, Tests: []string{"TestAuditHostTuning"}, Runbooks: []string{"findings/isolated_cpus.md"},
		Partly: "CPU isolation is read; the feeder thread's scheduling policy (SCHED_FIFO/RR, field 41 of /proc/<pid>/task/<tid>/stat) is not"},
	{ID: "N08", Title: "CUDA_VISIBLE_DEVICES or GOMP_CPU_AFFINITY hard-coded to GPU 0's layout and copied to every rank", Seeds: "S0 #40, #18", Source: "the ranks' CUDA_VISIBLE_DEVICES and GOMP_CPU_AFFINITY, the GPUs they run on, the GPUs' local_cpulist",
		Checks: []string{"cuda_visible_devices_shared", "omp_affinity_remote"}, Tests: []string{"TestAuditCUDAVisibleDevicesShared", "TestOMPAffinityRemote"},
		Runbooks: []string{"findings/cuda_visible_devices_shared.md", "findings/omp_affinity_remote.md"}},
	{ID: "N09", Title: "Node-wide remote NUMA allocations on the GPUs' nodes", Seeds: "S0 #9", Source: "/sys/devices/system/node/node<N>/numastat other_node and local_node rates",
		Checks: []string{"numa_remote_allocations"}, Tests: []string{"TestNodeRemoteAllocations"}, Runbooks: []string{"findings/numa_remote_allocations.md"}},

	// The host feeding the GPU.
	{ID: "F01", Title: "GPU starved by the host CPU (input pipeline, GIL, too few workers)", Seeds: "S0 #16, S1 #15, #18", Source: "process CPU, PSI cpu, the process's threads",
		Metrics: []string{"gpudiag_gpu_process_cpu_seconds_total"}, Checks: []string{"host/cpu"}, Tests: []string{"TestClassifyMeasuredSignatures"},
		Runbooks: []string{"GPUDiagGPUsStarved.md"}},
	{ID: "F07", Title: "Too many DataLoader workers for the CPUs they may use", Seeds: "S1 #16", Source: "DataLoader workers (pt_data_worker) against their CPUs, PSI cpu",
		Checks: []string{"dataloader_workers_oversubscribed"}, Tests: []string{"TestDataLoaderWorkersOversubscribed"}, Runbooks: []string{"findings/dataloader_workers_oversubscribed.md"},
		Partly: "fires while the workers contend for CPU (PSI cpu); their contention for I/O bandwidth is not counted"},
	{ID: "F08", Title: "CPU-bound decode or augmentation while the GPU's decoders idle", Seeds: "S1 #17", Source: "process CPU, PSI cpu",
		Checks: []string{"host/cpu"}, Tests: []string{"TestClassifyMeasuredSignatures"}, Runbooks: []string{"GPUDiagGPUsStarved.md"},
		Partly: "the host/cpu verdict names the starved GPU; NVDEC/NVJPG activity is not read, so decoding is not told from other CPU work"},
	{ID: "F09", Title: "DataLoader workers respawned each epoch, or a prefetch too shallow", Seeds: "S1 #19, #20", Source: "the GPU processes' pt_data_worker children followed across samples",
		Checks: []string{"dataloader_workers_respawned"}, Tests: []string{"TestDataLoaderWorkersRespawned"}, Runbooks: []string{"findings/dataloader_workers_respawned.md"},
		Partly: "respawns are counted; a prefetch too shallow (starvation in bursts at 1 s against bursty reads) is not told from other starvation"},
	{ID: "F02", Title: "GPU container throttled by its CPU quota", Seeds: "S0 #17", Source: "cgroup cpu.max, cpu.stat nr_throttled",
		Checks: []string{"cpu_quota_throttled", "host/cpu_quota"}, Tests: []string{"TestAuditLimits", "TestClassifyCPUQuota"}, Runbooks: []string{"findings/cpu_quota_throttled.md"}},
	{ID: "F03", Title: "OpenMP threads oversubscribe the cpuset", Seeds: "S0 #18", Source: "OMP_NUM_THREADS, Cpus_allowed_list",
		Checks: []string{"cpu_oversubscribed"}, Tests: []string{"TestAuditLimits"}, Runbooks: []string{"findings/cpu_oversubscribed.md"}},
	{ID: "F04", Title: "Host-to-device copies bound the GPU (pageable memory, slow link)", Seeds: "S0 #20, S1 #21", Source: "PCIe RX vs TX, SM activity",
		Metrics: []string{"gpudiag_gpu_pcie_receive_bytes_total"}, Checks: []string{"io/h2d_copy"}, Tests: []string{"TestClassifyMeasuredSignatures"},
		Runbooks: []string{"GPUDiagGPUsStarved.md"}},
	{ID: "F05", Title: "memlock limit too low for pinned memory and RDMA", Seeds: "S1 #23", Source: "/proc/<pid>/limits Max locked memory",
		Checks: []string{"memlock_limited"}, Tests: []string{"TestAuditLimits"}, Runbooks: []string{"findings/memlock_limited.md"}},
	{ID: "F06", Title: "/dev/shm too small in a GPU container", Seeds: "S0 #35", Source: "statfs of /proc/<pid>/root/dev/shm",
		Checks: []string{"dev_shm_small"}, Tests: []string{"TestAuditLimits"}, Runbooks: []string{"findings/dev_shm_small.md"}},

	// The GPU itself.
	{ID: "G01", Title: "Persistence mode off", Seeds: "S0 #22", Source: "NVML persistence mode",
		Checks: []string{"persistence_mode_off"}, Tests: []string{"TestAuditGPU"}, Runbooks: []string{"findings/persistence_mode_off.md"}},
	{ID: "G02", Title: "Several processes time-slice one GPU without MPS", Seeds: "S0 #23, #24", Source: "NVML compute processes, compute mode, MPS",
		Checks: []string{"gpu_time_sliced"}, Tests: []string{"TestAuditGPUConfig"}, Runbooks: []string{"findings/gpu_time_sliced.md"}},
	{ID: "G03", Title: "MIG mode pending, or MIG under a job that spans GPUs", Seeds: "S0 #25", Source: "NVML MIG mode current/pending",
		Checks: []string{"mig_mode_pending", "mig_job_spans_gpus"}, Tests: []string{"TestAuditGPUConfig"}, Runbooks: []string{"findings/mig_mode_pending.md"}},
	{ID: "G04", Title: "GPU clocks held down (thermal, power, slowdown)", Seeds: "S0 #26", Source: "NVML clock event reasons",
		Metrics: []string{"gpudiag_gpu_clock_event_active"}, Checks: []string{"clocks_throttled"}, Tests: []string{"TestAuditGPU"},
		Runbooks: []string{"GPUDiagClocksThrottled.md"}},
	{ID: "G05", Title: "ECC off, ECC errors, row remapping", Seeds: "S0 #27, #28", Source: "NVML ECC mode, volatile ECC counts (by memory location where reported), remapped rows",
		Metrics: []string{"gpudiag_gpu_ecc_errors_total", "gpudiag_gpu_ecc_location_errors_total"},
		Checks:  []string{"ecc_off", "ecc_uncorrectable", "ecc_correctable_rising", "row_remap_failed", "row_remap_pending"}, Tests: []string{"TestAuditGPU", "TestAuditECCByLocation"},
		Runbooks: []string{"GPUDiagECCUncorrectable.md", "GPUDiagECCCorrectableRising.md", "findings/row_remap_pending.md"}},
	{ID: "G06", Title: "GPU memory nearly full while busy", Seeds: "S0 #29", Source: "NVML memory info",
		Metrics: []string{"gpudiag_gpu_memory_used_bytes"}, Checks: []string{"gpu_memory_near_full"}, Tests: []string{"TestAuditGPUConfig"},
		Runbooks: []string{"findings/gpu_memory_near_full.md"}},
	{ID: "G07", Title: "Host driver too old for the container's CUDA", Seeds: "S0 #30, S2 C3", Source: "driver CUDA version, NVIDIA_REQUIRE_CUDA",
		Checks: []string{"driver_cuda_too_old"}, Tests: []string{"TestAuditGPUConfig"}, Runbooks: []string{"findings/driver_cuda_too_old.md"}},
	{ID: "G08", Title: "GPU fault: XID, fallen off the bus", Seeds: "S2 C8", Source: "NVML XID events, GPU_IS_LOST",
		Metrics: []string{"gpudiag_gpu_up"}, Checks: []string{"xid", "gpu_lost"}, Tests: []string{"TestAuditGPU"}, Runbooks: []string{"GPUDiagXIDError.md", "GPUDiagGPULost.md"}},
	{ID: "G09", Title: "GPU PCIe link trained down or replaying", Seeds: "S1 #22, S2 N5", Source: "NVML PCIe generation/width, replay counter",
		Metrics: []string{"gpudiag_gpu_pcie_link_generation"}, Checks: []string{"pcie_link_degraded", "pcie_replays"}, Tests: []string{"TestAuditGPU"},
		Runbooks: []string{"GPUDiagPCIeLinkDegraded.md"}},
	{ID: "G10", Title: "NVLink links down (fewer than the SKU has) or erroring", Seeds: "S2 N7", Source: "NVML NVLink state, NVLink error counters",
		Metrics: []string{"gpudiag_gpu_nvlink_link_up", "gpudiag_gpu_nvlink_errors_total"}, Checks: []string{"nvlink_links_down", "nvlink_errors"},
		Tests:    []string{"TestAuditGPUConfig", "TestAuditNVLinkErrors"},
		Runbooks: []string{"findings/nvlink_links_down.md", "GPUDiagNVLinkErrors.md"}},
	{ID: "G11", Title: "NVSwitch host without a working fabric manager (error 802)", Seeds: "S2 C1", Source: "NVML GPU fabric info",
		Checks: []string{"fabric_manager_not_ready"}, Tests: []string{"TestAuditGPUConfig"}, Runbooks: []string{"findings/fabric_manager_not_ready.md"}},
	{ID: "G12", Title: "Support daemon missing: DCGM hostengine down", Seeds: "S0 #31", Source: "the GPU backend in use",
		Metrics: []string{"gpudiag_gpu_backend_info"}, Checks: []string{"gpu_backend_fallback"}, Tests: []string{"TestAuditGPU"},
		Runbooks: []string{"GPUDiagGPUBackendFallback.md"}},
	{ID: "G13", Title: "Driver too old for the GPU, or not loaded (nouveau holds the GPU, no driver bound)", Seeds: "S2 C2, C4", Source: "/sys/bus/pci/devices/<bdf>/driver of each NVIDIA GPU",
		Checks: []string{"gpu_driver_missing"}, Tests: []string{"TestAuditGPUDriver"}, Runbooks: []string{"findings/gpu_driver_missing.md"}},

	// Storage and the dataset.
	{ID: "S01", Title: "Storage-bound: the GPU's processes wait on a disk", Seeds: "S1 #3, #4, #14", Source: "PSI io, thread D states, eBPF block I/O per GPU",
		Metrics: []string{"gpudiag_disk_read_bytes_total"}, Checks: []string{"io/storage_read"}, Tests: []string{"TestClassifyMeasuredSignatures"},
		Runbooks: []string{"GPUDiagGPUsStarved.md"}},
	{ID: "S02", Title: "Block queue settings wrong for streaming (read-ahead, scheduler, depth)", Seeds: "S1 #1, #2", Source: "/sys/block/<dev>/queue",
		Metrics: []string{"gpudiag_disk_read_ahead_bytes"}, Checks: []string{"block_queue_settings"}, Tests: []string{"TestAuditStorage"},
		Runbooks: []string{"findings/block_queue_settings.md"}},
	{ID: "S03", Title: "Dataset on remote or slow storage (NFS, FUSE); the NFS server the bottleneck", Seeds: "S0 #34, S1 #11", Source: "open files' mounts, NFS mountstats",
		Checks: []string{"dataset_on_network_fs", "nfs_slow_reads"}, Tests: []string{"TestAuditStorage"}, Runbooks: []string{"findings/dataset_on_network_fs.md"}},
	{ID: "S09", Title: "NFS client mount options untuned (rsize, actimeo, lookupcache)", Seeds: "S1 #10", Source: "NFS mountstats opts",
		Checks: []string{"dataset_on_network_fs"}, Tests: []string{"TestAuditStorage"}, Runbooks: []string{"findings/dataset_on_network_fs.md"},
		Partly: "an rsize under 1 MiB is named in the finding; actimeo and lookupcache are not read"},
	{ID: "S10", Title: "Reading an object store naively during training", Seeds: "S1 #29", Source: "open files' mounts (FUSE object-store clients)",
		Checks: []string{"dataset_on_network_fs"}, Tests: []string{"TestAuditStorage"}, Runbooks: []string{"findings/dataset_on_network_fs.md"},
		Partly: "object stores mounted through FUSE (s3fs, gcsfuse) are named; reads over HTTPS from the process itself (sockets to :443) are not"},
	{ID: "S04", Title: "atime updates on the dataset filesystem", Seeds: "S1 #9", Source: "mount options",
		Checks: []string{"dataset_atime"}, Tests: []string{"TestAuditStorage"}, Runbooks: []string{"findings/dataset_atime.md"}},
	{ID: "S05", Title: "Dataset read through the container's overlayfs", Seeds: "S0 #33", Source: "open files' mounts",
		Checks: []string{"dataset_overlay"}, Tests: []string{"TestAuditStorage"}, Runbooks: []string{"findings/dataset_overlay.md"}},
	{ID: "S06", Title: "GPUDirect Storage not used, or erroring", Seeds: "S0 #21, S1 #24, #25, #26", Source: "/proc/driver/nvidia-fs/stats",
		Checks: []string{"gds_errors", "gds_available_unused"}, Tests: []string{"TestAuditStorage"}, Runbooks: []string{"findings/gds_errors.md"},
		Partly: "with nvidia-fs loaded and unused by a storage-bound job; a node without nvidia-fs where GDS would help is not flagged"},
	{ID: "S07", Title: "NVMe link slower or narrower than the drive supports", Seeds: "S1 #7", Source: "/sys/class/nvme/<ctrl>/device current_link_*/max_link_*",
		Checks: []string{"pcie_link_trained_down"}, Tests: []string{"TestAuditDeviceLinks"}, Runbooks: []string{"findings/pcie_link_trained_down.md"}},
	{ID: "S08", Title: "Small random reads / small-file dataset", Seeds: "S1 #5", Source: "/proc/diskstats average read size and reads/s of the storage-bound GPU's disk",
		Checks: []string{"dataset_small_reads"}, Tests: []string{"TestAuditDatasetSmallReads"}, Runbooks: []string{"findings/dataset_small_reads.md"}},
	{ID: "S11", Title: "One disk cannot feed the GPUs (no striping); aggregate storage bandwidth below demand", Seeds: "S1 #6, #28", Source: "diskstats: the storage-bound GPU's NVMe drive against its idle NVMe siblings",
		Checks: []string{"dataset_single_disk"}, Tests: []string{"TestAuditDatasetSingleDisk"}, Runbooks: []string{"findings/dataset_single_disk.md"},
		Partly: "one busy NVMe drive beside idle ones is named; the demand the job would have without the disk (row 28's bytes per sample) needs a benchmark of the pipeline"},

	// Communication.
	{ID: "C01", Title: "NCCL over PCIe or shared memory instead of NVLink", Seeds: "S2 F6, S1 #30", Source: "NVLink/PCIe traffic, NCCL's log",
		Metrics: []string{"gpudiag_nccl_fallback"}, Checks: []string{"communication/pcie_peer_shm", "nccl_fallback"}, Tests: []string{"TestClassifyMeasuredSignatures", "TestAuditNCCLFallbacksPerCause"},
		Runbooks: []string{"GPUDiagCommunicationBoundFallback.md", "GPUDiagNCCLFallback.md"}},
	{ID: "C02", Title: "NCCL over TCP sockets instead of RDMA (RDMA misconfigured or disabled)", Seeds: "S2 F1, F2, S1 #33", Source: "processes' TCP bytes, NCCL's log",
		Metrics: []string{"gpudiag_gpu_process_tcp_transmit_bytes_total"}, Checks: []string{"communication/network", "nccl_fallback"}, Tests: []string{"TestClassifyMeasuredSignatures", "TestAuditNCCLFallbacksPerCause"},
		Runbooks: []string{"GPUDiagCommunicationBoundFallback.md"}},
	{ID: "C03", Title: "Traffic on the management network, or a virtual/slow socket interface", Seeds: "S2 F3, F4", Source: "NCCL_SOCKET_IFNAME, interface speeds",
		Metrics: []string{"gpudiag_network_speed_bytes_per_second"}, Checks: []string{"nccl_socket_ifname_virtual"}, Tests: []string{"TestAuditNCCLSocketInterface"},
		Runbooks: []string{"findings/nccl_socket_ifname_virtual.md"}},
	{ID: "C04", Title: "Gloo backend instead of NCCL", Seeds: "S2 F5", Source: "distributed job processes not mapping libnccl",
		Checks: []string{"distributed_backend_not_nccl"}, Tests: []string{"TestAuditBackendNotNCCL"}, Runbooks: []string{"findings/distributed_backend_not_nccl.md"}},
	{ID: "C05", Title: "GPUDirect RDMA off: inter-node traffic staged through host memory", Seeds: "S2 F7, S0 #21, S1 #31", Source: "peer-memory module, NCCL's GDRDMA tag",
		Metrics: []string{"gpudiag_gpudirect_rdma_module_loaded"}, Checks: []string{"gpudirect_rdma_missing", "communication/infiniband"}, Tests: []string{"TestRDMAHostStagedAndDegraded", "TestAuditHost"},
		Runbooks: []string{"GPUDiagCommunicationBoundFallback.md"}},
	{ID: "C06", Title: "NCCL version mismatch between ranks", Seeds: "S2 F8", Source: "libnccl mapped by each process",
		Metrics: []string{"gpudiag_nccl_library_info"}, Checks: []string{"nccl_library_mismatch"}, Tests: []string{"TestAuditNCCLLibraryMismatch"},
		Runbooks: []string{"findings/nccl_library_mismatch.md"}},
	{ID: "C07", Title: "TCP ephemeral port exhaustion at bootstrap", Seeds: "S2 F9", Source: "/proc/sys/net/ipv4/ip_local_port_range, /proc/net/tcp",
		Metrics: []string{"gpudiag_host_ephemeral_ports_in_use"}, Checks: []string{"ephemeral_ports"}, Tests: []string{"TestAuditHostTuning"},
		Runbooks: []string{"findings/ephemeral_ports.md"}},
	{ID: "C08", Title: "NCCL communicator churn", Seeds: "S2 F10", Source: "NCCL's log: communicator inits over time",
		Checks: []string{"nccl_communicator_churn"}, Tests: []string{"TestAuditCommunicatorChurn"}, Runbooks: []string{"findings/nccl_communicator_churn.md"}},
	{ID: "C09", Title: "NCCL settings overtuned or features disabled by environment", Seeds: "S2 F11", Source: "NCCL's log, processes' environment",
		Metrics: []string{"gpudiag_nccl_env_override_info"}, Checks: []string{"nccl_env_override"}, Tests: []string{"TestAuditNCCLEnvOverride"},
		Runbooks: []string{"findings/nccl_env_override.md"}},
	{ID: "C10", Title: "NCCL hang: a rank died or stopped and the collective stalls", Seeds: "S2 F13", Source: "utilization, SM activity and link progress over time, process states",
		Checks: []string{"nccl_collective_stalled", "communication/collective_stalled"}, Tests: []string{"TestCollectiveStalled"},
		Runbooks: []string{"GPUDiagCollectiveStalled.md"}},
	{ID: "C21", Title: "NCCL asynchronous error handling switched off, so a dead rank hangs the job", Seeds: "S2 F13", Source: "the ranks' TORCH_NCCL_ASYNC_ERROR_HANDLING, NCCL_ASYNC_ERROR_HANDLING, TORCH_NCCL_BLOCKING_WAIT",
		Checks: []string{"nccl_error_handling_off"}, Tests: []string{"TestAuditNCCLErrorHandlingOff"}, Runbooks: []string{"findings/nccl_error_handling_off.md"}},
	{ID: "C11", Title: "Multirail not used: GPUs share one NIC while others idle", Seeds: "S2 F14, N3", Source: "HCA port traffic, NCCL's net devices",
		Checks: []string{"rdma_rail_imbalance"}, Tests: []string{"TestRemoteNICAndRailImbalance"}, Runbooks: []string{"GPUDiagRDMARailImbalance.md"},
		Partly: "from the ports' traffic while they carry it; the topology alone (more GPUs than NICs behind one PCIe switch) is not flagged"},
	{ID: "C12", Title: "Network bandwidth is the ceiling: port at line rate", Seeds: "S2 N1, S1 #32", Source: "HCA port counters against the line rate",
		Metrics: []string{"gpudiag_infiniband_rate_bytes_per_second"}, Checks: []string{"rdma_port_saturated", "communication/infiniband"}, Tests: []string{"TestRDMATrafficIsNetworkNotSHM"},
		Runbooks: []string{"GPUDiagRDMAPortSaturated.md"}},
	{ID: "C13", Title: "Straggler GPU or node sets the job's pace (the waiting GPUs say so; the straggler is named by gpudiag_gpu_straggler and the training-job rules)", Seeds: "S2 N2, S1 #35", Source: "SM activity against the node's and the job's median",
		Metrics: []string{"gpudiag_gpu_straggler"}, Checks: []string{"communication/peer_wait"}, Tests: []string{"TestPeerWaitAndComputeWithLightFabric"},
		Runbooks: []string{"GPUDiagStraggler.md", "GPUDiagJobStragglerNode.md"}},
	{ID: "C14", Title: "GPU talks to a NIC across the inter-socket link", Seeds: "S2 N6", Source: "PCIe paths of GPU and HCA, NCCL's net devices",
		Checks: []string{"rdma_nic_remote"}, Tests: []string{"TestRemoteNICAndRailImbalance"}, Runbooks: []string{"GPUDiagRDMANICRemote.md"}},
	{ID: "C15", Title: "Fabric port trained down or erroring", Seeds: "S2 N5, C8", Source: "HCA port rate and width, link and transport error counters",
		Metrics: []string{"gpudiag_infiniband_port_rate_degraded", "gpudiag_infiniband_link_width_lanes", "gpudiag_infiniband_req_cqe_error_total"},
		Checks:  []string{"ib_port_degraded", "ib_port_errors", "rdma_transport_errors"}, Tests: []string{"TestAuditHost", "TestIBPortDegradedByWidth", "TestRDMATransportErrors"},
		Runbooks: []string{"GPUDiagInfiniBandPortDegraded.md", "GPUDiagInfiniBandPortErrors.md", "GPUDiagRDMATransportErrors.md"}},
	{ID: "C16", Title: "Fabric congestion (InfiniBand credit waits, RoCE ECN/CNP)", Seeds: "S2 (RDMA counters)", Source: "port_xmit_wait, hw_counters",
		Checks: []string{"rdma_congestion"}, Tests: []string{"TestRoCECongestion"}, Runbooks: []string{"GPUDiagRDMACongestion.md"}},
	{ID: "C17", Title: "NCCL_TOPO_FILE set but the file missing where the job runs", Seeds: "S0 #43", Source: "environ NCCL_TOPO_FILE, the file under /proc/<pid>/root",
		Checks: []string{"nccl_topo_file_missing"}, Tests: []string{"TestAuditNCCLTopoFileMissing"}, Runbooks: []string{"findings/nccl_topo_file_missing.md"}},
	{ID: "C18", Title: "NIC faster than its PCIe slot, or its PCIe link trained down", Seeds: "S2 N4, N5", Source: "RDMA port rate, interface speed, current_link_*/max_link_* of the NIC's PCI function",
		Checks: []string{"nic_faster_than_pcie", "pcie_link_trained_down"}, Tests: []string{"TestAuditDeviceLinks"},
		Runbooks: []string{"findings/nic_faster_than_pcie.md", "findings/pcie_link_trained_down.md"}},
	{ID: "C19", Title: "A container that cannot see /dev/infiniband while the node has RDMA ports and the job spans nodes", Seeds: "S0 #42, S2 F1", Source: "/proc/<pid>/root/dev/infiniband, the ranks' WORLD_SIZE and LOCAL_WORLD_SIZE, RDMA port states",
		Checks: []string{"rdma_devices_hidden"}, Tests: []string{"TestAuditRDMADevicesHidden"}, Runbooks: []string{"findings/rdma_devices_hidden.md"}},
	{ID: "C20", Title: "An RDMA port that stays down on a rail the node's NCCL ranks are set to use", Seeds: "S2 N5, C8", Source: "RDMA port state and physical state, the ranks' NCCL_IB_HCA",
		Checks: []string{"ib_port_down"}, Tests: []string{"TestAuditIBPortDown"}, Runbooks: []string{"findings/ib_port_down.md"}},

	// Kubernetes placement.
	{ID: "K01", Title: "GPU pods without exclusive CPUs or NUMA alignment (CPU, memory, topology manager)", Seeds: "S0 #38, #39", Source: "the kubelet's config and state files",
		Checks: []string{"kubelet_numa_unaware"}, Tests: []string{"TestAuditKubelet"}, Runbooks: []string{"findings/kubelet_numa_unaware.md"},
		Partly: "the policies are named once a GPU pod's memory or CPUs are already remote; the policies alone raise nothing"},
	{ID: "K02", Title: "Noisy neighbour: another pod or slice contends for I/O or memory that the GPU's processes stall on", Seeds: "S0 #3, #36", Source: "io.pressure and memory.pressure of the GPU processes' cgroup and of the groups beside it",
		Checks: []string{"noisy_neighbour"}, Tests: []string{"TestAuditNoisyNeighbour"}, Runbooks: []string{"findings/noisy_neighbour.md"}},

	// Not diagnosed, and why.
	{ID: "X03", Title: "Lustre file not striped / hot OST", Seeds: "S1 #12",
		NotWhy: "Lustre client statistics (llite, osc) need a Lustre client to build fixtures from; none is available here"},
	{ID: "X04", Title: "NCCL threads collapsed onto a narrow CPU set", Seeds: "S2 F12",
		NotWhy: "needs NCCL's proxy thread identified among the process's threads (names vary by version); the process-level CPU placement checks cover the usual cause"},
	{ID: "X05", Title: "SHARP available but unused", Seeds: "S2 F15",
		NotWhy: "whether the fabric has an Aggregation Manager is known only to the subnet manager, not to the node"},
	{ID: "X06", Title: "nn.DataParallel instead of DDP; no compute/communication overlap", Seeds: "S2 C5, C6",
		NotWhy: "inside the program: one process driving many GPUs is legitimate in some engines, and overlap is visible only in a trace (Nsight)"},
	{ID: "X07", Title: "MTU and TCP buffers untuned on the interfaces NCCL's sockets use", Seeds: "S0 #44",
		NotWhy: "the seed gives no numbers (\"tune TCP buffers, MTU, and interrupt affinities\"): a rule would invent its thresholds"},
}

// seedRowsNotConditions are the seed rows that are advice or inventory,
// about more than one node, or outside what a node agent sees; they are
// not counted among the conditions.
var seedRowsNotConditions = map[string]string{
	"S0 #19":         "advice only (glibc malloc in the feeder)",
	"S0 #32, #45":    "inventory (virtualised GPU, NVIDIA container runtime)",
	"S0 #37":         "co-tenant jitter (training next to inference): CPU contention, which the host/cpu verdict and the CPU quota checks cover; its I/O and memory side is K02",
	"S1 #8":          "NVMe health (SMART): marked 'not in seed'; needs nvme-cli's admin commands, which a read-only agent does not send",
	"S1 #36, #37":    "below expected FLOPS (needs the model's FLOPs) and cuda-checkpoint (a tool outside the job)",
	"S2 N8, N9":      "topology inventory (achieved NVLink vs expected, PCIe-only GPUs) shown as metrics and verdict evidence",
	"S2 N10":         "a reachability probe between nodes, which a node agent does not run",
	"S2 C7, C9":      "in-process memory pools (UCX registration) and hypervisor configuration",
	"S1 #24":         "joined with S06 (GDS)",
	"S0 #1-#45 rest": "joined into the conditions above",
}

var testFunc = regexp.MustCompile(`(?m)^func (Test\w+)\(`)

// repoTests maps each Go test function of the repository to its body.
func repoTests(t *testing.T) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir("..", func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "testdata" || d.Name() == ".git" || d.Name() == "node_modules") {
			return filepath.SkipDir
		}
		if !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		src := string(b)
		locs := testFunc.FindAllStringSubmatchIndex(src, -1)
		for i, l := range locs {
			end := len(src)
			if i+1 < len(locs) {
				end = locs[i+1][0]
			}
			out[src[l[2]:l[3]]] += src[l[0]:end]
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// analyzerSource is the package's non-test source, where every check is
// named.
func analyzerSource(t *testing.T) string {
	t.Helper()
	files, _ := filepath.Glob("*.go")
	var b strings.Builder
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		b.Write(src)
	}
	return b.String()
}

// subKindConst maps a sub-kind's value to its constant's name.
func subKindConst(src, value string) string {
	m := regexp.MustCompile(`(Sub\w+)\s*=\s*"` + regexp.QuoteMeta(value) + `"`).FindStringSubmatch(src)
	if m == nil {
		return ""
	}
	return m[1]
}

func TestSeedConditionCoverage(t *testing.T) {
	if len(seedConditions) != 76 {
		t.Errorf("%d conditions; the seeds' rows join into 76", len(seedConditions))
	}
	tests := repoTests(t)
	src := analyzerSource(t)
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	ids := map[string]bool{}
	diagnosed := 0
	for _, c := range seedConditions {
		if ids[c.ID] {
			t.Errorf("%s listed twice", c.ID)
		}
		ids[c.ID] = true
		if c.NotWhy != "" {
			if len(c.Checks) > 0 || c.Partly != "" {
				t.Errorf("%s: says why not and names checks or a part", c.ID)
			}
			continue
		}
		diagnosed++
		if len(c.Checks) == 0 || len(c.Tests) == 0 || len(c.Runbooks) == 0 {
			t.Errorf("%s %s: a diagnosed condition needs a check, a test and a runbook", c.ID, c.Title)
			continue
		}
		// What the tests must mention: each check's name, or a verdict's
		// sub-kind by value or constant.
		var names []string
		for _, ch := range c.Checks {
			if class, sub, ok := strings.Cut(ch, "/"); ok {
				cst := subKindConst(src, sub)
				if cst == "" || !regexp.MustCompile(`Class\w*\s+Class\s*=\s*"`+regexp.QuoteMeta(class)+`"`).MatchString(src) {
					t.Errorf("%s: verdict %s is not a class and sub-kind of the analyzers", c.ID, ch)
				}
				names = append(names, `"`+sub+`"`, cst)
				continue
			}
			if !strings.Contains(src, `"`+ch+`"`) {
				t.Errorf("%s: no analyzer produces the finding %q", c.ID, ch)
			}
			names = append(names, ch)
		}
		for _, tn := range c.Tests {
			body, ok := tests[tn]
			if !ok {
				t.Errorf("%s: test %s does not exist", c.ID, tn)
				continue
			}
			mentions := false
			for _, n := range names {
				if n != "" && strings.Contains(body, n) {
					mentions = true
				}
			}
			if !mentions {
				t.Errorf("%s: test %s does not mention %v", c.ID, tn, c.Checks)
			}
		}
		for _, rb := range c.Runbooks {
			if _, err := os.Stat(filepath.Join("../docs/runbooks", rb)); err != nil {
				t.Errorf("%s: runbook %s: %v", c.ID, rb, err)
			}
		}
		for _, m := range c.Metrics {
			if !strings.Contains(string(readme), "`"+m+"`") {
				t.Errorf("%s: metric %s is not in the README's metric table", c.ID, m)
			}
		}
	}
	if diagnosed < 70 {
		t.Errorf("%d of %d conditions diagnosed; want at least 70", diagnosed, len(seedConditions))
	}
	checkGeneratedSection(t, "../docs/diagnosis.md", "conditions", conditionsTable(diagnosed))
}

// conditionsTable renders the coverage table of docs/diagnosis.md.
func conditionsTable(diagnosed int) string {
	var b strings.Builder
	partly := 0
	for _, c := range seedConditions {
		if c.Partly != "" {
			partly++
		}
	}
	fmt.Fprintf(&b, "%d of the %d conditions are diagnosed: a finding or verdict names them, a test fires it, a runbook explains it; "+
		"%d of them in part (below the table: what their rules leave out). %d are not diagnosed. "+
		"Each claimed test is proven to fire its condition: `TestSeedConditionTestsFire` runs it again with the condition's rules switched off, and it must fail.\n\n",
		diagnosed, len(seedConditions), partly, len(seedConditions)-diagnosed)
	b.WriteString("| id | condition | seeds | data source | finding or verdict | test | runbook |\n|---|---|---|---|---|---|---|\n")
	code := func(xs []string) string {
		var out []string
		for _, x := range xs {
			out = append(out, "`"+x+"`")
		}
		return strings.Join(out, ", ")
	}
	for _, c := range seedConditions {
		if c.NotWhy != "" {
			continue
		}
		var rbs []string
		for _, r := range c.Runbooks {
			rbs = append(rbs, fmt.Sprintf("[%s](runbooks/%s)", strings.TrimSuffix(filepath.Base(r), ".md"), r))
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s |\n", c.ID, c.Title, c.Seeds, c.Source, code(c.Checks), code(c.Tests), strings.Join(rbs, ", "))
	}
	b.WriteString("\nDiagnosed in part, and what is left out:\n\n| id | condition | left out |\n|---|---|---|\n")
	for _, c := range seedConditions {
		if c.Partly != "" {
			fmt.Fprintf(&b, "| %s | %s | %s |\n", c.ID, c.Title, c.Partly)
		}
	}
	b.WriteString("\nNot diagnosed, and why:\n\n| id | condition | seeds | why not |\n|---|---|---|---|\n")
	for _, c := range seedConditions {
		if c.NotWhy != "" {
			fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", c.ID, c.Title, c.Seeds, c.NotWhy)
		}
	}
	b.WriteString("\nSeed rows that are not conditions of their own:\n\n")
	keys := make([]string, 0, len(seedRowsNotConditions))
	for k := range seedRowsNotConditions {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Fprintf(&b, "- %s: %s\n", k, seedRowsNotConditions[k])
	}
	return b.String()
}
