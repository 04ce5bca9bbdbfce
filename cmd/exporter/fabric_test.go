package main

import (
	"path/filepath"
	"testing"
)

const fabricTracesDir = "../../testdata/fabric/traces"

// fabricTraces are the simulated multi-node jobs (testdata/fabric, written
// by cmd/fabricsim over real 2×H200 samples: docs/simulation.md) and the
// verdict each node must get: node class and sub-kind, the findings it must
// show, and the ones it must not.
var fabricTraces = []struct {
	trace, class, sub string
	want, never       []string
}{
	{"healthy_gdr_line_rate-node0", "communication", "infiniband", nil,
		[]string{"pcie_peer_shm", "gpudirect_rdma_missing", "nccl_fallback", "rdma_congestion", "rdma_nic_remote", "rdma_rail_imbalance", "ib_port_degraded"}},
	{"host_staged-node0", "communication", "infiniband", []string{"gpudirect_rdma_missing", "nccl_fallback"}, []string{"rdma_congestion"}},
	{"port_trained_down-node0", "communication", "infiniband", []string{"ib_port_degraded"}, []string{"rdma_congestion"}},
	{"port_trained_down-node1", "communication", "infiniband", nil, []string{"ib_port_degraded"}},
	{"roce_congestion-node0", "communication", "roce", []string{"rdma_congestion"}, []string{"ib_port_degraded"}},
	{"ib_congestion-node0", "communication", "infiniband", []string{"rdma_congestion"}, nil},
	{"link_errors-node0", "communication", "infiniband", []string{"ib_port_errors"}, nil},
	{"link_errors-node1", "communication", "infiniband", nil, []string{"ib_port_errors"}},
	{"sys_distance_nic-node0", "communication", "infiniband", []string{"rdma_nic_remote"}, []string{"rdma_rail_imbalance"}},
	{"rail_imbalance-node0", "communication", "infiniband", []string{"rdma_rail_imbalance"}, []string{"rdma_nic_remote"}},
	{"hung_collective-node0", "communication", "collective_stalled", []string{"nccl_collective_stalled"}, nil},
	{"compute_multinode-node0", "compute", "tensor", nil,
		[]string{"rdma_port_saturated", "rdma_congestion", "rdma_nic_remote", "rdma_rail_imbalance", "nccl_collective_stalled", "gpudirect_rdma_missing"}},
	{"peer_wait-node0", "communication", "peer_wait", nil, []string{"nccl_collective_stalled", "rdma_congestion"}},
}

// Every simulated multi-node job replays into the verdict its scenario
// describes; none of them reads as pcie_peer_shm, the verdict the GPU side
// of GPUDirect RDMA traffic gets when the HCAs are not looked at.
func TestFabricTraces(t *testing.T) {
	for _, tc := range fabricTraces {
		t.Run(tc.trace, func(t *testing.T) {
			d, code := diagnoseTrace(t, filepath.Join(fabricTracesDir, tc.trace+".gdrec"))
			if string(d.Node.Class) != tc.class || d.Node.SubKind != tc.sub {
				t.Fatalf("node %s/%s (%s); want %s/%s", d.Node.Class, d.Node.SubKind, d.Node.Summary, tc.class, tc.sub)
			}
			got := map[string]bool{}
			for _, f := range d.Findings {
				got[f.Check] = true
			}
			for _, g := range d.GPUs {
				got[g.SubKind] = true
			}
			for _, f := range tc.want {
				if !got[f] {
					t.Errorf("finding %s missing; got %v", f, got)
				}
			}
			for _, f := range tc.never {
				if got[f] {
					t.Errorf("%s reported; got %v", f, got)
				}
			}
			if want := exitCode(&d); code != want || (tc.class == "communication" && code != exitBottleneck) {
				t.Errorf("exit code %d; want %d", code, want)
			}
		})
	}
}
