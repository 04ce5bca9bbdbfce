package analyzers

import (
	"strings"
	"testing"

	"github.com/gpudiag/gpudiag/sample"
)

func TestAuditHostTuning(t *testing.T) {
	zero, one, five, twenty := 0, 1, 5, 20
	gpus := auditGPU(func(g *sample.GPU) { g.PCIBusID = "00000000:9A:00.0" })
	node := func(mutate func(*sample.HostTuning)) *sample.HostTuning {
		h := &sample.HostTuning{TransparentHugepage: "madvise", DirtyRatio: &twenty, NUMABalancing: &zero,
			CPUIdleStates: []sample.CPUIdleState{{Name: "C1", LatencyMicros: 1, CPUs: 128, Enabled: 128}, {Name: "C6", LatencyMicros: 170, CPUs: 128}},
			DeviceIRQs:    []sample.DeviceIRQs{{Device: "0000:9a:00.0", Kind: "gpu", PCIBusID: "0000:9a:00.0", NUMANode: 1, Vectors: 4, Remote: 2}},
			Processes:     map[string]bool{"irqbalance": true}}
		if mutate != nil {
			mutate(h)
		}
		return h
	}
	procs := func(allowed string) *sample.GPUProcesses {
		return &sample.GPUProcesses{GPUs: []sample.GPUProcessGroup{{GPU: 2, NUMANode: 1,
			Processes: []sample.GPUProcess{{PID: 4242, Comm: "python", OnGPU: true, CPUsAllowedList: allowed}}}}}
	}
	isolated := func(h *sample.HostTuning) { h.IsolatedCPUList = "120-127" }
	for _, tc := range []struct {
		name string
		in   AuditInput
		want string
	}{
		{"tuned GPU node", AuditInput{Tuning: node(nil), LastGPUs: gpus}, ""},
		// numa_balancing and ephemeral_ports are auditTuningAnyNode's, on any node.
		{"numa balancing on", AuditInput{Tuning: node(func(h *sample.HostTuning) { h.NUMABalancing = &one })}, "numa_balancing:info"},
		{"ephemeral ports at 80%", AuditInput{Tuning: node(func(h *sample.HostTuning) {
			h.EphemeralPortFirst, h.EphemeralPortLast, h.EphemeralPortsInUse = 10000, 10999, 800
		})}, "ephemeral_ports:warning"},
		{"ephemeral ports at 79.9%", AuditInput{Tuning: node(func(h *sample.HostTuning) {
			h.EphemeralPortFirst, h.EphemeralPortLast, h.EphemeralPortsInUse = 10000, 10999, 799
		})}, ""},
		{"most GPU vectors remote", AuditInput{Tuning: node(func(h *sample.HostTuning) { h.DeviceIRQs[0].Remote = 3 }), LastGPUs: gpus}, "irq_affinity_remote:warning"},
		{"half the vectors remote", AuditInput{Tuning: node(nil), LastGPUs: gpus}, ""},
		{"RDMA NIC vectors remote", AuditInput{Tuning: node(func(h *sample.HostTuning) {
			h.DeviceIRQs = append(h.DeviceIRQs, sample.DeviceIRQs{Device: "mlx5_0", Kind: "rdma", PCIBusID: "0000:1a:00.0", Vectors: 70, Remote: 64})
		}), LastGPUs: gpus}, "irq_affinity_remote:warning"},
		{"C6 enabled", AuditInput{Tuning: node(func(h *sample.HostTuning) { h.CPUIdleStates[1].Enabled = 1 }), LastGPUs: gpus}, "cpu_deep_cstates:info"},
		{"C6 enabled, no GPU", AuditInput{Tuning: node(func(h *sample.HostTuning) {
			h.CPUIdleStates[1].Enabled, h.DeviceIRQs = 1, nil
		})}, ""},
		{"THP never", AuditInput{Tuning: node(func(h *sample.HostTuning) { h.TransparentHugepage = "never" }), LastGPUs: gpus}, "thp_disabled:info"},
		{"dirty ratio 5", AuditInput{Tuning: node(func(h *sample.HostTuning) { h.DirtyRatio = &five }), LastGPUs: gpus}, "vm_dirty_low:info"},
		{"dirty bytes 1 GiB of 1 TiB", AuditInput{Tuning: node(func(h *sample.HostTuning) { b := 1 << 30; h.DirtyBytes = &b }), LastGPUs: gpus,
			LastCPU: &sample.CPU{Memory: sample.HostMemory{TotalBytes: 1 << 40}}}, "vm_dirty_low:info"},
		{"dirty bytes, memory unknown", AuditInput{Tuning: node(func(h *sample.HostTuning) { b := 1 << 30; h.DirtyBytes = &b }), LastGPUs: gpus}, ""},
		{"GPU process only on isolated CPUs", AuditInput{Tuning: node(isolated), LastGPUs: gpus, Processes: procs("120-123")}, "isolated_cpus:info"},
		{"isolated CPUs unused by GPU processes", AuditInput{Tuning: node(isolated), LastGPUs: gpus, Processes: procs("32-63")}, "isolated_cpus:info"},
		{"GPU process on some isolated CPUs", AuditInput{Tuning: node(isolated), LastGPUs: gpus, Processes: procs("96-127")}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := checks(Audit(tc.in)); got != tc.want {
				t.Fatalf("findings %q; want %q", got, tc.want)
			}
		})
	}
}

