package hostfs

import (
	"bytes"
	"fmt"
	"path/filepath"
	"strings"
	"unicode/utf8"

	"github.com/gpudiag/gpudiag/hostfile"
)

// hostnameBytes bounds an /etc/hostname read through a process's root:
// HOST_NAME_MAX is 64, and the file may hold comments after it.
const hostnameBytes = 4 << 10

// ProcRoot is /proc/<pid>/root, the process's root directory: the way to
// the files it sees, through ReadHostname and PipNCCLVersion.
func (f FS) ProcRoot(pid int) string { return f.pidPath(pid, "root") }

// ReadHostname reads the first line of the /etc/hostname inside root,
// a process's root directory. The process's user controls that file: it
// may be a FIFO (a blocking open would wait for a writer for ever), a
// device, a huge file, or a symlink to a host file (resolved inside root,
// it cannot reach one).
func ReadHostname(root string) (string, error) {
	path := filepath.Join(root, "etc", "hostname")
	b, err := hostfile.ReadInRoot(root, "/etc/hostname", hostnameBytes)
	if err != nil {
		return "", err
	}
	line, _, _ := bytes.Cut(b, []byte{'\n'})
	host := strings.TrimSpace(string(line))
	if !utf8.ValidString(host) || strings.ContainsAny(host, "\x00 \t") {
		return "", fmt.Errorf("%s: not a host name", path)
	}
	return host, nil
}
