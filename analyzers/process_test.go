package analyzers

import (
	"strings"
	"testing"

	"github.com/gpudiag/gpudiag/sample"
)

// A GPU process placed on the wrong NUMA node, through Audit: its memory
// mostly on the other node (seeds-000-003 row 8 flags above 25%), or its
// CPUs all there (row 7).
func TestGPUProcessRemotePlacement(t *testing.T) {
	group := func(mutate func(*sample.GPUProcessGroup)) *sample.GPUProcesses {
		g := sample.GPUProcessGroup{GPU: 4, NUMANode: 1, LocalCPUList: "32-63,96-127",
			Processes: []sample.GPUProcess{{PID: 10, OnGPU: true}}, RemoteMemoryRatio: ptrF(0.1), CPUsOffNodeRatio: ptrF(0)}
		mutate(&g)
		return &sample.GPUProcesses{GPUs: []sample.GPUProcessGroup{g}}
	}
	for _, tc := range []struct {
		name, want, summary, fix string
		procs                    *sample.GPUProcesses
	}{
		{name: "placed on its GPU's node", procs: group(func(*sample.GPUProcessGroup) {})},
		{name: "a quarter of its memory remote", procs: group(func(g *sample.GPUProcessGroup) { g.RemoteMemoryRatio = ptrF(0.25) })},
		{name: "most of its memory remote", procs: group(func(g *sample.GPUProcessGroup) { g.RemoteMemoryRatio = ptrF(0.75) }),
			want: "gpu_process_remote_memory:warning", summary: "75% of a GPU process's resident memory", fix: "numactl --membind=1"},
		{name: "all its CPUs remote", procs: group(func(g *sample.GPUProcessGroup) { g.CPUsFullyRemote, g.CPUsOffNodeRatio = true, ptrF(1) }),
			want: "gpu_process_remote_cpus:warning", summary: "another NUMA node than its GPU's (node 1)", fix: "32-63,96-127"},
		{name: "GPU's node unknown", procs: group(func(g *sample.GPUProcessGroup) {
			g.NUMANode, g.RemoteMemoryRatio, g.CPUsFullyRemote = -1, ptrF(0.75), true
		})},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs := Audit(AuditInput{Processes: tc.procs})
			if got := checks(fs); got != tc.want {
				t.Fatalf("findings %q; want %q", got, tc.want)
			}
			if tc.want == "" {
				return
			}
			if f := fs[0]; f.GPU == nil || *f.GPU != 4 || !strings.Contains(f.Summary, tc.summary) || !strings.Contains(f.Fix, tc.fix) {
				t.Errorf("%+v; want GPU 4, %q in the summary, %q in the fix", f, tc.summary, tc.fix)
			}
		})
	}
}
