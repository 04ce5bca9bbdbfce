package analyzers

import (
	"strings"
	"testing"
	"time"

	"github.com/gpudiag/gpudiag/engine"
	"github.com/gpudiag/gpudiag/sample"
)

// A starved GPU whose job keeps reads outstanding on one disk is io-bound on
// that disk, by name; the same job with the disk mostly idle is not.
func TestDiskWaitNamesTheDisk(t *testing.T) {
	for _, tc := range []struct {
		name             string
		waitPerSecond    float64 // seconds of request wait added each second
		wantClass        Class
		wantDiskInReason bool
	}{
		{"always waiting on nvme0n1", 2.5, ClassIO, true},
		{"reading now and then", 0.19, ClassIdle, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := engine.NewWindow(time.Minute, 1<<20)
			t0 := time.Unix(1_800_000_000, 0)
			for i := range 10 {
				now := t0.Add(time.Duration(i) * time.Second)
				v := sample.NewValues()
				v.Set(sample.SMActive, 0.002)
				v.Set(sample.Utilization, 0.03)
				v.Set(sample.ComputeProcesses, 1)
				w.Add("gpu", now, &sample.GPUs{Devices: []sample.GPU{{Index: 2, Up: true, ActivitySource: sample.SourceGPM, IntervalSeconds: 1, Values: v}}})
				w.Add("ebpf", now, &sample.EBPF{IntervalSeconds: 1, BlockIO: sample.EBPFFeature{Loaded: true}, GPUs: []sample.EBPFGPU{{Index: 2,
					BlockIO: []sample.EBPFBlockIO{
						{Device: "nvme0n1", Op: "read", BytesTotal: uint64(i) * 800e6, WaitSecondsTotal: float64(i) * tc.waitPerSecond},
						{Device: "vda", Op: "write", BytesTotal: uint64(i) * 1e6, WaitSecondsTotal: float64(i) * 0.01},
					}}}})
			}
			in := FromWindow(w, t0.Add(9*time.Second), 10*time.Second)
			g := in.GPUs[0]
			if len(g.DiskWaits) != 2 || g.DiskWaits[0].Device != "nvme0n1" || !near(g.DiskWaits[0].InFlight, tc.waitPerSecond) || !near(g.DiskWaits[0].BytesPerSecond, 800e6) {
				t.Fatalf("disk waits %+v; want nvme0n1 first at %.2f in flight, 800 MB/s", g.DiskWaits, tc.waitPerSecond)
			}
			d := Analyze(in, nil, DefaultThresholds)
			v := d.GPUs[0]
			if v.Class != tc.wantClass || strings.Contains(v.Summary, "nvme0n1") != tc.wantDiskInReason {
				t.Fatalf("verdict %s/%s %q; want %s, disk named: %v", v.Class, v.SubKind, v.Summary, tc.wantClass, tc.wantDiskInReason)
			}
		})
	}
}

func near(a, b float64) bool { return a > b*0.999-1e-9 && a < b*1.001+1e-9 }
