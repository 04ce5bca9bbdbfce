package diagnose

import (
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/gpudiag/gpudiag/analyzers"
	"github.com/gpudiag/gpudiag/engine"
	"github.com/gpudiag/gpudiag/sample"
)

// The tests in this file hold the evidence functions to the rules in
// sample/span.go: an entity is followed from its own first reading in the span
// to its own last, a counter that went back restarted from zero, and a
// per-interval rate counts only for the part of its interval inside the
// span. Each builds readings whose right answer is known in closed form.

var spanT0 = time.Unix(1_800_000_000, 0)

// put adds a reading to the window under its collector's key: the compiler
// holds the reading's type to the key's, as the collectors' registration
// does.
func put[S any](w *engine.Window, k sample.Key[S], t time.Time, s *S) { w.Add(k.Name(), t, s) }

// readInto runs the given readers over the window into a build of in, as
// FromWindow does before the joins, for a test of one join.
func readInto(w *engine.Window, since time.Time, in *analyzers.Input, read ...func(*engine.Window, *build)) *build {
	b := &build{in: in, since: since}
	for _, r := range read {
		r(w, b)
	}
	return b
}

// at is the time of the i-th one-second reading.
func at(i int) time.Time { return spanT0.Add(time.Duration(i) * time.Second) }

// addStarvedGPUs adds one GPU reading a second for [from, to], with the
// given GPUs up and their SMs idle, so that FromWindow has a analyzers.GPUWindow for
// each of them to attach host evidence to.
func addStarvedGPUs(w *engine.Window, from, to int, indexes ...int) {
	for i := from; i <= to; i++ {
		var ds []sample.GPU
		for _, idx := range indexes {
			v := sample.NewValues()
			v.Set(sample.SMActive, 0.01)
			v.Set(sample.Utilization, 0.5)
			v.Set(sample.ComputeProcesses, 1)
			ds = append(ds, sample.GPU{Index: idx, Up: true, ActivitySource: sample.SourceGPM, IntervalSeconds: 1, Values: v})
		}
		put(w, sample.GPUKey, at(i), &sample.GPUs{Devices: ds})
	}
}

func gpuWindow(t *testing.T, in analyzers.Input, index int) analyzers.GPUWindow {
	t.Helper()
	for _, g := range in.GPUs {
		if g.Index == index {
			return g
		}
	}
	t.Fatalf("GPU %d not in the input", index)
	return analyzers.GPUWindow{}
}

// Four GPUs over 30 s of tcp readings, each moving bytes at a steady rate,
// each in a way the span's first and last reading alone get wrong: GPU 1
// is absent from the first five readings (the tcp collector lists a GPU
// only once the GPU collector has published it: the socket trace's first
// reading lists none, issue 14), GPU 2's total restarts from zero halfway,
// GPU 3 vanishes after ten readings. Each GPU's mean is its own rate.
func TestTCPEvidenceFollowsEachGPU(t *testing.T) {
	w := engine.NewWindow(time.Hour, 64<<20)
	addStarvedGPUs(w, 0, 30, 0, 1, 2, 3)
	tcp := func(idx int, total float64) sample.TCPGPU {
		// Split over both scopes and directions: the evidence sums all four.
		q := uint64(total / 4)
		return sample.TCPGPU{Index: idx,
			Loopback: sample.TCPTraffic{TransmitBytesTotal: q, ReceiveBytesTotal: q},
			Network:  sample.TCPTraffic{TransmitBytesTotal: q, ReceiveBytesTotal: q}}
	}
	for i := 0; i <= 30; i++ {
		s := &sample.TCP{IntervalSeconds: 1}
		s.GPUs = append(s.GPUs, tcp(0, float64(i)*1e9))
		if i >= 5 {
			s.GPUs = append(s.GPUs, tcp(1, float64(i-5)*2e9))
		}
		if i < 15 {
			s.GPUs = append(s.GPUs, tcp(2, float64(i)*1.5e9))
		} else {
			// Restarted from zero just after reading 14.
			s.GPUs = append(s.GPUs, tcp(2, float64(i-14)*1.5e9))
		}
		if i < 10 {
			s.GPUs = append(s.GPUs, tcp(3, float64(i)*3e9))
		}
		put(w, sample.TCPKey, at(i), s)
	}
	for _, span := range []time.Duration{40 * time.Second, 31 * time.Second, 30 * time.Second, 20 * time.Second} {
		in := FromWindow(w, at(30), span)
		want := map[int]float64{0: 1e9, 1: 2e9, 2: 1.5e9, 3: 3e9}
		if span <= 20*time.Second {
			delete(want, 3) // gone before the span began
		}
		for idx, rate := range want {
			if got := gpuWindow(t, in, idx).ProcessTCPBytes; !near(got, rate) {
				t.Errorf("span %v: GPU %d moves %.3g B/s over TCP; want %.3g", span, idx, got, rate)
			}
		}
		if _, ok := want[3]; !ok {
			if got := gpuWindow(t, in, 3).ProcessTCPBytes; !math.IsNaN(got) {
				t.Errorf("span %v: GPU 3, without a tcp reading in the span, moves %.3g B/s; want NaN (not measured)", span, got)
			}
		}
		// The verdict follows: every GPU with traffic is network-bound.
		d := analyzers.Analyze(in, nil, analyzers.DefaultThresholds)
		for _, g := range d.GPUs {
			if _, ok := want[g.GPU]; ok && (g.Class != analyzers.ClassCommunication || g.SubKind != analyzers.SubNetwork) {
				t.Errorf("span %v: GPU %d is %s/%s; want communication/network", span, g.GPU, g.Class, g.SubKind)
			}
		}
	}
}

