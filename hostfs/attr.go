package hostfs

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/gpudiag/gpudiag/hostfile"
)

// Helpers shared by the parsers of /proc and /sys files, here and in the
// collectors that parse what they read themselves.

// SysfsAttrBytes bounds the read of one sysfs attribute: the kernel prints
// at most a page (4 KiB; 64 KiB on arm64 kernels built with 64 KiB pages).
// More means the tree under --path.sysfs is not the kernel's.
const SysfsAttrBytes = 64 << 10

// ReadAttr reads one sysfs attribute (or a one-value procfs file such as
// a sysctl) through hostfile: a FIFO or device is refused unread, and more
// than SysfsAttrBytes is an error.
func ReadAttr(path string) ([]byte, error) {
	return hostfile.Read(path, SysfsAttrBytes)
}

// readAttr is ReadAttr through f's held files (see Holding).
func (f FS) readAttr(path string) ([]byte, error) {
	return f.readWhole(path, SysfsAttrBytes)
}

// maxQuotedInput bounds the text of a file quoted in a parse error: errors
// are logged, exported and shown, and a file that is not what it should be
// may hold anything.
const maxQuotedInput = 64

// WithPath prefixes a read error with the path, unless it names it
// already (a file over its read bound).
func WithPath(path string, err error) error {
	if le := (*hostfile.LimitError)(nil); errors.As(err, &le) {
		return err
	}
	return fmt.Errorf("%s: %w", path, err)
}

// Quote quotes at most maxQuotedInput bytes of s for an error.
func Quote(s string) string {
	if len(s) > maxQuotedInput {
		return strconv.Quote(s[:maxQuotedInput]) + "..."
	}
	return strconv.Quote(s)
}

// The parsers of one-value sysfs attributes, which the kernel prints as one
// value and a newline, take the bytes read so that every collector checks
// an attribute the same way.

// ParseUintAttr parses a decimal counter or size (statistics/rx_bytes,
// queue/read_ahead_kb).
func ParseUintAttr(path string, b []byte) (uint64, error) {
	s := strings.TrimSpace(string(b))
	v, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%s: not an unsigned integer: %s", path, Quote(s))
	}
	return v, nil
}

// ParseNUMANodeAttr parses a device's numa_node: its node, or -1 when the
// platform does not say. The node becomes a label value, so anything the
// kernel could not have printed is refused.
func ParseNUMANodeAttr(path string, b []byte) (int, error) {
	s := strings.TrimSpace(string(b))
	n, err := strconv.Atoi(s)
	if err != nil || n < -1 || n >= MaxListID {
		return -1, fmt.Errorf("%s: not a NUMA node: %s", path, Quote(s))
	}
	return n, nil
}

// ParseHexAttr parses a PCI ID attribute (vendor, device, class): 0x and
// at most 32 bits of hexadecimal.
func ParseHexAttr(path string, b []byte) (uint64, error) {
	s := strings.TrimSpace(string(b))
	v, err := strconv.ParseUint(strings.TrimPrefix(s, "0x"), 16, 32)
	if err != nil {
		return 0, fmt.Errorf("%s: not a hexadecimal ID: %s", path, Quote(s))
	}
	return v, nil
}
