package nccl

// Bounds on what one log may hold, whatever it contains (see the package
// documentation for the memory they add up to). A log is one file, which
// may interleave several processes (a launcher capturing every rank's
// stdout); the per-process bounds apply to each.
const (
	MaxProcesses       = 64   // distinct host:pid in one log; later ones are counted, not kept
	MaxComms           = 32   // communicators per process; ended ones are forgotten first
	MaxConnections     = 1024 // distinct (comm, channel, rank, peer, direction) kept to count each connection once
	MaxPeerLinks       = 256  // distinct (comm, rank, peer, transport) reported per process
	MaxPaths           = 16   // distinct "via ..." strings per process
	MaxEnv             = 64   // environment overrides per process
	MaxEnvValueBytes   = 128  // longer values are cut
	MaxWarnings        = 32   // distinct warning texts per process; the rest only count
	MaxWarningBytes    = 256  // warning texts are cut to this
	MaxVersions        = 4    // NCCL versions per process (a second one already means trouble)
	MaxNetDevices      = 16   // NICs and interfaces per process
	MaxGDRNotes        = 4    // "GPU Direct RDMA Disabled ..." lines per process
	maxNameBytes       = 64   // environment variable and network names, "via" texts
	maxCommIDBytes     = 32   // "0x" and 16 hex digits
	maxEvidenceEntries = 3
)

// Log is the state machine for one NCCL debug log: Feed it lines in order,
// read Summaries at any time. It is not safe for concurrent use.
type Log struct {
	procs        map[procKey]*procState
	order        []*procState
	bareVersions []string
	lines        uint64
	ncclLines    uint64
	droppedProcs uint64
}

type procKey struct {
	host string
	pid  int
}

// NewLog returns an empty log state.
func NewLog() *Log { return &Log{procs: map[procKey]*procState{}} }

// Reset forgets everything, for a log file that was replaced or truncated:
// its new content is a new job's.
func (l *Log) Reset() { *l = *NewLog() }

// Lines is the number of lines fed.
func (l *Log) Lines() uint64 { return l.lines }

// NCCLLines is the number of lines fed that were NCCL's.
func (l *Log) NCCLLines() uint64 { return l.ncclLines }

// DroppedProcesses counts processes beyond MaxProcesses, whose lines were
// ignored.
func (l *Log) DroppedProcesses() uint64 { return l.droppedProcs }

// Versions lists the bare "NCCL version" lines NCCL prints without a prefix
// (NCCL_DEBUG=VERSION or WARN), which no process can be credited with.
func (l *Log) Versions() []string { return append([]string(nil), l.bareVersions...) }

// Feed consumes one line (without its newline).
func (l *Log) Feed(b []byte) {
	l.lines++
	line, ok := ParseLine(b)
	if !ok {
		return
	}
	l.ncclLines++
	if line.Level == LevelVersion {
		if v := versionOf(line.Message); v != "" {
			l.bareVersions = addBounded(l.bareVersions, v, MaxVersions)
		}
		return
	}
	key := procKey{line.Host, line.PID}
	p := l.procs[key]
	if p == nil {
		if len(l.procs) >= MaxProcesses {
			l.droppedProcs++
			return
		}
		p = newProcState(line.Host, line.PID)
		l.procs[key] = p
		l.order = append(l.order, p)
	}
	p.feed(&line, l.lines)
}
