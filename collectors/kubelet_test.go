package collectors

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/gpudiag/gpudiag/analyzers"
	"github.com/gpudiag/gpudiag/internal/hosttest"
	"github.com/gpudiag/gpudiag/sample"
)

// kubeletFixture is the reference host's kubelet: static CPU manager,
// best-effort topology manager, memory manager None.
const kubeletFixture = "../hostfs/testdata/kubelet"

// The collectors built from flags in this package's tests (the exposition
// and README tests' Build) read the reference kubelet, as the others read
// the reference host.
func init() {
	kubeletFlags = kubeletOptions{config: filepath.Join(kubeletFixture, "config.yaml"), rootDir: kubeletFixture}
}

func newFixtureKubelet(dir string) *kubeletCollector {
	return newKubeletCollector(Config{}, kubeletOptions{config: filepath.Join(dir, "config.yaml"), rootDir: dir})
}

func TestKubeletFixture(t *testing.T) {
	c := newFixtureKubelet(kubeletFixture)
	got := sampleAs[sample.Kubelet](t, c)
	want := &sample.Kubelet{Found: true, ConfigPath: filepath.Join(kubeletFixture, "config.yaml"),
		CPUManagerPolicy: "static", MemoryManagerPolicy: "None", TopologyManagerPolicy: "best-effort", TopologyManagerScope: "container",
		ReservedSystemCPUs: "0,64", CPUManagerState: true, DefaultCPUSet: "0-3,12-63,64-67,76-127",
		ExclusiveCPUPods: []string{"6f1e2a3b-4c5d-4e6f-8a9b-0c1d2e3f4a5b"}, ExclusiveContainers: 1, MemoryManagerState: true}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("sample:\n got %+v\nwant %+v", got, want)
	}
	if got.NUMAAligned() || got.SizeBytes() <= 0 {
		t.Fatalf("best-effort read as aligned, or size %d", got.SizeBytes())
	}
	e := rdmaEngine(t, asEngine(c))
	wantText := `
# HELP gpudiag_kubelet_resource_managers_info The kubelet's CPU, memory and topology manager policies (its defaults where the config leaves them out; the state files' policy where they exist).
# TYPE gpudiag_kubelet_resource_managers_info gauge
gpudiag_kubelet_resource_managers_info{cpu_manager="static",memory_manager="None",topology_manager="best-effort",topology_scope="container"} 1
# HELP gpudiag_kubelet_exclusive_cpu_containers Containers the static CPU manager gives exclusive CPUs (cpu_manager_state entries).
# TYPE gpudiag_kubelet_exclusive_cpu_containers gauge
gpudiag_kubelet_exclusive_cpu_containers 1
# HELP gpudiag_kubelet_pinned_memory_containers Containers the Static memory manager pins to NUMA nodes (memory_manager_state entries).
# TYPE gpudiag_kubelet_pinned_memory_containers gauge
gpudiag_kubelet_pinned_memory_containers 0
`
	if err := testutil.GatherAndCompare(e, strings.NewReader(wantText), "gpudiag_kubelet_resource_managers_info",
		"gpudiag_kubelet_exclusive_cpu_containers", "gpudiag_kubelet_pinned_memory_containers"); err != nil {
		t.Fatal(err)
	}
}

// No config file: not a Kubernetes node; nothing read, nothing exported.
func TestKubeletAbsent(t *testing.T) {
	c := newFixtureKubelet(t.TempDir())
	if got := sampleAs[sample.Kubelet](t, c); !reflect.DeepEqual(got, &sample.Kubelet{}) {
		t.Fatalf("sample %+v", got)
	}
	if n, err := testutil.GatherAndCount(rdmaEngine(t, asEngine(c)), "gpudiag_kubelet_resource_managers_info",
		"gpudiag_kubelet_exclusive_cpu_containers", "gpudiag_kubelet_pinned_memory_containers"); err != nil || n != 0 {
		t.Fatalf("%d series, %v", n, err)
	}
}

func TestKubeletDefaultsAndBadFiles(t *testing.T) {
	dir := t.TempDir()
	hosttest.WriteFile(t, filepath.Join(dir, "config.yaml"), "kind: KubeletConfiguration\ntopologyManagerPolicy: \"single-numa-node; rm -rf\"\n")
	hosttest.WriteFile(t, filepath.Join(dir, "cpu_manager_state"), `{"policyName":"none","defaultCpuSet":"0-127","entries":{}}`)
	hosttest.WriteFile(t, filepath.Join(dir, "memory_manager_state"), `{"policyName":`)
	got := sampleAs[sample.Kubelet](t, newFixtureKubelet(dir))
	if got.CPUManagerPolicy != "none" || got.MemoryManagerPolicy != "None" || got.TopologyManagerPolicy != "invalid" ||
		got.TopologyManagerScope != "container" || !got.CPUManagerState || got.MemoryManagerState ||
		len(got.Errors) != 1 || !strings.Contains(got.Errors[0], "memory_manager_state") {
		t.Fatalf("sample %+v", got)
	}
	hosttest.WriteFile(t, filepath.Join(dir, "config.yaml"), "- not\n- a mapping\n")
	if _, err := newFixtureKubelet(dir).Sample(context.Background()); err == nil || !strings.Contains(err.Error(), "config.yaml") {
		t.Fatalf("error %v; want one naming config.yaml", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "config.yaml"), make([]byte, 5<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := newFixtureKubelet(dir).Sample(context.Background()); err == nil {
		t.Fatal("a 5 MiB config read")
	}
}

// The reference host's kubelet (static CPU manager, best-effort topology
// manager) with its GPU processes: the pod on GPU 0 is well placed, so no
// finding; GPU 4's process, in a Docker container, reaches its GPU's node
// remotely. Once it runs in a pod, kubelet_numa_unaware fires.
func TestKubeletFixtureFinding(t *testing.T) {
	k := sampleAs[sample.Kubelet](t, newFixtureKubelet(kubeletFixture))
	gp, _ := newGPUProcessTestCollector(t, fixtureProc, fixtureSys, numaFixtureGPURefs(), gpuProcessTestOptions)
	procs := sampleGPUProcesses(t, gp)
	find := func() []string {
		var out []string
		for _, f := range analyzers.Audit(analyzers.AuditInput{Kubelet: k, Processes: procs}) {
			if f.Check == "kubelet_numa_unaware" {
				out = append(out, f.Summary)
			}
		}
		return out
	}
	if got := find(); len(got) != 0 {
		t.Fatalf("findings %q with the only pod well placed", got)
	}
	procs.GPUs[4].Processes[0].PodUID = "0b7c1e9a-2d3f-4a5b-8c6d-7e8f9a0b1c2d"
	got := find()
	if len(got) != 1 || !strings.Contains(got[0], "GPU 4 (node 1: 75% of memory remote)") || !strings.Contains(got[0], "topologyManagerPolicy best-effort") {
		t.Fatalf("findings %q", got)
	}
}