// The eBPF collector's per-GPU block I/O totals, read the same way: GPU 5
// is absent from the first three readings and then always has 2.5 reads
// in flight on nvme0n1; GPU 6's totals on nvme1n1 restart from zero
// halfway, and it starts reading sdb mid-span (a disk is listed from its
// first request on, so sdb counts from zero at the reading before).
func TestDiskWaitEvidenceFollowsEachGPU(t *testing.T) {
	w := engine.NewWindow(time.Hour, 64<<20)
	addStarvedGPUs(w, 0, 20, 5, 6)
	for i := 0; i <= 20; i++ {
		s := &sample.EBPF{IntervalSeconds: 1, BlockIO: sample.EBPFFeature{Loaded: true}}
		if i >= 3 {
			n := float64(i - 3)
			s.GPUs = append(s.GPUs, sample.EBPFGPU{Index: 5, BlockIO: []sample.EBPFBlockIO{
				{Device: "nvme0n1", Op: "read", BytesTotal: uint64(n * 800e6), WaitSecondsTotal: n * 2.5}}})
		}
		n := float64(i)
		if i > 10 {
			n = float64(i - 10) // restarted just after reading 10
		}
		g6 := sample.EBPFGPU{Index: 6, BlockIO: []sample.EBPFBlockIO{
			{Device: "nvme1n1", Op: "read", BytesTotal: uint64(n * 100e6), WaitSecondsTotal: n * 1.2}}}
		if i >= 12 {
			// Its first reading already counts a second of requests.
			g6.BlockIO = append(g6.BlockIO, sample.EBPFBlockIO{Device: "sdb", Op: "read",
				BytesTotal: uint64(float64(i-11) * 50e6), WaitSecondsTotal: float64(i-11) * 0.3})
		}
		s.GPUs = append(s.GPUs, g6)
		put(w, sample.EBPFKey, at(i), s)
	}
	for _, span := range []time.Duration{30 * time.Second, 21 * time.Second, 15 * time.Second} {
		in := FromWindow(w, at(20), span)
		g5 := gpuWindow(t, in, 5)
		if len(g5.DiskWaits) != 1 || g5.DiskWaits[0].Device != "nvme0n1" || !near(g5.DiskWaits[0].InFlight, 2.5) || !near(g5.DiskWaits[0].BytesPerSecond, 800e6) {
			t.Errorf("span %v: GPU 5 waits %+v; want nvme0n1 with 2.5 in flight, 800 MB/s", span, g5.DiskWaits)
		}
		g6 := gpuWindow(t, in, 6)
		first := 20 - int(min(span, 20*time.Second)/time.Second) // GPU 6's first reading in the span
		sdbSeconds := float64(20-11) / float64(20-first)         // sdb's share of GPU 6's readings
		if len(g6.DiskWaits) != 2 || g6.DiskWaits[0].Device != "nvme1n1" || !near(g6.DiskWaits[0].InFlight, 1.2) || !near(g6.DiskWaits[0].BytesPerSecond, 100e6) ||
			g6.DiskWaits[1].Device != "sdb" || !near(g6.DiskWaits[1].InFlight, 0.3*sdbSeconds) || !near(g6.DiskWaits[1].BytesPerSecond, 50e6*sdbSeconds) {
			t.Errorf("span %v: GPU 6 waits %+v; want nvme1n1 with 1.2 in flight at 100 MB/s, then sdb with %.3f at %.3g B/s",
				span, g6.DiskWaits, 0.3*sdbSeconds, 50e6*sdbSeconds)
		}
		if v := analyzers.Analyze(in, nil, analyzers.DefaultThresholds).GPUs; v[0].Class != analyzers.ClassIO || v[1].Class != analyzers.ClassIO {
			t.Errorf("span %v: verdicts %s, %s; want io for both", span, v[0].Class, v[1].Class)
		}
	}
}

