package collectors

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/gpudiag/gpudiag/hostfile"
)

// Helpers shared by the parsers of /proc and /sys files.

// sysfsAttrBytes bounds the read of one sysfs attribute: the kernel prints
// at most a page (4 KiB; 64 KiB on arm64 kernels built with 64 KiB pages).
// More means the tree under --path.sysfs is not the kernel's.
const sysfsAttrBytes = 64 << 10

// readSysAttr reads one sysfs attribute (or a one-value procfs file such as
// a sysctl) through hostfile: a FIFO or device is refused unread, and more
// than sysfsAttrBytes is an error.
func readSysAttr(path string) ([]byte, error) {
	return hostfile.Read(path, sysfsAttrBytes)
}

// maxQuotedInput bounds the text of a file quoted in a parse error: errors
// are logged, exported and shown, and a file that is not what it should be
// may hold anything.
const maxQuotedInput = 64

// withPath prefixes a read error with the path, unless it names it
// already (a file over its read bound).
func withPath(path string, err error) error {
	if le := (*hostfile.LimitError)(nil); errors.As(err, &le) {
		return err
	}
	return fmt.Errorf("%s: %w", path, err)
}

// quoteInput quotes at most maxQuotedInput bytes of s for an error.
func quoteInput(s string) string {
	if len(s) > maxQuotedInput {
		return strconv.Quote(s[:maxQuotedInput]) + "..."
	}
	return strconv.Quote(s)
}

// The parsers of one-value sysfs attributes, which the kernel prints as one
// value and a newline, take the bytes read so that every collector checks
// an attribute the same way.

// parseUintAttr parses a decimal counter or size (statistics/rx_bytes,
// queue/read_ahead_kb).
func parseUintAttr(path string, b []byte) (uint64, error) {
	s := strings.TrimSpace(string(b))
	v, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%s: not an unsigned integer: %s", path, quoteInput(s))
	}
	return v, nil
}

// parseNUMANodeAttr parses a device's numa_node: its node, or -1 when the
// platform does not say. The node becomes a label value, so anything the
// kernel could not have printed is refused.
func parseNUMANodeAttr(path string, b []byte) (int, error) {
	s := strings.TrimSpace(string(b))
	n, err := strconv.Atoi(s)
	if err != nil || n < -1 || n >= maxListID {
		return -1, fmt.Errorf("%s: not a NUMA node: %s", path, quoteInput(s))
	}
	return n, nil
}

// parseHexAttr parses a PCI ID attribute (vendor, device, class): 0x and
// at most 32 bits of hexadecimal.
func parseHexAttr(path string, b []byte) (uint64, error) {
	s := strings.TrimSpace(string(b))
	v, err := strconv.ParseUint(strings.TrimPrefix(s, "0x"), 16, 32)
	if err != nil {
		return 0, fmt.Errorf("%s: not a hexadecimal ID: %s", path, quoteInput(s))
	}
	return v, nil
}