func TestAuditIRQAffinityNamesGPUAndIrqbalance(t *testing.T) {
	h := &sample.HostTuning{Processes: map[string]bool{"irqbalance": true},
		DeviceIRQs: []sample.DeviceIRQs{{Device: "0000:9a:00.0", Kind: "gpu", PCIBusID: "0000:9a:00.0", NUMANode: 1, Vectors: 4, Remote: 3}}}
	fs := Audit(AuditInput{Tuning: h, LastGPUs: auditGPU(func(g *sample.GPU) { g.PCIBusID = "00000000:9A:00.0" })})
	if len(fs) != 1 || fs[0].GPU == nil || *fs[0].GPU != 2 || fs[0].Device != "0000:9a:00.0" {
		t.Fatalf("findings %+v", fs)
	}
	for _, want := range []string{"3 of the 4", "GPU 2 (0000:9a:00.0)", "node 1", "irqbalance is running"} {
		if !strings.Contains(fs[0].Summary, want) {
			t.Errorf("summary %q lacks %q", fs[0].Summary, want)
		}
	}
	if !strings.Contains(fs[0].Fix, "--banirq") {
		t.Errorf("fix %q", fs[0].Fix)
	}
	h.Processes["irqbalance"] = false
	if fs := Audit(AuditInput{Tuning: h}); len(fs) != 1 || !strings.Contains(fs[0].Summary, "irqbalance is not running") {
		t.Fatalf("findings %+v", fs)
	}
}

// Swap left in place with vm.swappiness=0 is what swap_active's own fix
// recommends: no finding until pages go out. A zram swap is not in fstab,
// so its fix names what creates it at boot.
func TestAuditSwap(t *testing.T) {
	zero, sixty := 0, 60
	cpu := func(swapOut uint64) *sample.CPU { return &sample.CPU{VM: sample.VMCounters{SwapOutPages: swapOut}} }
	if fs := Audit(AuditInput{Tuning: &sample.HostTuning{SwapDevices: 1, SwapBytes: 8 << 30, Swappiness: &zero}}); len(fs) != 0 {
		t.Errorf("swap with vm.swappiness=0: %+v", fs)
	}
	fs := Audit(AuditInput{Tuning: &sample.HostTuning{SwapDevices: 1, Swappiness: &zero}, FirstCPU: cpu(10), LastCPU: cpu(500)})
	if len(fs) != 1 || fs[0].Check != "swap_active" || fs[0].Severity != SeverityCritical {
		t.Errorf("swapping out with vm.swappiness=0: %+v", fs)
	}
	fs = Audit(AuditInput{Tuning: &sample.HostTuning{SwapDevices: 1, SwapZramDevices: 1, SwapBytes: 8 << 30, Swappiness: &sixty}})
	if len(fs) != 1 || fs[0].Check != "swap_active" || fs[0].Severity != SeverityWarning || strings.Contains(fs[0].Fix, "remove it from fstab") ||
		!strings.Contains(fs[0].Fix, "zram-generator") || !strings.Contains(fs[0].Summary, "zram") {
		t.Errorf("zram swap with vm.swappiness=60: %+v", fs)
	}
	fs = Audit(AuditInput{Tuning: &sample.HostTuning{SwapDevices: 1, SwapBytes: 8 << 30, Swappiness: &sixty}})
	if len(fs) != 1 || fs[0].Check != "swap_active" || fs[0].Severity != SeverityWarning || !strings.Contains(fs[0].Fix, "fstab") {
		t.Errorf("disk swap with vm.swappiness=60: %+v", fs)
	}
}

