package collectors

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/gpudiag/gpudiag/hostfs"
	"github.com/gpudiag/gpudiag/sample"
)

// Facts collectors share. Collector files never call each other: what one
// collector learns that another needs is published here, as one typed field
// of Shared per fact, and read back through Shared's methods. Publishing
// never waits and reading never waits: a reader takes the latest complete
// publication, and each fact says how old a reader lets it be.
//
//	fact             publisher   readers                                        freshness
//	gpus             gpu         gpuprocess, ncclproc, nccl, numa, ebpf, tcp,   the latest, any age
//	                             dataset
//	newGPUProcess    gpu         gpuprocess (its engine.Prompter)               one signal pending at most
//	processTrees     gpuprocess  dataset                                        two gpuprocess intervals
//	processScan      ncclproc    gpuprocess, dataset (parents), tuning (comms)  parents: hostfs.ParentIndexRefresh;
//	                                                                            comms: one tuning interval
//	ncclLogFiles     ncclproc    nccl                                           the latest, any age
//	kernelTCP        ebpf        tcp                                            five sampling intervals
//
// A reader that finds a fact missing or too old does the work itself (walks
// /proc, lists sockets) or goes without: no collector depends on another
// being enabled.
type Shared struct {
	// gpus is each GPU's index, PCI bus ID and processes. The gpu collector
	// publishes it after every sample (publishGPUs); every collector that
	// looks at GPU processes or GPU placement reads it. A reader takes
	// the latest whatever its age: a GPU collector that stopped leaves its
	// last list standing, as the GPUs themselves do.
	gpus atomic.Pointer[[]GPURef]

	// newGPUProcess is signalled (never blocking, one pending at most)
	// when a published GPU lists a process the previous publication did
	// not: the gpuprocess collector reads a new job at once instead of at
	// its tick.
	newGPUProcessOnce sync.Once
	newGPUProcess     chan struct{}

	// processTrees is each GPU process's tree as the gpuprocess collector
	// read it whole at its last sample; the dataset collector takes a tree
	// from it while it is at most two gpuprocess intervals old
	// (ProcessTrees.Tree), so that /proc is walked once, not twice.
	processTrees atomic.Pointer[ProcessTrees]

	// processScan is every process's stat from the ncclproc collector's
	// last complete scan of /proc. gpuprocess and dataset seed their
	// parent indexes from it (seedParents: taken while younger than
	// hostfs.ParentIndexRefresh and newer than the index); the tuning
	// collector takes the programs running from it while it is younger
	// than its own interval.
	processScan atomic.Pointer[ProcessScan]

	// ncclLogFiles are the NCCL debug logs the running processes name,
	// published by the ncclproc collector after every scan and followed
	// by the nccl collector beside its globs. The latest stands whatever
	// its age: a log outlives the scan that found it.
	ncclLogFiles atomic.Pointer[[]NCCLLogFile]

	// kernelTCP is the GPU processes' TCP payload counted by the ebpf
	// collector's programs, published after every sample and withdrawn
	// (nil) when they detach. The tcp collector takes its byte counts from
	// it while it is at most five sampling intervals old, and lists
	// sockets otherwise.
	kernelTCP atomic.Pointer[KernelTCP]
}

// GPURef is what host collectors need to know of a GPU: where it sits on the
// PCI bus (to find its NUMA node and local CPUs in sysfs) and which processes
// run on it (to read their affinity, memory placement and I/O in /proc).
type GPURef struct {
	Index    int
	PCIBusID string // kernel form, 0000:3b:00.0
	PIDs     []uint32
}

// GPUs returns the latest GPUs published, or nil before the first sample.
func (s *Shared) GPUs() []GPURef {
	if p := s.gpus.Load(); p != nil {
		return *p
	}
	return nil
}

// SetGPUs publishes the GPUs; tests call it to stand in for the GPU collector.
func (s *Shared) SetGPUs(g []GPURef) {
	old := map[uint32]bool{}
	for _, r := range s.GPUs() {
		for _, pid := range r.PIDs {
			old[pid] = true
		}
	}
	s.gpus.Store(&g)
	for _, r := range g {
		for _, pid := range r.PIDs {
			if !old[pid] {
				select {
				case s.NewGPUProcesses() <- struct{}{}:
				default: // one pending signal is enough
				}
				return
			}
		}
	}
}

// publishGPUs publishes the GPUs of the gpu collector's sample.
func (s *Shared) publishGPUs(r *sample.GPUs) {
	refs := make([]GPURef, 0, len(r.Devices))
	for _, d := range r.Devices {
		ref := GPURef{Index: d.Index, PCIBusID: d.PCIBusID}
		for _, p := range d.Processes {
			ref.PIDs = append(ref.PIDs, p.PID)
		}
		refs = append(refs, ref)
	}
	s.SetGPUs(refs)
}

// NewGPUProcesses is signalled when a GPU gets a process it did not list at
// the previous publication. It has one reader, the gpuprocess collector.
func (s *Shared) NewGPUProcesses() chan struct{} {
	s.newGPUProcessOnce.Do(func() { s.newGPUProcess = make(chan struct{}, 1) })
	return s.newGPUProcess
}

