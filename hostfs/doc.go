// Package hostfs parses the node's /proc and /sys files that
// prometheus/procfs does not, or parses in a way a verdict cannot rest on
// (a malformed CPU list silently read as CPU 0). It is to collectors what
// procfs is to node_exporter's: an FS handle rooted where --path.procfs
// and --path.sysfs point, one file per source, each with its table test
// and fuzz target.
//
// Every file is read through hostfile, the one bounded, non-blocking,
// type-checked way of opening a host file: a FIFO or device where a
// regular file belongs is refused unread, and a file over its read bound
// is an error rather than a silent cut.
package hostfs
