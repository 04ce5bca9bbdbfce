package hostfs

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"path/filepath"
	"strings"
)

// procMapsBytes bounds one maps read: at the default vm.max_map_count
// (65530) a whole map is under 10 MiB. Past the bound the read fails
// rather than missing a libnccl mapped late in the file.
const procMapsBytes = 32 << 20

// MappedFile is one libnccl file of a memory map.
type MappedFile struct {
	Path string
	// Deleted: the file was unlinked after it was mapped.
	Deleted bool
}

// NCCLMaps returns the libnccl files a process maps, from
// /proc/<pid>/maps; see ParseNCCLMaps.
func (f FS) NCCLMaps(pid int) ([]MappedFile, error) {
	return streamParsed(f.pidPath(pid, "maps"), procMapsBytes, ParseNCCLMaps)
}

// ParseNCCLMaps returns the distinct libnccl files (base name libnccl.so,
// libnccl.so.2, libnccl.so.2.28.9...) of a /proc/<pid>/maps, in map
// order. Lines are "start-end perms offset dev inode path"; the path may
// contain spaces (the kernel escapes only newlines) and ends in
// " (deleted)" when the file was unlinked after it was mapped. Only lines
// that mention libnccl are parsed: procfs's ProcMaps would build a record
// for each of the thousands of mappings of every process on the node.
func ParseNCCLMaps(r io.Reader, name string) ([]MappedFile, error) {
	var out []MappedFile
	sc := bufio.NewScanner(r)
	// A path is at most PATH_MAX (4096) bytes.
	sc.Buffer(make([]byte, 0, 4096), 16<<10)
	line := 0
	marker := []byte("libnccl")
	for sc.Scan() {
		line++
		b := sc.Bytes()
		if !bytes.Contains(b, marker) {
			continue
		}
		path, ok := mapsLinePath(b)
		if !ok {
			return nil, fmt.Errorf("%s:%d: malformed mapping (truncated line?)", name, line)
		}
		deleted := false
		if p, cut := strings.CutSuffix(path, " (deleted)"); cut {
			path, deleted = p, true
		}
		if !strings.HasPrefix(filepath.Base(path), "libnccl.so") || !strings.HasPrefix(path, "/") {
			continue
		}
		dup := false
		for _, m := range out {
			dup = dup || m.Path == path
		}
		if !dup {
			out = append(out, MappedFile{Path: path, Deleted: deleted})
		}
	}
	if err := sc.Err(); err != nil {
		return nil, WithPath(name, err)
	}
	return out, nil
}

// mapsLinePath returns the path field of a maps line: what follows the
// five fixed fields and the padding after them.
func mapsLinePath(line []byte) (string, bool) {
	rest := line
	for field := 0; field < 5; field++ {
		rest = bytes.TrimLeft(rest, " ")
		i := bytes.IndexByte(rest, ' ')
		if i <= 0 {
			return "", false
		}
		if field == 0 && !bytes.Contains(rest[:i], []byte{'-'}) {
			return "", false
		}
		rest = rest[i:]
	}
	return string(bytes.TrimLeft(rest, " ")), true
}
