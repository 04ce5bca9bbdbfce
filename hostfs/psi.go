package hostfs

import (
	"bytes"
	"fmt"
	"strconv"
)

// psiFileBytes bounds a pressure file: two lines of some 70 bytes.
const psiFileBytes = 4 << 10

// PSILine is one line of a pressure file: the share of time stalled over
// the last 10, 60 and 300 s, in percent, and the stalled time since boot.
type PSILine struct {
	Avg10, Avg60, Avg300 float64
	TotalMicroseconds    uint64
}

// PSI is a pressure file (/proc/pressure/<resource>, or a cgroup's
// <resource>.pressure): its some line, and its full line where it has one.
type PSI struct {
	Some, Full       PSILine
	HasSome, HasFull bool
}

// PSI reads /proc/pressure/<resource>.
func (f FS) PSI(resource string) (PSI, error) {
	return readParsed(f, f.ProcPath("pressure", resource), psiFileBytes, ParsePSI)
}

// ParsePSI parses a pressure file in place ("some avg10=2.50 avg60=1.80
// avg300=1.20 total=987654321" and a full line): read every second per
// resource, where procfs's parser scans each line with fmt. An average
// outside 0–100 (the kernel prints percentages) or a file with neither
// line is an error.
func ParsePSI(path string, b []byte) (PSI, error) {
	var p PSI
	for n := 1; len(b) > 0; n++ {
		var line []byte
		line, b = nextLine(b)
		kind, rest := nextField(line)
		var dst *PSILine
		switch string(kind) {
		case "some":
			dst, p.HasSome = &p.Some, true
		case "full":
			dst, p.HasFull = &p.Full, true
		case "":
			continue
		default:
			return PSI{}, fmt.Errorf("%s: line %d: neither some nor full: %s", path, n, Quote(string(line)))
		}
		seen := 0
		for {
			var field []byte
			if field, rest = nextField(rest); len(field) == 0 {
				break
			}
			k, v, ok := bytes.Cut(field, []byte("="))
			if !ok {
				return PSI{}, fmt.Errorf("%s: line %d: %s is not key=value", path, n, Quote(string(field)))
			}
			if string(k) == "total" {
				t, ok := parseUint(v)
				if !ok {
					return PSI{}, fmt.Errorf("%s: line %d: total %s is not a number", path, n, Quote(string(v)))
				}
				dst.TotalMicroseconds, seen = t, seen+1
				continue
			}
			var avg *float64
			switch string(k) {
			case "avg10":
				avg = &dst.Avg10
			case "avg60":
				avg = &dst.Avg60
			case "avg300":
				avg = &dst.Avg300
			default:
				continue // a field a later kernel may add
			}
			x, err := strconv.ParseFloat(string(v), 64)
			if err != nil || !(x >= 0 && x <= 100) {
				return PSI{}, fmt.Errorf("%s: line %d: %s %s is not a percentage", path, n, k, Quote(string(v)))
			}
			*avg, seen = x, seen+1
		}
		if seen != 4 {
			return PSI{}, fmt.Errorf("%s: line %d: %d of avg10, avg60, avg300 and total (truncated?)", path, n, seen)
		}
	}
	if !p.HasSome && !p.HasFull {
		return PSI{}, fmt.Errorf("%s: no some or full line (truncated?)", path)
	}
	return p, nil
}
