package analyzers

import (
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpudiag/gpudiag/sample"
)

func auditGPU(mutate func(*sample.GPU)) *sample.GPUs {
	v := sample.NewValues()
	for f, x := range map[sample.Field]float64{
		sample.PersistenceModeEnabled: 1, sample.ECCEnabled: 1, sample.ECCUncorrectedErrorsTotal: 0,
		sample.RowRemapPending: 0, sample.RowRemapFailed: 0, sample.PCIeLinkWidth: 16, sample.PCIeLinkMaxWidth: 16,
		sample.PCIeLinkGeneration: 5, sample.PCIeLinkMaxGeneration: 5, sample.PCIeReplaysTotal: 3,
		sample.ECCCorrectedErrorsTotal: 5,
	} {
		v.Set(f, x)
	}
	// One NVLink with its error counters, and ECC by location, as an H200
	// reports them: errors from before the span, none in it.
	var errs sample.NVLinkErrors
	errs.Set(sample.NVLinkCRCFlit, 2)
	errs.Set(sample.NVLinkReplay, 1)
	errs.Set(sample.NVLinkRecovery, 0)
	g := sample.GPU{Index: 2, Up: true, Values: v, XIDErrors: map[uint64]uint64{},
		Links:     []sample.NVLink{{Link: 7, Up: true, Errors: errs}},
		ECCErrors: []sample.ECCCount{{Location: "dram", Counter: sample.ECCVolatile, Type: sample.ECCCorrected, Count: 5}}}
	if mutate != nil {
		mutate(&g)
	}
	return &sample.GPUs{Devices: []sample.GPU{g}}
}

func checks(fs []Finding) string {
	var out []string
	for _, f := range fs {
		out = append(out, f.Check+":"+string(f.Severity))
	}
	return strings.Join(out, ",")
}

