package hostfs

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"slices"
)

// /proc/net/dev, the counters of an interface whose /sys/class/net/<if>
// has no statistics directory (node_exporter's and procfs's fixture trees;
// a sysfs a container runtime masks in part). sysfs stays the source (see
// netCounters): this file shows the network namespace of whoever reads it.

// procNetDevBytes bounds /proc/net/dev: a line is some 110 to 200 bytes,
// so this is 20,000 interfaces; ProcNetDevMaxInterfaces bounds the lines
// parsed. A file past either fails the read, and the interfaces that
// wanted it keep their counters unmeasured.
const (
	procNetDevBytes         = 4 << 20
	ProcNetDevMaxInterfaces = 16384
)

// procNetDevColumns are the counters of a /proc/net/dev line, receive then
// transmit, as its header names them.
const procNetDevColumns = 16

// ProcNetDev reads the host's /proc/net/dev: that of PID 1 (the host's
// init, in the host's network namespace, the one the host's /sys shows),
// or, where <proc>/1/net/dev is not there (a fixture tree), <proc>/net/dev.
// Only the counters sysfs keeps under statistics/ are set; CarrierChanges
// is not in the file.
func (f FS) ProcNetDev() (map[string]NetCounters, error) {
	devs, err := readParsed(f, f.ProcPath("1", "net", "dev"), procNetDevBytes, ParseProcNetDev)
	if errors.Is(err, fs.ErrNotExist) {
		devs, err = readParsed(f, f.ProcPath("net", "dev"), procNetDevBytes, ParseProcNetDev)
	}
	return devs, err
}

// ParseProcNetDev parses /proc/net/dev: two header lines, then one
// "name: 16 counters" line per interface (the name padded to six; 2.4
// kernels printed no space after the colon). rx drop counts the missed
// packets too (rx_dropped + rx_missed_errors), where statistics/rx_dropped
// does not. A line of another shape, an interface listed twice (two
// readings of one name would be a counter stepping back) or more than
// ProcNetDevMaxInterfaces is an error naming the file.
func ParseProcNetDev(path string, raw []byte) (map[string]NetCounters, error) {
	out := map[string]NetCounters{}
	n := 0
	for len(raw) > 0 {
		var line []byte
		line, raw = nextLine(raw)
		n++
		if n <= 2 {
			if !bytes.Contains(line, []byte("|")) {
				return nil, fmt.Errorf("%s: line %d: not the header: %s", path, n, Quote(string(line)))
			}
			continue
		}
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		name, counters, ok := bytes.Cut(line, []byte(":"))
		name = bytes.TrimSpace(name)
		if !ok || len(name) == 0 || bytes.ContainsAny(name, " \t") {
			return nil, fmt.Errorf("%s: line %d: want \"name: counters\", got %s", path, n, Quote(string(line)))
		}
		var v [procNetDevColumns]uint64
		rest := counters
		for i := range v {
			var field []byte
			field, rest = nextField(rest)
			var ok bool
			if v[i], ok = parseUint(field); !ok {
				return nil, fmt.Errorf("%s: line %d: %s: counter %d is not a number: %s", path, n, Quote(string(name)), i+1, Quote(string(field)))
			}
		}
		if extra, _ := nextField(rest); len(extra) > 0 {
			return nil, fmt.Errorf("%s: line %d: %s: more than %d counters", path, n, Quote(string(name)), procNetDevColumns)
		}
		if _, dup := out[string(name)]; dup {
			return nil, fmt.Errorf("%s: line %d: interface %s listed again", path, n, Quote(string(name)))
		}
		if len(out) == ProcNetDevMaxInterfaces {
			return nil, fmt.Errorf("%s: line %d: more than %d interfaces", path, n, ProcNetDevMaxInterfaces)
		}
		out[string(name)] = NetCounters{
			ReceiveBytes: v[0], ReceivePackets: v[1], ReceiveErrors: v[2], ReceiveDrops: v[3],
			TransmitBytes: v[8], TransmitPackets: v[9], TransmitErrors: v[10], TransmitDrops: v[11],
		}
	}
	if n < 2 {
		return nil, fmt.Errorf("%s: no header (truncated?)", path)
	}
	return out, nil
}

// LacksStatistics is whether iface lacks a counter that /proc/net/dev has
// (FromProcNetDev).
func LacksStatistics(iface *NetInterface) bool {
	for _, c := range netCounters {
		if c.statistic && slices.Contains(iface.Unmeasured, c.name) {
			return true
		}
	}
	return false
}

// FromProcNetDev sets the statistics counters iface did not have from
// dev, its interface's /proc/net/dev counters, and takes them off its
// Unmeasured: the kernel prints both from the same dev_get_stats.
func FromProcNetDev(iface *NetInterface, dev NetCounters) {
	for _, c := range netCounters {
		if !c.statistic || !slices.Contains(iface.Unmeasured, c.name) {
			continue
		}
		*c.get(&iface.Counters) = *c.get(&dev)
		iface.Unmeasured = slices.DeleteFunc(iface.Unmeasured, func(s string) bool { return s == c.name })
	}
	if len(iface.Unmeasured) == 0 {
		iface.Unmeasured = nil
	}
}
