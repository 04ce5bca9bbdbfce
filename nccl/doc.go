// Package nccl reads NCCL_DEBUG=INFO logs to tell which path a job's
// collectives took and whether it is slower than the one the node offers.
//
// Three parts, all plain Go with no collector dependency:
//
//   - ParseLine recognises NCCL's debug line format (host:pid:tid [dev] NCCL
//     INFO|WARN|TRACE ..., and the bare "NCCL version" line) behind whatever
//     launchers and log pipelines put before it (mpirun's "[1,26]<stdout>:",
//     srun's "0: ", ISO timestamps, CloudWatch's columns, a Markdown quote),
//     and lines whose prefix a poster cut away ("[0] NCCL INFO ..."); it
//     rejects everything else.
//   - Log is a state machine fed one line at a time. Per process (host, pid)
//     it keeps the NCCL versions, the communicators (rank, nranks, device,
//     PCI bus ID from the "Init START/COMPLETE" lines), the connections by
//     transport class from the "Channel/Ring ... via ..." lines, the ranks
//     it drives and those it reaches over P2P or SHM, the chosen network
//     and NICs (NCCL's IB and sockets, HPC-X's IBext, aws-ofi-nccl), the
//     address it bootstrapped on, GPUDirect RDMA notes, environment
//     overrides, warnings and the topology's NVLinks, in the wording of NCCL
//     2.3 to 2.28. Summary.Fallbacks derives the slower paths taken, each
//     with the path taken, the one expected and the lines that say so.
//   - HostIDs and Locality tell hosts apart by more than their name
//     (bootstrap address, a rank or GPU two processes cannot share) and say
//     which ranks share a node; Analyze reads a whole log into the Report
//     `gpudiag nccl` prints.
//   - Tailer follows one file through polls (no goroutine): rotation,
//     truncation, partial and overlong lines, late and vanished files.
//     ExpandDebugFile expands NCCL_DEBUG_FILE's %h and %p as NCCL does.
//     ReadLog reads a saved log whole, bounded in bytes and time.
//
// Unknown lines are ignored, and no input makes the parser panic or grow
// without bound (FuzzParseLine and FuzzTailer check both). The bounds are
// the Max* constants: per process at most MaxComms communicators,
// MaxConnections distinct connections, MaxPeerLinks peer links, MaxPaths
// transport texts, MaxEnv overrides of MaxEnvValueBytes, MaxWarnings
// distinct warnings of MaxWarningBytes (all counted past the bound), which
// is under 100 KiB; per log at most MaxProcesses processes (about 6 MiB at
// worst, a few KiB for a real rank's log); per Tailer one partial line of
// at most its line limit (DefaultMaxLineBytes) and a pooled 64 KiB read
// buffer.
package nccl