// ProcessTrees is what the gpuprocess collector found under each GPU
// process at its last sample: the collectors that read files of a GPU
// process's descendants (dataset) take the tree from here instead of
// walking /proc again for it. A collector that finds no tree here, or one
// too old, walks on its own.
type ProcessTrees struct {
	// At is when the sample was taken; Interval is the collector's, so
	// that a reader can tell a tree it will refresh from one it stopped
	// refreshing (disabled, failing).
	At       time.Time
	Interval time.Duration
	// Under maps a GPU process's PID to the processes of its tree, itself
	// first and then its descendants breadth-first. A tree the sample did
	// not read whole (its cap or deadline left processes unread) is not
	// listed.
	Under map[int][]int
}

// Tree returns root's tree when it was read whole by a sample no older
// than two of the collector's intervals at now.
func (t *ProcessTrees) Tree(root int, now time.Time) ([]int, bool) {
	if t == nil || now.Sub(t.At) > 2*t.Interval {
		return nil, false
	}
	procs, ok := t.Under[root]
	return procs, ok
}

// SetProcessTrees publishes the trees of the gpuprocess collector's sample.
func (s *Shared) SetProcessTrees(t *ProcessTrees) { s.processTrees.Store(t) }

// ProcessTrees returns the latest trees published, nil before the first.
func (s *Shared) ProcessTrees() *ProcessTrees { return s.processTrees.Load() }

// ProcessScan is every process's stat as the ncclproc collector's last
// complete scan of /proc read it. The collectors that keep every process's
// parent (hostfs.ParentIndex: gpuprocess, dataset) take their due refresh
// from it instead of reading every process again themselves; without one
// (ncclproc off, failing) they read on their own.
// The tuning collector takes the programs running from it too.
type ProcessScan struct {
	At    time.Time
	Stats map[int]hostfs.TaskStat // by PID; never changed once published
	// Comms holds every command name running (comm: a program's name cut
	// by the kernel to 15 bytes).
	Comms map[string]bool
}

// SetProcessScan publishes a complete scan of every process.
func (s *Shared) SetProcessScan(p *ProcessScan) { s.processScan.Store(p) }

// ProcessScan returns the latest scan published, nil before the first.
func (s *Shared) ProcessScan() *ProcessScan { return s.processScan.Load() }

// seedParents gives ix the latest published scan (ParentIndex.Seed decides
// whether it takes it).
func (s *Shared) seedParents(ix *hostfs.ParentIndex) {
	if p := s.ProcessScan(); p != nil {
		ix.Seed(p.At, p.Stats)
	}
}

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

// The scopes of TCP traffic: to a peer on this node (loopback) or over the
// network. Both the ebpf collector, which counts them, and the tcp
// collector, which exports them, index TCPBytes arrays by scope.
const (
	tcpLoopback = iota
	tcpNetwork
	tcpScopes
)

// KernelTCP is the TCP payload of the GPU processes counted by the eBPF
// programs at each send and receive call, published by the ebpf collector
// after every sample. The tcp collector takes its byte counts from it while
// it is fresh instead of listing sockets: it costs no polling, sees short
// connections that open and close between two socket listings, and sees
// processes in other network namespaces.
//
// Only the GPU processes' own calls count, not their descendants', as in
// the socket listing: a DataLoader worker streaming a dataset over HTTP is
// input, not a collective.
type KernelTCP struct {
	// At is when the programs' counters were read.
	At time.Time
	// Every is the time since the reading before (0 for the first): the
	// ebpf collector's pace, slower while the node is quiet.
	Every time.Duration
	// GPUs holds each GPU's cumulative bytes, by scope (tcpLoopback,
	// tcpNetwork), since the collector started; they never decrease. A
	// process on several GPUs counts on each.
	GPUs map[int][tcpScopes]TCPBytes
	// Processes holds each GPU process's bytes since it was first tracked,
	// by scope.
	Processes map[uint32][tcpScopes]TCPBytes
}

// TCPBytes is payload sent and received.
type TCPBytes struct{ Sent, Received uint64 }

// SetKernelTCP publishes a reading; nil withdraws it (programs detached).
func (s *Shared) SetKernelTCP(k *KernelTCP) { s.kernelTCP.Store(k) }

// KernelTCP returns the latest reading, or nil.
func (s *Shared) KernelTCP() *KernelTCP { return s.kernelTCP.Load() }

// FreshKernelTCP returns the latest reading when it is at most maxAge old at
// now, or two of the ebpf collector's current intervals where those are
// longer (a quiet node samples every few seconds), else nil: past that the
// programs are taken to have stopped counting (the ebpf collector hung or
// failing) and the reader lists sockets instead.
func (s *Shared) FreshKernelTCP(now time.Time, maxAge time.Duration) *KernelTCP {
	if k := s.KernelTCP(); k != nil && now.Sub(k.At) <= max(maxAge, 2*k.Every) {
		return k
	}
	return nil
}