// The gpuprocess collector counts nothing for a process it meets whose
// parent it did not follow (its past belongs to before the daemon looked)
// and starts a GPU's account afresh where the GPU reappears: the reading
// where a job's processes first show reads zero for them, a baseline. It
// happens to every GPU at the daemon's start (its first reading lists none;
// the jobs' processes show in the second) and where a job starts. Readings
// every 5 s; every job uses 1 core while it runs. GPU 4's job runs from the
// start; so does GPU 5's, but the GPU is missing from the reading at 15 s;
// GPU 6 is idle (no process, 0 cores) until its job shows at 15 s, which
// forks a DataLoader worker shown at 30 s: born under a followed parent,
// the collector counts it whole, and that reading stays.
func TestProcessEvidenceSkipsBaselineReadings(t *testing.T) {
	// readings holds the daemon's readings up to now: the window holds no
	// later one.
	readings := func(now int) *engine.Window {
		w := engine.NewWindow(time.Hour, 64<<20)
		addStarvedGPUs(w, 0, now, 4, 5, 6)
		put(w, sample.GPUProcessKey, at(0), &sample.GPUProcesses{}) // the daemon's first reading
		for i := 5; i <= now; i += 5 {
			s := &sample.GPUProcesses{IntervalSeconds: 5}
			for _, gpu := range []int{4, 5, 6} {
				g := sample.GPUProcessGroup{GPU: gpu, NUMANode: -1, IOWaitThreadsRatio: ptr(0.02)}
				switch {
				case gpu == 5 && i == 15:
					continue // not listed
				case gpu == 6 && i < 15:
					s.GPUs = append(s.GPUs, g) // idle: measured, no process
					continue
				}
				main := sample.GPUProcess{PID: 4000 + gpu, PPID: 1, OnGPU: true}
				if i == 5 || (gpu == 5 && i == 20) || (gpu == 6 && i == 15) {
					g.Processes = []sample.GPUProcess{main} // first seen: no rate, counted 0
				} else {
					g.CPUCoresUsed, g.StorageReadBytesPerSecond = 1, 1e6
					main.CPUCoresUsed = ptr(1)
					g.Processes = []sample.GPUProcess{main}
					if gpu == 6 && i >= 30 {
						main.CPUCoresUsed = ptr(0.5)
						worker := sample.GPUProcess{PID: 5000, PPID: main.PID, Depth: 1}
						if i > 30 {
							worker.CPUCoresUsed = ptr(0.5)
						}
						g.Processes = []sample.GPUProcess{main, worker}
					}
				}
				s.GPUs = append(s.GPUs, g)
			}
			put(w, sample.GPUProcessKey, at(i), s)
		}
		return w
	}
	nan := math.NaN()
	for _, tc := range []struct {
		now, span int             // seconds
		want      map[int]float64 // cores; NaN: no reading measured the job
	}{
		{30, 31, map[int]float64{4: 1, 5: 1}}, // GPU 6 read idle, then busy: a phase change
		{30, 40, map[int]float64{4: 1, 5: 1}},
		{10, 7, map[int]float64{4: 1, 5: 1}},
		{10, 10, map[int]float64{4: 1, 5: 1}},
		{15, 12, map[int]float64{4: 1, 5: 1}},
		{15, 5, map[int]float64{4: 1, 5: nan, 6: nan}}, // GPU 5 unlisted, GPU 6's job just shown
		{20, 5, map[int]float64{4: 1, 5: nan, 6: 1}},   // GPU 5 met again
		{30, 20, map[int]float64{4: 1, 5: 1, 6: 1}},
		{30, 12, map[int]float64{4: 1, 5: 1, 6: 1}},
		{30, 5, map[int]float64{4: 1, 5: 1, 6: 1}}, // the worker's first reading alone
		{35, 25, map[int]float64{4: 1, 5: 1, 6: 1}},
	} {
		in := FromWindow(readings(tc.now), at(tc.now), time.Duration(tc.span)*time.Second)
		for idx, want := range tc.want {
			g := gpuWindow(t, in, idx)
			if math.IsNaN(want) {
				if !math.IsNaN(g.ProcessCPUCores) || !math.IsNaN(g.ProcessReadBytes) {
					t.Errorf("span of %ds to %ds: GPU %d uses %.3f cores, reads %.3g B/s; want NaN: no reading measured its job", tc.span, tc.now, idx, g.ProcessCPUCores, g.ProcessReadBytes)
				}
				continue
			}
			if !near(g.ProcessCPUCores, want) || !near(g.ProcessReadBytes, want*1e6) {
				t.Errorf("span of %ds to %ds: GPU %d uses %.3f cores, reads %.3g B/s; want %.3f cores, %.3g B/s", tc.span, tc.now, idx, g.ProcessCPUCores, g.ProcessReadBytes, want, want*1e6)
			}
			if !near(g.ProcessIOWait, 0.02) {
				t.Errorf("span of %ds to %ds: GPU %d has %.3f of its threads in I/O wait; want 0.02", tc.span, tc.now, idx, g.ProcessIOWait)
			}
			if v := analyzers.Analyze(in, nil, analyzers.DefaultThresholds).GPUs; v[idx-4].Class != analyzers.ClassHost {
				t.Errorf("span of %ds to %ds: GPU %d is %s; want host", tc.span, tc.now, idx, v[idx-4].Class)
			}
		}
	}
}

