package collectors

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"syscall"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpudiag/gpudiag/engine"
	"github.com/gpudiag/gpudiag/hostfile"
)

// NCCLLogFile is an NCCL debug log a running process names.
type NCCLLogFile struct {
	// Path is where the daemon reaches the file, as shown: Root joined
	// with Name.
	Path string
	// Root, when set, is the process's root directory (<proc>/<pid>/root,
	// for a process in another mount namespace) and Name the path inside
	// it: the path is resolved there, its symlinks included, never
	// against the daemon's root. Without Root, Name is Path.
	Root, Name string
	// OwnerUIDs, when CheckOwner is set, are the user IDs of the process
	// that names the file (real, effective, saved, filesystem): the file
	// is followed only when one of them owns it, as a log NCCL created
	// for the process is. The daemon reads as root; a user must not be
	// able to make it read a file that user could not. With CheckOwner
	// and no IDs (the process's status was unreadable) nothing is
	// followed.
	CheckOwner bool
	OwnerUIDs  []uint32
}

// open opens the log for reading: see hostfile.OpenInRoot and
// hostfile.Untrusted, and OwnerUIDs.
func (l NCCLLogFile) open(string) (*os.File, error) {
	var f *os.File
	var err error
	if l.Root != "" {
		f, err = hostfile.OpenInRoot(l.Root, l.Name)
	} else {
		f, err = hostfile.Untrusted(l.Path)
	}
	if err != nil || !l.CheckOwner {
		return f, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	switch {
	case !ok:
		err = errors.New("file owner unknown")
	case len(l.OwnerUIDs) == 0:
		err = fmt.Errorf("owned by uid %d, and the user of the process that names it is unknown: not followed", st.Uid)
	case !slices.Contains(l.OwnerUIDs, st.Uid):
		err = fmt.Errorf("owned by uid %d, not by the user (uid %d) of the process that names it: not followed", st.Uid, l.OwnerUIDs[0])
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("%s: %w", l.Path, err)
	}
	return f, nil
}

// SetNCCLLogFiles publishes the NCCL debug log files of the processes running
// now: each process's NCCL_DEBUG_FILE with %h and %p expanded
// (nccl.ExpandDebugFile), relative paths resolved against the process's
// working directory, and reachable from the daemon (through
// <proc>/<pid>/root for a process in another mount namespace). The process
// discovery collector calls it after every sample; the nccl collector
// follows these files besides its --collector.nccl.log-glob matches.
func (s *Shared) SetNCCLLogFiles(files []NCCLLogFile) {
	p := append([]NCCLLogFile(nil), files...)
	s.ncclLogFiles.Store(&p)
}

// NCCLLogFiles returns the files last published, or nil.
func (s *Shared) NCCLLogFiles() []NCCLLogFile {
	if p := s.ncclLogFiles.Load(); p != nil {
		return *p
	}
	return nil
}

// The metrics of both NCCL collectors (nccl, from the debug logs;
// ncclproc, from /proc) share the gpudiag_nccl_ prefix and its label rules.

// ncclLabelValueBytes bounds an override's value as a label.
const ncclLabelValueBytes = 64

func ncclDesc(name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc(engine.Namespace+"_nccl_"+name, help, labels, nil)
}

// ncclTruncateLabel cuts a value on a rune boundary (values are valid UTF-8
// already: the parser made them so).
func ncclTruncateLabel(v string) string {
	if len(v) <= ncclLabelValueBytes {
		return v
	}
	n := ncclLabelValueBytes
	for n > 0 && v[n]&0xc0 == 0x80 {
		n--
	}
	return v[:n]
}
