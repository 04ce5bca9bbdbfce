package hostfs

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"slices"
	"strconv"
)

// procMeminfoBytes bounds /proc/meminfo: some 60 lines, under 8 KiB on
// every kernel.
const procMeminfoBytes = 64 << 10

// Meminfo is the part of /proc/meminfo the analyzers use, in bytes.
type Meminfo struct {
	// Unmeasured names the lines (MeminfoFields) the file did not have
	// (MemAvailable before 3.14), or all of them when there was no file:
	// their fields are 0 and mean nothing.
	Unmeasured     []string
	TotalBytes     uint64
	AvailableBytes uint64
	CachedBytes    uint64
	DirtyBytes     uint64
	WritebackBytes uint64
	SwapTotalBytes uint64
	SwapFreeBytes  uint64
}

// MeminfoFields are the /proc/meminfo lines Meminfo keeps, in file
// order.
var MeminfoFields = []string{"MemTotal", "MemAvailable", "Cached", "Dirty", "Writeback", "SwapTotal", "SwapFree"}

// Meminfo reads the fields of /proc/meminfo the analyzers use. Every
// kernel since 3.14 has all of them; a line the file lacks (MemAvailable
// before 3.14, a container's partial /proc) leaves its field unmeasured
// (Meminfo.Unmeasured), and so does a file that is not there, every
// field. It is parsed here: procfs indexes the second field of every line
// unchecked, and a line cut short (a huge file cut at procfs's 1 MiB)
// panicked inside it.
func (f FS) Meminfo() (Meminfo, error) {
	m, err := readParsed(f, f.ProcPath("meminfo"), procMeminfoBytes, ParseMeminfo)
	if errors.Is(err, fs.ErrNotExist) {
		return Meminfo{Unmeasured: slices.Clone(MeminfoFields)}, nil
	}
	return m, err
}

// ParseMeminfo parses "Name:   value [kB]" lines into the fields kept; a
// line of any other shape is an error naming it, a kept line the file
// lacks is named in Unmeasured.
func ParseMeminfo(path string, raw []byte) (Meminfo, error) {
	var m Meminfo
	fields := map[string]*uint64{
		"MemTotal": &m.TotalBytes, "MemAvailable": &m.AvailableBytes, "Cached": &m.CachedBytes,
		"Dirty": &m.DirtyBytes, "Writeback": &m.WritebackBytes, "SwapTotal": &m.SwapTotalBytes, "SwapFree": &m.SwapFreeBytes,
	}
	seen := map[string]bool{}
	n := 0
	for line := range bytes.SplitSeq(raw, []byte("\n")) {
		n++
		f := bytes.Fields(line)
		if len(f) == 0 {
			continue
		}
		name, isKey := bytes.CutSuffix(f[0], []byte(":"))
		if !isKey || len(name) == 0 || len(f) > 3 || len(f) == 3 && string(f[2]) != "kB" || len(f) < 2 {
			return m, fmt.Errorf("%s: line %d: want \"Name: value [kB]\", got %s", path, n, Quote(string(line)))
		}
		v, err := strconv.ParseUint(string(f[1]), 10, 64)
		if err != nil {
			return m, fmt.Errorf("%s: line %d: %s is not a number: %s", path, n, Quote(string(name)), Quote(string(f[1])))
		}
		dst, kept := fields[string(name)]
		if !kept {
			continue
		}
		if len(f) == 3 {
			if v > math.MaxUint64/1024 {
				return m, fmt.Errorf("%s: line %d: %s overflows a 64-bit byte count", path, n, Quote(string(name)))
			}
			v *= 1024
		}
		*dst = v
		seen[string(name)] = true
	}
	for _, name := range MeminfoFields {
		if !seen[name] {
			m.Unmeasured = append(m.Unmeasured, name)
		}
	}
	return m, nil
}
