// Package hostfs parses the node's /proc and /sys files that
// prometheus/procfs does not, or parses in a way a verdict cannot rest on
// (a malformed CPU list silently read as CPU 0). It is to collectors what
// procfs is to node_exporter's: an FS handle rooted where --path.procfs
// and --path.sysfs point, one file per source, each with its table test
// and, where the input is the kernel's or a user's text, a fuzz target
// (scripts/fuzz.sh runs them with the rest).
//
// It returns types of its own and imports nothing of the daemon's (the
// sample data model included): each collector maps what it reads onto
// sample's types, so that a parser, its fixtures and its fuzz target stand
// and change apart from what the daemon exports.
//
// Every file is read through hostfile, the one bounded, non-blocking,
// type-checked way of opening a host file (read.go): a FIFO or device where
// a regular file belongs is refused unread, and a file over its read bound
// is an error rather than a silent cut.
//
// The sources, by file:
//
//   - /proc: meminfo.go, vmstat.go, diskstats.go, nettcp.go (/proc/net/tcp
//     local ports), sockstat.go (/proc/net/sockstat TCP socket counts),
//     swaps.go, sysctl.go (/proc/sys), nvidia.go (the driver's GPU
//     information).
//   - /proc/<pid>: proctree.go (task children, the parent scan, ProcID),
//     status.go (allowed CPU and memory lists), numamaps.go, maps.go
//     (mapped libnccl files), environ.go, cgroup.go (container, pod and
//     Slurm job of procfs's cgroup lines), hostname.go and nccllib.go
//     (files under the process's root).
//   - /sys: attr.go (one-value attributes), choice.go (bracketed choices),
//     cpulist.go (kernel lists), numanode.go, pci.go (a PCI device's
//     locality, place in the PCIe tree and ID attributes), netclass.go
//     (/sys/class/net and its interfaces), blockqueue.go
//     (/sys/block/<dev>/queue and its blk-mq queues), blockdevice.go (a
//     block device's NUMA node, from its controller), thp.go (transparent
//     hugepage modes), cpufreq.go (scaling governors).
//
// testdata/host is the reference host's /proc and /sys (a two-socket node
// with eight GPUs, InfiniBand and RoCE HCAs, NVMe and virtio disks): the
// tree the parsers' tests, the fuzz seeds (hosttest.Seed) and the
// collectors', exporter's and e2e tests read.
package hostfs
