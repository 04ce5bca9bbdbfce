package collectors

import (
	"sync"
	"sync/atomic"

	"github.com/gpudiag/gpudiag/sample"
)

// GPURef is what host collectors need to know of a GPU: where it sits on the
// PCI bus (to find its NUMA node and local CPUs in sysfs) and which processes
// run on it (to read their affinity, memory placement and I/O in /proc).
type GPURef struct {
	Index    int
	PCIBusID string // kernel form, 0000:3b:00.0
	PIDs     []uint32
}

// Shared carries what one collector learns for the others. The GPU collector
// publishes after every sample; readers get the latest complete snapshot and
// never wait. This is the only channel between collectors.
type Shared struct {
	gpus         atomic.Pointer[[]GPURef]
	ncclLogFiles atomic.Pointer[[]NCCLLogFile]
	kernelTCP    atomic.Pointer[KernelTCP]
	processTrees atomic.Pointer[ProcessTrees]
	processScan  atomic.Pointer[ProcessScan]

	// newProcs is signalled (never blocking, one pending at most) when a
	// published GPU lists a process the previous publication did not: the
	// gpuprocess collector reads a new job at once instead of at its tick.
	newProcsOnce sync.Once
	newProcs     chan struct{}
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

// NewGPUProcesses is signalled when a GPU gets a process it did not list at
// the previous publication. It has one reader, the gpuprocess collector.
func (s *Shared) NewGPUProcesses() chan struct{} {
	s.newProcsOnce.Do(func() { s.newProcs = make(chan struct{}, 1) })
	return s.newProcs
}

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