func TestAuditGPU(t *testing.T) {
	healthy := auditGPU(nil)
	for _, tc := range []struct {
		name string
		last *sample.GPUs
		busy bool
		want string
	}{
		{"healthy", auditGPU(nil), true, ""},
		{"persistence off", auditGPU(func(g *sample.GPU) { g.Values.Set(sample.PersistenceModeEnabled, 0) }), false, "persistence_mode_off:warning"},
		{"ecc off", auditGPU(func(g *sample.GPU) { g.Values.Set(sample.ECCEnabled, 0) }), false, "ecc_off:warning"},
		{"uncorrectable ECC", auditGPU(func(g *sample.GPU) { g.Values.Set(sample.ECCUncorrectedErrorsTotal, 2) }), false, "ecc_uncorrectable:critical"},
		{"remap failed beats pending", auditGPU(func(g *sample.GPU) {
			g.Values.Set(sample.RowRemapFailed, 1)
			g.Values.Set(sample.RowRemapPending, 1)
		}), false, "row_remap_failed:critical"},
		{"remap pending", auditGPU(func(g *sample.GPU) { g.Values.Set(sample.RowRemapPending, 1) }), false, "row_remap_pending:warning"},
		// CRC errors the link layer absorbs, with no replay or recovery,
		// are what a healthy busy H200 counts: nothing to act on.
		{"NVLink CRC errors alone", auditGPU(func(g *sample.GPU) {
			g.Links[0].Errors.Set(sample.NVLinkCRCFlit, 40)
			g.Links[0].Errors.Set(sample.NVLinkCRCData, 900)
		}), true, ""},
		{"NVLink CRC errors with replays", auditGPU(func(g *sample.GPU) {
			g.Links[0].Errors.Set(sample.NVLinkCRCFlit, 40)
			g.Links[0].Errors.Set(sample.NVLinkReplay, 3)
		}), false, "nvlink_errors:warning,nvlink_errors:warning"},
		{"NVLink recovered", auditGPU(func(g *sample.GPU) { g.Links[0].Errors.Set(sample.NVLinkRecovery, 1) }), true, "nvlink_errors:warning"},
		{"corrected ECC rising", auditGPU(func(g *sample.GPU) {
			g.Values.Set(sample.ECCCorrectedErrorsTotal, 9)
			g.ECCErrors[0].Count = 9
		}), false, "ecc_correctable_rising:warning"},
		// A driver reload zeroes the volatile counters: no growth.
		{"counters reset", auditGPU(func(g *sample.GPU) {
			g.Values.Set(sample.ECCCorrectedErrorsTotal, 0)
			g.Links[0].Errors.Set(sample.NVLinkCRCFlit, 0)
		}), false, ""},
		{"narrow link", auditGPU(func(g *sample.GPU) { g.Values.Set(sample.PCIeLinkWidth, 8) }), false, "pcie_link_degraded:warning"},
		// Gen drops at idle to save power: only a busy GPU counts.
		{"low gen at idle", auditGPU(func(g *sample.GPU) { g.Values.Set(sample.PCIeLinkGeneration, 1) }), false, ""},
		{"low gen busy", auditGPU(func(g *sample.GPU) { g.Values.Set(sample.PCIeLinkGeneration, 3) }), true, "pcie_link_degraded:warning"},
		{"replays rising", auditGPU(func(g *sample.GPU) { g.Values.Set(sample.PCIeReplaysTotal, 10) }), false, "pcie_replays:warning"},
		{"xid in span", auditGPU(func(g *sample.GPU) { g.XIDErrors[79] = 1 }), false, "xid:critical"},
		// An application's illegal address or killed kernel fails its job
		// and leaves the GPU serving the next: the job's owner looks, no
		// page (NVIDIA's XID catalogue; the alert's warning rule).
		{"application xid 13", auditGPU(func(g *sample.GPU) { g.XIDErrors[13] = 1 }), false, "xid:warning"},
		{"application xid 31", auditGPU(func(g *sample.GPU) { g.XIDErrors[31] = 2 }), false, "xid:warning"},
		{"application xid 43", auditGPU(func(g *sample.GPU) { g.XIDErrors[43] = 1 }), false, "xid:warning"},
		{"cleanup xid 45", auditGPU(func(g *sample.GPU) { g.XIDErrors[45] = 1 }), false, "xid:info"},
		{"GSP xid 119", auditGPU(func(g *sample.GPU) { g.XIDErrors[119] = 1 }), false, "xid:critical"},
		{"thermal while busy", auditGPU(func(g *sample.GPU) { g.ClockEventReasons = 0x40 }), true, "clocks_throttled:critical"},
		{"thermal while idle", auditGPU(func(g *sample.GPU) { g.ClockEventReasons = 0x40 }), false, ""},
		{"idle clocks are not throttling", auditGPU(func(g *sample.GPU) { g.ClockEventReasons = 0x1 }), true, ""},
		{"lost", auditGPU(func(g *sample.GPU) { g.Up = false; g.Error = "GPU_IS_LOST" }), false, "gpu_lost:critical"},
		{"backend fell back", fellBack(auditGPU(nil)), false, "gpu_backend_fallback:warning"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := checks(Audit(AuditInput{GPUReadings: []*sample.GPUs{healthy, tc.last}, LastGPUs: tc.last, Busy: map[int]bool{2: tc.busy}}))
			if got != tc.want {
				t.Fatalf("findings %q; want %q", got, tc.want)
			}
		})
	}
}

func fellBack(s *sample.GPUs) *sample.GPUs {
	s.Backend = "nvml"
	s.Fallback = &sample.BackendFallback{Preferred: "dcgm", Reason: "no GPU answered (8 known): DCGM read: hostengine connection lost",
		Since: time.Unix(1_700_000_000, 0)}
	return s
}

// The fallback finding names both backends, since when and why, so the
// on-call engineer knows which daemon to look at.
func TestAuditBackendFallback(t *testing.T) {
	fs := Audit(AuditInput{LastGPUs: fellBack(auditGPU(nil))})
	if len(fs) != 1 {
		t.Fatalf("findings %q", checks(fs))
	}
	f := fs[0]
	for _, want := range []string{"through nvml", "dcgm failed", "2023-11-14T22:13:20Z", "hostengine connection lost"} {
		if !strings.Contains(f.Summary, want) {
			t.Errorf("summary %q lacks %q", f.Summary, want)
		}
	}
	if f.Kind != "dcgm" || f.Device != "" || f.GPU != nil || !strings.Contains(f.Fix, "nvidia-dcgm") {
		t.Errorf("finding %+v", f)
	}
}

