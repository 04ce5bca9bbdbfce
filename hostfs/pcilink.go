package hostfs

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
)

// PCIeLink is what a PCIe function's link trained to against what it can
// do: the transfer rate in GT/s and the lanes (sysfs current_link_speed,
// max_link_speed, current_link_width, max_link_width).
type PCIeLink struct {
	CurrentGTs, MaxGTs     float64
	CurrentWidth, MaxWidth int
}

// TrainedDown is whether the link runs below its rate or with fewer lanes
// than the function supports: a slot that is narrower or older than the
// card, a riser or cable that lost lanes, or a link that retrained after
// errors.
func (l PCIeLink) TrainedDown() bool {
	return l.CurrentGTs < l.MaxGTs || l.CurrentWidth < l.MaxWidth
}

// ReadPCIeLink reads the link attributes of a PCI function's directory
// (/sys/bus/pci/devices/<bdf>, or the device path PCILocation resolves).
// ok is false when the function has no PCIe link to judge: the files are
// absent (conventional PCI, a virtual function, a VM's emulated bus), or
// the kernel prints "Unknown" or a width of 0 (a link that is down).
func ReadPCIeLink(dir string) (link PCIeLink, ok bool, err error) {
	read := func(name string) (string, bool, error) {
		b, err := ReadAttr(filepath.Join(dir, name))
		if errors.Is(err, fs.ErrNotExist) {
			return "", false, nil
		}
		if err != nil {
			return "", false, err
		}
		return strings.TrimSpace(string(b)), true, nil
	}
	var vals [4]string
	for i, name := range []string{"current_link_speed", "max_link_speed", "current_link_width", "max_link_width"} {
		v, present, err := read(name)
		if err != nil || !present {
			return PCIeLink{}, false, err
		}
		vals[i] = v
	}
	var okCur, okMax bool
	link.CurrentGTs, okCur = ParsePCIeSpeed(vals[0])
	link.MaxGTs, okMax = ParsePCIeSpeed(vals[1])
	var errCur, errMax error
	link.CurrentWidth, errCur = strconv.Atoi(vals[2])
	link.MaxWidth, errMax = strconv.Atoi(vals[3])
	if !okCur || !okMax || errCur != nil || errMax != nil || link.CurrentWidth <= 0 || link.MaxWidth <= 0 ||
		link.CurrentWidth > 32 || link.MaxWidth > 32 {
		return PCIeLink{}, false, nil
	}
	return link, true, nil
}

// ParsePCIeSpeed parses a link speed as the kernel prints it
// (drivers/pci/pci-sysfs.c, pci_speed_string): "16.0 GT/s PCIe",
// "8.0 GT/s PCIe", "2.5 GT/s PCIe", and "16 GT/s" or "8 GT/s" from older
// kernels. "Unknown" and anything else are not a speed.
func ParsePCIeSpeed(s string) (float64, bool) {
	num, rest, found := strings.Cut(strings.TrimSpace(s), " GT/s")
	if !found || (rest != "" && rest != " PCIe") {
		return 0, false
	}
	v, err := strconv.ParseFloat(num, 64)
	if err != nil || !(v > 0 && v <= 1024) { // NaN fails both
		return 0, false
	}
	return v, true
}

// ParseInfiniBandRate reads the signalling rate of an RDMA port's rate file
// (drivers/infiniband/core/sysfs.c rate_show, "%d%s Gb/sec (%dX%s)":
// "400 Gb/sec (4X NDR)", "2.5 Gb/sec (1X SDR)") in bytes per second, one
// direction.
func ParseInfiniBandRate(s string) (float64, error) {
	num, _, found := strings.Cut(strings.TrimSpace(s), " Gb/sec")
	v, err := strconv.ParseFloat(num, 64)
	if !found || err != nil || !(v >= 0 && v <= 1e5) { // NaN fails both
		return 0, fmt.Errorf("not an InfiniBand rate: %s", Quote(s))
	}
	return v * 1e9 / 8, nil
}
