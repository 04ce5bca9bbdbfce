package collectors

import (
	"fmt"
	"strconv"
	"strings"
)

// Helpers shared by the parsers of /proc and /sys files.

// maxQuotedInput bounds the text of a file quoted in a parse error: errors
// are logged, exported and shown, and a file that is not what it should be
// may hold anything.
const maxQuotedInput = 64

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
