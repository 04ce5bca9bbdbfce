package collectors

import (
	"runtime"
	"sync"
	"sync/atomic"
	"weak"
)

// The NCCL_DEBUG_FILE paths live beside Shared rather than in it so that
// shared.go stays the GPU collector's; the slot is looked up by a weak key
// and removed when its Shared is collected, so test instances do not pile up.
var ncclLogFileSlots sync.Map // weak.Pointer[Shared] → *atomic.Pointer[[]string]

func (s *Shared) ncclLogFileSlot() *atomic.Pointer[[]string] {
	key := weak.Make(s)
	if v, ok := ncclLogFileSlots.Load(key); ok {
		return v.(*atomic.Pointer[[]string])
	}
	v, loaded := ncclLogFileSlots.LoadOrStore(key, new(atomic.Pointer[[]string]))
	if !loaded {
		runtime.AddCleanup(s, func(k weak.Pointer[Shared]) { ncclLogFileSlots.Delete(k) }, key)
	}
	return v.(*atomic.Pointer[[]string])
}

// SetNCCLLogFiles publishes the NCCL debug log files of the processes running
// now: each process's NCCL_DEBUG_FILE with %h and %p expanded
// (nccl.ExpandDebugFile), relative paths resolved against the process's
// working directory, and reachable from the daemon (through
// <proc>/<pid>/root for a process in another mount namespace). The process
// discovery collector calls it after every sample; the nccl collector
// follows these files besides its --collector.nccl.log-glob matches.
func (s *Shared) SetNCCLLogFiles(paths []string) {
	p := append([]string(nil), paths...)
	s.ncclLogFileSlot().Store(&p)
}

// NCCLLogFiles returns the paths last published, or nil.
func (s *Shared) NCCLLogFiles() []string {
	if p := s.ncclLogFileSlot().Load(); p != nil {
		return *p
	}
	return nil
}
