package diagnose

import (
	"math"

	"github.com/gpudiag/gpudiag/analyzers"
	"github.com/gpudiag/gpudiag/sample"
)

// storageEvidence tells the storage checks where each GPU's data comes
// from (the dataset collector's newest scan), how the disk it waits on is
// set up (diskstats' newest reading), how fast the page cache refaults
// (the cpu collector's vmstat over the span, the dataset collector's
// memory cgroup) and whether GPUDirect Storage reads or fails, and names
// the data path in each GPU's storage_read summary. It runs after
// diskWaitEvidence, whose disk it prefers. Without a dataset reading it
// leaves the Input alone.
func storageEvidence(b *build) {
	in := b.in
	latest, ok := newest(b.datasets)
	if !ok {
		return
	}
	ds := latest.Sample
	s := &analyzers.StorageInput{NodeRefaultsPerSecond: b.nodeRefaults}
	disks := map[string]*sample.Disk{}
	busiest := ""
	if d := b.disks; d != nil {
		s.NodeDisks = d.Devices
		best := 0.0
		for i := range d.Devices {
			dev := &d.Devices[i]
			disks[dev.Name] = dev
			if dev.Rates != nil && dev.Rates.ReadBytesPerSecond > best {
				best, busiest = dev.Rates.ReadBytesPerSecond, dev.Name
			}
		}
	}
	windows := map[int]*analyzers.GPUWindow{}
	for i := range in.GPUs {
		windows[in.GPUs[i].Index] = &in.GPUs[i]
	}
	for _, g := range ds.GPUs {
		gs := analyzers.GPUStorage{GPU: g.GPU, Mounts: g.Mounts,
			CgroupRefaultsPerSecond: math.NaN(), CgroupCurrentBytes: math.NaN()}
		if cg := g.Cgroup; cg != nil {
			gs.CgroupPath, gs.CgroupPressure = cg.Path, cg.Pressure
			gs.CgroupLimitBytes, gs.CgroupCurrentBytes = float64(cg.LimitBytes), float64(cg.CurrentBytes)
			if cg.RefaultsPerSecond != nil {
				gs.CgroupRefaultsPerSecond = *cg.RefaultsPerSecond
			}
		}
		// The disk: where eBPF saw the processes wait, else under the
		// mount holding most of their files, else the node's busiest.
		gw := windows[g.GPU]
		switch {
		case gw != nil && len(gw.DiskWaits) > 0:
			gs.Disk = gw.DiskWaits[0].Device
		default:
			for _, m := range g.Mounts {
				if m.Disk != "" {
					gs.Disk = m.Disk
					break
				}
			}
			if gs.Disk == "" && !readsOverNetwork(g.Mounts) {
				gs.Disk = busiest
			}
		}
		if d := disks[gs.Disk]; d != nil {
			gs.Queue, gs.Rates = d.Queue, d.Rates
		}
		s.GPUs = append(s.GPUs, gs)
		if gw != nil {
			gw.StorageNote = analyzers.StorageNote(gs)
		}
	}
	for _, n := range ds.NFS {
		if n.Rates == nil {
			continue
		}
		s.NFS = append(s.NFS, analyzers.NFSRead{MountPoint: n.MountPoint, Server: n.Server, RSize: n.RSize,
			OpsPerSecond: n.Rates.OpsPerSecond, BytesPerSecond: n.Rates.BytesPerSecond,
			RTTSeconds: n.Rates.RTTSeconds, ExecuteSeconds: n.Rates.ExecuteSeconds})
	}
	if ds.GDS != nil {
		s.GDS = gdsWindow(b.datasets, latest)
	}
	s.Neighbours = ds.Neighbours
	in.Audit.Storage = s
}

// readsOverNetwork says whether the mount holding most files (the first)
// is a network filesystem: its reads wait on no local disk.
func readsOverNetwork(mounts []sample.DatasetMount) bool {
	return len(mounts) > 0 && mounts[0].Network()
}

// gdsWindow is the nvidia-fs counters' growth from the oldest reading of
// the window that has them to the newest: NaN when there is only one.
func gdsWindow(datasets []sample.Timed[*sample.Datasets], latest sample.Timed[*sample.Datasets]) *analyzers.GDSWindow {
	out := &analyzers.GDSWindow{ReadsIncrease: math.NaN(), ErrorsIncrease: math.NaN()}
	var first *sample.GDSStats
	for _, e := range datasets {
		if e.Sample.GDS != nil && e.Time.Before(latest.Time) {
			first = e.Sample.GDS
			break
		}
	}
	if first == nil {
		return out
	}
	last := latest.Sample.GDS
	out.ReadsIncrease = sample.CounterIncrease(float64(first.Reads), float64(last.Reads))
	out.ErrorsIncrease = sample.CounterIncrease(float64(first.Errors()), float64(last.Errors()))
	return out
}
