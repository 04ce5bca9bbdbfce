package analyzers

import (
	"strings"
	"testing"

	"github.com/gpudiag/gpudiag/sample"
)

// One nvlink_errors finding per GPU and kind of error that grew, its kind
// the counter's, one evidence line per link that grew, the links named in
// the summary; a GPU reading without the counters (not answering, or an
// older trace) continues from the last reading that had them.
func TestAuditNVLinkErrors(t *testing.T) {
	first := auditGPU(func(g *sample.GPU) {
		g.Links = append(g.Links, sample.NVLink{Link: 9, Up: true, Errors: g.Links[0].Errors})
	})
	gap := auditGPU(func(g *sample.GPU) { g.Up, g.Links = false, nil })
	last := auditGPU(func(g *sample.GPU) {
		g.Links = append(g.Links, sample.NVLink{Link: 9, Up: true, Errors: g.Links[0].Errors})
		g.Links[0].Errors.Set(sample.NVLinkCRCFlit, 12) // +10 on link 7
		g.Links[1].Errors.Set(sample.NVLinkCRCFlit, 5)  // +3 on link 9
		g.Links[1].Errors.Set(sample.NVLinkReplay, 4)   // +3 on link 9
	})
	fs := withoutDisabled(auditGPUHealth(AuditInput{GPUReadings: []*sample.GPUs{first, gap, last}, LastGPUs: last})) // as Audit runs it, rules off included
	if got := checks(fs); got != "nvlink_errors:warning,nvlink_errors:warning" {
		t.Fatalf("findings %q", got)
	}
	crc, replay := fs[0], fs[1]
	if crc.Kind != "crc_flit" || *crc.GPU != 2 || len(crc.Evidence) != 2 ||
		crc.Evidence[0].Signal != "nvlink_crc_flit_errors_link_7" || crc.Evidence[0].Value != 10 ||
		crc.Evidence[1].Signal != "nvlink_crc_flit_errors_link_9" || crc.Evidence[1].Value != 3 ||
		!strings.Contains(crc.Summary, "13 NVLink flow-control CRC error(s)") || !strings.Contains(crc.Summary, "link(s) 7, 9") ||
		!strings.Contains(crc.Fix, "nvidia-smi nvlink -e") {
		t.Errorf("crc_flit finding %+v", crc)
	}
	if replay.Kind != "replay" || len(replay.Evidence) != 1 || replay.Evidence[0].Value != 3 {
		t.Errorf("replay finding %+v", replay)
	}
}

// ecc_correctable_rising names the locations the corrected errors were in
// where the GPU reports them; ecc_uncorrectable names those of the
// uncorrected ones (DRAM, which remapping retires, or SRAM).
func TestAuditECCByLocation(t *testing.T) {
	first := auditGPU(func(g *sample.GPU) {
		g.ECCErrors = append(g.ECCErrors, sample.ECCCount{Location: "sram", Counter: sample.ECCVolatile, Type: sample.ECCCorrected, Count: 0})
	})
	last := auditGPU(func(g *sample.GPU) {
		g.Values.Set(sample.ECCCorrectedErrorsTotal, 8)
		g.Values.Set(sample.ECCUncorrectedErrorsTotal, 1)
		g.ECCErrors = []sample.ECCCount{
			{Location: "dram", Counter: sample.ECCVolatile, Type: sample.ECCCorrected, Count: 7},
			{Location: "sram", Counter: sample.ECCVolatile, Type: sample.ECCCorrected, Count: 1},
			{Location: "sram", Counter: sample.ECCVolatile, Type: sample.ECCUncorrected, Count: 1},
			{Location: "dram", Counter: sample.ECCAggregate, Type: sample.ECCUncorrected, Count: 3}, // before this driver load
		}
	})
	fs := Audit(AuditInput{GPUReadings: []*sample.GPUs{first, last}, LastGPUs: last})
	if got := checks(fs); got != "ecc_uncorrectable:critical,ecc_correctable_rising:warning" {
		t.Fatalf("findings %q", got)
	}
	unc, corr := fs[0], fs[1]
	if len(unc.Evidence) != 2 || unc.Evidence[1].Signal != "ecc_uncorrected_errors_sram" || unc.Evidence[1].Value != 1 {
		t.Errorf("ecc_uncorrectable evidence %+v", unc.Evidence)
	}
	want := []Evidence{{Signal: "ecc_corrected_errors", Value: 3, Op: ">"}, {Signal: "ecc_corrected_errors_dram", Value: 2, Op: ">"},
		{Signal: "ecc_corrected_errors_sram", Value: 1, Op: ">"}}
	if len(corr.Evidence) != len(want) {
		t.Fatalf("ecc_correctable_rising evidence %+v", corr.Evidence)
	}
	for i, w := range want {
		if e := corr.Evidence[i]; e.Signal != w.Signal || e.Value != w.Value || e.Op != w.Op {
			t.Errorf("evidence %d %+v; want %+v", i, e, w)
		}
	}
	if !strings.Contains(corr.Summary, "3 corrected ECC error(s) in the span") {
		t.Errorf("summary %q", corr.Summary)
	}
}