// integrate is the mean of a piecewise-constant signal over [from, to],
// seconds after spanT0: what a mean over that span must read whatever the
// readings' intervals.
func integrate(f func(s float64) float64, from, to float64) float64 {
	const dt = 1e-3
	sum := 0.0
	for s := from + dt/2; s < to; s += dt {
		sum += f(s) * dt
	}
	return sum / (to - from)
}

// Per-interval rates (PSI, swap, disk reads every 5 s, the GPU's SM
// activity every 2 s) count only for the part of their interval inside the
// span. The signals change inside the last readings' intervals, so a
// reading whose whole interval counts, though it mostly lies before the
// span, reads a different mean; over 5 s the GPU then looked partly busy
// (compute/other_sm) though the truth is a GPU starved by CPU pressure.
func TestIntervalMeansCoverOnlyTheSpan(t *testing.T) {
	sm := func(s float64) float64 { // the GPU computed in (24, 26]
		if s > 24 && s <= 26 {
			return 0.9
		}
		return 0.1
	}
	late := func(v float64) func(float64) float64 { // v in (25, 30], else 0
		return func(s float64) float64 {
			if s > 25 {
				return v
			}
			return 0
		}
	}
	w := engine.NewWindow(time.Hour, 64<<20)
	for i := 0; i <= 30; i += 2 {
		v := sample.NewValues()
		iv := 2.0
		if i == 0 {
			iv = 0 // the collector's first reading: no rates yet
		} else {
			v.Set(sample.SMActive, sm(float64(i)))
		}
		v.Set(sample.ComputeProcesses, 1)
		put(w, sample.GPUKey, at(i), &sample.GPUs{Devices: []sample.GPU{{Index: 0, UUID: "GPU-a", Up: true, ActivitySource: sample.SourceGPM, IntervalSeconds: iv, Values: v}}})
	}
	for i := 0; i <= 30; i += 5 {
		iv, s := 5.0, float64(i)
		if i == 0 {
			iv = 0
		}
		line := func(r float64) *sample.PressureLine { return &sample.PressureLine{IntervalRatio: r} }
		put(w, sample.PressureKey, at(i), &sample.Pressure{IntervalSeconds: iv, Resources: []sample.PressureResource{
			{Resource: "cpu", Some: line(late(0.3)(s))}, {Resource: "io", Some: line(0), Full: line(0)}}})
		cpu := &sample.CPU{IntervalSeconds: iv}
		disks := &sample.Disks{IntervalSeconds: iv, Devices: []sample.Disk{{Name: "nvme0n1"}}}
		if i > 0 {
			cpu.Interval = &sample.CPUInterval{SwapInPagesPerSecond: late(100)(s)}
			disks.Devices[0].Rates = &sample.DiskRates{ReadBytesPerSecond: late(600e6)(s)}
		}
		put(w, sample.CPUKey, at(i), cpu)
		put(w, sample.DiskstatsKey, at(i), disks)
	}
	for _, span := range []float64{5, 6, 11, 30, 40} {
		in := FromWindow(w, at(30), time.Duration(span*float64(time.Second)))
		from := max(0, 30-span) // nothing was measured before the first reading
		for _, c := range []struct {
			what      string
			got, want float64
		}{
			{"SM activity", in.GPUs[0].SMActive, integrate(sm, from, 30)},
			{"PSI cpu some", in.Node.CPUPressure, integrate(late(0.3), from, 30)},
			{"swap pages/s", in.Node.SwapPagesPerSecond, integrate(late(100), from, 30)},
			{"disk read B/s", in.Node.DiskReadBytes, integrate(late(600e6), from, 30)},
		} {
			if math.Abs(c.got-c.want) > 1e-3*math.Max(1, c.want) {
				t.Errorf("span %vs: %s %.4g; want %.4g, its mean over the span", span, c.what, c.got, c.want)
			}
		}
		d := analyzers.Analyze(in, nil, analyzers.DefaultThresholds)
		if span == 5 && d.GPUs[0].Class != analyzers.ClassHost {
			t.Errorf("span 5s: %s/%s (%s); want host (over the span SM activity is below SMActiveStarved and PSI cpu over CPUPressure); read SM %.2f, PSI cpu %.2f",
				d.GPUs[0].Class, d.GPUs[0].SubKind, d.GPUs[0].Summary, in.GPUs[0].SMActive, in.Node.CPUPressure)
		}
	}
}

