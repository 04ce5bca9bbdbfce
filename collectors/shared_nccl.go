package collectors

// SetNCCLLogFiles publishes the NCCL debug log files of the processes running
// now: each process's NCCL_DEBUG_FILE with %h and %p expanded
// (nccl.ExpandDebugFile), relative paths resolved against the process's
// working directory, and reachable from the daemon (through
// <proc>/<pid>/root for a process in another mount namespace). The process
// discovery collector calls it after every sample; the nccl collector
// follows these files besides its --collector.nccl.log-glob matches.
func (s *Shared) SetNCCLLogFiles(paths []string) {
	p := append([]string(nil), paths...)
	s.ncclLogFiles.Store(&p)
}

// NCCLLogFiles returns the paths last published, or nil.
func (s *Shared) NCCLLogFiles() []string {
	if p := s.ncclLogFiles.Load(); p != nil {
		return *p
	}
	return nil
}
