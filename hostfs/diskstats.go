package hostfs

import (
	"bytes"
	"fmt"
	"math"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/prometheus/procfs"
	"github.com/prometheus/procfs/blockdevice"
)

// diskstatsBytes bounds the read of /proc/diskstats: a line is 40 to 200
// bytes, so this is some 20,000 devices, and DiskstatsMaxDevices bounds the
// devices parsed. A node with a thousand multipath LUNs (four sd paths and a
// dm head each) lists 5,000. A file past either bound fails the sample: a
// 100 MB file once turned into 1.6 million series and 7.6 GB of memory.
const (
	diskstatsBytes      = 4 << 20
	DiskstatsMaxDevices = 16384
)

// Diskstats reads /proc/diskstats once and parses it; see
// ParseDiskstats.
func (f FS) Diskstats() ([]blockdevice.Diskstats, error) {
	return readParsed(f, f.ProcPath("diskstats"), diskstatsBytes, ParseDiskstats)
}

// ParseDiskstats parses /proc/diskstats as read once: the checks and the
// values come from the same bytes, so a file that changes between two reads
// cannot pass the check and then be parsed cut short. Per device: major and
// minor numbers, name and 11 counters, 15 since 4.18 (discards), 17 since
// 5.5 (flushes); fields a later kernel appends are ignored. A line too
// short to be diskstats is an error: procfs would drop it without a word
// and the device would vanish. So is a device listed twice (the kernel
// lists each once; two readings of one name would be two series, or a
// counter stepping back) and more than DiskstatsMaxDevices devices.
func ParseDiskstats(path string, raw []byte) ([]blockdevice.Diskstats, error) {
	var out []blockdevice.Diskstats
	lineOf := map[string]int{}
	n := 0
	for line := range bytes.SplitSeq(raw, []byte("\n")) {
		n++
		fields := bytes.Fields(line)
		if len(fields) == 0 {
			continue
		}
		d, err := parseDiskstatsLine(fields)
		if err != nil {
			return nil, fmt.Errorf("%s: line %d: %w", path, n, err)
		}
		if first, dup := lineOf[d.DeviceName]; dup {
			return nil, fmt.Errorf("%s: line %d: device %s listed again (first on line %d)", path, n, Quote(d.DeviceName), first)
		}
		if len(out) == DiskstatsMaxDevices {
			return nil, fmt.Errorf("%s: line %d: more than %d devices", path, n, DiskstatsMaxDevices)
		}
		lineOf[d.DeviceName] = n
		out = append(out, d)
	}
	return out, nil
}

// Fields of a diskstats line: before 4.18, and all that are read.
const (
	DiskstatsMinFields = 14
	DiskstatsMaxFields = 20
)

func parseDiskstatsLine(fields [][]byte) (blockdevice.Diskstats, error) {
	var d blockdevice.Diskstats
	if len(fields) < DiskstatsMinFields {
		return d, fmt.Errorf("%d fields, want at least %d (truncated?)", len(fields), DiskstatsMinFields)
	}
	fields = fields[:min(len(fields), DiskstatsMaxFields)]
	major, errMajor := strconv.ParseUint(string(fields[0]), 10, 32)
	minor, errMinor := strconv.ParseUint(string(fields[1]), 10, 32)
	if errMajor != nil || errMinor != nil {
		return d, fmt.Errorf("bad device number %s %s", Quote(string(fields[0])), Quote(string(fields[1])))
	}
	// The name becomes a label value and a path under /sys/block.
	name := string(fields[2])
	if !utf8.ValidString(name) || strings.Contains(name, "/") || name == "." || name == ".." {
		return d, fmt.Errorf("bad device name %s", Quote(name))
	}
	d.MajorNumber, d.MinorNumber, d.DeviceName = uint32(major), uint32(minor), name
	counters := []*uint64{
		&d.ReadIOs, &d.ReadMerges, &d.ReadSectors, &d.ReadTicks,
		&d.WriteIOs, &d.WriteMerges, &d.WriteSectors, &d.WriteTicks,
		&d.IOsInProgress, &d.IOsTotalTicks, &d.WeightedIOTicks,
		&d.DiscardIOs, &d.DiscardMerges, &d.DiscardSectors, &d.DiscardTicks,
		&d.FlushRequestsCompleted, &d.TimeSpentFlushing,
	}
	for i, f := range fields[3:] {
		v, err := strconv.ParseUint(string(f), 10, 64)
		if err != nil {
			return d, fmt.Errorf("%s: field %d is not a counter: %s", Quote(name), i+4, Quote(string(f)))
		}
		*counters[i] = v
	}
	for _, sectors := range []uint64{d.ReadSectors, d.WriteSectors, d.DiscardSectors} {
		if sectors > math.MaxUint64/procfs.SectorSize {
			return d, fmt.Errorf("%s: %d sectors overflow a 64-bit byte count", Quote(name), sectors)
		}
	}
	d.IoStatsCount = len(fields)
	return d, nil
}