// The audit's event counters follow the same rules: GPU 2's replay counter
// is zeroed by a GPU reset and counts 2 replays after it; GPU 3 is absent
// from the span's first reading and reports XID 79 after, and its replay
// count, missing while it does not answer, is no restart. Port mlx5_0/1's
// symbol errors are cleared (perfquery -R) and count 3 after; mlx5_1/1
// appears in the span and its link goes down once; mlx5_2/1 counts a
// receive error and then goes away; mlx5_0/1's ACK timeout counter,
// missing from one reading, is no restart either.
func TestAuditEventsFollowEachGPUAndPort(t *testing.T) {
	type gpuState struct {
		up      bool
		replays float64
		xid79   uint64
	}
	gpus := [][]struct {
		idx int
		gpuState
	}{
		{{2, gpuState{true, 10, 0}}},
		{{2, gpuState{true, 10, 0}}, {3, gpuState{true, 5, 0}}},
		{{2, gpuState{true, 0, 0}}, {3, gpuState{false, 0, 0}}},
		{{2, gpuState{true, 2, 0}}, {3, gpuState{true, 5, 1}}},
	}
	type port struct {
		dev      string
		counters map[sample.InfiniBandCounter]uint64
	}
	c := func(kv ...any) map[sample.InfiniBandCounter]uint64 {
		m := map[sample.InfiniBandCounter]uint64{}
		for i := 0; i+1 < len(kv); i += 2 {
			m[kv[i].(sample.InfiniBandCounter)] = uint64(kv[i+1].(int))
		}
		return m
	}
	ib := [][]port{
		{{"mlx5_0", c(sample.IBSymbolErrors, 5, sample.IBLocalAckTimeoutErrors, 7)}, {"mlx5_2", c(sample.IBReceiveErrors, 0)}},
		{{"mlx5_0", c(sample.IBSymbolErrors, 5)}, {"mlx5_1", c(sample.IBLinkDowned, 0)}, {"mlx5_2", c(sample.IBReceiveErrors, 1)}},
		{{"mlx5_0", c(sample.IBSymbolErrors, 0, sample.IBLocalAckTimeoutErrors, 7)}, {"mlx5_1", c(sample.IBLinkDowned, 1)}},
		{{"mlx5_0", c(sample.IBSymbolErrors, 3, sample.IBLocalAckTimeoutErrors, 7)}, {"mlx5_1", c(sample.IBLinkDowned, 1)}},
	}
	w := engine.NewWindow(time.Hour, 64<<20)
	for i := range gpus {
		s := &sample.GPUs{}
		for _, g := range gpus[i] {
			d := sample.GPU{Index: g.idx, Up: g.up, Values: sample.NewValues(), XIDErrors: map[uint64]uint64{}}
			if g.up {
				d.Values.Set(sample.PCIeReplaysTotal, g.replays)
			} else {
				d.Error = "GPU_IS_LOST"
			}
			if g.xid79 > 0 {
				d.XIDErrors[79] = g.xid79
			}
			s.Devices = append(s.Devices, d)
		}
		put(w, sample.GPUKey, at(i), s)
		b := &sample.InfiniBand{GPUDirectRDMAModule: "nvidia_peermem"}
		for _, p := range ib[i] {
			b.Ports = append(b.Ports, sample.InfiniBandPort{Device: p.dev, Port: 1, StateID: 4, RateBytesPerSecond: 50e9, Counters: p.counters})
		}
		put(w, sample.InfiniBandKey, at(i), b)
	}
	got := map[string]analyzers.Finding{}
	for _, f := range analyzers.Audit(FromWindow(w, at(3), 10*time.Second).Audit) {
		key := f.Check + ":" + f.Device
		if f.GPU != nil {
			key = fmt.Sprintf("%s:%d", f.Check, *f.GPU)
		}
		got[key] = f
	}
	for key, value := range map[string]float64{
		"pcie_replays:2": 2, "xid:3": 1,
		"ib_port_errors:mlx5_0/1": 3, "ib_port_errors:mlx5_1/1": 1, "ib_port_errors:mlx5_2/1": 1,
	} {
		f, ok := got[key]
		if !ok || len(f.Evidence) != 1 || f.Evidence[0].Value != value {
			t.Errorf("%s: %+v; want one, counting %.0f", key, f, value)
		}
		delete(got, key)
	}
	for key, f := range got {
		t.Errorf("unexpected finding %s: %s", key, f.Summary)
	}
}

