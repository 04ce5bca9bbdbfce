package sample

import (
	"strings"
	"testing"
)

// Each source keeps an identity only in its own format; anything a
// workload, a kubelet or a trace could plant instead is refused.
func TestValidJobIdentity(t *testing.T) {
	for _, tc := range []struct {
		source, value string
		want          bool
	}{
		{SlurmJobIDVar, "8812", true},
		{SlurmJobIDVar, "4294967295", true}, // the largest uint32 Slurm writes
		{SlurmJobIDVar, "4294967296", false},
		{SlurmJobIDVar, "0", false},
		{SlurmJobIDVar, "08812", false},
		{SlurmJobIDVar, "+8812", false},
		{SlurmJobIDVar, "1234_7", false}, // squeue's array spelling, never the variable's
		{SlurmJobIDVar, "1234+0", false}, // squeue's heterogeneous spelling
		{SlurmJobIDVar, "\x1b]0;owned\x07", false},
		{SlurmJobIDVar, "8812\n", false},
		{SlurmJobIDVar, "", false},
		{TorchrunRunIDVar, "3f2b1c9e-8d7a-4e6f-9b0c-1a2d3e4f5a6b", true}, // --standalone's uuid4
		{TorchrunRunIDVar, "llama-70b.run_7:29500", true},
		{TorchrunRunIDVar, "none", false}, // torchrun's default: no identity
		{TorchrunRunIDVar, strings.Repeat("a", 253), true},
		{TorchrunRunIDVar, strings.Repeat("a", 254), false},
		{TorchrunRunIDVar, strings.Repeat("a", 100_000), false},
		{TorchrunRunIDVar, "run 7", false},
		{TorchrunRunIDVar, "run\x1b[2J", false},
		{TorchrunRunIDVar, "rün", false},
		{K8sNamespace, "research", true},
		{K8sNamespace, "Research", false},
		{K8sNamespace, strings.Repeat("n", 64), false},
		{K8sNamespace, "-research", false},
		{K8sPod, "llama-worker-3", true},
		{K8sPod, "web.v2-7d9f8c6b5d-x2x4z", true},
		{K8sPod, strings.Repeat("a", 253), true},
		{K8sPod, strings.Repeat("a", 252) + "é", false}, // the crash's name
		{K8sPod, strings.Repeat("a", 254), false},
		{K8sPod, "pod..x", false},
		{K8sContainer, "trainer", true},
		{K8sContainer, "trainer.main", false},
		{K8sPodUID, "9b2c4d6e-1a3f-4b5c-8d7e-6f5a4b3c2d1e", true},
		{K8sPodUID, "9b2c4d6e_1a3f_4b5c_8d7e_6f5a4b3c2d1e", false},
		{"PBS_JOBID", "1234", false}, // no source, no identity
	} {
		if got := ValidJobIdentity(tc.source, tc.value); got != tc.want {
			t.Errorf("ValidJobIdentity(%s, %.40q) = %v, want %v", tc.source, tc.value, got, tc.want)
		}
	}
	if !NoJobIdentity(TorchrunRunIDVar, "none") || !NoJobIdentity(SlurmJobIDVar, "") || NoJobIdentity(SlurmJobIDVar, "none") {
		t.Error("NoJobIdentity: want empty values and torchrun's none only")
	}
}