func TestAuditHost(t *testing.T) {
	one, zero := 1, 0
	cpu := func(swapOut, oom uint64) *sample.CPU {
		return &sample.CPU{VM: sample.VMCounters{SwapOutPages: swapOut, HasOOMKills: true, OOMKills: oom}}
	}
	ib := func(degraded bool, symbol uint64, peermem string) *sample.InfiniBand {
		return &sample.InfiniBand{GPUDirectRDMAModule: peermem, Ports: []sample.InfiniBandPort{{
			Device: "mlx5_0", Port: 1, StateID: 4, RateBytesPerSecond: 25e9, RateDegraded: degraded,
			Counters: map[sample.InfiniBandCounter]uint64{sample.IBSymbolErrors: symbol}}}}
	}
	for _, tc := range []struct {
		name string
		in   AuditInput
		want string
	}{
		{"tuned host", AuditInput{Tuning: &sample.HostTuning{Swappiness: &zero, ScalingGovernors: map[string]int{"performance": 128},
			NUMABalancing: &zero}}, ""},
		{"swap configured", AuditInput{Tuning: &sample.HostTuning{SwapDevices: 1, SwapBytes: 8 << 30, Swappiness: &one}}, "swap_active:warning"},
		{"swapping", AuditInput{Tuning: &sample.HostTuning{SwapDevices: 1}, FirstCPU: cpu(10, 0), LastCPU: cpu(500, 0)}, "swap_active:critical"},
		{"powersave CPUs", AuditInput{Tuning: &sample.HostTuning{ScalingGovernors: map[string]int{"performance": 96, "powersave": 32}}}, "cpu_governor:warning"},
		{"oom kill", AuditInput{FirstCPU: cpu(0, 1), LastCPU: cpu(0, 2)}, "oom_kill:critical"},
		{"ib degraded and erroring, peermem loaded", AuditInput{IBReadings: []*sample.InfiniBand{ib(true, 5, "nvidia_peermem"), ib(true, 9, "nvidia_peermem")},
			LastIB: ib(true, 9, "nvidia_peermem"), LastGPUs: auditGPU(nil)},
			"ib_port_degraded:warning,ib_port_errors:warning"},
		{"ib without GPUDirect RDMA", AuditInput{LastIB: ib(false, 0, ""), LastGPUs: auditGPU(nil)}, "gpudirect_rdma_missing:warning"},
		// No module, but NCCL's log shows GDRDMA: DMA-BUF.
		{"ib with DMA-BUF GPUDirect RDMA", AuditInput{LastIB: ib(false, 0, ""), LastGPUs: auditGPU(nil), NCCL: &sample.NCCL{
			GPUs: []sample.NCCLGPU{{GPU: 0}}, Files: []sample.NCCLFile{{Processes: []sample.NCCLProcess{{Current: true,
				Transports: []sample.NCCLTransport{{Transport: "NET/IB+GDRDMA", Connections: 2}}}}}}}}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := checks(Audit(tc.in)); got != tc.want {
				t.Fatalf("findings %q; want %q", got, tc.want)
			}
		})
	}
}

// The finding's hardware XIDs are the ones the GPUDiagXIDError alert pages
// for: the two must not drift apart.
func TestXIDClassesMatchTheAlert(t *testing.T) {
	b, err := os.ReadFile("../alerts/gpudiag.alerts.yml")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`gpudiag_gpu_xid_errors_total\{xid=~"([0-9|]+)"\}`).FindAllStringSubmatch(string(b), -1)
	if len(m) == 0 {
		t.Fatal("no critical XID rule in the alerts")
	}
	var want []string
	for _, x := range hardwareXIDs {
		want = append(want, strconv.FormatUint(x, 10))
	}
	for _, got := range m {
		if got[1] != strings.Join(want, "|") {
			t.Errorf("alert's critical XIDs %s; the finding's %s", got[1], strings.Join(want, "|"))
		}
	}
	for x := range applicationXIDs {
		if sev, _ := xidSeverity(x); sev == SeverityCritical || slices.Contains(hardwareXIDs, x) {
			t.Errorf("XID %d is both an application and a hardware XID", x)
		}
	}
}