// Each piece of evidence names the span its value is a mean over: the
// span analyzed (diagnose --for, /diagnose?window=), not the daemon's
// default span the thresholds carry.
func TestEvidenceNamesTheSpanAnalyzed(t *testing.T) {
	w := engine.NewWindow(time.Hour, 64<<20)
	addStarvedGPUs(w, 0, 40, 0)
	for _, span := range []time.Duration{31 * time.Second, time.Duration(analyzers.DefaultThresholds.SpanSeconds) * time.Second} {
		d := analyzers.Analyze(FromWindow(w, at(40), span), nil, analyzers.DefaultThresholds)
		if d.SpanSeconds != span.Seconds() {
			t.Errorf("span %v: the diagnosis says %vs", span, d.SpanSeconds)
		}
		n := 0
		for _, g := range d.GPUs {
			for _, e := range g.Evidence {
				n++
				if e.SpanSeconds != span.Seconds() {
					t.Errorf("span %v: evidence %s says it is a mean over %vs", span, e.Signal, e.SpanSeconds)
				}
			}
		}
		if n == 0 {
			t.Fatalf("span %v: no evidence to check", span)
		}
	}
}

// A starved GPU whose job keeps reads outstanding on one disk is io-bound on
// that disk, by name; the same job with the disk mostly idle is not.
func TestDiskWaitNamesTheDisk(t *testing.T) {
	for _, tc := range []struct {
		name             string
		waitPerSecond    float64 // seconds of request wait added each second
		wantClass        analyzers.Class
		wantDiskInReason bool
	}{
		{"always waiting on nvme0n1", 2.5, analyzers.ClassIO, true},
		{"reading now and then", 0.19, analyzers.ClassIdle, false},
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
				put(w, sample.GPUKey, now, &sample.GPUs{Devices: []sample.GPU{{Index: 2, Up: true, ActivitySource: sample.SourceGPM, IntervalSeconds: 1, Values: v}}})
				put(w, sample.EBPFKey, now, &sample.EBPF{IntervalSeconds: 1, BlockIO: sample.EBPFFeature{Loaded: true}, GPUs: []sample.EBPFGPU{{Index: 2,
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
			d := analyzers.Analyze(in, nil, analyzers.DefaultThresholds)
			v := d.GPUs[0]
			if v.Class != tc.wantClass || strings.Contains(v.Summary, "nvme0n1") != tc.wantDiskInReason {
				t.Fatalf("verdict %s/%s %q; want %s, disk named: %v", v.Class, v.SubKind, v.Summary, tc.wantClass, tc.wantDiskInReason)
			}
		})
	}
}

func near(a, b float64) bool { return a > b*0.999-1e-9 && a < b*1.001+1e-9 }

// A GIL-bound loop: the GPU's process uses one core while the SMs idle; the
// process evidence turns "waiting" into host-bound, and placement findings
// come from the same samples.
func TestProcessEvidenceMakesHostVerdict(t *testing.T) {
	w := engine.NewWindow(time.Minute, 1<<20)
	t0 := time.Unix(1_800_000_000, 0)
	for i := 0; i < 10; i++ {
		now := t0.Add(time.Duration(i) * time.Second)
		v := sample.NewValues()
		v.Set(sample.SMActive, 0.001)
		v.Set(sample.Utilization, 0.02)
		v.Set(sample.ComputeProcesses, 1)
		put(w, sample.GPUKey, now, &sample.GPUs{Devices: []sample.GPU{{Index: 4, Up: true, ActivitySource: sample.SourceGPM, IntervalSeconds: 1, Values: v}}})
		put(w, sample.GPUProcessKey, now, &sample.GPUProcesses{IntervalSeconds: 1, GPUs: []sample.GPUProcessGroup{{
			GPU: 4, NUMANode: 1, LocalCPUList: "32-63,96-127", Processes: []sample.GPUProcess{{PID: 4343, OnGPU: true, CPUCoresUsed: ptr(1.0)}},
			CPUCoresUsed: 1.0, IOWaitThreadsRatio: ptr(0), RemoteMemoryRatio: ptr(0.75), CPUsOffNodeRatio: ptr(1), CPUsFullyRemote: true}}})
	}
	in := FromWindow(w, t0.Add(9*time.Second), 10*time.Second)
	d := analyzers.Analyze(in, nil, analyzers.DefaultThresholds)
	if g := d.GPUs[0]; g.Class != analyzers.ClassHost || g.SubKind != analyzers.SubCPU {
		t.Fatalf("verdict %s/%s: %s", g.Class, g.SubKind, g.Summary)
	}
	if got := checks(d.Findings); got != "gpu_process_remote_cpus:warning,gpu_process_remote_memory:warning" {
		t.Fatalf("findings %q", got)
	}
	if !d.Inputs.HostEvidence {
		t.Fatal("host evidence not reported as present")
	}
}

// The scan's sample reaches the audit through the window, however old it is
// within the window, together with the network interfaces.
func TestNCCLProcessEvidence(t *testing.T) {
	w := engine.NewWindow(time.Minute, 1<<20)
	t0 := time.Unix(1_800_000_000, 0)
	put(w, sample.NCCLProcKey, t0, &sample.NCCLHostProcesses{Processes: []sample.NCCLHostProcess{
		{PID: 5151, PodUID: "u-1", HostNetwork: yes(), Libraries: ncclLib("/a/libnccl.so.2.21.5", "2.21.5"), Env: env("NCCL_SOCKET_IFNAME", "eno1")},
		{PID: 5152, PodUID: "u-1", Libraries: ncclLib("/b/libnccl.so.2.18.3", "2.18.3")},
	}})
	put(w, sample.NetDevKey, t0.Add(25*time.Second), &sample.NetDevices{Interfaces: []sample.NetInterface{
		{Name: "eno1", Physical: true, Carrier: true, SpeedBytesPerSecond: 1e9 / 8}}})
	in := FromWindow(w, t0.Add(30*time.Second), 10*time.Second)
	if in.Audit.NCCLProcesses == nil || in.Audit.NetDevices == nil {
		t.Fatal("the scan or the interfaces did not reach the audit")
	}
	if got := checks(analyzers.Audit(in.Audit)); got != "nccl_library_mismatch:warning,nccl_socket_ifname_virtual:warning" {
		t.Fatalf("findings %q", got)
	}
}

func ptr(x float64) *float64 { return &x }

func yes() *bool { b := true; return &b }

func ncclLib(path, version string) []sample.NCCLLibrary {
	return []sample.NCCLLibrary{{Path: path, Version: version}}
}

func env(kv ...string) []sample.NCCLEnv {
	var out []sample.NCCLEnv
	for i := 0; i+1 < len(kv); i += 2 {
		out = append(out, sample.NCCLEnv{Name: kv[i], Value: kv[i+1]})
	}
	return out
}

// checks is each finding as check:severity.
func checks(fs []analyzers.Finding) string {
	var out []string
	for _, f := range fs {
		out = append(out, f.Check+":"+string(f.Severity))
	}
	return strings.Join(out, ",")
}

// A DataLoader in a container limited to half a CPU: the processes use
// what the quota lets them (0.5 core, below ProcessCPUCores) and are
// throttled in 80% of periods in the first half of the span, 60% in the
// second. The span's mean throttled share (0.7) makes the verdict host /
// cpu_quota with the CPU-limit fix, and the newest reading the finding.
func TestProcessEvidenceCPUQuota(t *testing.T) {
	w := engine.NewWindow(time.Minute, 1<<20)
	t0 := time.Unix(1_800_000_000, 0)
	for i := 0; i < 10; i++ {
		now := t0.Add(time.Duration(i) * time.Second)
		v := sample.NewValues()
		v.Set(sample.SMActive, 0.001)
		v.Set(sample.Utilization, 0.02)
		v.Set(sample.ComputeProcesses, 1)
		put(w, sample.GPUKey, now, &sample.GPUs{Devices: []sample.GPU{{Index: 4, Up: true, ActivitySource: sample.SourceGPM, IntervalSeconds: 1, Values: v}}})
		share := 0.8
		if i >= 5 {
			share = 0.6
		}
		put(w, sample.GPUProcessKey, now, &sample.GPUProcesses{IntervalSeconds: 1, GPUs: []sample.GPUProcessGroup{{
			GPU: 4, NUMANode: -1, Processes: []sample.GPUProcess{{PID: 4343, OnGPU: true, CPUCoresUsed: ptr(0.4)}, {PID: 4344, PPID: 4343, Depth: 1, CPUCoresUsed: ptr(0.1)}},
			CPUCoresUsed: 0.5, IOWaitThreadsRatio: ptr(0), CPUCgroups: 1, CPUQuotaCores: ptr(0.5),
			CPUThrottledPeriodsRatio: ptr(share), CPUThrottledSecondsPerSecond: ptr(share * 0.5)}}})
	}
	in := FromWindow(w, t0.Add(9*time.Second), 10*time.Second)
	if g := gpuWindow(t, in, 4); !near(g.ProcessCPUThrottled, 0.7) || g.ProcessCPUQuota != 0.5 {
		t.Fatalf("throttled share %v, quota %v; want 0.7 and 0.5", g.ProcessCPUThrottled, g.ProcessCPUQuota)
	}
	d := analyzers.Analyze(in, nil, analyzers.DefaultThresholds)
	g := d.GPUs[0]
	if g.Class != analyzers.ClassHost || g.SubKind != analyzers.SubCPUQuota || g.Fix != "raise the container's CPU limit (or remove it; requests only)" {
		t.Fatalf("verdict %s/%s: %s (fix %q)", g.Class, g.SubKind, g.Summary, g.Fix)
	}
	if got := checks(d.Findings); got != "cpu_quota_throttled:warning" {
		t.Fatalf("findings %q", got)
	}
}

// Communicator churn is a rate over minutes: the audit gets every NCCL
// reading of the window, not only the span's; the kubelet's policies are
// the newest reading whatever its age.
func TestAuditGetsNCCLHistoryAndKubelet(t *testing.T) {
	w := engine.NewWindow(time.Hour, 64<<20)
	for i := range 120 {
		put(w, sample.NCCLKey, at(i), &sample.NCCL{})
	}
	put(w, sample.KubeletKey, at(0), &sample.Kubelet{Found: true, CPUManagerPolicy: "none"})
	in := FromWindow(w, at(119), 10*time.Second)
	if n := len(in.Audit.NCCLHistory); n != 120 || !in.Audit.NCCLHistory[0].Time.Equal(at(0)) {
		t.Fatalf("%d NCCL readings; want the window's 120, oldest first", n)
	}
	if k := in.Audit.Kubelet; k == nil || k.CPUManagerPolicy != "none" {
		t.Fatalf("kubelet %+v", k)
	}
}
