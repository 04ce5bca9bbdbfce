package nccl

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
)

// Where a process's NCCL writes its debug log (NCCL_DEBUG_FILE).

// WritesDebugFile is whether NCCL opens NCCL_DEBUG_FILE at this
// NCCL_DEBUG level: it does for every level above VERSION.
func WritesDebugFile(level string) bool {
	for _, l := range []string{"WARN", "INFO", "ABORT", "TRACE"} {
		if strings.EqualFold(level, l) {
			return true
		}
	}
	return false
}

// DebugFileName resolves where NCCL writes a process's log: the pattern
// expanded with the host name and PID NCCL sees, a relative path taken
// from the process's working directory (NCCL opens the file from there):
// the absolute, clean path as the process sees it, which a reader reaches
// through <proc>/<pid>/root when the process lives in another mount
// namespace. It returns an error when the path cannot be known.
func DebugFileName(pattern, hostname string, nspid int, cwd func() (string, error)) (string, error) {
	if hostname == "" && debugFileUsesHost(pattern) {
		return "", errors.New("NCCL_DEBUG_FILE uses %h and the process's host name is unknown")
	}
	p := ExpandDebugFile(pattern, hostname, nspid)
	if !filepath.IsAbs(p) {
		wd, err := cwd()
		if err != nil {
			return "", fmt.Errorf("NCCL_DEBUG_FILE is relative and the working directory is unreadable: %w", err)
		}
		p = filepath.Join(wd, p)
	}
	return filepath.Clean(p), nil
}

// debugFileUsesHost is whether an NCCL_DEBUG_FILE pattern contains %h, read
// as ExpandDebugFile reads it.
func debugFileUsesHost(pattern string) bool {
	for i := 0; i+1 < len(pattern); i++ {
		if pattern[i] == '%' {
			if pattern[i+1] == 'h' {
				return true
			}
			i++
		}
	}
	return false
}
