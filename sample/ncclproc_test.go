package sample

import "testing"

func TestNCCLHostProcessJob(t *testing.T) {
	for _, tc := range []struct {
		p    NCCLHostProcess
		want string
	}{
		{NCCLHostProcess{SlurmJobID: "8812", PodUID: "u-1"}, "slurm job 8812"},
		{NCCLHostProcess{PodUID: "u-1", ContainerID: "abc"}, "pod u-1"},
		{NCCLHostProcess{ContainerID: "abc"}, ""},
	} {
		if got := tc.p.Job(); got != tc.want {
			t.Errorf("Job() of %+v = %q; want %q", tc.p, got, tc.want)
		}
	}
	p := NCCLHostProcess{Env: []NCCLEnv{{Name: "RANK", Value: "3"}, {Name: "NCCL_ALGO", Value: ""}}}
	if v, ok := p.EnvValue("NCCL_ALGO"); !ok || v != "" {
		t.Errorf("EnvValue(NCCL_ALGO) = %q, %v; want set and empty", v, ok)
	}
	if _, ok := p.EnvValue("WORLD_SIZE"); ok {
		t.Error("EnvValue(WORLD_SIZE) set")
	}
	s := &NCCLHostProcesses{Processes: []NCCLHostProcess{p}}
	if empty := (&NCCLHostProcesses{}).SizeBytes(); s.SizeBytes() <= empty {
		t.Errorf("SizeBytes %d with a process, %d without", s.SizeBytes(), empty)
	}
}