// Only the CPUs local to a GPU feed it: powersave CPUs on a node without
// GPUs raise nothing. intel_pstate's and amd-pstate-epp's powersave is a
// dynamic policy that reaches full clocks under load: info; the generic
// governors that hold or ramp the clock stay warnings.
func TestAuditCPUGovernor(t *testing.T) {
	numa := &sample.NUMA{GPUs: []sample.GPUNUMA{{GPU: 0, NUMANode: 0, LocalCPUList: "0-31"}, {GPU: 1, NUMANode: 0, LocalCPUList: "0-31"}}}
	span := func(first, last int) []int {
		var out []int
		for c := first; c <= last; c++ {
			out = append(out, c)
		}
		return out
	}
	tuning := func(driver, slowGovernor string, slow, fast []int) *sample.HostTuning {
		return &sample.HostTuning{ScalingDriver: driver,
			ScalingGovernors:    map[string]int{"performance": len(fast), slowGovernor: len(slow)},
			ScalingGovernorCPUs: map[string][]int{"performance": fast, slowGovernor: slow}}
	}
	for _, tc := range []struct {
		name    string
		tuning  *sample.HostTuning
		want    Severity // "" for no finding
		summary string
	}{
		{"powersave far from the GPUs", tuning("acpi-cpufreq", "powersave", span(32, 63), span(0, 31)), "", ""},
		{"generic powersave on GPU-local CPUs", tuning("acpi-cpufreq", "powersave", span(0, 7), append(span(8, 31), span(32, 63)...)), SeverityWarning, "CPUs local to a GPU not on the performance governor: 8 on powersave (of 32)"},
		{"intel_pstate powersave", tuning("intel_pstate", "powersave", span(0, 31), span(32, 63)), SeverityInfo, "intel_pstate's dynamic powersave policy: 32 on powersave (of 32)"},
		{"amd-pstate-epp powersave", tuning("amd-pstate-epp", "powersave", span(0, 31), span(32, 63)), SeverityInfo, "dynamic powersave"},
		{"intel_pstate passive, schedutil", tuning("intel_cpufreq", "schedutil", span(0, 31), span(32, 63)), SeverityWarning, "32 on schedutil"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []Finding
			for _, f := range Audit(AuditInput{Tuning: tc.tuning, NUMA: numa}) {
				if f.Check == "cpu_governor" {
					got = append(got, f)
				}
			}
			switch {
			case tc.want == "" && len(got) != 0:
				t.Fatalf("want no finding, got %+v", got)
			case tc.want != "" && (len(got) != 1 || got[0].Severity != tc.want || !strings.Contains(got[0].Summary, tc.summary)):
				t.Fatalf("want one %s finding saying %q, got %+v", tc.want, tc.summary, got)
			}
		})
	}
}

// A NIC or NVMe drive whose PCIe link trained down, or a NIC whose port
// outruns even its full link, is capped by the link; a link at its
// capability that carries the port (200 Gb/s on Gen4 x16) is not.
func TestAuditDeviceLinks(t *testing.T) {
	gen4x16 := sample.DeviceLink{Device: "mlx5_0", Kind: "rdma", PCIBusID: "0000:3b:00.0", CurrentGTs: 16, MaxGTs: 16, CurrentWidth: 16, MaxWidth: 16, PortBytesPerSecond: 25e9}
	for _, tc := range []struct {
		name    string
		link    func(*sample.DeviceLink)
		want    string
		summary string
	}{
		{name: "200G on Gen4 x16", link: func(*sample.DeviceLink) {}},
		{name: "NVMe x4 at Gen4", link: func(d *sample.DeviceLink) {
			*d = sample.DeviceLink{Device: "nvme0", Kind: "nvme", PCIBusID: "0000:c1:00.0", CurrentGTs: 16, MaxGTs: 16, CurrentWidth: 4, MaxWidth: 4}
		}},
		{name: "NVMe lost two lanes", link: func(d *sample.DeviceLink) {
			*d = sample.DeviceLink{Device: "nvme0", Kind: "nvme", PCIBusID: "0000:c1:00.0", CurrentGTs: 16, MaxGTs: 16, CurrentWidth: 2, MaxWidth: 4}
		}, want: "pcie_link_trained_down:warning", summary: "NVMe drive nvme0 (0000:c1:00.0) trained to 16 GT/s x2 of the 16 GT/s x4"},
		{name: "NIC at Gen3 of Gen4", link: func(d *sample.DeviceLink) { d.CurrentGTs = 8 },
			want: "pcie_link_trained_down:warning", summary: "it carries 15.8 GB/s of 31.5 GB/s one way, below the port's 25.0 GB/s"},
		{name: "400G on Gen4 x16", link: func(d *sample.DeviceLink) { d.PortBytesPerSecond = 50e9 },
			want: "nic_faster_than_pcie:warning", summary: "more than its PCIe link (16 GT/s x16) carries at best, 31.5 GB/s"},
		{name: "port rate unknown", link: func(d *sample.DeviceLink) { d.PortBytesPerSecond = 0 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := gen4x16
			tc.link(&d)
			var got []Finding
			for _, f := range Audit(AuditInput{Tuning: &sample.HostTuning{DeviceLinks: []sample.DeviceLink{d}}}) {
				if f.Check == "pcie_link_trained_down" || f.Check == "nic_faster_than_pcie" {
					got = append(got, f)
				}
			}
			if checks(got) != tc.want {
				t.Fatalf("findings %q; want %q", checks(got), tc.want)
			}
			if tc.want != "" && (!strings.Contains(got[0].Summary, tc.summary) || got[0].Fix == "" || got[0].Device != d.Device) {
				t.Errorf("finding %+v lacks %q", got[0], tc.summary)
			}
		})
	}
}
